"""The store: runs, questions, evidence, model calls and transcripts in SQLite or PostgreSQL.

    from boe.db import Store
    with Store("sqlite:///runs.db") as store:
        run = store.create_run("demo", {"policy": "boe", "budget": 16})
        store.save_question(run, record, model_calls=calls, transcripts=[t])
        for rec in store.iter_records("demo"): ...

Needs SQLAlchemy (the ``agent`` extra) and, for PostgreSQL, psycopg 3 (the
``postgres`` extra). Names load on first use, so importing `boe.db` is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boe.db.cache import request_key
    from boe.db.interchange import export_ledger, import_ledger
    from boe.db.migrate import SCHEMA_VERSION
    from boe.db.store import DEFAULT_URL, Store
    from boe.db.types import (
        CachedResponse,
        ImageRecord,
        ImportReport,
        ModelCall,
        QuestionData,
        RunInfo,
        TranscriptRecord,
        WorkItem,
    )

__all__ = [
    "DEFAULT_URL",
    "SCHEMA_VERSION",
    "CachedResponse",
    "ImageRecord",
    "ImportReport",
    "ModelCall",
    "QuestionData",
    "RunInfo",
    "Store",
    "TranscriptRecord",
    "WorkItem",
    "export_ledger",
    "import_ledger",
    "request_key",
]

_WHERE = {
    "DEFAULT_URL": "store",
    "Store": "store",
    "SCHEMA_VERSION": "migrate",
    "request_key": "cache",
    "export_ledger": "interchange",
    "import_ledger": "interchange",
    **{
        name: "types"
        for name in (
            "CachedResponse",
            "ImageRecord",
            "ImportReport",
            "ModelCall",
            "QuestionData",
            "RunInfo",
            "TranscriptRecord",
            "WorkItem",
        )
    },
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'boe.db' has no attribute {name!r}")
    if module != "types":
        try:
            import sqlalchemy  # noqa: F401
        except ImportError as exc:
            from boe.errors import MissingExtraError

            raise MissingExtraError("agent", "sqlalchemy", "The store (boe.db)") from exc
    value = getattr(importlib.import_module(f"boe.db.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
