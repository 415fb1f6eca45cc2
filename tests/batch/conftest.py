"""Batch fixtures: simulator datasets on disk, the simulator over loopback, stores, `boe batch` subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.db.conftest import pg_url  # noqa: F401  (PostgreSQL schema per test)


@pytest.fixture(scope="session")
def sim_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 simulator questions on 64-pixel scans (small images keep the simulator and the segmenter cheap)."""
    from boe.sim.dataset import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("batch") / "data", 24, seed=3, size=64)


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Worker lock files of this test only."""
    d = tmp_path / "locks"
    monkeypatch.setenv("BOE_WORKER_LOCKS", str(d))
    return d


def batch_args(data: Path, base_url: str, db: str, run: str, *extra: str) -> list[str]:
    """`boe batch` arguments for a simulator batch: full ledger, K=4."""
    return [
        str(data),
        "--base-url",
        base_url,
        "--model",
        "boe-sim",
        "--db",
        db,
        "--run",
        run,
        "--k",
        "4",
        "--ledger",
        "full",
        "--concurrency",
        "8",
        "--no-progress",
        "--json",
        *extra,
    ]


def start_batch(args: list[str], locks: Path) -> subprocess.Popen[str]:
    """`boe batch` in a subprocess of its own (its JSON summary on stdout)."""
    env = {**os.environ, "BOE_WORKER_LOCKS": str(locks)}
    return subprocess.Popen(
        [sys.executable, "-m", "boe", "batch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,
    )


def default_sigint() -> None:
    """In the child: Ctrl-C interrupts, even when the test run itself was started in the background (which
    ignores SIGINT, and children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, object]:
    """Wait for a `boe batch` subprocess; its JSON summary (fails the test with its stderr otherwise)."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)
