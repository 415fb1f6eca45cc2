"""One model call, in one shape: what the client records, the store keeps and a ledger record lists.

`ModelCall` is the record the model client fills in for every logical call
(never the API key or the images). The store's ``model_calls`` table keeps a
projection of it (`ModelCall.status`, `ModelCall.retries`, ...), and an agent's
ledger record lists another (`ModelCall.ledger_entry`, fields in
`LEDGER_FIELDS` order: the stored lines depend on that order).

`request_key` is the one cache key of a chat-completions request: the key the
store's request cache has always used, so existing caches keep answering.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from boe.util import redact_url

__all__ = ["LEDGER_FIELDS", "NOT_IN_KEY", "ModelCall", "request_key"]

#: Client options that do not change the reply (and may hold secrets): never part of a key.
NOT_IN_KEY = frozenset(
    {"api_key", "authorization", "headers", "extra_headers", "timeout", "max_retries", "http_client", "stream"}
)


def request_key(
    endpoint: str,
    model: str,
    messages: Any,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> str:
    """The cache key of one chat-completions request: hex SHA-256 of its canonical JSON, without credentials.

    The canonical JSON is ``json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
    default=str)`` of (endpoint, messages, model, params, seed). Its long strings (the images' base64 data URLs)
    are neither encoded nor hashed again for each request: the text around them is encoded with placeholders,
    and the hash of everything up to the last long string is kept per prefix (the system text and the images
    come first, so every request of a question about the same figures shares it). The key is the same function
    of the request as the plain hash of the canonical JSON (tests/core/test_request_key.py).
    """
    body = {
        "endpoint": redact_url(endpoint).rstrip("/"),
        "model": model,
        "messages": messages,
        "params": {k: v for k, v in sorted((params or {}).items()) if k not in NOT_IN_KEY and k != "seed"},
        "seed": seed if seed is not None else (params or {}).get("seed"),
    }
    longs: list[str] = []
    slim = _swap_long(body, longs)
    text = json.dumps(slim, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    pieces = _MARKS.split(text) if longs else [text]
    if len(pieces) != 2 * len(longs) + 1:  # a placeholder the data itself holds (never by chance): no shortcut
        canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    h = _prefix_hash(pieces[:-1], longs).copy()
    h.update(pieces[-1].encode("utf-8"))
    digest: str = h.hexdigest()
    return digest


#: Strings at least this long are spliced into the canonical JSON (their encoding is kept per prefix).
_LONG = 2048
#: A placeholder no request holds: a random token per process, and the long string's index.
_TOKEN = f"boe-long-{uuid.uuid4().hex}-"
_MARKS = re.compile(rf'"{re.escape(_TOKEN)}(\d+)"')
_PREFIXES: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_PREFIX_LIMIT = 256


def _swap_long(value: Any, longs: list[str]) -> Any:
    """``value`` with each long string replaced by a numbered placeholder (kept in ``longs``)."""
    if isinstance(value, str):
        if len(value) < _LONG:
            return value
        longs.append(value)
        return f"{_TOKEN}{len(longs) - 1}"
    if isinstance(value, dict):
        return {k: _swap_long(v, longs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_swap_long(v, longs) for v in value]
    return value


def _prefix_hash(pieces: list[str], longs: list[str]) -> Any:
    """The SHA-256 state after the canonical JSON up to and including its last long string.

    ``pieces`` alternate text and placeholder indices (as `_MARKS` splits them); computed once per prefix."""
    key = (*pieces, *longs)
    state = _PREFIXES.get(key)
    if state is not None:
        _PREFIXES.move_to_end(key)
        return state
    state = hashlib.sha256()
    for i, piece in enumerate(pieces):
        if i % 2:
            piece = json.dumps(longs[int(piece)], ensure_ascii=False)
        state.update(piece.encode("utf-8"))
    _PREFIXES[key] = state
    while len(_PREFIXES) > _PREFIX_LIMIT:
        _PREFIXES.popitem(last=False)
    return state


@dataclass
class ModelCall:
    """One logical model call (tokens, latency, attempts, error); never holds the API key or the images."""

    call_id: str
    role: str  # generator | judge
    purpose: str  # the prompt name
    prompt_version: str
    model: str
    base_url: str  # redacted
    n: int
    temperature: float
    request_key: str
    started_at: str
    requests: int = 0  # HTTP requests sent, retries included
    attempts: int = 0  # attempts of the last request chain
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_ms: float = 0.0
    cache_hit: bool = False
    n_fallback: bool = False
    reasks: int = 0  # requests repeated because the reply was unusable
    error: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)  # the sampling fields actually sent, and the server kind
    # the seed sent with each attempt, first ask then re-asks (one-at-a-time choice i of an attempt got seed + i)
    seeds: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The call as a JSON-ready dict (``dataclasses.asdict`` without its deep copies: fields are scalars)."""
        out = {name: getattr(self, name) for name in _FIELDS}
        out["tags"] = dict(self.tags)
        out["sampling"] = dict(self.sampling)
        out["seeds"] = list(self.seeds)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | ModelCall) -> ModelCall:
        """From `as_dict` (values as given; absent optional fields take their defaults); a `ModelCall` as is."""
        if isinstance(data, ModelCall):
            return data
        return cls(**{name: data[name] for name in _FIELDS if name in data})

    def ledger_entry(self) -> dict[str, Any]:
        """The call as an agent's ledger record lists it (`LEDGER_FIELDS`, in that order)."""
        out = {name: getattr(self, name) for name in LEDGER_FIELDS}
        out["tags"] = dict(self.tags)
        out["sampling"] = dict(self.sampling)
        out["seeds"] = list(self.seeds)
        return out

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def status(self) -> str:
        """``cached``, ``error`` or ``ok`` (the store's status column)."""
        return "cached" if self.cache_hit else ("error" if self.error else "ok")

    @property
    def retries(self) -> int:
        """HTTP requests beyond the first (the store's retries column)."""
        return max(0, int(self.requests) - 1)

    @property
    def created(self) -> datetime | None:
        """When the call started, or None when ``started_at`` is not an ISO time."""
        try:
            return datetime.fromisoformat(self.started_at) if self.started_at else None
        except (TypeError, ValueError):
            return None


_FIELDS = tuple(f.name for f in fields(ModelCall))

#: The fields an agent's ledger record keeps of each call, in their stored order (the run's store has the rest).
LEDGER_FIELDS = (
    "call_id",
    "role",
    "purpose",
    "prompt_version",
    "model",
    "n",
    "temperature",
    "requests",
    "reasks",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "latency_ms",
    "cache_hit",
    "n_fallback",
    "error",
    "tags",
    "sampling",
    "seeds",
)
