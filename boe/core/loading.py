"""Load ledger files straight into compact `Question`s, in parallel for large files, from a cache when unchanged.

Large files are cut into byte ranges at line boundaries; forked workers
validate their range and send its questions back packed (`boe.core.packing`);
the parent keeps file order, global line numbers, calibration-group ids and
the duplicate-question check, so the result is identical to the sequential
path. Given a `LedgerCache`, a file whose every record is valid is stored
packed, and the next load of the same contents unpacks it instead of
validating again (the cache, outside the core, keys it by content).
"""

from __future__ import annotations

import gc
import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import IO, Protocol

from boe.core.columns import fits, pack_records
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import FieldRuleError, parse_record
from boe.core.lines import STDIN, ledger_name, open_ledger
from boe.core.packing import PackedQuestions, from_bytes, pack_questions, to_bytes, unpack_questions
from boe.core.structs import LedgerLine, decode_record
from boe.errors import LedgerError, RecordError

__all__ = ["LedgerCache", "load_ledgers", "load_lines", "worker_count"]

#: Files above this size are read by several processes.
PARALLEL_BYTES = 32 * 2**20
CHUNK_BYTES = 8 * 2**20

#: Records packed at once (`pack_records`).
RUN = 512

_Item = tuple[int, Question | RecordError]
_Segment = tuple[PackedQuestions, list[RecordError]]
_Line = tuple[int, str | bytes, LedgerLine | None]  # a line's number, text and record (None: the Structs refused it)


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
            items: Iterable[_Item] = _unpacked([(packed, [])], groups)
        else:
            n_workers = worker_count(workers)
            if n_workers > 1 and size > PARALLEL_BYTES:
                items = _parallel_items(path, size, n_workers, groups, found)
            else:
                items = _sequential_items(str(src), groups, found)
            if use_cache is not None:
                items = file_items = list(items)
        _collect(items, ledger_name(src), seen, questions, strict, on_error)
        if use_cache is not None and file_items is not None and not found.plugin_kinds:
            _store(use_cache, path, file_items, groups.keys)
    return questions, groups


def _collect(
    items: Iterable[_Item],
    source: str,
    seen: set[tuple[str, str]],
    questions: list[Question],
    strict: bool,
    on_error: Callable[[RecordError], None] | None,
) -> None:
    """Questions into ``questions`` unless their id was ``seen``; errors (a repeated id too) raised or reported."""
    for line, item in items:
        if isinstance(item, Question):
            key = (item.dataset, item.question_id)
            if key not in seen:
                seen.add(key)
                questions.append(item)
                continue
            item = RecordError(
                "question id already seen for this dataset",
                source=source,
                line=line,
                question_id=item.question_id,
                field="question_id",
            )
        if strict:
            raise item
        if on_error is not None:
            on_error(item)


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
    items = _unpacked(_segments(enumerate(lines, start=1), source, _Found()), groups)
    _collect(items, source, set(), questions, strict, on_error)
    return questions, groups


def worker_count(workers: int | None = None) -> int:
    """Processes for loading: ``workers`` if given, else BOE_WORKERS, else up to two (1 without fork)."""
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
    fh, name = open_ledger(src), ledger_name(src)
    try:
        yield from _unpacked(_segments(enumerate(fh, start=1), name, found), groups)
    finally:
        if src != STDIN:
            fh.close()


