"""The request cache for model calls: a re-run never pays for the same call twice.

A key is the SHA-256 of the canonical JSON of (endpoint base URL without
credentials, model, messages, sampling parameters, seed). Credentials never
enter the key: the URL is redacted and parameters that are not part of the
request body (api keys, headers, timeouts, retries) are dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, select

from boe.db.models import CacheEntry, table, utcnow
from boe.db.sql import insert_ignore
from boe.db.types import CachedResponse
from boe.util import redact_url

__all__ = ["NOT_IN_KEY", "cache_get", "cache_put", "request_key"]

#: Client options that do not change the reply (and may hold secrets).
NOT_IN_KEY = frozenset(
    {"api_key", "authorization", "headers", "extra_headers", "timeout", "max_retries", "http_client", "stream"}
)

_T = table(CacheEntry)


def request_key(
    endpoint: str,
    model: str,
    messages: Any,
    params: Mapping[str, Any] | None = None,
    seed: int | None = None,
) -> str:
    """The cache key of one chat-completions request (hex SHA-256)."""
    body = {
        "endpoint": redact_url(endpoint).rstrip("/"),
        "model": model,
        "messages": messages,
        "params": {k: v for k, v in sorted((params or {}).items()) if k not in NOT_IN_KEY and k != "seed"},
        "seed": seed if seed is not None else (params or {}).get("seed"),
    }
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def cache_get(conn: Connection, key: str) -> CachedResponse | None:
    """The cached reply under ``key``, if any."""
    cols = (_T.c.response, _T.c.model, _T.c.prompt_tokens, _T.c.completion_tokens, _T.c.created)
    row = conn.execute(select(*cols).where(_T.c.key == key)).first()
    if row is None:
        return None
    return CachedResponse(
        response=json.loads(row.response),
        model=row.model,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        created=row.created,
    )


def cache_put(
    conn: Connection,
    key: str,
    response: Any,
    *,
    endpoint: str,
    model: str,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> None:
    """Store a JSON-serialisable reply under ``key``; a reply already cached under the key is kept."""
    stmt = insert_ignore(conn, _T, ["key"]).values(
        key=key,
        endpoint=redact_url(endpoint),
        model=model,
        response=json.dumps(response, ensure_ascii=False),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        created=utcnow(),
    )
    conn.execute(stmt)
