"""Helpers of the dataset tests: where the data is, and small writers for fixture files."""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path | None:
    """``$BOE_SHARED_DATA``, else the ``shared/data`` beside the repository; None when absent."""
    env = os.environ.get("BOE_SHARED_DATA")
    base = Path(env) if env else REPO.parent / "shared" / "data"
    return base if base.is_dir() else None


def tiny_png(path: Path, value: int = 128) -> Path:
    """Write a valid 2x2 grayscale PNG (no image library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes([value, value]) for _ in range(2))
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return path


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def write_lines(path: Path, lines: Iterable[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    return write_lines(path, (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows))


def record_at(path: Path, line: int) -> Any:
    """The JSON value that starts on ``line`` (1-based) of a file: checks that a reported line is right."""
    text = path.read_text(encoding="utf-8")
    offset = sum(len(ln) for ln in text.splitlines(keepends=True)[: line - 1])
    start = len(text) - len(text[offset:].lstrip())
    return json.JSONDecoder().raw_decode(text, start)[0]
