"""SQLite set-up, write transactions and retries; schema versions and migrations."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, event, inspect, text

from boe.db import Store, migrate
from boe.errors import SchemaVersionError, StoreError


def test_sqlite_pragmas_and_begin_immediate(sqlite_url: str) -> None:
    with Store(sqlite_url, busy_timeout=7) as store:
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 7000
        seen: list[str] = []
        event.listen(store.engine, "before_cursor_execute", lambda c, cur, stmt, *a: seen.append(stmt))
        store.create_run("r")
        store.count_questions("r")
        assert "BEGIN IMMEDIATE" in seen  # the write
        assert seen.count("BEGIN") >= 1  # the reads


def test_a_locked_database_is_retried_not_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with Store(path, busy_timeout=0.05) as store:
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
        holder.execute("INSERT INTO runs (name, created, config, boe_version) VALUES ('x', '2026-01-01', '{}', '0')")
        release = threading.Timer(1.0, holder.execute, args=("COMMIT",))
        release.start()
        start = time.monotonic()
        store.create_run("r")  # its busy timeout (0.05 s) runs out many times before the lock is free
        assert time.monotonic() - start >= 0.9
        release.join()
        holder.close()
        assert [r.name for r in store.list_runs()] == ["x", "r"]


def test_write_transactions_take_the_write_lock_up_front(tmp_path: Path) -> None:
    """pysqlite's deferred BEGIN upgrades a read lock later, which deadlocks concurrent writers."""
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.create_run("r")
        other = sqlite3.connect(path, timeout=0, isolation_level=None)

        def body(conn: Connection) -> None:
            conn.execute(text("SELECT count(*) FROM runs")).scalar()  # it has only read so far
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")

        store._write(body)
        other.execute("BEGIN IMMEDIATE")  # free again once the transaction ended
        other.execute("ROLLBACK")
        other.close()


def _bump_version(store: Store, version: int) -> None:
    with store.engine.begin() as conn:
        stmt = text("INSERT INTO boe_schema (version, boe_version, applied) VALUES (:v, '9.9', '2030-01-01')")
        conn.execute(stmt, {"v": version})


def test_a_newer_schema_is_refused(store_url: str) -> None:
    with Store(store_url) as store:
        _bump_version(store, migrate.SCHEMA_VERSION + 1)
    with pytest.raises(SchemaVersionError, match=r"schema version 2 \(written by boe 9.9\).*upgrade boe"):
        Store(store_url)


def test_an_older_schema_is_migrated_or_refused(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(store_url) as store:
        store.create_run("old")
    # this boe now expects version 2, and knows no way from 1 to 2
    monkeypatch.setattr(migrate, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(migrate, "MIGRATIONS", {})
    with pytest.raises(SchemaVersionError, match="no migration from version 1 to 2"):
        Store(store_url)
    calls: list[int] = []

    def add_note(conn: Connection) -> None:
        calls.append(1)
        conn.execute(text("ALTER TABLE runs ADD COLUMN note TEXT"))

    monkeypatch.setattr(migrate, "MIGRATIONS", {1: add_note})
    with pytest.raises(SchemaVersionError, match="older schema version 1.*migration enabled"):
        Store(store_url, migrate=False)
    assert calls == []

    def broken(conn: Connection) -> None:
        add_note(conn)
        raise RuntimeError("migration bug")

    monkeypatch.setattr(migrate, "MIGRATIONS", {1: broken})
    with pytest.raises(RuntimeError, match="migration bug"):
        Store(store_url)
    assert "note" not in _run_columns(store_url)  # the failed migration was rolled back whole

    monkeypatch.setattr(migrate, "MIGRATIONS", {1: add_note})
    with Store(store_url) as store:
        assert [r.name for r in store.list_runs()] == ["old"]
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT max(version) FROM boe_schema")).scalar() == 2
    assert "note" in _run_columns(store_url)
    with Store(store_url):  # already current: no second migration
        pass
    assert len(calls) == 2  # the failed attempt and the successful one


def _run_columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {c["name"] for c in inspect(conn).get_columns("runs")}
    finally:
        engine.dispose()


def test_foreign_tables_without_a_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY)")
    with pytest.raises(SchemaVersionError, match="no schema version"):
        Store(path)


def test_create_false_on_an_empty_database(store_url: str) -> None:
    if store_url.startswith("sqlite"):
        Path(store_url.removeprefix("sqlite:///")).touch()
    with pytest.raises(StoreError, match="holds no boe store"):
        Store(store_url, create=False)
