"""A stored run straight into compact `Question`s for replay, in parallel for big runs.

The same result as ``boe.core.loading.load_lines(store.iter_ledger_lines(run))``
(question order, calibration-group ids, errors with their record numbers),
but forked workers each read a range of the run's questions through their own
connection and validate it, as ``load_ledgers`` does for big files.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from boe.db.models import Question as QuestionRow
from boe.db.models import table
from boe.db.rows import unpack_record
from boe.errors import RecordError

if TYPE_CHECKING:
    from boe.core.graph import GroupIndex, Question
    from boe.db.store import RunRef, Store

__all__ = ["load_questions"]

#: Runs with more questions than this are loaded by several processes.
PARALLEL_QUESTIONS = 4_000
CHUNK = 1_000

_Q = table(QuestionRow)
_worker_store: Store | None = None


def load_questions(
    store: Store,
    run: RunRef,
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
    workers: int | None = None,
) -> tuple[list[Question], GroupIndex]:
    """Validated questions of a run in insertion order; bad records go to ``on_error`` (or raise with ``strict``)."""
    from boe.core.graph import GroupIndex
    from boe.core.loading import load_lines, worker_count  # the same worker count (BOE_WORKERS) as for files

    name = run if isinstance(run, str) else run.name
    source = f"{store.url}#{name}"
    run_id = store.get_run(name).id
    n_workers = worker_count(workers)
    with store._read() as conn:
        pks = list(conn.execute(select(_Q.c.id).where(_Q.c.run_id == run_id).order_by(_Q.c.id)).scalars())
    if n_workers < 2 or len(pks) <= PARALLEL_QUESTIONS:
        return load_lines(store.iter_ledger_lines(run), source, strict=strict, on_error=on_error)
    tasks = [(run_id, pks[i], pks[min(i + CHUNK, len(pks)) - 1], source) for i in range(0, len(pks), CHUNK)]
    groups = GroupIndex()
    questions: list[Question] = []
    import numpy as np

    with mp.get_context("fork").Pool(n_workers, initializer=_init_worker, initargs=(store._url_text,)) as pool:
        for start, (keys, chunk, errors) in zip(range(0, len(pks), CHUNK), pool.imap(_load_chunk, tasks), strict=True):
            remap = np.array([groups.id(k) for k in keys], dtype=np.int32)
            for q in chunk:
                if q.n_actions:
                    q.group = remap[q.group]
            questions.extend(chunk)
            for err in errors:
                err.line = start + (err.line or 0)
                err.args = (err.describe(),)
                if strict:
                    raise err
                if on_error is not None:
                    on_error(err)
    return questions, groups


def _init_worker(url: str) -> None:
    """Each worker reads through a store of its own (connections must not cross a fork)."""
    from boe.db.store import Store

    global _worker_store
    _worker_store = Store(url, create=False)


def _load_chunk(task: tuple[int, int, int, str]) -> tuple[list[str], list[Any], list[RecordError]]:
    """Questions of the run's question ids lo..hi; error line numbers relative to the chunk."""
    from boe.core.loading import load_lines

    run_id, lo, hi, source = task
    assert _worker_store is not None
    stmt = select(_Q.c.record).where(_Q.c.run_id == run_id, _Q.c.id >= lo, _Q.c.id <= hi).order_by(_Q.c.id)
    with _worker_store._read() as conn:
        lines = [unpack_record(blob) for blob in conn.execute(stmt).scalars()]
    errors: list[RecordError] = []
    chunk, local = load_lines(lines, source, on_error=errors.append)
    return local.keys, chunk, errors
