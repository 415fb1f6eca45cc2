"""Ledger JSONL in and out of the store: `boe import` and `boe export`.

Import validates every line with the ledger-v1 rules, stores the good
questions (many whole questions per transaction, so a killed import leaves
each question stored or absent) and reports bad lines by file and line.
Questions the run already holds are skipped, so re-running an interrupted
import completes it. The stored record is the line itself, so export gives
back exactly what was imported.

On big inputs the parsing runs in a helper process while this process
writes, which keeps both cores busy.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from boe.db.rows import PreparedQuestion, pack_record, question_rows
from boe.db.types import ImportReport
from boe.errors import LedgerError, RecordError, StoreError

if TYPE_CHECKING:
    from boe.db.store import RunRef, Store

__all__ = ["export_ledger", "import_ledger", "parse_files"]

#: Inputs larger than this are parsed in a helper process (when ``parallel`` is None).
PARALLEL_BYTES = 16 * 1024 * 1024

Key = tuple[str, str]
ErrorFields = tuple[str, str | None, int | None, str | None, str | None]
Item = tuple[Literal["ok"], PreparedQuestion] | tuple[Literal["skip"], Key] | tuple[Literal["bad"], ErrorFields]


def parse_files(paths: Sequence[str | Path], skip: set[Key] | frozenset[Key] = frozenset()) -> Iterator[Item]:
    """Validate ledger lines in order: yield ("ok", prepared), ("skip", key) for keys in ``skip``, ("bad", fields)."""
    from boe.core.ledger import parse_record_dict
    from boe.core.lines import STDIN, clean_line, ledger_name, open_ledger

    seen: set[Key] = set()
    for path in paths:
        source = ledger_name(path)
        fh = open_ledger(path)
        try:
            for lineno, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    rec = parse_record_dict(raw, source=source, line=lineno)
                except RecordError as err:
                    yield "bad", (err.message, err.source, err.line, err.question_id, err.field)
                    continue
                text = clean_line(raw).decode("utf-8")  # type: ignore[union-attr]  # valid: it parsed
                key = (rec["dataset"], rec["question_id"])
                if key in seen:
                    yield "bad", ("question id already seen for this dataset", source, lineno, key[1], "question_id")
                    continue
                seen.add(key)
                if key in skip:
                    yield "skip", key
                else:
                    yield "ok", PreparedQuestion(question_rows(rec), pack_record(text))
        finally:
            if str(path) != STDIN:
                fh.close()


def _parse_in_helper(paths: list[str], skip: set[Key]) -> Iterator[Item]:
    """Run `parse_files` in a helper process (``python -m boe.db._parser``) and stream its items."""
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the boe package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "boe.db._parser"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        pickle.dump((paths, skip), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        proc.stdin.close()
        while True:
            try:
                msg = pickle.load(proc.stdout)
            except EOFError:
                code = proc.wait(5)
                raise StoreError(f"the ledger parser process stopped unexpectedly (exit code {code})") from None
            if msg is None:
                return
            if isinstance(msg, tuple):
                raise StoreError(f"the ledger parser process failed:\n{msg[1]}")
            yield from msg
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.wait()


def import_ledger(
    store: Store,
    sources: str | Path | Sequence[str | Path],
    run: str,
    *,
    on_error: Callable[[RecordError], None] | None = None,
    replace: bool = False,
    parallel: bool | None = None,
    batch_rows: int = 40_000,
    progress: Callable[[int], None] | None = None,
    config: dict[str, Any] | None = None,
) -> ImportReport:
    """Import ledger files into run ``run`` (created if needed); bad records go to ``on_error``.

    Questions the run already holds are skipped (or swapped whole with
    ``replace``). ``parallel`` parses in a helper process (default: when the
    input exceeds 16 MB). ``progress(n)`` is called with records handled.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    paths = [sources] if isinstance(sources, (str, Path)) else list(sources)
    if not paths:
        raise LedgerError("give at least one ledger file")
    from boe.core.lines import STDIN, open_ledger

    size = 0
    for p in paths:
        if str(p) == STDIN:
            parallel = False  # the helper process cannot read this process's standard input
            continue
        open_ledger(p).close()  # names a missing file or a folder before the run is created
        try:
            size += os.stat(p).st_size
        except OSError as exc:
            raise LedgerError(f"cannot open ledger {p}: {exc.strerror}") from exc
    run_info = store.create_run(
        run, config or {"source": "boe import", "ledgers": [str(p) for p in paths]}, exist_ok=True
    )
    skip = set() if replace else store.done_question_ids(run_info)
    names = [str(p) for p in paths]
    use_helper = size > PARALLEL_BYTES if parallel is None else parallel
    items = _parse_in_helper(names, skip) if use_helper else parse_files(names, skip)

    report = ImportReport()
    batch: list[PreparedQuestion] = []
    rows = 0

    def flush() -> None:
        nonlocal rows
        stored = store.save_prepared(run_info, batch, replace=replace)
        report.stored += stored
        report.skipped += len(batch) - stored
        if progress is not None:
            progress(len(batch))
        batch.clear()
        rows = 0

    for kind, payload in items:
        if kind == "ok":
            batch.append(payload)  # type: ignore[arg-type]
            rows += payload.rows.n_rows  # type: ignore[union-attr]
            if rows >= batch_rows:
                flush()
            continue
        if kind == "skip":
            report.skipped += 1
        else:
            report.bad += 1
            if on_error is not None:
                msg, src, line, qid, field = payload  # type: ignore[misc]
                on_error(RecordError(msg, source=src, line=line, question_id=qid, field=field))
        if progress is not None:
            progress(1)
    if batch:
        flush()
    report.seconds = time.perf_counter() - start
    report.cpu_seconds = time.process_time() - cpu_start
    return report


def export_ledger(store: Store, run: RunRef, out: str | Path | IO[str]) -> int:
    """Write the run's ledger (one JSON line per question, insertion order); returns the count.

    A path is written atomically (a temporary file renamed into place).
    """
    if not isinstance(out, (str, Path)):
        return _write_lines(store, run, out)
    target = Path(out)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as fh:
            n = _write_lines(store, run, fh)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LedgerError(f"cannot write ledger {target}: {exc.strerror}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


def _write_lines(store: Store, run: RunRef, fh: IO[str]) -> int:
    n = 0
    for line in store.iter_ledger_lines(run):
        fh.write(line)
        fh.write("\n")
        n += 1
    return n
