"""Small helpers with no heavy dependencies."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_url"]

_SECRET_QUERY = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|password|secret)=)[^&]*")


def redact_url(url: str) -> str:
    """The URL without user name, password or secret query parameters (safe to log or store)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return _SECRET_QUERY.sub(r"\1***", clean)
