"""Engines for the two back ends, transactions, and retries on lock contention.

SQLite: WAL journal, foreign keys on, a busy timeout, and transactions that
SQLAlchemy begins itself: ``BEGIN IMMEDIATE`` for writes (so a writer takes
the write lock up front instead of upgrading a read lock, which deadlocks
under pysqlite's deferred transactions), plain ``BEGIN`` for reads. The
driver's own transaction handling is switched off (``isolation_level =
None``, the recipe that works on every Python version; the
``connection.autocommit`` attribute only exists from Python 3.12).

A write transaction that still meets "database is locked" after the busy
timeout, or a PostgreSQL serialization failure or deadlock, is retried with
backoff, so lock contention between workers never reaches the user.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from boe.db.backends import StoreBackend
from boe.errors import MissingExtraError, StoreError, StoreNotFoundError
from boe.util import redact_url

__all__ = ["display_url", "is_retryable", "make_engine", "read_tx", "sqlite_path", "to_url", "write_tx"]

T = TypeVar("T")

#: How long a write keeps retrying lock contention before it gives up.
RETRY_SECONDS = 600.0
_WRITE = "boe_write"
_PG_RETRY_STATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected


def to_url(url: str | Path) -> URL:
    """Parse a store URL; a bare path means an SQLite file; ``postgresql://`` means psycopg 3."""
    text = str(url)
    if "://" not in text:
        text = f"sqlite:///{Path(text)}"
    try:
        parsed = make_url(text)
    except ArgumentError as exc:
        raise StoreNotFoundError(f"not a database URL: {redact_url(text)!r}") from exc
    backend = parsed.get_backend_name()
    from boe.db.backends import STORES

    if backend not in STORES:
        raise StoreNotFoundError(f"unsupported database {backend!r}: use sqlite:///path.db or postgresql+psycopg://...")
    spec = STORES.get_obj(backend)
    if parsed.drivername not in spec.drivers:
        raise StoreNotFoundError(f"{spec.wrong_driver}, not {parsed.drivername}://")
    if spec.canonical:
        parsed = parsed.set(drivername=spec.canonical)
    return parsed


def display_url(url: URL) -> str:
    """The URL safe to show and store: no user name, password or secret query parameters."""
    text = url.render_as_string(hide_password=False)
    return text if url.get_backend_name() == "sqlite" else redact_url(text)


def sqlite_path(url: URL) -> Path | None:
    """The file of an SQLite URL (None for an in-memory database or another back end)."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def make_engine(url: URL, *, busy_timeout: float = 30.0, echo: bool = False) -> Engine:
    """An engine configured for the store (pragmas, transaction begin, pool)."""
    from boe.db.backends import STORES

    engine: Engine = STORES.get_obj(url.get_backend_name()).engine(url, busy_timeout=busy_timeout, echo=echo)
    return engine


def _postgres_engine(url: URL, busy_timeout: float, echo: bool) -> Engine:
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("postgres", "psycopg", "A PostgreSQL store") from exc
    return create_engine(url, echo=echo, pool_pre_ping=True, pool_size=2, max_overflow=4)


def _sqlite_engine(url: URL, busy_timeout: float, echo: bool) -> Engine:
    engine = create_engine(url, echo=echo, connect_args={"timeout": busy_timeout, "check_same_thread": False})
    ms = int(busy_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN (see module docstring)
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {ms}")
            cur.execute("PRAGMA foreign_keys = ON")
            _retry_locked(lambda: cur.execute("PRAGMA journal_mode = WAL"))
            cur.execute("PRAGMA synchronous = NORMAL")  # durable across process kills; WAL keeps it consistent
            cur.execute("PRAGMA journal_size_limit = 67108864")
            cur.execute("PRAGMA cache_size = -65536")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")

    return engine


def _retry_locked(fn: Callable[[], T]) -> T:
    deadline = time.monotonic() + RETRY_SECONDS
    delay = 0.01
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 1.0)


def is_retryable(exc: BaseException) -> bool:
    """True for lock contention worth retrying: SQLite busy/locked, PostgreSQL serialization failure or deadlock."""
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        text = str(orig)
        return "database is locked" in text or "database is busy" in text or "database table is locked" in text
    return getattr(orig, "sqlstate", None) in _PG_RETRY_STATES


@contextmanager
def read_tx(engine: Engine, **options: Any) -> Iterator[Connection]:
    """A read transaction (deferred on SQLite: readers never block the writer in WAL mode)."""
    with engine.connect() as conn:
        if options:
            conn = conn.execution_options(**options)
        with conn.begin():
            yield conn


def write_tx(engine: Engine, fn: Callable[[Connection], T], *, what: str = "write") -> T:
    """Run ``fn(conn)`` in one write transaction, retrying the whole transaction on lock contention."""
    deadline = time.monotonic() + RETRY_SECONDS
    delay = 0.02
    while True:
        try:
            with engine.connect() as conn:
                conn.execution_options(**{_WRITE: True})
                with conn.begin():
                    return fn(conn)
        except OperationalError as exc:
            if not is_retryable(exc):
                raise
            if time.monotonic() > deadline:
                raise StoreError(f"{what}: the database stayed locked for {RETRY_SECONDS:.0f} s") from exc
        except DBAPIError as exc:
            if not is_retryable(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 2.0)


SQLITE = StoreBackend(
    "sqlite", ("sqlite", "sqlite+pysqlite"), _sqlite_engine, "use sqlite:///path.db", "SQLite file (WAL)"
)
POSTGRESQL = StoreBackend(
    "postgresql",
    ("postgresql+psycopg", "postgresql"),
    _postgres_engine,
    "use postgresql+psycopg:// (psycopg 3)",
    "PostgreSQL through psycopg 3 (the postgres extra)",
    canonical="postgresql+psycopg",
)
