"""PMC-VQA: CSV with ``Figure_path, Question, Answer, Choice A..D, Answer_label`` + ``images/``.

The paper's option-hidden protocol is the default: the generator never
sees the options, the correct option's text becomes the open-answer
reference, and items whose reference only makes sense next to the options
("none of the above", "cannot be determined", ...) are left out. With
``hide_options=False`` items are four-way multiple choice instead.

Quirks handled: choice cells carry their letter (``" B:Focal uptake "``),
stray quotes and non-breaking spaces; ``Answer_label`` may be missing or
disagree with ``Answer`` (a record whose label and answer text name two
different options is skipped and reported).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from boe.datasets._context import (
    Drop,
    LoadContext,
    RecordProblem,
    clean_text,
    find_files,
    head,
    read_csv,
    split_files,
)
from boe.datasets._item import AnswerType, DatasetItem
from boe.datasets._registry import register_format
from boe.datasets.evaluate import normalise

__all__ = ["PLACEHOLDER_PATTERNS", "is_placeholder_answer"]

_SPLITS = {"train": "train", "test": "test", "val": "val"}
_LETTERS = "ABCD"
_ID_COLUMNS = ("index", "Index", "id", "ID", "")
_IMAGE_DIRS = ("images", "", "figures", "images/images", "images_2")
_CHOICE = re.compile(r"^\(?([A-Da-d])\s*[:.)]\s*(.*)$", re.DOTALL)
_LABEL = re.compile(r"^\(?([A-Da-d])\)?\s*[:.]?$")
_QUOTES = "'\"\u201c\u201d\u2018\u2019"

# Matched against `normalise(reference, keep_articles=True)` ("a" may be an option letter): references that
# point at other options or decline to answer.
PLACEHOLDER_PATTERNS: tuple[str, ...] = (
    r"^(none|all|both|neither|any|each) of (the )?"
    r"(these|those|them|above|below|options|choices|answers|preceding|following)\b",
    r"^(none|all|both|neither)$",
    r"^(both |either |neither )?[a-d]( |, )(and|or|nor|&) [a-d]$",
    r"^(both |all )?[a-d](, [a-d])+,? (and|or) [a-d]$",
    r"\b(can ?not|cant|could not|couldnt|unable to|impossible to|not possible to|not able to) (be )?"
    r"(determine|determined|assess|assessed|evaluate|evaluated|tell|say|know|identify|identified|answer|"
    r"conclude|infer|inferred|judge|establish)",
    r"^(not|no) (mentioned|specified|stated|given|provided|shown|visible|available|applicable|determined|known|"
    r"clear|indicated|reported|described|enough information|information|answer|data)\b",
    r"^(unknown|unclear|undetermined|indeterminate|uncertain|n a|na|not applicable|insufficient information|"
    r"insufficient data|information not (given|provided|available)|no correct answer|other)$",
    r"^(the )?(image|figure|text|question|context|caption) (does|do) not (show|provide|mention|specify|indicate|say)",
)
_PLACEHOLDER = re.compile("|".join(f"(?:{p})" for p in PLACEHOLDER_PATTERNS))


def is_placeholder_answer(text: str) -> bool:
    """Whether an answer only makes sense next to its options ("none of the above", "cannot be determined")."""
    return bool(_PLACEHOLDER.search(normalise(text, keep_articles=True)))


def _is_pmc_file(p: Path) -> bool:
    if p.suffix != ".csv":
        return False
    first = head(p, 4096).splitlines()[:1]
    return bool(first) and "Figure_path" in first[0] and "Question" in first[0]


def _sniff(p: Path) -> bool:
    if p.is_file():
        return _is_pmc_file(p)
    return any(_is_pmc_file(f) for f in find_files(p, ("*.csv",)))


def _strip(value: str | None) -> str:
    return clean_text(value or "").strip(_QUOTES).strip()


def _options(row: Mapping[str, str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for letter in _LETTERS:
        cell = _strip(row.get(f"Choice {letter}"))
        m = _CHOICE.match(cell)
        if m:
            if m.group(1).upper() != letter:
                raise RecordProblem(f"'Choice {letter}' holds option {m.group(1).upper()!r}: {cell!r}")
            cell = _strip(m.group(2))
        if cell:
            options[letter] = cell
    if len(options) < 2:
        raise RecordProblem("fewer than two non-empty choices")
    return options


def _label(row: Mapping[str, str], options: Mapping[str, str]) -> tuple[str, str | None]:
    """The correct letter, and the ``Answer`` text when it adds a wording not among the options."""
    m = _LABEL.match(_strip(row.get("Answer_label")))
    label = m.group(1).upper() if m else None
    answer = _strip(row.get("Answer"))
    m2 = _LABEL.match(answer)
    if m2:  # some releases put the letter in Answer
        answer_letter, answer = m2.group(1).upper(), ""
    else:
        m3 = _CHOICE.match(answer)
        answer_letter = m3.group(1).upper() if m3 else None
        answer = _strip(m3.group(2)) if m3 else answer
    if answer:
        key = normalise(answer)
        hits = [k for k, v in options.items() if normalise(v) == key]
        if len(hits) == 1:
            answer_letter = answer_letter or hits[0]
    if label is not None and answer_letter is not None and label != answer_letter:
        raise RecordProblem(
            f"Answer_label {label!r} disagrees with Answer {row.get('Answer')!r} (option {answer_letter})"
        )
    label = label or answer_letter
    if label is None:
        raise RecordProblem(
            f"no usable Answer_label ({row.get('Answer_label')!r}) and Answer {answer!r} names no option"
        )
    if label not in options:
        raise RecordProblem(f"Answer_label {label!r} names an empty or missing choice")
    extra = answer if answer and normalise(answer) != normalise(options[label]) else None
    return label, extra


@register_format(
    "pmc-vqa",
    sniff=_sniff,
    description="PMC-VQA CSV (Figure_path, Question, Answer, Choice A..D, Answer_label) + images/",
)
def load_pmc_vqa(
    path: Path,
    ctx: LoadContext,
    *,
    split: str | None = None,
    hide_options: bool = True,
    filter_placeholders: bool | None = None,
) -> Iterator[DatasetItem]:
    """Load PMC-VQA: option-hidden open answers by default; ``filter_placeholders`` defaults to ``hide_options``."""
    drop_placeholders = hide_options if filter_placeholders is None else filter_placeholders
    for f, file_split in split_files(
        ctx,
        path,
        ("*.csv",),
        splits=_SPLITS,
        split=split,
        accept=_is_pmc_file,
        what="PMC-VQA CSV files (a header with Figure_path and Question)",
    ):
        for row_no, (line, row) in enumerate(read_csv(ctx, f, ("Figure_path", "Question")), 1):
            with ctx.record(f, line):
                if "Answer_label" not in row and "Answer" not in row:
                    raise ctx.file_error(f, "CSV has neither an Answer_label nor an Answer column", 1)
                row_id = next((_strip(row[c]) for c in _ID_COLUMNS if c in row and _strip(row[c])), str(row_no))
                question = _strip(row["Question"])
                if not question:
                    raise RecordProblem("field 'Question' is empty")
                options = _options(row)
                label, extra = _label(row, options)
                correct = options[label]
                if drop_placeholders and is_placeholder_answer(correct):
                    raise Drop("placeholder reference")
                answer_type: AnswerType
                if hide_options:  # the paper's protocol: the correct option's text is the open-answer reference
                    reference, alternatives, answer_type = correct, [extra] if extra else [], "open"
                else:
                    reference, alternatives, answer_type = label, [correct, *([extra] if extra else [])], "mcq"
                yield ctx.item(
                    question_id=f"{f.stem}-{row_id}",
                    question=question,
                    reference=reference,
                    alternatives=alternatives,
                    answer_type=answer_type,
                    options=options,
                    options_hidden=hide_options,
                    label=label,
                    images=[ctx.image(_strip(row["Figure_path"]), dirs=_IMAGE_DIRS)],
                    metadata={"split": file_split, "file": f.name, "row": row_id},
                    answer_raw=row.get("Answer"),
                )
