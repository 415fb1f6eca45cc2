"""Store fixtures: real SQLite files in tmp_path and, when available, a real PostgreSQL server.

PostgreSQL tests read ``BOE_TEST_POSTGRES_URL`` (``.ci/run`` starts a server
and exports it). Without it they skip on a developer machine, but fail when
``BOE_CI=1``: CI must run them. Every test gets its own schema, dropped after.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from boe.sim.ledgers import factor_code_ledger, pool_ledger

PG_ENV = "BOE_TEST_POSTGRES_URL"


def pg_base_url() -> str | None:
    """The test server's URL, or skip (fail in CI) when there is none."""
    url = os.environ.get(PG_ENV)
    if url:
        return url
    if os.environ.get("BOE_CI") == "1":
        pytest.fail(f"{PG_ENV} is not set, but BOE_CI=1: the PostgreSQL tests must run in CI")
    pytest.skip(f"{PG_ENV} is not set (no PostgreSQL server for the tests)")
    return None


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A store URL on the test server whose tables live in a fresh schema of their own."""
    import psycopg

    base = pg_base_url()
    assert base is not None
    schema = f"boe_test_{uuid.uuid4().hex[:12]}"
    dsn = base.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A store URL for a real SQLite file on disk."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both back ends: a real SQLite file and a PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write records as JSON lines."""
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return path


def pool_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """A small pool ledger (K = 16, like the paper's pools)."""
    return list(pool_ledger(n, seed=seed))


def factor_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """A small factor-code ledger with noisy channels."""
    return list(factor_code_ledger(n, m=4, seed=seed, rho=0.8, whole_rho=0.9))
