"""The loaded question (`DatasetItem`), what went wrong while loading (`LoadIssue`), and the result (`Dataset`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, overload

from boe.errors import InputError

__all__ = [
    "ANSWER_TYPES",
    "AnswerType",
    "Dataset",
    "DatasetItem",
    "DatasetRecordError",
    "ImageFile",
    "IssueKind",
    "LoadIssue",
]

AnswerType = Literal["open", "closed", "mcq"]
ANSWER_TYPES: tuple[str, ...] = ("open", "closed", "mcq")
IssueKind = Literal["error", "path", "missing_image", "duplicate"]


class ImageFile(NamedTuple):
    """One image of a question: its figure id (unique within the question) and absolute path."""

    figure: str
    path: Path


class DatasetRecordError(InputError):
    """One dataset record (or file) cannot be used; names the file, line and question."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        question_id: str | None = None,
        kind: str = "error",
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.question_id = question_id
        self.kind = kind
        super().__init__(_where(source, line, question_id, message))


@dataclass(frozen=True)
class LoadIssue:
    """A record that was skipped (or loaded with missing images), and why."""

    kind: IssueKind
    message: str
    source: str | None = None
    line: int | None = None
    question_id: str | None = None

    def describe(self) -> str:
        """One line: file:line, question, kind and message."""
        return _where(self.source, self.line, self.question_id, f"[{self.kind}] {self.message}")


def _where(source: str | None, line: int | None, question_id: str | None, message: str) -> str:
    parts = []
    if source is not None:
        parts.append(f"{source}:{line}" if line is not None else source)
    elif line is not None:
        parts.append(f"line {line}")
    if question_id is not None:
        parts.append(f"question {question_id!r}")
    return f"{', '.join(parts)}: {message}" if parts else message


def _check_options(options: Mapping[str, str]) -> None:
    """`ValueError` unless the options are non-empty, keyed by single capital letters, each with a text."""
    if not options:
        raise ValueError("options must be None or non-empty")
    bad = [k for k in options if not (len(k) == 1 and k.isalpha() and k.isupper())]
    if bad:
        raise ValueError(f"option keys must be single capital letters, got {bad}")
    empty = [k for k, v in options.items() if not str(v).strip()]
    if empty:
        raise ValueError(f"option(s) {empty} have no text")


