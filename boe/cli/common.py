"""Small helpers shared by the command modules."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["err_console", "out_console", "parse_list", "parse_budgets", "progress_bar"]


@cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@cache
def out_console() -> Console:
    from rich.console import Console

    return Console()


def progress_bar(console: Console, show: bool) -> Progress:
    """A transient bar with the stage, count and elapsed time (shown only when ``show``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not show,
    )


def parse_list(text: str) -> list[str]:
    """Comma-separated values, blanks dropped, order kept, duplicates removed."""
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def parse_budgets(text: str) -> list[float]:
    """Comma-separated non-negative budgets."""
    from boe.errors import ConfigError

    out = []
    for part in parse_list(text):
        try:
            b = float(part)
        except ValueError:
            raise ConfigError(f"--budget: {part!r} is not a number") from None
        if not b >= 0:
            raise ConfigError(f"--budget: budgets must be >= 0, got {part}")
        out.append(b)
    if not out:
        raise ConfigError("--budget: give at least one budget")
    return out
