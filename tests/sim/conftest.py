"""Fixtures for the simulator tests: a small generated dataset and a live loopback server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boe.sim.dataset import generate_dataset, load_facts, load_sim_dataset
from boe.sim.server import SimHandle, serve_in_thread


@pytest.fixture(scope="session")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 questions about 12 scans (seed 11)."""
    return generate_dataset(tmp_path_factory.mktemp("simdata") / "ds", 24, seed=11, per_image=2, dicom=True)


@pytest.fixture(scope="session")
def sim_questions(sim_dir: Path) -> list[dict[str, Any]]:
    return load_sim_dataset(sim_dir)


@pytest.fixture(scope="session")
def sim_facts(sim_dir: Path) -> dict[str, dict[str, Any]]:
    return load_facts(sim_dir)


@pytest.fixture(scope="session")
def sim_server() -> Iterator[SimHandle]:
    """A fault-free simulator on a free loopback port, shared by the tests of a session."""
    handle = serve_in_thread()
    try:
        yield handle
    finally:
        handle.close()
