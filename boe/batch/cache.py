"""The store's request cache with its writes gathered: one transaction per flush, not one per model call.

A reply is answered from memory until it is written, so a question never
asks twice; the runner's writer thread stores the gathered replies once 32
have gathered or the oldest has waited a quarter of a second. The keys the
store held when the batch started (up to `KNOWN_KEYS` of them) and those it
wrote are known, so a request no one made before is a miss without a read of
the store (a reply another worker stores meanwhile is not looked for: its
request is paid again, as when the two ask at the same moment). A worker
killed with ``kill -9`` loses at most those replies (and the calls in
flight); a re-run pays for them again and for nothing else.
"""

from __future__ import annotations

import time
from typing import Any

from boe.agent.persist import StoreCache

__all__ = ["KNOWN_KEYS", "WriteBehindCache"]

#: Cached replies whose keys are loaded when a batch starts; a larger cache is read for every request.
KNOWN_KEYS = 1_000_000


class WriteBehindCache(StoreCache):
    """`StoreCache` whose ``put`` is buffered until `take` hands the buffer to a writer."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self._pending: dict[str, dict[str, Any]] = {}
        self._writing: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self.lookups = 0
        self.written = 0
        self.read_cpu = 0.0  # seconds spent reading the store on the caller's thread (it waits for nothing else)
        self._oldest: float | None = None  # when the oldest pending reply arrived
        self._known = store.cache_keys(KNOWN_KEYS)  # None: too many to hold, the store is asked every time

    def get(self, key: str) -> dict[str, Any] | None:
        self.lookups += 1
        entry = self._pending.get(key) or self._writing.get(key)
        if entry is not None:
            hit: dict[str, Any] | None = dict(entry["response"])
        elif self._known is not None and key not in self._known:
            hit = None  # never stored: no read
        else:
            t0 = time.perf_counter()  # (a clock read in user space: thread_time() is a system call)
            hit = super().get(key)
            self.read_cpu += time.perf_counter() - t0
        self.hits += hit is not None
        return hit

    def put(self, key: str, value: dict[str, Any]) -> None:
        if self._oldest is None:
            self._oldest = time.monotonic()
        usage = value.get("usage", {})
        self._pending[key] = {
            "key": key,
            "response": value,
            "endpoint": str(value.get("endpoint", "")),
            "model": str(value.get("model", "")),
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
        }

    @property
    def pending(self) -> int:
        """Replies not yet handed to the writer."""
        return len(self._pending)

    def due(self, max_entries: int = 32, max_age: float = 0.25) -> bool:
        """Whether the pending replies should be written now."""
        if not self._pending or self._oldest is None:
            return False
        return len(self._pending) >= max_entries or time.monotonic() - self._oldest >= max_age

    def take(self) -> list[dict[str, Any]]:
        """The buffered replies, for one `Store.cache_put_many`; they stay readable until `written`."""
        entries = list(self._pending.values())
        self._writing.update(self._pending)
        self._pending = {}
        self._oldest = None
        return entries

    def put_back(self, entries: list[dict[str, Any]]) -> None:
        """A write of these replies failed: they wait for the next one."""
        for e in entries:
            self._writing.pop(e["key"], None)
            self._pending.setdefault(e["key"], e)
        if self._pending and self._oldest is None:
            self._oldest = time.monotonic()

    def mark_written(self, entries: list[dict[str, Any]]) -> None:
        """The writer stored these replies: the store answers for them from now on."""
        for e in entries:
            self._writing.pop(e["key"], None)
            if self._known is not None:
                self._known.add(e["key"])
        self.written += len(entries)
