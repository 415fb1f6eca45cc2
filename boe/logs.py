"""The ``boe`` logger: what a library run does on the side (retries, refused fields, fallbacks, skipped records).

Modules log through a child of ``boe`` (``boe.client``, ``boe.batch``, ...). As a library, ``boe`` adds only a
`logging.NullHandler` and never configures the root logger: an embedding program sees these records through its
own logging set-up (``logging.getLogger("boe").setLevel(logging.INFO)``). The ``boe`` command attaches one
handler to the ``boe`` logger (`configure_cli`): warnings by default, ``-v`` info (retries), ``-vv`` debug,
``-q`` errors only. Every record written by that handler is redacted (`redact_text`): API keys never reach a log.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from typing import TextIO

__all__ = ["ROOT", "configure_cli", "get_logger", "level_for", "mask_secret", "redact_text"]

ROOT = "boe"

logging.getLogger(ROOT).addHandler(logging.NullHandler())

_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")
_KEYS = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}")  # API-key shaped words, not identifiers such as token_count
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s'\"]+")
_KEY_VARIABLES = ("BOE_API_KEY", "OPENAI_API_KEY", "BOE_JUDGE_API_KEY")
_SECRETS: set[str] = set()  # keys given as arguments (a client's api_key)


def get_logger(name: str) -> logging.Logger:
    """The ``boe.<name>`` logger."""
    return logging.getLogger(f"{ROOT}.{name}")


def mask_secret(secret: str | None) -> None:
    """Mask ``secret`` (an API key given as an argument) in every record the CLI's handler writes."""
    if secret and len(secret) >= 4:
        _SECRETS.add(secret)


def redact_text(text: str) -> str:
    """``text`` without credentials: URL user parts, bearer tokens, key-shaped words, the keys set in the
    environment (``BOE_API_KEY``, ``OPENAI_API_KEY``) and those given to a client are masked."""
    keys = _SECRETS | {os.environ.get(var) or "" for var in _KEY_VARIABLES}
    for key in sorted(keys, key=len, reverse=True):
        if len(key) >= 4:  # a one-letter "key" would mask every occurrence of that letter
            text = text.replace(key, "***")
    text = _CREDENTIALS.sub(r"\g<scheme>***@", text)
    return _KEYS.sub("***", _BEARER.sub(r"\g<1>***", text))


class _Redacting(logging.Formatter):
    """``boe.client: warning: message``, redacted (an exception's traceback only at debug level)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{record.name}: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info and record.levelno <= logging.DEBUG:
            text += "\n" + self.formatException(record.exc_info)
        return redact_text(text)


def level_for(verbose: int, quiet: bool) -> int:
    """The ``boe`` logger's level for the CLI's ``-v`` count and ``-q``."""
    if quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


def configure_cli(verbose: int = 0, quiet: bool = False, stream: TextIO | None = None) -> logging.Handler:
    """Send ``boe`` records at the level of ``-v``/``-q`` to standard error (replacing the CLI's earlier handler)."""
    log = logging.getLogger(ROOT)
    for h in list(log.handlers):
        if getattr(h, "_boe_cli", False):
            log.removeHandler(h)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler._boe_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(_Redacting())
    log.addHandler(handler)
    level = level_for(verbose, quiet)
    log.setLevel(level)
    log.propagate = False  # the CLI owns the output; an embedding program's root handlers are not involved here
    # pydicom warns (as Python warnings, with its source lines) about files it reads anyway ("using implicit
    # VR"); the command says in its own words what it could not read, so they show only at -vv
    warnings.filterwarnings("default" if level <= logging.DEBUG else "ignore", category=UserWarning, module="pydicom")
    return handler
