"""SLAKE (Slake1.0): ``train.json`` / ``validate.json`` / ``test.json`` arrays + ``imgs/xmlab<N>/source.jpg``.

Record: ``qid, img_id, img_name, question, answer, q_lang, answer_type,
content_type, modality, location, base_type, triple``. SLAKE is bilingual;
only English questions are loaded unless ``lang`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from boe.datasets._context import (
    OPEN_CLOSED,
    Drop,
    LoadContext,
    RecordProblem,
    clean_text,
    find_files,
    head,
    read_json_records,
    require_fields,
    split_files,
    text_field,
)
from boe.datasets._item import DatasetItem
from boe.datasets._registry import register_format
from boe.errors import ConfigError

_SPLITS = {"train": "train", "validate": "val", "validation": "val", "val": "val", "test": "test"}
_FILES = ("train.json", "validate.json", "val.json", "test.json", "*/train.json", "*/validate.json", "*/test.json")
_IMAGE_DIRS = ("imgs", "", "images", "Slake1.0/imgs")
_META = ("content_type", "modality", "location", "base_type")


def _is_slake_file(p: Path) -> bool:
    text = head(p, 4096)
    return p.suffix == ".json" and '"img_name"' in text and '"q_lang"' in text


def _sniff(p: Path) -> bool:
    if p.is_file():
        return _is_slake_file(p)
    return any(_is_slake_file(f) for f in find_files(p, _FILES))


@register_format("slake", sniff=_sniff, description="SLAKE JSON records (train/validate/test) + imgs/")
def load_slake(
    path: Path, ctx: LoadContext, *, split: str | None = None, lang: str | None = "en"
) -> Iterator[DatasetItem]:
    """Load SLAKE from its directory or one split file; ``lang`` "en", "zh" or None (both)."""
    if lang not in ("en", "zh", None):
        raise ConfigError(f"SLAKE lang must be 'en', 'zh' or None, got {lang!r}")
    for f, file_split in split_files(
        ctx, path, _FILES, splits=_SPLITS, split=split, what="SLAKE files (train.json, validate.json, test.json)"
    ):
        for line, raw in read_json_records(ctx, f):
            with ctx.record(f, line):
                rec = require_fields(raw, ("qid", "img_name", "question", "answer"))
                q_lang = clean_text(rec.get("q_lang") or "").lower() or None
                if lang is not None and q_lang != lang:
                    raise Drop(f"language not {lang}")
                atype = OPEN_CLOSED.get(clean_text(rec.get("answer_type") or "OPEN").upper())
                if atype is None:
                    raise RecordProblem(f"answer_type {rec['answer_type']!r} is neither OPEN nor CLOSED")
                metadata = {"split": file_split, "qid": rec["qid"], "language": q_lang, "img_id": rec.get("img_id")}
                metadata.update({k: clean_text(rec[k]) for k in _META if isinstance(rec.get(k), str)})
                folder = Path(str(rec["img_name"])).parent.name  # "xmlab1/source.jpg": every file is "source"
                yield ctx.item(
                    question_id=f"{file_split or 'all'}-{clean_text(rec['qid'])}",
                    question=text_field(rec, "question"),
                    reference=text_field(rec, "answer"),
                    answer_type=atype,
                    images=[ctx.image(rec["img_name"], dirs=_IMAGE_DIRS, figure=folder or None)],
                    metadata=metadata,
                    answer_raw=str(rec["answer"]),
                )
