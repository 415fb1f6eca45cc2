"""Run one task over many items in forked worker processes (and this one), yielding results as they finish."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["forked"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")

#: The task of `forked`'s workers (inherited by the fork, never pickled).
_TASK: Callable[[Any], Any] | None = None


def forked(task: Callable[[_In], _Out], items: list[_In], workers: int, here: int = 0) -> Iterator[_Out]:
    """``task`` of each item: in this process, or (``workers`` > 1) in forked workers, as they finish.

    With workers, the first ``here`` items run in this process while the workers run the rest (the workers
    inherit what this process holds when they fork, so it may not yet hold what those items build)."""
    if workers <= 1 or len(items) < 2:
        yield from (task(x) for x in items)
        return
    import multiprocessing as mp

    global _TASK
    _TASK = task
    try:
        with mp.get_context("fork").Pool(workers) as procs:
            rest = procs.imap_unordered(_run_task, items[here:])  # queued now: the workers start on them
            yield from (task(x) for x in items[:here])
            yield from rest
    finally:
        _TASK = None


def _run_task(item: Any) -> Any:
    assert _TASK is not None
    return _TASK(item)
