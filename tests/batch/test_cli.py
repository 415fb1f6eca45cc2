"""`boe batch` on the command line: the dry-run estimate, a run with its summary, interrupting it."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from boe.batch.progress import BatchStats, RichProgress
from boe.cli import app
from boe.db import Store

from .conftest import batch_args, finish, start_batch

runner = CliRunner()


def test_dry_run_estimates_without_calling_or_creating_anything(sim_data, tmp_path) -> None:
    db = tmp_path / "none.db"
    args = [
        "batch",
        str(sim_data),
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--db",
        str(db),
        "--run",
        "r",
        "--k",
        "4",
        "--dry-run",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    est = json.loads(res.output)
    assert est["todo"] == 24 and est["calls"]["generation"] == 24 and est["calls"]["answer_judge"] == 38.4
    assert est["upper_bound_calls"] >= est["total_calls"] and est["prompt_tokens"] > 0
    assert "defaults" in est["basis"] and not db.exists()
    text = runner.invoke(app, args)
    assert text.exit_code == 0 and "expected model calls" in text.output and "24 to do" in text.output


def test_dry_run_measures_a_stored_run(sim_data, tmp_path) -> None:
    from boe.core.ledger import parse_record
    from boe.db import QuestionData
    from boe.sim.ledgers import pool_ledger

    db = tmp_path / "s.db"
    with Store(db) as store:
        store.create_run("old")
        recs = list(pool_ledger(3, seed=1))
        for r in recs:
            r["model_calls"] = [{"purpose": "generation", "prompt_tokens": 100, "completion_tokens": 50}]
        store.save_questions("old", [QuestionData(parse_record(r)) for r in recs])
    res = runner.invoke(
        app,
        [
            "batch",
            str(sim_data),
            "--base-url",
            "http://x/v1",
            "--model",
            "m",
            "--db",
            str(db),
            "--run",
            "new",
            "--dry-run",
            "--estimate-from",
            "old",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    est = json.loads(res.output)
    assert est["calls"] == {"generation": 24.0} and est["prompt_tokens"] == 2400 and est["completion_tokens"] == 1200
    assert est["basis"].startswith("measured on run 'old' (3 stored questions")
    bad = runner.invoke(
        app,
        [
            "batch",
            str(sim_data),
            "--base-url",
            "http://x/v1",
            "--model",
            "m",
            "--db",
            str(db),
            "--run",
            "new",
            "--dry-run",
            "--estimate-from",
            "nope",
        ],
    )
    assert bad.exit_code != 0


def test_the_progress_bar_shows_rate_tokens_calls_and_errors() -> None:
    from rich.console import Console

    out = io.StringIO()
    view = RichProgress(Console(file=out, force_terminal=True, width=200))
    view.start(10, "run [host/1]")
    stats = BatchStats(todo=10, done=3, failed=1)
    stats.add_calls(
        [
            {"requests": 2, "prompt_tokens": 1500, "completion_tokens": 500},
            {"cache_hit": True},
            {"requests": 1, "error": "HTTP 500"},
        ]
    )
    view.update(stats)
    view.stop()
    text = out.getvalue()
    assert "3/10" in text and "q/min" in text and "2k tok" in text and "2 calls (+1 cached)" in text
    assert "1 failed" in text and "1 call errors" in text


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_gives_the_held_questions_back(sim_data, tmp_path, locks, signum, code) -> None:
    """Ctrl-C, or SIGTERM as systemd, Kubernetes and Slurm send it: held questions go back to the queue at once."""
    from boe.sim import FaultPlan, serve_in_thread

    db = tmp_path / "runs.db"
    # slow enough that the batch is still running when the signal comes, even on a loaded machine
    with serve_in_thread(faults=FaultPlan(latency_ms=400)) as sim:
        proc = start_batch(batch_args(sim_data, sim.base_url, f"sqlite:///{db}", "r"), locks)
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and proc.poll() is None
            if db.exists():
                with Store(f"sqlite:///{db}") as store:
                    if any(r.name == "r" for r in store.list_runs()) and store.count_questions("r") >= 2:
                        break
            time.sleep(0.1)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        assert "Traceback" not in err and "Resume with the same command" in err
        with Store(f"sqlite:///{db}") as store:
            counts = store.work_counts("r")
        assert counts["claimed"] == 0 and 2 <= counts["done"] < 24 and counts["pending"] == 24 - counts["done"]
        sim.server.faults = FaultPlan()  # the resumed batch need not be slow: nothing interrupts it
        last = finish(start_batch(batch_args(sim_data, sim.base_url, f"sqlite:///{db}", "r"), locks))
    assert last["complete"] and last["reclaimed"] == 0 and last["stored"] == 24 - counts["done"]


def test_errors_are_printed_without_a_traceback(sim_data, tmp_path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "boe",
            "batch",
            str(sim_data),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--db",
            str(tmp_path / "s.db"),
            "--run",
            "r",
            "--resume",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "no run 'r' to resume" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("costs", ["paper", "1,2,2,3", "measured", "measured:seconds"])
def test_costs_are_taken_as_boe_ask_takes_them(sim_data, tmp_path, costs) -> None:
    res = runner.invoke(
        app,
        [
            "batch",
            str(sim_data),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--db",
            str(tmp_path / "s.db"),
            "--run",
            "r",
            "--costs",
            costs,
            "--dry-run",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["todo"] == 24
