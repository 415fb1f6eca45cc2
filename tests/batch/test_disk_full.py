"""`boe batch` whose store runs out of space: one `error:` line, exit 1, nothing stored lost, the same command resumes.

The store file cannot grow past a size limit (``RLIMIT_FSIZE`` in the `boe`
subprocess: every write past it fails as on a full disk), set a little above
what the first few questions took.
"""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import batch_args, default_sigint, finish, start_batch

pytestmark = pytest.mark.slow


def stored_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT source_id FROM questions")]


def test_a_full_store_is_one_error_line_keeps_what_was_stored_and_resumes(sim_data, tmp_path, locks) -> None:
    from boe.sim import serve_in_thread

    db = tmp_path / "runs.db"
    with serve_in_thread() as sim:
        args = batch_args(sim_data, sim.base_url, f"sqlite:///{db}", "r")
        first = finish(start_batch([*args, "--limit", "4"], locks))
        assert first["stored"] == 4
        limit = db.stat().st_size + 200_000  # room for a few more questions, not for 20

        def small_disk() -> None:
            default_sigint()
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        res = subprocess.run(
            [sys.executable, "-m", "boe", "batch", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "BOE_WORKER_LOCKS": str(locks)},
            preexec_fn=small_disk,
            timeout=600,
        )
        assert res.returncode == 1, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: writing to sqlite:///"), res.stderr
        assert "Traceback" not in res.stderr and "run the same command to resume" in lines[0]
        kept = stored_ids(db)
        assert 4 <= len(kept) < 24 and len(set(kept)) == len(kept)

        again = finish(start_batch(args, locks))  # space again: the same command finishes the batch
    assert again["complete"] and again["stored_before"] == len(kept)
    final = stored_ids(db)
    assert sorted(final) == sorted(set(final)) and len(final) == 24 and set(kept) <= set(final)
