"""Output paths are checked before any work starts; the message names the option and the path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from boe.sim.ledgers import pool_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("out") / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in pool_ledger(20, seed=1)))
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None
    return subprocess.run([BOE, *args], capture_output=True, text=True, timeout=120)


def test_bad_outputs_are_refused_before_the_work(ledger: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (
            ("replay", str(ledger), "--transcripts", "/nonexistent/t.jsonl"),
            "--transcripts /nonexistent/t.jsonl: the folder /nonexistent does not exist",
        ),
        (("replay", str(ledger), "--save-calibration", str(tmp_path)), f"--save-calibration {tmp_path}: is a folder"),
        (("report", "--ledger", str(ledger), "--out", str(tmp_path)), f"--out {tmp_path}: is a folder"),
        (
            ("report", "--ledger", str(ledger), "--out", str(tmp_path / "r.html"), "--png", str(a_file)),
            f"--png {a_file}: is a file, not a folder",
        ),
        (
            ("report", "--ledger", str(ledger), "--out", str(tmp_path / "r.html"), "--png", str(a_file / "sub")),
            "is a file, not a folder",
        ),
        (
            ("export", "--db", str(tmp_path / "none.db"), "--run", "r", "--out", str(tmp_path / "no" / "x.jsonl")),
            "the folder",
        ),
        (("theory", "noisy", "--png", str(tmp_path / "no" / "f.png")), "--png"),
    ]
    for args, words in cases:
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert words in " ".join(res.stderr.split()), (args, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "r.html").exists()


def test_writable_outputs_still_work(ledger: Path, tmp_path: Path) -> None:
    tr = tmp_path / "tr.jsonl"
    res = run("replay", str(ledger), "--policy", "raw", "--budget", "4", "--transcripts", str(tr), "--json")
    assert res.returncode == 0, res.stderr
    assert len(tr.read_text().splitlines()) == 20
