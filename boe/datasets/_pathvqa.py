"""PathVQA: records ``image, question, answer`` + ``images/<split>/<image>.jpg``.

Read from the release's ``qas/<split>/<split>_qa.pkl`` (a pickled list of
dicts, unpickled with every class lookup refused, so a file cannot run
code) or from the same records as JSON, JSON Lines or CSV. As in the
paper, yes/no questions are dropped unless ``keep_yes_no``.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from boe.datasets._context import (
    Drop,
    LoadContext,
    clean_text,
    find_files,
    head,
    is_yes_no,
    read_csv,
    read_json_records,
    read_jsonl,
    require_fields,
    split_files,
    text_field,
)
from boe.datasets._item import DatasetItem
from boe.datasets._registry import register_format

_SPLITS = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_PICKLES = ("*_qa.pkl", "qas/*_qa.pkl", "qas/*/*_qa.pkl")
_TEXT_FILES = ("*.json", "*.jsonl", "*.csv", "qas/*.json", "qas/*.jsonl", "qas/*.csv")
_FIELDS = ("image", "question", "answer")
_HF_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")  # a save_to_disk folder's (format hf)


class _DataOnly(pickle.Unpickler):
    """Unpickles plain lists, dicts, strings and numbers; refuses every class (no code can run)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data is read")


def _is_pathvqa_text(p: Path) -> bool:
    if p.suffix not in (".json", ".jsonl", ".csv") or p.name in _HF_FILES:
        return False
    text = head(p, 4096)
    if p.suffix == ".csv":
        cols = [c.strip().strip('"') for c in text.splitlines()[0].split(",")] if text else []
        # exactly these columns (and a pandas index): a CSV format with more of its own is not PathVQA's
        return {c for c in cols if c and not c.startswith("Unnamed:")} == set(_FIELDS)
    # other formats carry more fields; PathVQA's records have exactly these three
    others = ('"img_name"', '"image_name"', '"options"', '"label"', '"answer_type"', '"q_lang"')
    return all(f'"{f}"' in text for f in _FIELDS) and not any(o in text for o in others)


def _files(p: Path) -> list[Path]:
    return find_files(p, _PICKLES) + [f for f in find_files(p, _TEXT_FILES) if _is_pathvqa_text(f)]


def _sniff(p: Path) -> bool:
    if p.is_file():
        return p.name.endswith("_qa.pkl") or _is_pathvqa_text(p)
    return bool(_files(p))


def _root(p: Path) -> Path:
    d = p if p.is_dir() else p.parent
    # qas/<split>/<split>_qa.pkl lives two levels below the root that holds images/
    for up in (d, *d.parents[:2]):
        if (up / "images").is_dir():
            return up
    return d


def _records(ctx: LoadContext, f: Path) -> Iterator[tuple[int | None, Any]]:
    if f.suffix == ".pkl":
        try:
            data = _DataOnly(io.BytesIO(f.read_bytes())).load()
        except OSError as exc:
            raise ctx.file_error(f, f"cannot read: {exc.strerror or exc}") from exc
        except Exception as exc:  # a damaged or hostile pickle fails in many ways; all are bad input
            raise ctx.file_error(f, f"unreadable pickle ({type(exc).__name__}: {exc})") from exc
        if not isinstance(data, list):
            raise ctx.file_error(f, f"expected a list of records, got {type(data).__name__}")
        yield from ((None, rec) for rec in data)
    elif f.suffix == ".csv":
        yield from read_csv(ctx, f, _FIELDS)
    elif f.suffix == ".jsonl":
        yield from read_jsonl(ctx, f)
    else:
        yield from read_json_records(ctx, f)


@register_format(
    "pathvqa",
    sniff=_sniff,
    root=_root,
    description="PathVQA image/question/answer records (pickle, JSON, JSONL or CSV) + images/<split>/",
)
def load_pathvqa(
    path: Path, ctx: LoadContext, *, split: str | None = None, keep_yes_no: bool = False
) -> Iterator[DatasetItem]:
    """Load PathVQA; yes/no questions are dropped (the paper's open-answer cell) unless ``keep_yes_no``."""
    files = split_files(
        ctx,
        path,
        (*_PICKLES, *_TEXT_FILES),
        splits=_SPLITS,
        split=split,
        what="PathVQA files (qas/<split>/<split>_qa.pkl, or JSON/JSONL/CSV records)",
        accept=lambda f: f.suffix == ".pkl" or _is_pathvqa_text(f),
    )
    for f, file_split in files:
        dirs = (f"images/{file_split}", "images", "", str(file_split)) if file_split else ("images", "")
        per_image: dict[str, int] = {}
        for index, (line, raw) in enumerate(_records(ctx, f), 1):
            with ctx.record(f, line if line is not None else index):
                rec = require_fields(raw, _FIELDS)
                image = text_field(rec, "image")
                # numbered before any filter, so ids do not depend on keep_yes_no
                k = per_image[image] = per_image.get(image, 0) + 1
                answer = text_field(rec, "answer")
                closed = is_yes_no(answer)
                if closed and not keep_yes_no:
                    raise Drop("yes/no answer")
                yield ctx.item(
                    question_id=f"{file_split or 'all'}/{image}/{k}",
                    question=text_field(rec, "question"),
                    reference=answer,
                    answer_type="closed" if closed else "open",
                    images=[ctx.image(image, dirs=dirs, exts=(".jpg", ".png", ".jpeg"))],
                    metadata={"split": file_split, "image_id": clean_text(image)},
                    answer_raw=str(rec["answer"]),
                )