@dataclass(frozen=True, eq=False)
class DatasetItem:
    """One benchmark question with its evaluation data.

    What a generator may see is `for_generator()`: the question, the images
    and the options unless ``options_hidden``. ``reference``,
    ``alternatives``, ``label`` and ``answer_raw`` are evaluation data.
    ``metadata`` describes the question (type, organ, modality, language,
    split); it can correlate with the answer (SLAKE's ``modality`` answers its
    modality questions), so it is not part of `for_generator()` either.
    """

    question_id: str
    dataset: str
    question: str
    reference: str
    answer_type: AnswerType
    alternatives: tuple[str, ...] = ()
    options: Mapping[str, str] | None = None
    options_hidden: bool = False
    label: str | None = None  # the correct option letter, when the question has options
    images: tuple[ImageFile, ...] = ()
    missing_images: tuple[str, ...] = ()  # figure ids whose file was not found at load time
    metadata: Mapping[str, Any] = field(default_factory=dict)
    root: Path = Path(".")
    answer_raw: str | None = None  # the answer exactly as the file has it

    def __post_init__(self) -> None:
        if not self.question_id:
            raise ValueError("question_id must not be empty")
        if not self.question.strip():
            raise ValueError("question text is empty")
        if not self.reference.strip():
            raise ValueError("reference answer is empty")
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"answer_type must be one of {ANSWER_TYPES}, got {self.answer_type!r}")
        if self.options is not None:
            _check_options(self.options)
        if self.label is not None and (self.options is None or self.label not in self.options):
            raise ValueError(f"label {self.label!r} is not one of the options")
        if self.answer_type == "mcq" and (self.options is None or self.label is None):
            raise ValueError("a multiple-choice item needs options and a label")
        if self.answer_type == "mcq" and self.options_hidden:
            raise ValueError("a multiple-choice item cannot hide its options")
        figures = [im.figure for im in self.images]
        if len(set(figures)) != len(figures):
            raise ValueError(f"figure ids must be unique within a question, got {figures}")
        unknown = set(self.missing_images) - set(figures)
        if unknown:
            raise ValueError(f"missing_images names unknown figures {sorted(unknown)}")

    @property
    def answers(self) -> tuple[str, ...]:
        """The reference followed by the alternatives (every accepted answer string)."""
        return (self.reference, *self.alternatives)

    def for_generator(self) -> dict[str, Any]:
        """Only what a candidate generator may see: never the reference, label or metadata."""
        return {
            "question_id": self.question_id,
            "question": self.question,
            "options": None if self.options_hidden or self.options is None else dict(self.options),
            "images": [(im.figure, str(im.path)) for im in self.images],
        }

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready record of everything, evaluation data included."""
        return {
            "question_id": self.question_id,
            "dataset": self.dataset,
            "question": self.question,
            "reference": self.reference,
            "alternatives": list(self.alternatives),
            "answer_type": self.answer_type,
            "options": None if self.options is None else dict(self.options),
            "options_hidden": self.options_hidden,
            "label": self.label,
            "images": [[im.figure, str(im.path)] for im in self.images],
            "missing_images": list(self.missing_images),
            "metadata": dict(self.metadata),
            "root": str(self.root),
            "answer_raw": self.answer_raw,
        }


@dataclass(frozen=True)
class Dataset(Sequence[DatasetItem]):
    """The items of one load, with the skipped records and filter counts."""

    name: str
    format: str
    root: Path
    items: tuple[DatasetItem, ...]
    issues: tuple[LoadIssue, ...] = ()
    dropped: Mapping[str, int] = field(default_factory=dict)  # filter reason -> records left out on purpose
    options: Mapping[str, Any] = field(default_factory=dict)

    @overload
    def __getitem__(self, index: int) -> DatasetItem: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[DatasetItem]: ...

    def __getitem__(self, index: int | slice) -> DatasetItem | Sequence[DatasetItem]:
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[DatasetItem]:
        return iter(self.items)

    def by_id(self, question_id: str) -> DatasetItem:
        """The item with this question id (KeyError if absent)."""
        for item in self.items:
            if item.question_id == question_id:
                return item
        raise KeyError(question_id)

    def subset(self, n: int, seed: int = 0) -> tuple[DatasetItem, ...]:
        """A deterministic sample of ``n`` items: ordered by a hash of (seed, question id), not by file order."""
        if n < 0:
            raise ValueError("n must be >= 0")

        def key(item: DatasetItem) -> str:
            return hashlib.sha256(f"{seed}\0{item.question_id}".encode()).hexdigest()

        return tuple(sorted(self.items, key=key)[:n])

    def describe(self) -> dict[str, Any]:
        """What a run records about this dataset (no question content)."""
        kinds: dict[str, int] = {}
        for issue in self.issues:
            kinds[issue.kind] = kinds.get(issue.kind, 0) + 1
        return {
            "name": self.name,
            "format": self.format,
            "root": str(self.root),
            "n_items": len(self.items),
            "issues": kinds,
            "dropped": dict(self.dropped),
            "options": dict(self.options),
            "items_with_missing_images": sum(1 for it in self.items if it.missing_images),
        }

    def summary(self) -> str:
        """One line for a person: loaded, skipped and filtered counts."""
        d = self.describe()
        parts = [f"{self.name}: {d['n_items']} items"]
        if d["issues"]:
            parts.append("issues " + ", ".join(f"{k} {v}" for k, v in sorted(d["issues"].items())))
        if d["dropped"]:
            parts.append("filtered " + ", ".join(f"{k} {v}" for k, v in sorted(d["dropped"].items())))
        if d["items_with_missing_images"]:
            parts.append(f"{d['items_with_missing_images']} loaded without their image files")
        return "; ".join(parts)
