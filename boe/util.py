"""Small helpers with no heavy dependencies."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_url", "redact_urls", "split_urls"]

_SECRET_QUERY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|password|secret)=)[^&]*")


@lru_cache(maxsize=256)  # the request cache stores each reply's endpoint: the same few URLs, 31 times a question
def redact_url(url: str) -> str:
    """The URL without user name, password or secret query parameters (safe to log or store)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return _SECRET_QUERY.sub(r"\1***", clean)


def split_urls(value: str | Sequence[str]) -> list[str]:
    """One base URL, or several (a sequence, or one text separated by whitespace or commas), each once."""
    items = [value] if isinstance(value, str) else list(value)
    urls: list[str] = []
    for item in items:
        for url in re.split(r"[\s,]+", str(item).strip()):
            if url and url.rstrip("/") not in (u.rstrip("/") for u in urls):
                urls.append(url)
    return urls


def redact_urls(value: str) -> str:
    """`redact_url` of each URL of a text holding one or several (`split_urls`), space-separated."""
    return " ".join(redact_url(u) for u in split_urls(value))
