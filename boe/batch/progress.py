"""What a batch worker has done so far, and a Rich progress bar that shows it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["BatchStats", "NullProgress", "ProgressView", "RichProgress", "human"]


@dataclass
class BatchStats:
    """Counters of one worker session (model calls are those the session made; cached ones cost nothing)."""

    todo: int = 0  # questions left when the session started (this worker may do only part of them)
    done: int = 0
    failed: int = 0
    lost: int = 0  # questions whose lease another worker took over
    calls_paid: int = 0
    calls_cached: int = 0
    call_errors: int = 0  # calls that ended in an error (the action is then unresolved)
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    live_requests: int = 0  # model requests finished so far, of unfinished questions too
    active: int = 0  # questions in progress
    expected_requests: float = 0.0  # requests a question takes, until finished questions measure it
    started: float = field(default_factory=time.monotonic)

    def add_calls(self, calls: list[dict[str, Any]]) -> None:
        """Count one question's model calls."""
        for c in calls:
            if c.get("cache_hit"):
                self.calls_cached += 1
                continue
            self.calls_paid += 1
            self.requests += int(c.get("requests") or 0)
            self.prompt_tokens += int(c.get("prompt_tokens") or 0)
            self.completion_tokens += int(c.get("completion_tokens") or 0)
            self.call_errors += bool(c.get("error"))

    @property
    def partial(self) -> float:
        """Questions' worth of requests finished for questions still in progress (the bar moves per request)."""
        per_q = self.requests / self.done if self.done and self.requests else self.expected_requests
        if per_q <= 0 or not self.active:
            return 0.0
        return 0.99 * min(float(self.active), max(0, self.live_requests - self.requests) / per_q)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def per_minute(self) -> float:
        """Questions stored per minute in this session."""
        s = self.seconds
        return 60.0 * self.done / s if s > 0 else 0.0


def human(n: float) -> str:
    """1234567 -> '1.23M'."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


class ProgressView(Protocol):
    """Where a runner reports its counters."""

    def start(self, total: int, description: str) -> None: ...

    def update(self, stats: BatchStats) -> None: ...

    def stop(self) -> None: ...


class NullProgress:
    """Shows nothing."""

    def start(self, total: int, description: str) -> None:
        pass

    def update(self, stats: BatchStats) -> None:
        pass

    def stop(self) -> None:
        pass


class RichProgress:
    """A progress bar on stderr: questions, throughput, ETA, tokens, calls and errors so far."""

    def __init__(self, console: Any = None) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),  # moves per finished request (see BatchStats.partial)
            TextColumn("{task.fields[stored]}/{task.total:.0f}"),  # questions stored, not the bar's fraction
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[tokens]}"),
            TextColumn("{task.fields[calls]}"),
            TextColumn("{task.fields[errors]}"),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
            refresh_per_second=4,
        )
        self._task: Any = None

    def start(self, total: int, description: str) -> None:
        self._progress.start()
        self._task = self._progress.add_task(
            description, total=total, rate="", tokens="", calls="", errors="", status="", stored=0
        )

    def update(self, stats: BatchStats) -> None:
        if self._task is None:
            return
        errors = stats.failed + stats.lost
        self._progress.update(
            self._task,
            completed=stats.done + stats.partial,
            stored=stats.done,
            rate=f"{stats.per_minute:.1f} q/min",
            tokens=f"{human(stats.tokens)} tok",
            calls=f"{human(max(stats.calls_paid, stats.live_requests))} calls (+{human(stats.calls_cached)} cached)",
            status="",
            errors=(
                f"[red]{stats.failed} failed, {stats.lost} lost, {stats.call_errors} call errors[/]"
                if errors or stats.call_errors
                else "no errors"
            ),
        )

    def status(self, text: str) -> None:
        """What the worker waits on (shown after the counters until the next update)."""
        if self._task is not None:
            self._progress.update(self._task, status=f"[yellow]{text}[/]")

    def stop(self) -> None:
        self._progress.stop()
