"""Load ledger files straight into compact `Question`s, in parallel for large files, from a cache when unchanged.

Large files are cut into byte ranges at line boundaries: with n processes,
the parent reads the first 1/n itself while n - 1 forked workers validate
the rest, range by range, and send its questions back packed
(`boe.core.packing`: only their share pays for packing and unpacking); the
parent keeps file order, global line numbers, calibration-group ids and the
duplicate-question check, so the result is identical to the sequential path.
Given a `LedgerCache`, a file whose every record is valid is stored packed,
and the next load of the same contents unpacks it instead of validating
again (the cache, outside the core, keys it by content).
"""

from __future__ import annotations

import gc
import heapq
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from boe.core.graph import GroupIndex, Question
from boe.core.ledger import FieldRuleError, parse_record
from boe.core.lines import STDIN, ledger_name, open_ledger
from boe.core.packing import PackedQuestions, from_bytes, pack_questions, to_bytes, unpack_questions
from boe.core.structs import decode_record
from boe.errors import LedgerError, RecordError

__all__ = ["LedgerCache", "load_ledgers", "load_lines", "worker_count"]

#: Files above this size are read by several processes.
PARALLEL_BYTES = 32 * 2**20
CHUNK_BYTES = 8 * 2**20

_Item = tuple[int, Question | RecordError]


class LedgerCache(Protocol):
    """Where loaded ledger files are kept packed (`boe.ledger_cache.FileLedgerCache`); every failure is a miss.

    An implementation keys an entry by the file's content (and the loader's code), never by its name or time.
    """

    def get(self, path: Path) -> bytes | None:
        """What `put` stored for exactly these file contents, or None."""
        ...

    def put(self, path: Path, data: bytes) -> None:
        """Store ``data`` for the contents ``get`` last saw at ``path`` (silently not, when they changed)."""
        ...


def load_ledgers(
    sources: Iterable[str | Path],
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
    workers: int | None = None,
    groups: GroupIndex | None = None,
    cache: LedgerCache | None = None,
) -> tuple[list[Question], GroupIndex]:
    """Validated questions of all files in order; bad records go to ``on_error`` (or raise with ``strict``)."""
    groups = GroupIndex() if groups is None else groups
    questions: list[Question] = []
    seen: set[tuple[str, str]] = set()
    for src in sources:
        path = Path(src)
        stdin = str(src) == STDIN
        if stdin:
            size = 0
        else:
            open_ledger(path).close()  # names a missing file or a folder before any work
            try:
                size = path.stat().st_size
            except OSError as exc:
                raise LedgerError(f"cannot open ledger {path}: {exc.strerror}") from exc
        use_cache = None if stdin else cache
        packed = _cached(use_cache, path)
        file_items: list[_Item] | None = None
        found = _Found()
        if packed is not None:
            items: Iterable[_Item] = zip(packed.arrays["line"].tolist(), unpack_questions(packed, groups), strict=True)
        else:
            n_workers = worker_count(workers)
            if n_workers > 1 and size > PARALLEL_BYTES:
                items = _parallel_items(path, ledger_name(src), size, n_workers, groups, found)
            else:
                items = _sequential_items(str(src), groups, found)
            if use_cache is not None:
                items = file_items = list(items)
        for line, item in items:
            if isinstance(item, Question):
                key = (item.dataset, item.question_id)
                if key not in seen:
                    seen.add(key)
                    questions.append(item)
                    continue
                item = RecordError(
                    "question id already seen for this dataset",
                    source=ledger_name(src),
                    line=line,
                    question_id=item.question_id,
                    field="question_id",
                )
            if strict:
                raise item
            if on_error is not None:
                on_error(item)
        if use_cache is not None and file_items is not None and not found.plugin_kinds:
            _store(use_cache, path, file_items, groups.keys)
    return questions, groups


def _cached(cache: LedgerCache | None, path: Path) -> PackedQuestions | None:
    if cache is None:
        return None
    data = cache.get(path)
    if data is None:
        return None
    try:
        return from_bytes(data)
    except ValueError:
        return None  # damaged: loaded afresh and stored again


def _store(cache: LedgerCache, path: Path, items: list[_Item], group_keys: list[str]) -> None:
    """Cache a file whose every record loaded, with no plugin kind and no question twice."""
    if not items or any(not isinstance(q, Question) for _, q in items):
        return
    questions: list[Question] = [q for _, q in items]  # type: ignore[misc]
    if len({(q.dataset, q.question_id) for q in questions}) < len(questions):
        return
    cache.put(path, to_bytes(pack_questions(questions, group_keys, lines=[line for line, _ in items])))


