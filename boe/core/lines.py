"""The one way a ledger line is read: the same bytes give the same record or the same error everywhere.

Replay, import, report and export read ledger files through `open_ledger`
(``-`` is standard input, a folder is named as such) and turn each line into
JSON through `decode_line`, which accepts a UTF-8 byte-order mark and CRLF
line endings and words every failure the same way (file, line, what is wrong).
"""

from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from boe.errors import LedgerError, RecordError

__all__ = [
    "MAX_DEPTH",
    "STDIN",
    "clean_line",
    "decode_line",
    "json_error_text",
    "ledger_name",
    "nesting_depth",
    "open_ledger",
]

#: The ledger path that means standard input.
STDIN = "-"
_BOM = "\ufeff"
_BOM_BYTES = b"\xef\xbb\xbf"
_SPACE = " \t\r\n"


def clean_line(raw: str | bytes) -> str | bytes:
    """A line without a leading UTF-8 byte-order mark and without surrounding JSON whitespace (LF, CRLF)."""
    if isinstance(raw, bytes):
        return raw.removeprefix(_BOM_BYTES).strip(_SPACE.encode())
    return raw.removeprefix(_BOM).strip(_SPACE)


def json_error_text(exc: json.JSONDecodeError) -> str:
    """``Expecting value at column 3`` (json's own text ends some messages with "at")."""
    msg = exc.msg.removesuffix(" at").removesuffix(" starting")
    if exc.msg.endswith("starting at"):
        return f"{msg} starting at column {exc.colno}"
    return f"{msg} at column {exc.colno}"


def decode_line(raw: str | bytes, *, source: str | None = None, line: int | None = None) -> Any:
    """The JSON value of one ledger line; `RecordError` (file, line) when it is not UTF-8 or not JSON."""
    text: str
    if isinstance(raw, bytes):
        try:
            text = clean_line(raw).decode("utf-8")  # type: ignore[union-attr]
        except UnicodeDecodeError as exc:
            raise RecordError(f"not UTF-8 ({exc.reason} at byte {exc.start})", source=source, line=line) from None
    else:
        text = clean_line(raw)  # type: ignore[assignment]
    # refused by depth, not by whatever stack the reader happens to run on: every reader says the same, and
    # depth is judged before validity (a line too deep is "nested", wherever its JSON breaks)
    shallow = text.count("[") + text.count("{") <= MAX_DEPTH
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        if isinstance(exc, json.JSONDecodeError) and (shallow or nesting_depth(text) <= MAX_DEPTH):
            raise RecordError(f"not valid JSON ({json_error_text(exc)})", source=source, line=line) from None
        raise RecordError(f"nested more than {MAX_DEPTH} levels deep", source=source, line=line) from None
    if not shallow and _deeper_than(value, MAX_DEPTH):
        raise RecordError(f"nested more than {MAX_DEPTH} levels deep", source=source, line=line)
    return value


#: Deeper JSON is refused (Python's recursion limit would otherwise decide, differently per caller).
MAX_DEPTH = 400
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)  # unrolled: a run of plain characters a step
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting outside strings (linear; the regexes drop strings and all but the brackets
    in C, so that Python steps only through the brackets)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate((1 if c in "[{" else -1 for c in brackets), initial=0))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests arrays and objects more than ``limit`` deep (level by level: no
    recursion, and for valid JSON the same depth `nesting_depth` reads in its text, a few times faster)."""
    level = [value] if type(value) is dict or type(value) is list else []  # arrays and objects only
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [v for c in level for v in (c.values() if type(c) is dict else c) if type(v) is dict or type(v) is list]
    return False


def ledger_name(src: str | Path) -> str:
    """How a ledger source is named in messages (``<stdin>`` for ``-``)."""
    return "<stdin>" if str(src) == STDIN else str(src)


def open_ledger(src: str | Path) -> IO[bytes]:
    """A ledger file opened for reading bytes (``-``: standard input); `LedgerError` naming the path otherwise."""
    if str(src) == STDIN:
        return sys.stdin.buffer
    path = Path(src)
    if path.is_dir():
        raise LedgerError(f"cannot open ledger {path}: it is a folder, not a ledger file (give the .jsonl files)")
    try:
        return path.open("rb")
    except OSError as exc:
        raise LedgerError(f"cannot open ledger {path}: {exc.strerror or exc}") from exc
