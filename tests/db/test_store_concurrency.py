"""Four processes writing different questions into one store at the same time: nothing lost, nothing locked."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from pathlib import Path
from typing import Any

from boe.core.ledger import parse_record
from boe.db import ModelCall, Store, TranscriptRecord, import_ledger

from .conftest import pool_records, write_jsonl
from .test_interchange import assert_whole_questions

WRITERS = 4


def _save_one_by_one(url: str, recs: list[dict[str, Any]], busy_timeout: float, barrier: Any, out: Any) -> None:
    try:
        store = Store(url, busy_timeout=busy_timeout)
        store.create_run("shared", {"writers": WRITERS}, exist_ok=True)  # every writer races to create it
        barrier.wait()
        for r in recs:
            rec = parse_record(r)
            t = TranscriptRecord(rec.dataset, rec.question_id, "raw", 0, 0, [], [0.5] * rec.k)
            call = ModelCall(
                "c",
                "generator",
                "generation",
                "generation@1",
                "sim",
                "http://sim/v1",
                1,
                0.0,
                "h" * 64,
                "",
                prompt_tokens=10,
                completion_tokens=2,
            )
            store.save_question("shared", rec, transcripts=[t], model_calls=[call])
            store.cache_put(rec.question_id, {"q": rec.question_id}, endpoint="http://sim/v1", model="sim")
        store.close()
        out.put(None)
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put(traceback.format_exc())


def _import_file(url: str, path: str, busy_timeout: float, barrier: Any, out: Any) -> None:
    try:
        barrier.wait()  # all four create the store, its schema and the run at once
        store = Store(url, busy_timeout=busy_timeout)
        report = import_ledger(store, path, "shared", batch_rows=3_000)
        store.close()
        out.put(None if report.bad == 0 else f"bad records: {report}")
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put(traceback.format_exc())


def _run_writers(target: Any, args: list[tuple[Any, ...]]) -> None:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, out)) for a in args]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(30)
    assert [r for r in results if r is not None] == []  # no "database is locked", no error at all
    assert [p.exitcode for p in procs] == [0] * WRITERS


def test_four_writers_saving_questions(store_url: str) -> None:
    recs = pool_records(4 * 25, seed=21)
    Store(store_url).close()  # the schema exists; the writers race on the run
    # two writers with the default SQLite busy timeout, two whose timeout runs out all the time (retried)
    timeouts = [30.0, 30.0, 0.01, 0.01]
    _run_writers(_save_one_by_one, [(store_url, recs[i::WRITERS], timeouts[i]) for i in range(WRITERS)])
    assert assert_whole_questions(store_url, "shared") == len(recs)
    with Store(store_url) as store:
        assert store.done_question_ids("shared") == {(r["dataset"], r["question_id"]) for r in recs}
        assert len(list(store.iter_transcripts("shared"))) == len(recs)
        assert len(list(store.iter_model_calls("shared"))) == len(recs)
        assert all(store.cache_get(r["question_id"]) is not None for r in recs)


def test_four_concurrent_imports_into_a_new_store(store_url: str, tmp_path: Path) -> None:
    recs = pool_records(4 * 40, seed=22)
    files = [str(write_jsonl(tmp_path / f"part{i}.jsonl", recs[i::WRITERS])) for i in range(WRITERS)]
    _run_writers(_import_file, [(store_url, f, 30.0) for f in files])
    assert assert_whole_questions(store_url, "shared") == len(recs)
