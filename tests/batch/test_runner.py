"""The batch runner in process, against the simulator over loopback: stored once, graded, resumable, safe."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from boe.agent import make_config
from boe.batch import BatchConfig, BatchRunner, run_batch
from boe.datasets import AnswerEvaluator, load_dataset
from boe.db import Store
from boe.errors import ConfigError

pytestmark = pytest.mark.slow


def config(data: Path, url: str, db: str, run: str = "r", **kw: object) -> BatchConfig:
    agent_kw = {k: kw.pop(k) for k in ("k", "ledger", "budget") if k in kw}
    agent = make_config(base_url=url, model="boe-sim", concurrency=8, **{"k": 4, "ledger": "full", **agent_kw})
    return BatchConfig(dataset=str(data), agent=agent, db=db, run=run, **kw)


def test_every_question_is_stored_once_with_the_evaluators_utilities(sim_data, sim, locks, tmp_path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    s = run_batch(config(sim_data, sim.base_url, db))
    assert (s.selected, s.stored, s.stored_before, s.failed, s.lost) == (24, 24, 0, [], 0) and s.complete
    assert s.requests == sim.stats()["requests"] and s.calls_paid > 24 * 10 and s.peak_in_flight <= 8
    assert s.cpu_seconds > 0 and set(s.cpu_breakdown) == {"store_writes", "cache_reads", "grading_and_rows"}
    items = {it.question_id: it for it in load_dataset(sim_data)}
    evaluator = AnswerEvaluator()
    with Store(db) as store:
        run = store.get_run("r")
        assert run.config["kind"] == "batch" and run.config["batch"]["evaluator"]["uses_llm"] is False
        records = list(store.iter_record_dicts("r", strict=True))
        transcripts = list(store.iter_transcripts("r"))
        paid = [c for c in store.iter_model_calls("r") if not c.cache_hit]
    assert sorted(r["question_id"] for r in records) == sorted(items)
    assert len(transcripts) == 24 and len(paid) == s.calls_paid
    for rec in records:
        assert rec["ledger"] == "full" and all(a["observed"] for a in rec["actions"])
        item = items[rec["question_id"]]
        for c in rec["candidates"]:
            text = c.get("answer_text") if c["valid"] else None
            assert c["utility"] == evaluator.grade(text, item).score and "method" in c["grade"]
    by_q = {t.question_id: t for t in transcripts}
    assert all(
        by_q[r["question_id"]].utility == r["candidates"][by_q[r["question_id"]].selected]["utility"] for r in records
    )

    again = run_batch(config(sim_data, sim.base_url, db))  # the same command: nothing left, nothing paid
    assert (again.stored, again.stored_before, again.calls_paid) == (0, 24, 0) and again.complete
    assert sim.stats()["requests"] == s.requests

    # the full ledger replays offline: every policy and budget without a model call
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "boe",
            "replay",
            "--db",
            db,
            "--run",
            "r",
            "--policy",
            "raw,boe,whole",
            "--budget",
            "4,16",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(out.stdout) and sim.stats()["requests"] == s.requests


def test_a_run_never_mixes_configurations(sim_data, sim, locks, tmp_path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with pytest.raises(ConfigError, match="no run 'r' to resume"):
        run_batch(config(sim_data, sim.base_url, db, resume=True))
    run_batch(config(sim_data, sim.base_url, db, limit=2))
    with pytest.raises(ConfigError, match="another configuration"):
        run_batch(config(sim_data, sim.base_url, db, k=8, limit=2))
    with pytest.raises(ConfigError, match="answer evaluator"):
        run_batch(config(sim_data, sim.base_url, db, limit=2, semantic_grader=True))
    s = run_batch(config(sim_data, sim.base_url, db, resume=True, limit=3))
    assert (s.stored_before, s.stored) == (2, 1)


def test_a_failed_question_is_released_and_done_by_the_next_run(sim_data, sim, locks, tmp_path) -> None:
    data = shutil.copytree(sim_data, tmp_path / "data")
    first = load_dataset(data)[0]
    good = first.images[0].path.read_bytes()
    first.images[0].path.write_bytes(b"not an image")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    s = run_batch(config(data, sim.base_url, db, limit=6))
    assert s.stored == 5 and [q for q, _ in s.failed] == [first.question_id] and "image" in s.failed[0][1]
    assert s.remaining == {"pending": 1, "claimed": 0, "done": 5} and not s.complete
    first.images[0].path.write_bytes(good)
    again = run_batch(config(data, sim.base_url, db, limit=6))
    assert (again.stored, again.failed) == (1, []) and again.complete


def test_a_question_whose_lease_another_worker_took_is_dropped(sim_data, locks, tmp_path) -> None:
    from boe.sim import FaultPlan, serve_in_thread

    db = tmp_path / "runs.db"
    with serve_in_thread(faults=FaultPlan(latency_ms=400)) as slow:
        cfg = config(sim_data, slow.base_url, f"sqlite:///{db}", limit=3, lease_seconds=2.0, wait=False)

        async def go() -> tuple[object, str]:
            runner = BatchRunner(cfg)
            task = asyncio.create_task(runner.run())
            while len(runner.active) < 3:
                await asyncio.sleep(0.01)
            victim = sorted(runner.active)[1][1]
            with sqlite3.connect(db) as conn:  # another (live) worker takes the question over
                conn.execute(
                    "UPDATE work_items SET worker = 'thief', lease_until = lease_until + 3600 WHERE source_id = ?",
                    (victim,),
                )
            return await task, victim

        s, victim = asyncio.run(go())
    assert s.lost == 1 and s.stored == 2 and s.failed == []
    assert s.remaining == {"pending": 0, "claimed": 1, "done": 2}
    with Store(db) as store:
        assert victim not in {q for _, q in store.done_question_ids("r")}


def test_figures_can_be_decoded_in_worker_processes(sim_data, sim, locks, tmp_path) -> None:
    s = run_batch(config(sim_data, sim.base_url, f"sqlite:///{tmp_path / 'runs.db'}", limit=4, cpu_workers=1))
    assert s.stored == 4 and s.pool_cpu_seconds > 0
