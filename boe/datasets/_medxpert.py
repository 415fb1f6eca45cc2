"""MedXpertQA-MM: JSON Lines ``id, question, options {A..E}, label, images [..]`` + ``images/``.

Every item is single-answer multiple choice over the options it offers,
with one to six images; each image's figure id is its file stem
(``MM-26-a``). The released question text repeats the options after
"Answer Choices:"; that tail is cut from ``question`` (the options travel
separately) when it agrees with ``options``, and kept otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from boe.datasets._context import (
    LoadContext,
    RecordProblem,
    clean_text,
    find_files,
    head,
    read_jsonl,
    require_fields,
    split_files,
    text_field,
)
from boe.datasets._item import DatasetItem, ImageFile
from boe.datasets._registry import register_format
from boe.datasets.evaluate import normalise

_SPLITS = {"test": "test", "dev": "dev", "val": "dev"}
_FILES = ("*.jsonl", "MM/*.jsonl")
_IMAGE_DIRS = ("images", "", "MM/images")
_INLINE = re.compile(r"\s*Answer Choices:\s*(\(A\).*)$", re.DOTALL)
_INLINE_OPTION = re.compile(r"\(([A-J])\)\s*(.*?)\s*(?=\([A-J]\)|$)", re.DOTALL)


def _is_medxpert_file(p: Path) -> bool:
    if p.suffix != ".jsonl":
        return False
    first = next((ln for ln in head(p, 16384).splitlines() if ln.strip()), "")
    return all(f'"{k}"' in first for k in ("options", "label", "images", "question"))


def _sniff(p: Path) -> bool:
    if p.is_file():
        return _is_medxpert_file(p)
    return any(_is_medxpert_file(f) for f in find_files(p, _FILES))


def _root(p: Path) -> Path:
    d = p if p.is_dir() else p.parent
    return d.parent if not (d / "images").is_dir() and (d.parent / "images").is_dir() else d


def _options(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not raw:
        raise RecordProblem("field 'options' must be a non-empty object of letter -> text")
    options: dict[str, str] = {}
    for key, value in raw.items():
        letter = clean_text(key).upper()
        if not re.fullmatch(r"[A-J]", letter):
            raise RecordProblem(f"option key {key!r} is not a letter A-J")
        text = clean_text(value) if isinstance(value, str | int | float) else ""
        if not text:
            raise RecordProblem(f"option {letter} has no text")
        options[letter] = text
    return dict(sorted(options.items()))


def _strip_inline(question: str, options: Mapping[str, str]) -> str:
    m = _INLINE.search(question)
    if not m:
        return question
    inline = {k: normalise(v) for k, v in _INLINE_OPTION.findall(m.group(1))}
    if inline != {k: normalise(v) for k, v in options.items()}:
        return question
    return question[: m.start()].strip() or question


def _figures(ctx: LoadContext, names: Any) -> list[ImageFile]:
    if not isinstance(names, list) or not names:
        raise RecordProblem("field 'images' must be a non-empty list of file names")
    out: list[ImageFile] = []
    seen: set[str] = set()
    for name in names:
        im = ctx.image(name, dirs=_IMAGE_DIRS)
        fig, n = im.figure, 2
        while fig in seen:
            fig, n = f"{im.figure}-{n}", n + 1
        seen.add(fig)
        out.append(ImageFile(fig, im.path))
    return out


@register_format(
    "medxpertqa",
    sniff=_sniff,
    root=_root,
    description="MedXpertQA-MM JSON Lines (id, question, options A-E, label, images) + images/",
)
def load_medxpertqa(
    path: Path, ctx: LoadContext, *, split: str | None = None, strip_inline_options: bool = True
) -> Iterator[DatasetItem]:
    """Load MedXpertQA-MM as multiple-choice items (reference = label letter, option text as alternative)."""
    for f, file_split in split_files(
        ctx,
        path,
        _FILES,
        splits=_SPLITS,
        split=split,
        accept=_is_medxpert_file,
        what="MedXpertQA-MM JSON Lines files (*.jsonl with options, label, images)",
    ):
        for line, raw in read_jsonl(ctx, f):
            with ctx.record(f, line):
                rec = require_fields(raw, ("id", "question", "options", "label", "images"))
                options = _options(rec["options"])
                label = clean_text(rec["label"]).upper()
                if label not in options:
                    raise RecordProblem(f"label {rec['label']!r} is not one of the options {sorted(options)}")
                question = text_field(rec, "question")
                if strip_inline_options:
                    question = _strip_inline(question, options)
                images = _figures(ctx, rec["images"])
                metadata = {"split": file_split, "n_images": len(images)}
                metadata.update(
                    {
                        k: clean_text(rec[k])
                        for k in ("medical_task", "body_system", "question_type")
                        if isinstance(rec.get(k), str)
                    }
                )
                yield ctx.item(
                    question_id=text_field(rec, "id"),
                    question=question,
                    reference=label,
                    alternatives=[options[label]],
                    answer_type="mcq",
                    options=options,
                    label=label,
                    images=images,
                    metadata=metadata,
                    answer_raw=str(rec["label"]),
                )
