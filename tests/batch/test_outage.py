"""An outage of the judge endpoint in the middle of `boe batch`, then the same command with the endpoint back.

Judged property of issue #13: no stored check carries a transport error, every
question is complete, and no reply that was already paid for is requested
twice. Real `boe batch` processes; the generator and the judge are two
simulators over loopback, and the judge answers 500 to everything for a while.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from boe.db import Store

from .conftest import batch_args, start_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

N = 16


def paid(sim) -> int:
    """Replies the simulator served (200s): what an endpoint would bill."""
    return int(sim.stats()["responses"].get("200", 0))


def run_to_end(proc) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=300)
    assert out, err[-3000:]
    return proc.returncode, json.loads(out)


def test_an_outage_is_retried_not_stored(tmp_path: Path, locks: Path) -> None:
    from boe.sim import FaultPlan, serve_in_thread
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", N, seed=5, size=64)
    slow = FaultPlan(latency_ms=30)

    def args(gen, judge, db: Path) -> list[str]:
        return batch_args(
            data,
            gen.base_url,
            f"sqlite:///{db}",
            "r",
            "--judge-base-url",
            judge.base_url,
            "--max-retries",
            "1",
            "--max-failures",
            "0",
        )

    db = tmp_path / "r.db"
    # the run without an outage goes beside the others, on simulators of its own
    with (
        serve_in_thread() as base_gen,
        serve_in_thread(faults=slow) as base_judge,
        serve_in_thread() as gen,
        serve_in_thread(faults=slow) as judge,
    ):
        base_proc = start_batch(args(base_gen, base_judge, tmp_path / "base.db"), tmp_path / "base-locks")
        proc = start_batch(args(gen, judge, db), locks)
        deadline = time.monotonic() + 120
        while True:  # the outage starts once a few questions are stored
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1][-3000:]
            if db.exists():
                with Store(f"sqlite:///{db}") as store:
                    if any(r.name == "r" for r in store.list_runs()) and store.count_questions("r") >= 2:
                        break
            time.sleep(0.02)
        judge.server.faults = FaultPlan(rate_500=1.0)  # every judge call fails from now on
        code, first = run_to_end(proc)
        assert code == 1 and not first["complete"] and first["failed"], first
        assert any("could not be run" in err for _, err in first["failed"]), first["failed"]
        judge.server.faults = slow  # the endpoint is back: the same command again
        code, second = run_to_end(start_batch(args(gen, judge, db), locks))
        again_paid = (paid(gen), paid(judge))
        base_code, base = run_to_end(base_proc)
        base_paid = (paid(base_gen), paid(base_judge))
    assert base_code == 0 and base["complete"] and base["stored"] == N
    assert code == 0 and second["complete"] and not second["failed"], second
    assert second["stored_before"] == first["stored_before"] + first["stored"]
    assert second["stored"] == N - second["stored_before"] and second["calls_cached"] > 0
    with Store(f"sqlite:///{db}") as store:
        assert store.work_counts("r") == {"pending": 0, "claimed": 0, "done": N}
        records = list(store.iter_record_dicts("r"))
    assert len(records) == N
    for rec in records:
        for act in rec["actions"]:
            assert not act.get("failed"), act
            assert "500" not in (act.get("error") or "") and "attempt(s)" not in (act.get("error") or ""), act
    # every reply paid for before the outage came from the cache afterwards: the endpoints billed what one
    # uninterrupted run bills, no more
    assert again_paid == base_paid, (again_paid, base_paid)
