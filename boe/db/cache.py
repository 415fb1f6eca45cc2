"""The request cache for model calls: a re-run never pays for the same call twice.

A key is `boe.core.calls.request_key` (re-exported here): the SHA-256 of the
canonical JSON of (endpoint base URL without credentials, model, messages,
sampling parameters, seed). Credentials never enter the key: the URL is
redacted and parameters that are not part of the request body (api keys,
headers, timeouts, retries) are dropped.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Connection, bindparam, select

from boe.core.calls import NOT_IN_KEY, request_key
from boe.db.models import CacheEntry, table, utcnow
from boe.db.sql import insert_ignore
from boe.db.types import CachedResponse
from boe.util import redact_url

__all__ = ["NOT_IN_KEY", "cache_get", "cache_keys", "cache_put", "cache_put_rows", "cache_row", "request_key"]

_T = table(CacheEntry)
#: Built once: a statement's cache key is then computed once, not per lookup (half the cost of a lookup).
_GET = select(_T.c.response, _T.c.model, _T.c.prompt_tokens, _T.c.completion_tokens, _T.c.created).where(
    _T.c.key == bindparam("key")
)


def cache_get(conn: Connection, key: str) -> CachedResponse | None:
    """The cached reply under ``key``, if any."""
    row = conn.execute(_GET, {"key": key}).first()
    if row is None:
        return None
    return CachedResponse(
        response=orjson.loads(row.response),
        model=row.model,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        created=row.created,
    )


def cache_keys(conn: Connection, limit: int) -> set[str] | None:
    """Every key of the cache, or None when it holds more than ``limit``."""
    keys = set(conn.execute(select(_T.c.key).limit(limit + 1)).scalars())
    return keys if len(keys) <= limit else None


def cache_row(
    key: str,
    response: Any,
    *,
    endpoint: str,
    model: str,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
) -> dict[str, Any]:
    """The table row of one reply (the response as JSON text)."""
    return {
        "key": key,
        "endpoint": redact_url(endpoint),
        "model": model,
        "response": orjson.dumps(response).decode("utf-8"),
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "created": utcnow(),
    }


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
    row = cache_row(
        key, response, endpoint=endpoint, model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    conn.execute(insert_ignore(conn, _T, ["key"]).values(**row))


def cache_put_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Store several rows of `cache_row` in one statement (executemany); replies already cached are kept."""
    if rows:
        conn.execute(insert_ignore(conn, _T, ["key"]), rows)
