"""The work queue many workers claim questions from.

A batch runner enqueues (dataset, question id) pairs for a run; each worker
claims a few under a lease, stores each question (which can complete its
item in the same transaction) and claims more. An item whose lease ran out
(a crashed worker) is handed out again. PostgreSQL picks items with
``SELECT ... FOR UPDATE SKIP LOCKED``, so workers never wait on each other;
SQLite runs the claim under ``BEGIN IMMEDIATE``, which serialises claimers.
Lease times use the database clock, so workers on several machines agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from sqlalchemy import ColumnElement, Connection, and_, func, literal, or_, select, tuple_, update

from boe.db.models import WorkItemRow, table
from boe.db.sql import insert_ignore
from boe.db.types import WorkItem

__all__ = ["claim", "complete", "counts", "enqueue", "release", "renew"]

_W = table(WorkItemRow)
_CHUNK = 500


def db_now(conn: Connection) -> ColumnElement[float]:
    """The database clock in seconds since the epoch."""
    if conn.dialect.name == "postgresql":
        return cast(ColumnElement[float], func.extract("epoch", func.clock_timestamp()))
    return (func.julianday("now") - literal(2440587.5)) * literal(86400.0)


def enqueue(conn: Connection, run_id: int, keys: Iterable[tuple[str, str]]) -> int:
    """Queue (dataset, question id) pairs; pairs already queued are left as they are. Returns how many were new."""
    added = 0
    batch: list[dict[str, object]] = []
    stmt = insert_ignore(conn, _W, ["run_id", "source_id", "dataset"]).returning(_W.c.id)

    def flush() -> int:
        if not batch:
            return 0
        n = len(conn.execute(stmt, batch).all())  # rows skipped as duplicates return nothing
        batch.clear()
        return n

    for dataset, qid in keys:
        batch.append({"run_id": run_id, "dataset": dataset, "source_id": qid, "status": "pending", "attempts": 0})
        if len(batch) >= _CHUNK:
            added += flush()
    return added + flush()


def claim(conn: Connection, run_id: int, worker: str, n: int, lease_seconds: float) -> list[WorkItem]:
    """Claim up to ``n`` pending (or lease-expired) items for ``worker``, oldest first, within its fair share.

    An item whose lease ``worker`` itself let run out is not handed to it again:
    it is still working on it (its heartbeat renews it late); a restarted
    worker gives its dead predecessor's items back first (`release`). No worker
    holds more than an equal share of the open items among the workers holding
    some, so a second worker started beside a first one gets half the work.
    """
    now = db_now(conn)
    n = min(n, _fair_share(conn, run_id, worker, now))
    if n < 1:
        return []
    pick = (
        select(_W.c.id)
        .where(
            _W.c.run_id == run_id,
            or_(
                _W.c.status == "pending",
                and_(_W.c.status == "claimed", _W.c.lease_until < now, _W.c.worker != worker),
            ),
        )
        .order_by(_W.c.id)
        .limit(n)
        .with_for_update(skip_locked=True)
    )
    stmt = (
        update(_W)
        .where(_W.c.id.in_(pick.scalar_subquery()))
        .values(status="claimed", worker=worker, lease_until=now + lease_seconds, attempts=_W.c.attempts + 1)
        .returning(_W.c.id, _W.c.dataset, _W.c.source_id, _W.c.attempts, _W.c.lease_until)
    )
    rows = sorted(conn.execute(stmt).all(), key=lambda r: r.id)
    return [WorkItem(r.dataset, r.source_id, r.attempts, float(r.lease_until)) for r in rows]


def _fair_share(conn: Connection, run_id: int, worker: str, now: ColumnElement[float]) -> int:
    """How many more items ``worker`` may hold: ceil(open items / workers holding live leases, itself included)."""
    live = and_(_W.c.status == "claimed", _W.c.lease_until >= now)
    row = conn.execute(
        select(
            func.count().filter(_W.c.status != "done"),
            func.count(func.distinct(_W.c.worker)).filter(live, _W.c.worker != worker),
            func.count().filter(_W.c.status == "claimed", _W.c.worker == worker),
        ).where(_W.c.run_id == run_id)
    ).one()
    open_items, others, mine = int(row[0]), int(row[1]), int(row[2])
    return -(-open_items // (others + 1)) - mine


def _keyed(keys: Iterable[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    items = list(keys)
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def complete(conn: Connection, run_id: int, keys: Iterable[tuple[str, str]]) -> int:
    """Mark items done (whoever holds them: the question is stored either way). Returns how many changed."""
    done = 0
    for chunk in _keyed(keys):
        done += conn.execute(
            update(_W)
            .where(_W.c.run_id == run_id, tuple_(_W.c.dataset, _W.c.source_id).in_(chunk), _W.c.status != "done")
            .values(status="done", lease_until=None)
        ).rowcount
    return done


def renew(
    conn: Connection, run_id: int, worker: str, keys: Iterable[tuple[str, str]], lease_seconds: float
) -> list[tuple[str, str]]:
    """Extend the leases of items ``worker`` still holds; returns the keys renewed (a lost item is absent)."""
    out: list[tuple[str, str]] = []
    until = db_now(conn) + lease_seconds
    for chunk in _keyed(keys):
        stmt = (
            update(_W)
            .where(
                _W.c.run_id == run_id,
                _W.c.worker == worker,
                _W.c.status == "claimed",
                tuple_(_W.c.dataset, _W.c.source_id).in_(chunk),
            )
            .values(lease_until=until)
            .returning(_W.c.dataset, _W.c.source_id)
        )
        out += [(r.dataset, r.source_id) for r in conn.execute(stmt)]
    return out


def release(conn: Connection, run_id: int, worker: str, keys: Iterable[tuple[str, str]] | None) -> int:
    """Hand items ``worker`` holds back to the queue (all of them when ``keys`` is None)."""
    base = update(_W).where(_W.c.run_id == run_id, _W.c.worker == worker, _W.c.status == "claimed")
    values = {"status": "pending", "worker": None, "lease_until": None}
    if keys is None:
        return conn.execute(base.values(**values)).rowcount
    return sum(
        conn.execute(base.where(tuple_(_W.c.dataset, _W.c.source_id).in_(chunk)).values(**values)).rowcount
        for chunk in _keyed(keys)
    )


def counts(conn: Connection, run_id: int) -> dict[str, int]:
    """How many items of the run are pending, claimed and done."""
    out = {"pending": 0, "claimed": 0, "done": 0}
    for status, n in conn.execute(select(_W.c.status, func.count()).where(_W.c.run_id == run_id).group_by(_W.c.status)):
        out[status] = int(n)
    return out


def leases(conn: Connection, run_id: int) -> list[tuple[str, float, float]]:
    """(worker, questions held, latest lease end in epoch seconds) of every worker holding questions of the run."""
    rows = conn.execute(
        select(_W.c.worker, func.count(), func.max(_W.c.lease_until))
        .where(_W.c.run_id == run_id, _W.c.status == "claimed")
        .group_by(_W.c.worker)
    )
    return [(str(w), float(n), float(until or 0.0)) for w, n, until in rows]