def load_lines(
    lines: Iterable[str | bytes],
    source: str,
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
    groups: GroupIndex | None = None,
) -> tuple[list[Question], GroupIndex]:
    """Questions from ledger lines of any origin (e.g. a store); ``source`` names them in errors."""
    groups = GroupIndex() if groups is None else groups
    questions: list[Question] = []
    seen: set[tuple[str, str]] = set()
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            q = _question(raw, source, lineno, groups)
            if (q.dataset, q.question_id) in seen:
                raise RecordError(
                    "question id already seen for this dataset",
                    source=source,
                    line=lineno,
                    question_id=q.question_id,
                    field="question_id",
                )
        except RecordError as err:
            if strict:
                raise
            if on_error is not None:
                on_error(err)
            continue
        seen.add((q.dataset, q.question_id))
        questions.append(q)
    return questions, groups


def worker_count(workers: int | None = None) -> int:
    """Processes for loading, the parent one of them: ``workers`` if given, else BOE_WORKERS, else up to two (1
    without fork)."""
    if workers is not None:
        return workers
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        return 1
    env = os.environ.get("BOE_WORKERS")
    if env:
        return max(1, int(env))
    return min(2, os.cpu_count() or 1)


class _Found:
    """What loading a file found besides its questions."""

    plugin_kinds = False  # a record declares plugin kinds: its load depends on the plugins installed


def _sequential_items(src: str, groups: GroupIndex, found: _Found) -> Iterator[_Item]:
    fh = open_ledger(src)
    try:
        yield from _line_items(fh, ledger_name(src), groups, found)
    finally:
        if src != STDIN:
            fh.close()


def _line_items(lines: Iterable[bytes], name: str, groups: GroupIndex, found: _Found) -> Generator[_Item, None, int]:
    """The question or error of each non-blank line, numbered from 1; returns how many lines there were."""
    lineno = 0
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            yield (lineno, _question(raw, name, lineno, groups, found))
        except RecordError as err:
            yield (lineno, err)
    return lineno


def _parallel_items(
    path: Path, name: str, size: int, n_workers: int, groups: GroupIndex, found: _Found
) -> Iterator[_Item]:
    """The file's first 1/n_workers read here, as `_sequential_items` does, while n_workers - 1 forked workers
    read the rest in chunks and send it back packed: only their share pays for packing and unpacking. Errors
    name the file ``name``, as the sequential path does."""
    import multiprocessing as mp

    head = size // n_workers
    n_chunks = max(n_workers - 1, -(-(size - head) // CHUNK_BYTES))
    bounds = [
        (str(path), head + (size - head) * i // n_chunks, head + (size - head) * (i + 1) // n_chunks)
        for i in range(n_chunks)
    ]
    with mp.get_context("fork").Pool(n_workers - 1) as pool:
        results = pool.imap(_load_range, bounds)  # the workers start at once
        offset = yield from _line_items(_range_lines(path, 0, head), name, groups, found)
        for n_lines, packed, errors, plugin_kinds in results:
            found.plugin_kinds |= plugin_kinds
            good: Iterator[_Item] = zip(
                (offset + line for line in packed.arrays["line"].tolist()),
                unpack_questions(packed, groups),
                strict=True,
            )
            for err in errors:
                err.line = offset + (err.line or 0)
                err.source = name
                err.args = (err.describe(),)
            bad: Iterator[_Item] = ((err.line or 0, err) for err in errors)
            yield from heapq.merge(good, bad, key=lambda item: item[0])
            offset += n_lines


def _range_lines(path: str | Path, start: int, end: int) -> Iterator[bytes]:
    """The lines of a file that start in [start, end)."""
    with open(path, "rb") as fh:
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # finish the line that started before this range
        while fh.tell() < end:
            raw = fh.readline()
            if not raw:
                break
            yield raw


def _question(raw: str | bytes, source: str, line: int, groups: GroupIndex, found: _Found | None = None) -> Question:
    """Decode and type-check one line (msgspec) and build its arrays, checking the graph rules on the way; a line
    that fails goes to the pydantic model (`parse_record`), which names the field or accepts what the Structs
    are stricter about (a number written as a string)."""
    rec = decode_record(raw)
    if rec is not None:
        try:
            q = Question.from_record(rec, groups, check=True)
        except FieldRuleError:
            pass
        else:
            if found is not None and rec.kinds:
                found.plugin_kinds = True
            return q
    record = parse_record(raw, source=source, line=line)  # raises the RecordError naming the field
    if found is not None and record.kinds:
        found.plugin_kinds = True
    return Question.from_record(record, groups)


def _load_range(bound: tuple[str, int, int]) -> tuple[int, PackedQuestions, list[RecordError], bool]:
    """Parse the lines that start in [start, end) of a file; line numbers relative to the range."""
    path, start, end = bound
    gc.disable()  # a worker of this load only: what it builds stays alive until it is packed
    local = GroupIndex()
    found = _Found()
    questions: list[Question] = []
    lines: list[int] = []
    errors: list[RecordError] = []
    n_lines = 0
    for n_lines, raw in enumerate(_range_lines(path, start, end), start=1):
        if not raw.strip():
            continue
        try:
            questions.append(_question(raw, path, n_lines, local, found))
            lines.append(n_lines)
        except RecordError as err:
            errors.append(err)
    return n_lines, pack_questions(questions, local.keys, lines=lines), errors, found.plugin_kinds
