"""What every loader shares: per-record error handling, safe image paths, file readers and text cleaning."""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from boe.datasets._item import AnswerType, DatasetItem, DatasetRecordError, ImageFile, IssueKind, LoadIssue
from boe.datasets.evaluate import normalise
from boe.errors import ConfigError

__all__ = [
    "Drop",
    "LoadContext",
    "OPEN_CLOSED",
    "RecordProblem",
    "clean_text",
    "find_files",
    "head",
    "is_yes_no",
    "read_csv",
    "read_json_records",
    "read_jsonl",
    "read_text_lines",
    "require_fields",
    "split_files",
    "split_from_name",
    "text_field",
]

#: OPEN / CLOSED as VQA-RAD and SLAKE spell them (compared after `clean_text` and upper-casing).
OPEN_CLOSED: dict[str, AnswerType] = {"OPEN": "open", "CLOSED": "closed"}

_SPACE = re.compile(r"\s+")
_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u200c\u200d\u2060"), None)


def is_yes_no(answer: str) -> bool:
    """Whether an answer is a bare "yes" or "no" (case and punctuation aside)."""
    return normalise(answer) in ("yes", "no")


def clean_text(value: object) -> str:
    """A field as one line: every run of whitespace (tabs, newlines, NBSP, doubled spaces) becomes one space."""
    return _SPACE.sub(" ", str(value).translate(_INVISIBLE)).strip()


class RecordProblem(Exception):
    """Raised inside `LoadContext.record`: this record is malformed and is skipped (or fails a strict load)."""

    def __init__(self, message: str, kind: IssueKind = "error") -> None:
        self.message = message
        self.kind = kind
        super().__init__(message)