def _parallel_items(path: Path, size: int, n_workers: int, groups: GroupIndex, found: _Found) -> Iterator[_Item]:
    import multiprocessing as mp

    n_chunks = max(n_workers, -(-size // CHUNK_BYTES))
    bounds = [(str(path), size * i // n_chunks, size * (i + 1) // n_chunks) for i in range(n_chunks)]
    offset = 0
    with mp.get_context("fork").Pool(n_workers) as pool:
        for n_lines, segments, plugin_kinds in pool.imap(_load_range, bounds):
            found.plugin_kinds |= plugin_kinds
            for packed, errors in segments:
                packed.arrays["line"] += offset
                for err in errors:
                    err.line = offset + (err.line or 0)
                    err.source = str(path)
                    err.args = (err.describe(),)
            yield from _unpacked(segments, groups)
            offset += n_lines


def _unpacked(segments: Iterable[_Segment], groups: GroupIndex) -> Iterator[_Item]:
    """The questions (their groups registered in ``groups``) and errors of each segment, in line order."""
    for packed, errors in segments:
        good: Iterable[_Item] = ()
        if packed:
            good = zip(packed.arrays["line"].tolist(), unpack_questions(packed, groups), strict=True)
        bad: Iterable[_Item] = ((err.line or 0, err) for err in errors)
        yield from heapq.merge(good, bad, key=itemgetter(0))


def _segments(lines: Iterable[tuple[int, str | bytes]], source: str, found: _Found) -> Iterator[_Segment]:
    """The questions of numbered lines packed a run at a time (`pack_records`, or per record for the records it
    does not take), each run with the errors among its lines."""
    fast: list[_Line] = []
    slow: list[_Line] = []
    k = 0  # the candidates of each record in ``fast``
    for lineno, raw in lines:
        if not raw or raw.isspace():
            continue
        rec = decode_record(raw)
        if rec is not None and fits(rec):
            if slow:
                yield _slow(slow, source, found)
                slow = []
            if fast and (len(fast) == RUN or len(rec.candidates) != k):
                yield _fast(fast, source, found)
                fast = []
            k = len(rec.candidates)
            fast.append((lineno, raw, rec))
        else:
            if fast:
                yield _fast(fast, source, found)
                fast = []
            slow.append((lineno, raw, rec))
    if fast:
        yield _fast(fast, source, found)
    if slow:
        yield _slow(slow, source, found)


def _fast(run: list[_Line], source: str, found: _Found) -> _Segment:
    done = pack_records([rec for _, _, rec in run], [line for line, _, _ in run])  # type: ignore[misc]
    if done is None:  # a number beyond int64 (never in range): each record on its own
        return _slow(run, source, found)
    packed, bad = done
    errors = []
    for i in bad:
        line, raw, rec = run[i]
        try:
            _question(raw, rec, source, line, GroupIndex(), found)
        except RecordError as err:
            errors.append(err)
            continue
        raise AssertionError("the vectorised graph rules and check_graph disagree")
    return packed, errors


def _slow(run: list[_Line], source: str, found: _Found) -> _Segment:
    groups = GroupIndex()
    questions: list[Question] = []
    lines: list[int] = []
    errors: list[RecordError] = []
    for line, raw, rec in run:
        try:
            questions.append(_question(raw, rec, source, line, groups, found))
            lines.append(line)
        except RecordError as err:
            errors.append(err)
    return pack_questions(questions, groups.keys, lines=lines), errors


def _question(
    raw: str | bytes, rec: LedgerLine | None, source: str, line: int, groups: GroupIndex, found: _Found
) -> Question:
    """The question of a decoded line (``rec``; None: the Structs refused it), checking the graph rules on the way;
    a line that fails goes to the pydantic model (`parse_record`), which names the field or accepts what the
    Structs are stricter about (a number written as a string)."""
    if rec is not None:
        try:
            q = Question.from_record(rec, groups, check=True)
        except FieldRuleError:
            pass
        else:
            found.plugin_kinds |= bool(rec.kinds)
            return q
    record = parse_record(raw, source=source, line=line)  # raises the RecordError naming the field
    found.plugin_kinds |= bool(record.kinds)
    return Question.from_record(record, groups)


def _load_range(bound: tuple[str, int, int]) -> tuple[int, list[_Segment], bool]:
    """Parse the lines that start in [start, end) of a file; line numbers relative to the range."""
    path, start, end = bound
    gc.disable()  # a worker of this load only: what it builds stays alive until it is packed
    found = _Found()
    n_lines = 0

    def numbered(fh: IO[bytes]) -> Iterator[tuple[int, bytes]]:
        nonlocal n_lines
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # finish the line that started before this range
        while fh.tell() < end:
            raw = fh.readline()
            if not raw:
                break
            n_lines += 1
            yield n_lines, raw

    with open(path, "rb") as fh:
        segments = list(_segments(numbered(fh), path, found))
    return n_lines, segments, found.plugin_kinds
