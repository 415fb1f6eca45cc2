"""VQA-Med 2019 (ImageCLEF): pipe-separated text, one QA per line, no header.

* train / val: ``QAPairsByCategory/C<n>_<Category>_<split>.txt`` with
  ``<image-id>|<question>|<answer>`` (the category comes from the file name);
* test: ``VQAMed2019_Test_Questions_w_Ref_Answers.txt`` with
  ``<image-id>|<category>|<question>|<answer>``.

In answers ``#`` separates alternative correct answers and ``(...)`` marks
an optional part (the organisers' convention, README of the test set): each
becomes an accepted alternative. The image id is the JPEG name without
``.jpg``; images sit in ``Train_images`` / ``Val_images`` /
``VQAMed2019_Test_Images`` next to the text (or ``images/``).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

from boe.datasets._context import (
    LoadContext,
    RecordProblem,
    clean_text,
    find_files,
    head,
    is_yes_no,
    read_text_lines,
    split_files,
)
from boe.datasets._item import DatasetItem
from boe.datasets._registry import register_format

_SPLITS = {"train": "train", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_TEST_FILE = "VQAMed2019_Test_Questions_w_Ref_Answers.txt"
_FILES = (
    "QAPairsByCategory/*.txt",
    "*/QAPairsByCategory/*.txt",
    _TEST_FILE,
    f"*/{_TEST_FILE}",
)
_IMAGE_SUBDIRS = ("Train_images", "Val_images", "VQAMed2019_Test_Images", "images", "")
_CATEGORY_FILE = re.compile(r"^C\d+_([A-Za-z]+)_", re.IGNORECASE)
_OPTIONAL = re.compile(r"\(([^()]*)\)")
_MAX_OPTIONAL = 3  # more optional parts than this: only "all kept" and "all dropped"


def _is_vqamed_file(p: Path) -> bool:
    if p.suffix != ".txt":
        return False
    lines = [ln for ln in head(p, 4096).splitlines()[:5] if ln.strip()]
    return bool(lines) and all(ln.count("|") in (2, 3) for ln in lines) and lines[0].split("|")[0].strip() != ""


def _sniff(p: Path) -> bool:
    if p.is_file():
        return _is_vqamed_file(p)
    return any(_is_vqamed_file(f) for f in find_files(p, _FILES))


def _root(p: Path) -> Path:
    if p.is_file():
        p = p.parent
    return p.parent if p.name == "QAPairsByCategory" else p


def expand_answer(raw: str) -> list[str]:
    """Every accepted form of a VQA-Med answer: ``#`` alternatives, each with its ``(...)`` parts kept or dropped.

    The first element is the first alternative as written (the reference).
    """
    out: list[str] = []
    for part in raw.split("#"):
        text = clean_text(part)
        if not text:
            continue
        out.append(text)
        groups = _OPTIONAL.findall(text)
        if not groups:
            continue
        choices = (
            list(itertools.product((True, False), repeat=len(groups)))
            if len(groups) <= _MAX_OPTIONAL
            else [(True,) * len(groups), (False,) * len(groups)]
        )
        for keep in choices:
            variant = _fill_optional(text, keep)
            if variant:
                out.append(variant)
    return list(dict.fromkeys(out))


def _fill_optional(text: str, keep: tuple[bool, ...]) -> str:
    """``text`` with its i-th ``(...)`` part kept (without brackets) when ``keep[i]``, else removed."""
    flags = iter(keep)

    def one(m: re.Match[str]) -> str:
        return m.group(1) if next(flags) else " "

    variant = clean_text(re.sub(r"\s+([,.;:])", r"\1", _OPTIONAL.sub(one, text)))
    return variant.strip(" ,;:-")


def _category(path: Path) -> str | None:
    m = _CATEGORY_FILE.match(path.stem)
    return m.group(1).lower() if m else None


def _image_dirs(ctx: LoadContext, text_file: Path) -> list[str]:
    split_dir = _root(text_file).resolve()
    dirs = list(_IMAGE_SUBDIRS)
    if split_dir.is_relative_to(ctx.root) and split_dir != ctx.root:
        base = os.path.relpath(split_dir, ctx.root)
        dirs = [os.path.join(base, d) for d in _IMAGE_SUBDIRS] + dirs
    return dirs


@register_format(
    "vqa-med",
    sniff=_sniff,
    root=_root,
    description="VQA-Med 2019 pipe-separated QA text (QAPairsByCategory, test with reference answers)",
)
def load_vqa_med(path: Path, ctx: LoadContext, *, split: str | None = None) -> Iterator[DatasetItem]:
    """Load VQA-Med 2019 from a directory (train, val and test files found in it) or one text file."""
    for f, file_split in split_files(
        ctx,
        path,
        _FILES,
        splits=_SPLITS,
        split=split,
        what="VQA-Med files (QAPairsByCategory/*.txt or the test file with answers)",
    ):
        yield from _load_file(f, ctx, file_split)


def _load_file(f: Path, ctx: LoadContext, split: str | None) -> Iterator[DatasetItem]:
    file_category = _category(f)
    dirs = _image_dirs(ctx, f)
    n_fields: int | None = None
    for line, text in read_text_lines(ctx, f):
        with ctx.record(f, line):
            fields = text.split("|")
            if n_fields is None:
                if len(fields) == 2:
                    raise ctx.file_error(f, "has questions but no reference answers (2 fields a line)", line)
                n_fields = len(fields)
            if len(fields) != n_fields or n_fields not in (3, 4):
                raise RecordProblem(
                    f"expected {n_fields if n_fields in (3, 4) else '3 or 4'} '|'-separated fields, got {len(fields)}"
                )
            category: str | None
            if n_fields == 4:
                image_id, cat_text, question, answer = fields
                category = clean_text(cat_text).lower() or None
            else:
                image_id, question, answer = fields
                category = file_category
            image_id = clean_text(image_id)
            question = clean_text(question)
            forms = expand_answer(answer)
            if not image_id or not question or not forms:
                raise RecordProblem("empty image id, question or answer")
            qid = f"{split or 'all'}/{category}/{image_id}" if category else f"{split or 'all'}/{f.stem}/{line}"
            reference = forms[0]
            yield ctx.item(
                question_id=qid,
                question=question,
                reference=reference,
                alternatives=forms[1:],
                answer_type="closed" if is_yes_no(reference) else "open",
                images=[ctx.image(image_id, dirs=dirs, exts=(".jpg", ".jpeg", ".png"))],
                metadata={"split": split, "category": category, "image_id": image_id},
                answer_raw=answer,
            )
