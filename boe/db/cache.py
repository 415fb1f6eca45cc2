"""The request cache for model calls: a re-run never pays for the same call twice.

A key is `boe.core.calls.request_key` (re-exported here): the SHA-256 of the
canonical JSON of (endpoint base URL without credentials, model, messages,
sampling parameters, seed). Credentials never enter the key: the URL is
redacted and parameters that are not part of the request body (api keys,
headers, timeouts, retries) are dropped.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select

from boe.core.calls import NOT_IN_KEY, request_key
from boe.db.models import CacheEntry, table, utcnow
from boe.db.sql import insert_ignore
from boe.db.types import CachedResponse
from boe.util import redact_url

__all__ = ["NOT_IN_KEY", "cache_get", "cache_put", "request_key"]

_T = table(CacheEntry)


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
