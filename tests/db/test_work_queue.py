"""The work queue: claim under a lease, complete, release, reclaim after a crash; concurrent claimers."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from boe.core.ledger import parse_record
from boe.db import Store

from .conftest import pool_records

KEYS = [("pool", f"q{i:03d}") for i in range(12)]


def test_claim_complete_release(store_url: str) -> None:
    with Store(store_url) as store:
        store.create_run("r")
        assert store.enqueue("r", KEYS) == 12
        assert store.enqueue("r", KEYS[:3] + [("pool", "extra")]) == 1
        a = store.claim_questions("r", "A", n=5, lease_seconds=60)
        assert [(w.dataset, w.question_id) for w in a] == KEYS[:5] and all(w.attempts == 1 for w in a)
        assert a[0].lease_until > time.time() + 30
        b = store.claim_questions("r", "B", n=3, lease_seconds=60)
        assert [(w.dataset, w.question_id) for w in b] == KEYS[5:8]
        assert store.complete("r", KEYS[:2]) == 2
        assert store.release("r", "B", [KEYS[5]]) == 1
        assert store.release("r", "A", [KEYS[6]]) == 0  # not A's
        assert store.work_counts("r") == {"pending": 6, "claimed": 5, "done": 2}
        c = store.claim_questions("r", "C", n=2, lease_seconds=60)
        assert [w.question_id for w in c] == ["q005", "q008"]  # released first, then the next pending
        assert store.release("r", "A") == 3  # all A still holds
        assert store.work_counts("r") == {"pending": 7, "claimed": 4, "done": 2}  # B: 2, C: 2


def test_a_crashed_workers_lease_expires(store_url: str) -> None:
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", KEYS[:2])
        assert len(store.claim_questions("r", "crashed", n=2, lease_seconds=2)) == 2
        assert store.claim_questions("r", "B", n=2, lease_seconds=60) == []  # still leased
        time.sleep(2.3)
        again = store.claim_questions("r", "B", n=5, lease_seconds=60)
        assert [(w.question_id, w.attempts) for w in again] == [("q000", 2), ("q001", 2)]


def test_a_live_worker_is_never_handed_its_own_late_lease(store_url: str) -> None:
    """A's lease ran out while it was still answering (a slow store write): it is not given the item again to
    redo, its late heartbeat still renews it, and only another worker may take an expired item over."""
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", KEYS[:2])
        assert len(store.claim_questions("r", "A", n=1, lease_seconds=0.3)) == 1
        time.sleep(0.5)
        [again] = store.claim_questions("r", "A", n=5, lease_seconds=60)
        assert again.question_id == "q001"  # the pending one, not its own q000 a second time
        assert store.renew("r", "A", KEYS[:1], lease_seconds=0.3) == KEYS[:1]  # late, but nobody took it
        time.sleep(0.5)
        [b] = store.claim_questions("r", "B", n=5, lease_seconds=60)
        assert b.question_id == "q000" and b.attempts == 2
        assert store.renew("r", "A", KEYS[:1], lease_seconds=60) == []  # lost to B


def test_a_worker_claims_no_more_than_its_fair_share(store_url: str) -> None:
    """Two workers on 40 questions: the first cannot take more than half once a second one holds some."""
    keys = [("pool", f"q{i:03d}") for i in range(40)]
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", keys)
        assert len(store.claim_questions("r", "A", n=10, lease_seconds=60)) == 10  # alone: what it asks for
        assert len(store.claim_questions("r", "B", n=30, lease_seconds=60)) == 20  # half of the 40 open
        assert len(store.claim_questions("r", "A", n=30, lease_seconds=60)) == 10  # A up to its half, no more
        assert store.claim_questions("r", "A", n=5, lease_seconds=60) == []
        store.complete("r", keys[:10])  # A finished its first ten: 30 open, A holds 10, B 20
        assert len(store.claim_questions("r", "C", n=30, lease_seconds=60)) == 0  # nothing pending is left
        assert store.release("r", "B", keys[10:20]) == 10
        assert len(store.claim_questions("r", "C", n=30, lease_seconds=60)) == 10  # ceil(30 / 3)


def test_a_live_worker_renews_its_leases_and_learns_what_it_lost(store_url: str) -> None:
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", KEYS[:3])
        a = store.claim_questions("r", "A", n=3, lease_seconds=0.5)
        assert sorted(store.renew("r", "A", KEYS[:2], lease_seconds=60)) == KEYS[:2]
        time.sleep(0.8)  # q002's lease runs out; the renewed two are still A's
        [b] = store.claim_questions("r", "B", n=3, lease_seconds=60)
        assert (b.dataset, b.question_id) == KEYS[2] and len(a) == 3
        assert sorted(store.renew("r", "A", KEYS[:3], lease_seconds=60)) == KEYS[:2]  # q002 is B's now
        store.complete("r", KEYS[:1])
        assert store.renew("r", "A", KEYS[:2], lease_seconds=60) == [KEYS[1]]  # a done item is not renewed
        assert store.renew("r", "A", [], lease_seconds=60) == []


def test_saving_a_question_completes_its_item_atomically(store_url: str) -> None:
    rec = parse_record(pool_records(1)[0])
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", [(rec.dataset, rec.question_id)])
        [item] = store.claim_questions("r", "w", n=1)
        assert store.save_question("r", rec, worker="w")
        assert store.work_counts("r") == {"pending": 0, "claimed": 0, "done": 1}
        assert store.claim_questions("r", "w2", n=1) == []


def _claimer(url: str, worker: str, barrier: Any, out: Any) -> None:
    store = Store(url)
    barrier.wait()
    got: list[str] = []
    while items := store.claim_questions("r", worker, n=3, lease_seconds=300):
        got += [w.question_id for w in items]
        store.complete("r", [(w.dataset, w.question_id) for w in items])
    store.close()
    out.put(got)


def test_concurrent_claimers_never_share_an_item(store_url: str) -> None:
    keys = [("pool", f"q{i:04d}") for i in range(150)]
    with Store(store_url) as store:
        store.create_run("r")
        store.enqueue("r", keys)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(store_url, f"w{i}", barrier, out)) for i in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    claimed = [q for r in results for q in r]
    assert sorted(claimed) == [q for _, q in keys]  # every item once, none twice
