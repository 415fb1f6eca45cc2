"""Hostile images for tests: a pixel bomb (a small PNG declaring a huge size), built without holding its pixels."""

from __future__ import annotations

import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(width: int = 20000, height: int = 20000) -> bytes:
    """A valid 8-bit grey PNG of ``width`` x ``height`` black pixels (20000^2: about 400 KB on disk, 400 MB
    decoded), compressed row by row so building it takes little memory."""
    comp = zlib.compressobj(9)
    row = b"\x00" * (width + 1)  # filter byte 0, then the row
    parts = [comp.compress(row) for _ in range(height)]
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", b"".join(parts)) + _chunk(b"IEND", b"")
