"""What a batch says while it works: whose leases it waits on, how to resume after Ctrl-C, what to run next."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.batch.conftest import batch_args, default_sigint, finish, start_batch

pytestmark = pytest.mark.slow  # more than a few seconds in all (tests/conftest.py starts such files first)


def holds_flock(pid: int) -> bool:
    """Whether process ``pid`` holds an ``flock`` (a batch worker's identity lock; SQLite's locks are POSIX)."""
    with open("/proc/locks", encoding="ascii") as fh:
        return any(f[1] == "FLOCK" and f[4] == str(pid) for f in (line.split() for line in fh) if len(f) > 4)


def test_a_resumed_batch_says_which_dead_workers_leases_it_waits_for(sim_data, sim, locks, tmp_path):
    from boe.datasets import load_dataset
    from boe.db import Store

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    first = finish(start_batch(batch_args(sim_data, sim.base_url, db, "r", "--limit", "20"), locks))
    assert first["stored"] == 20
    ds = load_dataset(sim_data)
    rest = [(ds.name, it.question_id) for it in ds.items[20:]]
    # a worker that died holding the last four questions, its leases long enough that however slowly the resumed
    # batch starts it finds them held; once it has taken its worker identity (just before it claims) they are cut
    # to 5 s from then, so that the test does not wait out the long lease
    with Store(db) as store:
        store.enqueue("r", rest)
        assert len(store.claim_questions("r", "ghost", 4, lease_seconds=600.0)) == 4
        t0 = time.monotonic()
        proc = start_batch(batch_args(sim_data, sim.base_url, db, "r"), locks)
        deadline = t0 + 300
        while not holds_flock(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        assert len(store.renew("r", "ghost", rest, lease_seconds=5.0)) == 4
    out = finish(proc)
    assert time.monotonic() - t0 >= 5.0  # it waited for the leases to run out
    assert out["stored"] == 4 and out["remaining"]["done"] == 24
    waiting = [n for n in out["notes"] if n.startswith("waiting:")]
    assert waiting and "4 held by ghost until" in waiting[0] and "UTC" in waiting[0]
    assert out["evaluation"]["labelled"] == 24 and out["evaluation"]["calibration"].startswith("crossfit:5")
    assert any(c.startswith("boe report --db") for c in out["next"])
    # a full ledger: the replay it suggests puts the run's own controller beside the paper's policies
    assert any(" --policy raw,bayes,boe,random-factor,whole " in c for c in out["next"]), out["next"]


def test_ctrl_c_prints_the_command_that_resumes_the_batch(sim_data, locks, tmp_path):
    from boe.sim import serve_in_thread
    from boe.sim.faults import FaultPlan

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with serve_in_thread(faults=FaultPlan(latency_ms=200)) as slow:
        args = batch_args(sim_data, slow.base_url, db, "r")
        proc = subprocess.Popen(
            [sys.executable, "-m", "boe", "batch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "BOE_WORKER_LOCKS": str(locks)},
            preexec_fn=default_sigint,
        )
        deadline = time.monotonic() + 120  # interrupt once the batch is at work (its first request arrived)
        while slow.stats()["requests"] == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slow.stats()["requests"] > 0, "the batch sent no request within 120 s"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Resume with the same command" in err
    resume = err.strip().splitlines()[-1].strip()
    assert resume.startswith("boe batch ") and f"--db {db}" in resume and "--run r" in resume
    assert Path(tmp_path / "runs.db").is_file()


def test_the_bar_moves_with_every_finished_request_of_unfinished_questions():
    import io

    from rich.console import Console

    from boe.batch.progress import BatchStats, RichProgress

    stats = BatchStats(todo=10, expected_requests=20.0, active=3)
    assert stats.partial == 0.0  # nothing sent yet
    stats.live_requests = 10  # before any question is stored: the first guess of 20 requests a question
    assert abs(stats.partial - 0.99 * 0.5) < 1e-9
    stats.done, stats.requests, stats.live_requests = 2, 20, 35  # measured: 10 a question, 15 in progress
    assert abs(stats.partial - 0.99 * 1.5) < 1e-9
    stats.live_requests = 200
    assert stats.partial < stats.active  # never a question more than those in progress
    out = io.StringIO()
    view = RichProgress(Console(file=out, force_terminal=True, width=200))
    view.start(10, "r")
    view.update(stats)
    view.status("waiting: 4 held by ghost until 10:00:00 UTC")
    view.stop()
    assert "2/10" in out.getvalue() and "waiting: 4 held by ghost" in out.getvalue()  # stored, not the bar
