"""Schema versions: create a new store, migrate an older one, refuse a newer one.

The ``boe_schema`` table holds one row per version applied. ``MIGRATIONS``
maps a version v to the function that upgrades a database from v to v + 1
inside the opening transaction; a gap in the chain means the database is too
old to open, and the message says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy import Connection, Engine, func, insert, inspect, select, text

from boe.core.version import __version__
from boe.db.engine import read_tx, write_tx
from boe.db.models import Base, SchemaVersion, table, utcnow
from boe.errors import SchemaVersionError, StoreNotFoundError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "ensure_schema", "stored_version"]

SCHEMA_VERSION = 1

Migration = Callable[[Connection], None]

#: version v -> upgrade from v to v + 1 (none yet: version 1 is the first schema).
MIGRATIONS: dict[int, Migration] = {}

_LOCK_KEY = 0x62_6F_65_5F_64_62  # "boe_db": serialises schema set-up across PostgreSQL clients


def stored_version(conn: Connection) -> tuple[int, str] | None:
    """(schema version, boe version that wrote it) of a store, or None when it has no version table."""
    if not inspect(conn).has_table(SchemaVersion.__tablename__):
        return None
    t = table(SchemaVersion)
    top = conn.execute(select(func.max(t.c.version))).scalar()
    if top is None:
        return None
    writer = conn.execute(select(t.c.boe_version).where(t.c.version == top)).scalar_one()
    return int(top), str(writer)


def ensure_schema(
    engine: Engine,
    where: str,
    *,
    create: bool = True,
    migrate: bool = True,
    migrations: Mapping[int, Migration] | None = None,
) -> int:
    """Make the store at ``where`` usable by this boe: create, migrate or refuse. Returns the version."""
    with read_tx(engine) as conn:
        found = stored_version(conn)
    if found is not None and found[0] == SCHEMA_VERSION:
        return SCHEMA_VERSION
    steps = MIGRATIONS if migrations is None else migrations

    def setup(conn: Connection) -> int:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        found = stored_version(conn)
        if found is None:
            return _create(conn, where, create)
        version, writer = found
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{where} has schema version {version} (written by boe {writer}); this boe {__version__} "
                f"understands up to version {SCHEMA_VERSION}: upgrade boe to open it"
            )
        if version < SCHEMA_VERSION:
            if not migrate:
                raise SchemaVersionError(
                    f"{where} has the older schema version {version} (boe {writer}); this boe needs version "
                    f"{SCHEMA_VERSION}: open it with migration enabled to upgrade it in place"
                )
            for v in range(version, SCHEMA_VERSION):
                step = steps.get(v)
                if step is None:
                    raise SchemaVersionError(
                        f"{where} has schema version {version} (boe {writer}), which this boe {__version__} "
                        f"cannot migrate (no migration from version {v} to {v + 1}); export its runs with "
                        f"boe {writer} (boe export) and import them here"
                    )
                step(conn)
                _record_version(conn, v + 1)
        return SCHEMA_VERSION

    return write_tx(engine, setup, what=f"opening {where}")


def _create(conn: Connection, where: str, create: bool) -> int:
    existing = set(inspect(conn).get_table_names())
    ours = set(Base.metadata.tables) - {SchemaVersion.__tablename__}
    if existing & ours:
        raise SchemaVersionError(
            f"{where} holds tables named like boe's ({', '.join(sorted(existing & ours)[:4])}, ...) but no "
            "schema version: it was not created by boe; use another database"
        )
    if not create:
        raise StoreNotFoundError(f"{where} holds no boe store")
    Base.metadata.create_all(conn)
    _record_version(conn, SCHEMA_VERSION)
    return SCHEMA_VERSION


def _record_version(conn: Connection, version: int) -> None:
    conn.execute(insert(table(SchemaVersion)).values(version=version, boe_version=__version__, applied=utcnow()))
