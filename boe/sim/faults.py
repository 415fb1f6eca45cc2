"""Injected latency and faults for reliability tests, decided per request by a seeded schedule."""

from __future__ import annotations

import hashlib
import random
import threading
from collections import deque
from dataclasses import dataclass, field

from boe.errors import ConfigError

__all__ = ["FAULT_KINDS", "FaultPlan", "Stats"]

FAULT_KINDS = ("429", "500", "timeout", "malformed", "truncated")


@dataclass(frozen=True)
class FaultPlan:
    """Rates of each fault (per chat request), latency, and the seed of the schedule.

    Request i (in arrival order) gets the fault drawn from a generator seeded
    by (seed, i), so a run with the same seed and request count injects the
    same faults. `timeout` sleeps `timeout_sleep` seconds before answering.
    """

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    rate_truncated: float = 0.0
    latency_ms: float = 0.0
    latency_jitter: float = 0.0  # latency is drawn uniformly from latency_ms * (1 +- jitter)
    timeout_sleep: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        rates = self.rates()
        for kind, rate in rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ConfigError(f"fault rate {kind} must lie in [0, 1], got {rate}")
        if sum(rates.values()) > 1.0 + 1e-9:
            raise ConfigError(f"fault rates add up to {sum(rates.values()):.3f} > 1")
        if self.latency_ms < 0 or not 0.0 <= self.latency_jitter <= 1.0:
            raise ConfigError("latency must be >= 0 ms and jitter in [0, 1]")
        if self.timeout_sleep < 0:
            raise ConfigError("timeout sleep must be >= 0 seconds")

    def rates(self) -> dict[str, float]:
        """Fault kind -> rate."""
        return {
            "429": self.rate_429,
            "500": self.rate_500,
            "timeout": self.rate_timeout,
            "malformed": self.rate_malformed,
            "truncated": self.rate_truncated,
        }

    def decide(self, index: int) -> tuple[str | None, float]:
        """The fault (or None) and the latency in seconds for request `index`."""
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "little"))
        u = rng.random()
        fault = None
        acc = 0.0
        for kind, rate in self.rates().items():
            acc += rate
            if u < acc:
                fault = kind
                break
        jitter = 1.0 + self.latency_jitter * (2 * rng.random() - 1)
        return fault, self.latency_ms * jitter / 1000.0


@dataclass
class Stats:
    """Thread-safe counters of what the server did."""

    requests: int = 0  # chat completion requests received
    responses: dict[str, int] = field(default_factory=dict)  # HTTP status -> count
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULT_KINDS, 0))
    choices: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    image_tokens: int = 0  # prompt tokens of images
    cached_image_tokens: int = 0  # ... of which from the prefix cache
    prefix_log: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=100_000), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_prefix(self, cached: int, cached_images: int, images: int) -> None:
        """Count one answered prompt's prefix-cache use (also kept per request, in answer order)."""
        with self._lock:
            self.cached_tokens += cached
            self.cached_image_tokens += cached_images
            self.image_tokens += images
            self.prefix_log.append((cached, cached_images, images))

    def next_index(self) -> int:
        """Count a chat request and return its arrival index (0-based)."""
        with self._lock:
            self.requests += 1
            return self.requests - 1

    def record(
        self, status: int, fault: str | None = None, choices: int = 0, prompt: int = 0, completion: int = 0
    ) -> None:
        """Count one response."""
        with self._lock:
            key = str(status)
            self.responses[key] = self.responses.get(key, 0) + 1
            if fault is not None:
                self.faults[fault] += 1
            self.choices += choices
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def snapshot(self) -> dict[str, object]:
        """A JSON-ready copy."""
        with self._lock:
            return {
                "requests": self.requests,
                "responses": dict(self.responses),
                "faults": dict(self.faults),
                "choices": self.choices,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens,
                "image_tokens": self.image_tokens,
                "cached_image_tokens": self.cached_image_tokens,
            }