class Drop(Exception):
    """Raised inside `LoadContext.record`: this record is left out on purpose by a protocol filter."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class _Record:
    """The `with` block around one record: turns `RecordProblem` and `Drop` into reports."""

    def __init__(self, ctx: LoadContext, source: str, line: int | None) -> None:
        self.ctx = ctx
        self.source = source
        self.line = line
        self.question_id: str | None = None

    def __enter__(self) -> _Record:
        self.ctx._current = self
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self.ctx._current = None
        if isinstance(exc, Drop):
            self.ctx.dropped[exc.reason] = self.ctx.dropped.get(exc.reason, 0) + 1
            return True
        if isinstance(exc, RecordProblem):
            self.ctx.report(exc.kind, exc.message, self.source, self.line, self.question_id)
            return True
        return False


class LoadContext:
    """Handed to a loader: the dataset root, the options every format shares, and the issue log."""

    def __init__(
        self,
        root: Path,
        dataset: str,
        *,
        strict: bool = False,
        require_images: bool = True,
        on_issue: Callable[[LoadIssue], None] | None = None,
    ) -> None:
        self.root = root.resolve()
        self.dataset = dataset
        self.strict = strict
        self.require_images = require_images
        self.on_issue = on_issue
        self.issues: list[LoadIssue] = []
        self.dropped: dict[str, int] = {}
        self._seen: set[str] = set()
        self._current: _Record | None = None
        self._root_str = str(self.root)
        self._root_prefix = self._root_str.rstrip(os.sep) + os.sep
        self._listings: dict[str, frozenset[str]] = {}
        self._folder_cache: dict[tuple[str, ...], list[str]] = {}
        self._display: dict[str, str] = {}

    def record(self, source: Path | str, line: int | None) -> _Record:
        """``with ctx.record(file, line) as rec:`` around the parsing of one record."""
        return _Record(self, self.display(source), line)

    def display(self, source: Path | str) -> str:
        """A file name for messages: relative to the root when it lies inside it."""
        key = str(source)
        shown = self._display.get(key)
        if shown is None:
            resolved = Path(source).resolve()
            shown = str(resolved.relative_to(self.root)) if resolved.is_relative_to(self.root) else key
            self._display[key] = shown
        return shown

    def report(
        self, kind: IssueKind, message: str, source: str | None, line: int | None, question_id: str | None
    ) -> None:
        """Record an issue; a strict load raises it instead."""
        if self.strict:
            raise DatasetRecordError(message, source=source, line=line, question_id=question_id, kind=kind)
        issue = LoadIssue(kind, message, source, line, question_id)
        self.issues.append(issue)
        if self.on_issue is not None:
            self.on_issue(issue)

    def file_error(self, source: Path | str, message: str, line: int | None = None) -> DatasetRecordError:
        """An error for a whole file (unreadable, wrong top-level type): always raised, strict or not."""
        return DatasetRecordError(message, source=self.display(source), line=line)

    def image(
        self,
        name: object,
        *,
        dirs: Sequence[str] = ("",),
        exts: Sequence[str] = ("",),
        figure: str | None = None,
    ) -> ImageFile:
        """The image a record names, looked up under ``root/dir/name[ext]``; never outside the root.

        An empty name, an absolute path outside the root or a ``..`` that
        leaves it is a `RecordProblem` (kind ``path``); so is a found file
        that is a symlink to somewhere outside the root. A file that is not
        found comes back as its first candidate path; `item` reports it.
        """
        text = str(name).strip() if name is not None else ""
        if not text or "\0" in text:
            raise RecordProblem(f"image name {text!r} is empty or invalid", "path")
        stem, suffix = os.path.splitext(os.path.basename(text))
        fig = figure or stem or text
        names = [text + e for e in exts] if not suffix else [text]
        if "/" in text or os.sep in text or text.startswith("."):
            return self._image_path(text, names, dirs, fig)
        folders = self._folders(tuple(dirs))
        for folder in folders:
            listing = self._listing(folder)
            for n in names:
                if n in listing:
                    found = self._checked(os.path.join(folder, n), text)
                    if found is not None:
                        return ImageFile(fig, found)
        return ImageFile(fig, Path(folders[0], names[0]))

    def _image_path(self, text: str, names: list[str], dirs: Sequence[str], fig: str) -> ImageFile:
        """`image` for a name with folders in it (or dots in front): lexical root check on every candidate."""
        if os.path.isabs(text):
            candidates = [os.path.normpath(text)]
        else:
            candidates = [os.path.normpath(os.path.join(self._root_str, d, n)) for d in dirs for n in names]
        for cand in candidates:
            if not (cand == self._root_str or cand.startswith(self._root_prefix)):
                raise RecordProblem(f"image path {text!r} lies outside the dataset root {self._root_str!r}", "path")
        for cand in dict.fromkeys(candidates):
            folder, base = os.path.split(cand)
            if base in self._listing(folder):
                found = self._checked(cand, text)
                if found is not None:
                    return ImageFile(fig, found)
        return ImageFile(fig, Path(candidates[0]))

    def _checked(self, cand: str, text: str) -> Path | None:
        """The resolved file, if it is a regular file inside the root (a symlink out is a `RecordProblem`)."""
        resolved = Path(cand).resolve()
        if not resolved.is_relative_to(self.root):
            raise RecordProblem(f"image {text!r} links to {str(resolved)!r}, outside the dataset root", "path")
        return resolved if resolved.is_file() else None

    def _folders(self, dirs: tuple[str, ...]) -> list[str]:
        folders = self._folder_cache.get(dirs)
        if folders is None:
            folders = list(dict.fromkeys(os.path.normpath(os.path.join(self._root_str, d)) for d in dirs))
            outside = [f for f in folders if not (f == self._root_str or f.startswith(self._root_prefix))]
            if outside:
                raise ValueError(f"image folders {outside} lie outside the dataset root")  # a loader bug
            self._folder_cache[dirs] = folders
        return folders

    def _listing(self, folder: str) -> frozenset[str]:
        names = self._listings.get(folder)
        if names is None:
            try:
                names = frozenset(os.listdir(folder))
            except OSError:
                names = frozenset()
            self._listings[folder] = names
        return names

    def item(
        self,
        *,
        question_id: str,
        question: str,
        reference: str,
        answer_type: AnswerType,
        alternatives: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
        options_hidden: bool = False,
        label: str | None = None,
        images: Sequence[ImageFile] = (),
        metadata: Mapping[str, Any] | None = None,
        answer_raw: str | None = None,
    ) -> DatasetItem:
        """Build one item: checks ids, images and fields; problems become `RecordProblem`."""
        if self._current is not None:
            self._current.question_id = question_id
        if question_id in self._seen:
            raise RecordProblem(f"question id {question_id!r} appears twice; the later record is skipped", "duplicate")
        missing = tuple(im.figure for im in images if not im.path.is_file())
        if missing and self.require_images:
            paths = ", ".join(str(im.path) for im in images if im.figure in missing)
            raise RecordProblem(f"image file not found: {paths}", "missing_image")
        ref_key = reference.casefold()
        alts = tuple(dict.fromkeys(a for a in alternatives if a and a.casefold() != ref_key))
        try:
            item = DatasetItem(
                question_id=question_id,
                dataset=self.dataset,
                question=question,
                reference=reference,
                answer_type=answer_type,
                alternatives=alts,
                options=options,
                options_hidden=options_hidden,
                label=label,
                images=tuple(images),
                missing_images=missing,
                metadata=dict(metadata or {}),
                root=self.root,
                answer_raw=answer_raw,
            )
        except ValueError as exc:
            raise RecordProblem(str(exc)) from exc
        self._seen.add(question_id)
        return item


def _read(ctx: LoadContext, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ctx.file_error(path, f"not UTF-8 text (byte {exc.start})") from exc
    except OSError as exc:
        raise ctx.file_error(path, f"cannot read: {exc.strerror or exc}") from exc


def read_json_records(ctx: LoadContext, path: Path) -> Iterator[tuple[int, Any]]:
    """(line, element) for each element of a JSON array file, the line being where the element starts."""
    text = _read(ctx, path)
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if i >= len(text) or text[i] != "[":
        raise ctx.file_error(path, "expected a JSON array of records")
    i = _skip_ws(text, i + 1)
    line, counted = 1, 0
    if i < len(text) and text[i] == "]":
        return
    while True:
        line += text.count("\n", counted, i)
        counted = i
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise ctx.file_error(path, f"invalid JSON ({exc.msg})", text.count("\n", 0, exc.pos) + 1) from exc
        yield line, obj
        i = _skip_ws(text, end)
        if i < len(text) and text[i] == ",":
            i = _skip_ws(text, i + 1)
            continue
        if i < len(text) and text[i] == "]":
            return
        raise ctx.file_error(path, "invalid JSON (expected ',' or ']')", text.count("\n", 0, i) + 1)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def read_jsonl(ctx: LoadContext, path: Path) -> Iterator[tuple[int, Any]]:
    """(line, object) per non-blank line; a line that is not JSON is reported and skipped."""
    for line_no, line in read_text_lines(ctx, path):
        parsed: list[Any] = []
        with ctx.record(path, line_no):
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise RecordProblem(f"invalid JSON ({exc.msg} at column {exc.colno})") from exc
        if parsed:
            yield line_no, parsed[0]


def read_text_lines(ctx: LoadContext, path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) for each non-blank line; BOM and CRLF handled."""
    for line_no, line in enumerate(_read(ctx, path).splitlines(), 1):
        if line.strip():
            yield line_no, line


