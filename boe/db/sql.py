"""Dialect-aware statements shared by the store's modules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table
from sqlalchemy.sql.dml import Insert

__all__ = ["bulk_insert", "insert_ignore", "upsert"]


def _dialect_insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def insert_ignore(conn: Connection, table: Table, conflict_columns: Sequence[str]) -> Insert:
    """INSERT ... ON CONFLICT (columns) DO NOTHING, for SQLite and PostgreSQL."""
    stmt: Insert = _dialect_insert(conn, table).on_conflict_do_nothing(index_elements=list(conflict_columns))
    return stmt


def bulk_insert(conn: Connection, table: Table, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Insert many rows (sequences in ``columns`` order) at driver speed inside the connection's transaction.

    SQLite: one prepared statement, ``executemany``. PostgreSQL: ``COPY ... FROM
    STDIN``. Values must already be in column form (JSON columns as JSON text).
    """
    if conn.dialect.name == "postgresql":
        dbapi = conn.connection.driver_connection
        assert dbapi is not None
        with dbapi.cursor() as cur, cur.copy(_copy_sql(conn, table, tuple(columns))) as copy:
            for row in rows:
                copy.write_row(row)
        return
    conn.exec_driver_sql(_insert_sql(conn, table, tuple(columns)), rows if isinstance(rows, list) else list(rows))


def _quoted(conn: Connection, table: Table, columns: tuple[str, ...]) -> tuple[str, str]:
    prep = conn.dialect.identifier_preparer
    for c in columns:
        if c not in table.c:
            raise KeyError(f"{table.name} has no column {c!r}")
    return prep.format_table(table), ", ".join(prep.quote(c) for c in columns)


@cache
def _insert_sql_text(name: str, cols: str, n: int) -> str:
    return f"INSERT INTO {name} ({cols}) VALUES ({', '.join('?' * n)})"


def _insert_sql(conn: Connection, table: Table, columns: tuple[str, ...]) -> str:
    name, cols = _quoted(conn, table, columns)
    return _insert_sql_text(name, cols, len(columns))


def _copy_sql(conn: Connection, table: Table, columns: tuple[str, ...]) -> str:
    name, cols = _quoted(conn, table, columns)
    return f"COPY {name} ({cols}) FROM STDIN"


def upsert(conn: Connection, table: Table, conflict_columns: Sequence[str], values: dict[str, Any]) -> None:
    """INSERT, or UPDATE the other given columns of the row that has the same ``conflict_columns``."""
    stmt = _dialect_insert(conn, table).values(**values)
    changes = {k: stmt.excluded[k] for k in values if k not in conflict_columns}
    conn.execute(stmt.on_conflict_do_update(index_elements=list(conflict_columns), set_=changes))
