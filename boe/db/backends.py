"""Store back ends by URL scheme: SQLite and PostgreSQL built in, more through plugins.

A back end says which SQLAlchemy driver names it accepts (the first is the
one used) and how to build an engine for the store. Importing this module
imports no database driver: the built-ins are lazy entries in `boe.db.engine`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from boe.core.registry import Registry

__all__ = ["STORES", "StoreBackend", "register_store_backend"]


@dataclass(frozen=True)
class StoreBackend:
    """One database a store can live in."""

    name: str  # the URL's back-end name (``postgresql`` in ``postgresql+psycopg://``)
    drivers: tuple[str, ...]  # accepted driver names
    engine: Callable[..., Any]  # engine(url, busy_timeout=..., echo=...) -> sqlalchemy Engine
    wrong_driver: str = ""  # what to say about another driver ("use sqlite:///path.db")
    description: str = ""
    canonical: str | None = None  # the driver name URLs are rewritten to (None: kept as given)


#: Store back ends by URL back-end name.
STORES: Registry[StoreBackend] = Registry("stores", "store backend")
STORES.add("sqlite", "boe.db.engine:SQLITE")
STORES.add("postgresql", "boe.db.engine:POSTGRESQL")


def register_store_backend(backend: StoreBackend, *, override: bool = False) -> StoreBackend:
    """Make a back end available to ``Store(url)`` for URLs of ``backend.name``."""
    STORES.add(backend.name, backend, override=override)
    return backend
