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


#: The VQA-RAD dataset card's features on the Hub (flaviagiammarino/vqa-rad): an Image and two strings.
HUB_FEATURES = {"image": {"_type": "Image"}, "question": {"dtype": "string", "_type": "Value"}}
HUB_FEATURES["answer"] = {"dtype": "string", "_type": "Value"}


def hub_table(records: list[dict[str, Any]], images: Path, rename: dict[str, str] | None = None) -> Any:
    """VQA-RAD records as the Hub's parquet holds them: ``image`` {bytes, path}, ``question``, ``answer``.

    Only records whose image file exists (the Hub embeds every image); ``rename`` renames columns.
    """
    import pyarrow as pa

    rows = [r for r in records if (images / r["image_name"]).is_file()]
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    names = {c: (rename or {}).get(c, c) for c in ("image", "question", "answer")}
    features = {names[k]: v for k, v in HUB_FEATURES.items()}
    schema = pa.schema(
        [(names["image"], image_type), (names["question"], pa.string()), (names["answer"], pa.string())],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    return pa.table(
        {
            names["image"]: [{"bytes": (images / r["image_name"]).read_bytes(), "path": r["image_name"]} for r in rows],
            names["question"]: [r["question"] for r in rows],
            names["answer"]: [r["answer"] for r in rows],
        },
        schema=schema,
    )


def vqa_rad_hub_layout(dest: Path, source: Path, rename: dict[str, str] | None = None) -> Path:
    """``dest/data/{train,test}-00000-of-00001-<hash>.parquet`` built from a VQA-RAD folder (JSON + images)."""
    import pyarrow.parquet as pq

    for split, name in (("train", "trainset*.json"), ("test", "testset*.json")):
        records = [r for f in sorted(source.glob(name)) for r in json.loads(f.read_text(encoding="utf-8"))]
        out = dest / "data" / f"{split}-00000-of-00001-{zlib.crc32(split.encode()):08x}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(hub_table(records, source / "images", rename), out)
    return dest
