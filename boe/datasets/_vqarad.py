"""VQA-RAD: a JSON array of records per split (MEVF ``trainset.json`` / ``testset.json`` or the OSF file) + images.

Record: ``qid, image_name, image_organ, answer, answer_type, question_type,
question, phrase_type``. Quirks in the released files: ``answer_type``
``"CLOSED "`` with a trailing space, tabs and doubled spaces inside
questions and answers, combined question types (``"POS, PRES"``) and the
misspelt type ``"PRSE"``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from boe.datasets._context import (
    OPEN_CLOSED,
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

_SPLITS = {"train": "train", "test": "test"}
_FILES = ("trainset*.json", "testset*.json", "VQA_RAD Dataset Public.json")
_IMAGE_DIRS = ("images", "", "VQA_RAD Image Folder")
_QTYPE_FIX = {"PRSE": "PRES"}  # a misspelling in the released files


def _is_vqarad_file(p: Path) -> bool:
    text = head(p, 4096)
    return p.suffix == ".json" and '"image_name"' in text and '"image_organ"' in text


def _sniff(p: Path) -> bool:
    if p.is_file():
        return _is_vqarad_file(p)
    return any(_is_vqarad_file(f) for f in find_files(p, _FILES))


def question_types(raw: str) -> list[str]:
    """``"POS, PRES"`` -> ``["POS", "PRES"]``; known misspellings fixed."""
    out: list[str] = []
    for part in raw.split(","):
        t = clean_text(part).upper()
        t = _QTYPE_FIX.get(t, t)
        if t and t not in out:
            out.append(t)
    return out


@register_format("vqa-rad", sniff=_sniff, description="VQA-RAD JSON records (MEVF trainset/testset or OSF) + images")
def load_vqa_rad(path: Path, ctx: LoadContext, *, split: str | None = None) -> Iterator[DatasetItem]:
    """Load VQA-RAD from a directory (every split file in it, or only ``split``) or one JSON file."""
    for f, file_split in split_files(
        ctx, path, _FILES, splits=_SPLITS, split=split, what=f"VQA-RAD files ({', '.join(_FILES)})"
    ):
        prefix = file_split or "all"
        for line, raw in read_json_records(ctx, f):
            with ctx.record(f, line):
                rec = require_fields(raw, ("qid", "image_name", "question", "answer", "answer_type"))
                qid = clean_text(rec["qid"])
                if not qid:
                    raise RecordProblem("field 'qid' is empty")
                atype = OPEN_CLOSED.get(clean_text(rec["answer_type"]).upper())
                if atype is None:
                    raise RecordProblem(f"answer_type {rec['answer_type']!r} is neither OPEN nor CLOSED")
                qtype_raw = str(rec.get("question_type") or "")
                metadata = {
                    "split": file_split,
                    "qid": rec["qid"],
                    "organ": clean_text(rec.get("image_organ") or "").lower() or None,
                    "question_types": question_types(qtype_raw),
                    "question_type_raw": qtype_raw,
                    "phrase_type": clean_text(rec.get("phrase_type") or "") or None,
                }
                yield ctx.item(
                    question_id=f"{prefix}-{qid}",
                    question=text_field(rec, "question"),
                    reference=text_field(rec, "answer"),
                    answer_type=atype,
                    images=[ctx.image(rec["image_name"], dirs=_IMAGE_DIRS)],
                    metadata=metadata,
                    answer_raw=str(rec["answer"]),
                )
