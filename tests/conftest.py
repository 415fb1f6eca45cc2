"""Shared fixtures: small ledgers written to real files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# One BLAS thread per test process, as the `boe` script defaults to (boe/cli/__init__.py): on two workers, OpenBLAS's
# per-core threads would spin-wait against each other between the many small products of a fit (set before numpy loads)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from boe.sim.ledgers import factor_code_ledger, pool_ledger  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a test marked `slow` first, in their collected order, then the rest: on the README's two
    workers, which take whole files (``--dist loadfile``), the long files start early instead of leaving one
    worker to finish them alone at the end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True, scope="session")
def _ledger_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Loaded ledgers are cached in a folder of the test session (subprocesses inherit it), not in ~/.cache."""

    from boe.ledger_cache import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = str(tmp_path_factory.mktemp("ledger-cache"))
    yield
    if before is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = before


@pytest.fixture
def sim() -> Iterator[object]:
    """A fresh simulator (fresh request counters) on a free loopback port."""
    from boe.sim import serve_in_thread

    handle = serve_in_thread()
    try:
        yield handle
    finally:
        handle.close()


def write_ledger(path: Path, records) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return path


@pytest.fixture
def pool_file(tmp_path: Path) -> Path:
    return write_ledger(tmp_path / "pool.jsonl", pool_ledger(120, seed=7))


@pytest.fixture
def factor_file(tmp_path: Path) -> Path:
    return write_ledger(tmp_path / "fc.jsonl", factor_code_ledger(60, m=4, seed=3, rho=0.8))