def read_csv(ctx: LoadContext, path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(first line of the row, row) for each data row of a CSV file with a header naming ``required``."""
    text = _read(ctx, path)
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ctx.file_error(path, "empty CSV file") from None
    except csv.Error as exc:
        raise ctx.file_error(path, f"unreadable CSV header ({exc})", 1) from exc
    missing = [c for c in required if c not in header]
    if missing:
        raise ctx.file_error(path, f"CSV header lacks column(s) {missing}; it has {header}", 1)
    start = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ctx.file_error(path, f"unreadable CSV ({exc})", start) from exc
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            with ctx.record(path, line):
                raise RecordProblem(f"{len(row)} fields where the header has {len(header)}")
            continue
        yield line, dict(zip(header, row, strict=True))


def require_fields(rec: Any, fields: Sequence[str]) -> Mapping[str, Any]:
    """The record as a mapping that has every field in ``fields`` (else `RecordProblem`)."""
    if not isinstance(rec, Mapping):
        raise RecordProblem(f"expected an object, got {type(rec).__name__}")
    missing = [f for f in fields if f not in rec or rec[f] is None]
    if missing:
        raise RecordProblem(f"missing field(s) {missing}")
    return rec


def text_field(rec: Mapping[str, Any], name: str) -> str:
    """A required field as clean one-line text; empty or non-scalar values are a `RecordProblem`."""
    value = rec.get(name)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise RecordProblem(f"field {name!r} must be text, got {type(value).__name__}")
    text = clean_text(value)
    if not text:
        raise RecordProblem(f"field {name!r} is empty")
    return text


def split_from_name(path: Path, known: Mapping[str, str]) -> str | None:
    """The split a file belongs to, from a word of its name (``known`` maps a word to a split name)."""
    words = re.split(r"[^a-z]+", path.stem.lower())
    for word, split in known.items():
        if word in words or words[0].startswith(word):
            return split
    return None


def split_files(
    ctx: LoadContext,
    path: Path,
    patterns: Sequence[str],
    *,
    splits: Mapping[str, str],
    split: str | None,
    what: str,
    accept: Callable[[Path], bool] | None = None,
) -> list[tuple[Path, str | None]]:
    """(file, split) to load: ``path`` itself, or the files under it that match (and ``accept``).

    ``splits`` maps a word of a file name to its split; with ``split``
    given, only that split's files are kept. No file at all is an error
    naming ``what`` was looked for.
    """
    known = sorted(set(splits.values()))
    if split is not None and split not in known:
        raise ConfigError(f"unknown split {split!r}; known: {', '.join(known)}")
    if path.is_file():
        files = [path]
    else:
        files = [f for f in find_files(path, patterns) if accept is None or accept(f)]
    if not files:
        raise ctx.file_error(path, f"no {what}")
    named = [(f, split_from_name(f, splits)) for f in files]
    return [(f, s) for f, s in named if split is None or s == split]


def find_files(path: Path, patterns: Sequence[str]) -> list[Path]:
    """Files under ``path`` matching any glob pattern, each once, sorted."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        for p in sorted(path.glob(pattern)):
            if p.is_file():
                found[p] = None
    return list(found)


def head(path: Path, size: int = 65536) -> str:
    """The first bytes of a file as text (for sniffing formats); empty when unreadable."""
    try:
        with path.open("rb") as fh:
            return fh.read(size).decode("utf-8-sig", errors="replace")
    except OSError:
        return ""
