"""Two `boe batch` workers against one PostgreSQL store split a batch; no question is done twice."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from boe.db import Store

from .conftest import batch_args, finish, start_batch

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(900)]

N = 40


def test_two_workers_share_one_postgresql_store_without_doing_a_question_twice(pg_url, tmp_path, locks) -> None:
    from boe.sim import FaultPlan, serve_in_thread
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", N, seed=21, size=64)
    with serve_in_thread(faults=FaultPlan(latency_ms=50)) as sim:  # latency: the workers overlap in time
        procs = [
            start_batch(batch_args(data, sim.base_url, pg_url, "shared", "--worker", w), locks) for w in ("w1", "w2")
        ]
        a, b = (finish(p) for p in procs)
        requests = int(sim.stats()["requests"])

    assert a["worker"].endswith("/w1") and b["worker"].endswith("/w2")
    assert a["stored"] + b["stored"] == N and a["stored"] > 0 and b["stored"] > 0, (a["stored"], b["stored"])
    assert a["complete"] and b["complete"] and a["failed"] == b["failed"] == []
    assert a["requests"] + b["requests"] == requests  # every request the simulator served, one worker paid
    with Store(pg_url) as store:
        assert store.count_questions("shared") == N
        assert len(store.done_question_ids("shared")) == N
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT worker, attempts, status FROM work_items")).all()
            per_question = conn.execute(
                text(
                    "SELECT q.source_id, count(*) FROM model_calls m JOIN questions q ON q.id = m.question_pk "
                    "WHERE m.cached = false GROUP BY q.source_id"
                )
            ).all()
    assert len(rows) == N and all(status == "done" and attempts == 1 for _, attempts, status in rows)
    by_worker = {w: sum(1 for r in rows if r[0] == w) for w in (a["worker"], b["worker"])}
    assert by_worker == {a["worker"]: a["stored"], b["worker"]: b["stored"]}  # each stored what it claimed
    assert sum(n for _, n in per_question) == requests  # no question's calls were paid twice
