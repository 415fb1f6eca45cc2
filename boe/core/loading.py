"""Load ledger files straight into compact `Question`s, in parallel for large files.

Large files are cut into byte ranges at line boundaries; forked workers
validate their range and build the arrays; the parent keeps file order,
global line numbers, calibration-group ids and the duplicate-question
check, so the result is identical to the sequential path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from boe.core.graph import GroupIndex, Question
from boe.core.ledger import FieldRuleError, parse_record, parse_record_dict
from boe.core.lines import STDIN, ledger_name, open_ledger
from boe.errors import LedgerError, RecordError

__all__ = ["load_ledgers", "load_lines", "worker_count"]

#: Files above this size are read by several processes.
PARALLEL_BYTES = 32 * 2**20
CHUNK_BYTES = 8 * 2**20

_Item = tuple[int, Question | RecordError]


def load_ledgers(
    sources: Iterable[str | Path],
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
    workers: int | None = None,
    groups: GroupIndex | None = None,
) -> tuple[list[Question], GroupIndex]:
    """Validated questions of all files in order; bad records go to ``on_error`` (or raise with ``strict``)."""
    groups = GroupIndex() if groups is None else groups
    questions: list[Question] = []
    seen: set[tuple[str, str]] = set()
    for src in sources:
        path = Path(src)
        if str(src) == STDIN:
            size = 0
        else:
            open_ledger(path).close()  # names a missing file or a folder before any work
            try:
                size = path.stat().st_size
            except OSError as exc:
                raise LedgerError(f"cannot open ledger {path}: {exc.strerror}") from exc
        n_workers = worker_count(workers)
        if n_workers > 1 and size > PARALLEL_BYTES:
            items = _parallel_items(path, size, n_workers, groups)
        else:
            items = _sequential_items(str(src), groups)
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
    return questions, groups


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


def _sequential_items(src: str, groups: GroupIndex) -> Iterable[_Item]:
    fh, name = open_ledger(src), ledger_name(src)
    try:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield (lineno, _question(raw, name, lineno, groups))
            except RecordError as err:
                yield (lineno, err)
    finally:
        if src != STDIN:
            fh.close()


def _parallel_items(path: Path, size: int, n_workers: int, groups: GroupIndex) -> Iterable[_Item]:
    import multiprocessing as mp

    n_chunks = max(n_workers, -(-size // CHUNK_BYTES))
    bounds = [(str(path), size * i // n_chunks, size * (i + 1) // n_chunks) for i in range(n_chunks)]
    offset = 0
    with mp.get_context("fork").Pool(n_workers) as pool:
        for n_lines, keys, items in pool.imap(_load_range, bounds):
            remap = np.array([groups.id(k) for k in keys], dtype=np.int32)
            for line, item in items:
                if isinstance(item, Question):
                    if item.n_actions:
                        item.group = remap[item.group]
                else:
                    item.line = offset + line
                    item.source = str(path)
                    item.args = (item.describe(),)
                yield (offset + line, item)
            offset += n_lines


def _question(raw: str | bytes, source: str, line: int, groups: GroupIndex) -> Question:
    """Validate one line and build its arrays (the graph rules are checked while building)."""
    rec = parse_record_dict(raw, source=source, line=line, keep_unknown=False, check=False)
    try:
        return Question.from_dict(rec, groups, check=True)
    except FieldRuleError:
        parse_record(raw, source=source, line=line)  # raises the RecordError naming the field
        raise AssertionError("the graph check and the record model disagree") from None


def _load_range(bound: tuple[str, int, int]) -> tuple[int, list[str], list[_Item]]:
    """Parse the lines that start in [start, end) of a file; line numbers relative to the range."""
    path, start, end = bound
    local = GroupIndex()
    items: list[_Item] = []
    n_lines = 0
    with open(path, "rb") as fh:
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # finish the line that started before this range
        while fh.tell() < end:
            raw = fh.readline()
            if not raw:
                break
            n_lines += 1
            if not raw.strip():
                continue
            try:
                items.append((n_lines, _question(raw, path, n_lines, local)))
            except RecordError as err:
                items.append((n_lines, err))
    return n_lines, local.keys, items
