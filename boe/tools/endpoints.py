"""The servers a run talks to: what each was found to accept, and how loaded and how healthy each is.

A client may have several base URLs serving one model (``--base-url`` given more than once).
`Servers` is shared by the clients of a run (the generator and the judges):

* per base URL a `Server`: requests in flight, sent and failed; marked down after a failure
  to reach it, for a backoff that doubles while it stays unreachable (one probe request at a
  time is let through when the backoff ends, and a reply brings it back);
* per base URL and model an `EndpointState`: the server kind and what the server refused
  (``n``, ``max_completion_tokens``, sampling fields, schema bounds), so each server's limits
  are learnt on their own.

`Servers.pick` gives a request to the reachable server with the fewest requests in flight (the
fewest sent breaks ties, so idle servers take turns); when every server is down, the one back
soonest is tried, so a run with one server retries it as it always did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from boe.logs import get_logger
from boe.util import redact_url, split_urls

__all__ = ["EndpointState", "Server", "Servers", "split_urls"]

_log = get_logger("client")


@dataclass
class EndpointState:
    """What one endpoint (base URL and model) was found to accept; shared by the clients of a run, recorded."""

    kind: str = "auto"  # vllm | sglang | openai | generic once known
    detected: str = ""  # how the kind was decided
    n: bool | None = None  # whether the server takes n > 1 (None: not yet known)
    n_reason: str = ""  # how that was decided (the error's param, or a probe)
    tokens_field: str = "max_completion_tokens"  # falls back to max_tokens for servers that only know it
    dropped: list[str] = field(default_factory=list)  # request fields the server refused and no longer gets
    notes: list[str] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def note(self, text: str) -> None:
        """Record what the endpoint was found to refuse (kept with the run) and log it."""
        self.notes.append(text)
        _log.warning("%s", text)

    def as_dict(self) -> dict[str, Any]:
        """The state as recorded with a run."""
        return {
            "kind": self.kind,
            "detected": self.detected,
            "n": self.n,
            "n_reason": self.n_reason,
            "tokens_field": self.tokens_field,
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


@dataclass
class Server:
    """One base URL: its load, its share of the run's requests, and whether it is reachable."""

    url: str
    safe_url: str
    in_flight: int = 0
    requests: int = 0  # requests sent to it (retries included)
    errors: int = 0  # of which failed (no reply, an error status, a reply that was no chat completion)
    downs: int = 0  # times it was marked down
    failures: int = 0  # failures to reach it since its last reply
    down_until: float = 0.0

    def share(self) -> dict[str, Any]:
        """Its share of the run (no secrets)."""
        return {"base_url": self.safe_url, "requests": self.requests, "errors": self.errors, "down": self.downs}


class Servers:
    """The servers and endpoint states of one run (shared by its clients)."""

    def __init__(
        self, *, backoff: float = 1.0, max_backoff: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._clock = clock
        self._servers: dict[str, Server] = {}
        self._states: dict[tuple[str, str], EndpointState] = {}

    def server(self, url: str) -> Server:
        """The server at ``url`` (one per base URL, trailing slash ignored)."""
        key = url.rstrip("/")
        found = self._servers.get(key)
        if found is None:
            found = self._servers[key] = Server(url, redact_url(url))
        return found

    def state(self, url: str, model: str) -> EndpointState:
        """What the server at ``url`` was found to accept for ``model``."""
        return self._states.setdefault((url.rstrip("/"), model), EndpointState())

    def states(self) -> list[tuple[str, str, EndpointState]]:
        """Every endpoint state: (base URL, model, state)."""
        return [(url, model, st) for (url, model), st in self._states.items()]

    def pick(self, urls: Sequence[str]) -> Server:
        """The server of ``urls`` that gets the next request."""
        pool = [self.server(u) for u in urls]
        now = self._clock()
        # a server back from its backoff takes one probe at a time until it answers
        ready = [s for s in pool if now >= s.down_until and (s.failures == 0 or s.in_flight == 0)]
        if ready:
            return min(ready, key=lambda s: (s.in_flight, s.requests))
        return min(pool, key=lambda s: s.down_until)

    def unreachable(self, server: Server) -> None:
        """A request got no reply from ``server``: it is down for a backoff (counted once per outage)."""
        now = self._clock()
        if now < server.down_until:  # other requests in flight when it went away: the same outage
            return
        server.failures += 1
        server.downs += 1
        server.down_until = now + min(self.max_backoff, self.backoff * 2 ** (server.failures - 1))

    def answered(self, server: Server) -> None:
        """``server`` replied: it is up."""
        server.failures = 0
        server.down_until = 0.0

    def shares(self) -> list[dict[str, Any]]:
        """Each server's share of the run's requests and errors, in the order first used."""
        return [s.share() for s in self._servers.values()]
