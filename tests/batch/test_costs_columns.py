"""`boe costs` at 80 columns: every action kind is printed whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from boe.agent.costs import KINDS
from tests.batch.conftest import batch_args, finish, start_batch


def test_the_costs_table_fits_80_columns_without_cutting_a_kind(sim_data: Path, sim, locks: Path, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    finish(start_batch(batch_args(sim_data, sim.base_url, db, "r", "--limit", "3"), locks))
    res = subprocess.run(
        [sys.executable, "-m", "boe", "costs", "--db", db, "--run", "r"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout, res.stdout  # nothing cut: "grounded_fa…" named no kind
    rows = {line.strip("│ ").split()[0] for line in res.stdout.splitlines() if line.startswith("│")}
    assert set(KINDS) <= rows, res.stdout
    assert max(map(len, res.stdout.splitlines())) <= 80
