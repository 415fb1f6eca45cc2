"""One calibration story across commands: replay, report and show pick the same answer under one calibration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.batch.conftest import batch_args, finish, start_batch

pytestmark = pytest.mark.slow  # more than a few seconds in all (tests/conftest.py starts such files first)


def boe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def stored_run(sim_data: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A full-ledger batch run of the 24 simulator questions, K=4 (one for the module: the tests only read it)."""
    from boe.sim import serve_in_thread

    tmp = tmp_path_factory.mktemp("story")
    db = f"sqlite:///{tmp / 'runs.db'}"
    with serve_in_thread() as sim:
        finish(start_batch(batch_args(sim_data, sim.base_url, db, "r"), tmp / "locks"))
    return db


def test_replay_report_and_show_agree_on_every_selection(stored_run: str, tmp_path: Path):
    db = stored_run
    cal_file = tmp_path / "cal.json"
    res = boe("calibrate", "--db", db, "--run", "r", "--out", str(cal_file))
    assert res.returncode == 0, res.stderr
    for cal in (None, "fit", str(cal_file)):
        flag = [] if cal is None else ["--calibration", cal]
        trans = tmp_path / "t.jsonl"
        res = boe(
            "replay", "--db", db, "--run", "r", "--policy", "boe", "--budget", "16", "--transcripts", str(trans), *flag
        )
        assert res.returncode == 0, res.stderr
        replayed = {
            (t["dataset"], t["question_id"]): t["selected"] for t in map(json.loads, trans.read_text().splitlines())
        }
        res = boe(
            "report",
            "--db",
            db,
            "--run",
            "r",
            "--policy",
            "raw,boe",
            "--budget",
            "16",
            "--json",
            "--out",
            str(tmp_path / "r.html"),
            *flag,
        )
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        reported = {(q["dataset"], q["question_id"]): q["selected_index"] for q in doc["selections"]["questions"]}
        assert reported == replayed, cal
        label = doc["calibration"]["label"]
        if cal is None:
            assert label.startswith("crossfit:5") and res.stderr.startswith("calibration: crossfit:5")
        elif cal == "fit":
            assert "in-sample" in label and any("in-sample" in w for w in doc["warnings"])
        shown = sorted(replayed)[:: 6 if cal is None else 12]
        for ds, qid in shown:
            res = boe(
                "show", f"{ds}/{qid}", "--db", db, "--run", "r", "--policy", "boe", "--budget", "16", "--json", *flag
            )
            assert res.returncode == 0, res.stderr
            page = json.loads(res.stdout)
            assert page["selected"]["index"] == replayed[(ds, qid)], (cal, qid)
            assert page["calibration"] == label


def test_show_honours_the_calibration_of_a_full_ledger(stored_run: str, tmp_path: Path):
    """A full ledger's question is shown under the calibration asked for: its evidence is the replay's."""
    db = stored_run
    trans = tmp_path / "t.jsonl"
    res = boe("replay", "--db", db, "--run", "r", "--policy", "boe", "--budget", "16", "--transcripts", str(trans))
    assert res.returncode == 0, res.stderr
    bought = {t["question_id"]: t["actions"] for t in map(json.loads, trans.read_text().splitlines())}
    qid = next(q for q, acts in bought.items() if acts)
    res = boe("show", qid, "--db", db, "--run", "r", "--policy", "boe", "--budget", "16", "--json")
    assert res.returncode == 0, res.stderr
    page = json.loads(res.stdout)
    assert [e["action"] for e in page["evidence"]] == bought[qid]
    assert all(e["words"] for e in page["evidence"]) and page["closing"]
    res = boe("show", qid, "--db", db, "--run", "r", "--policy", "boe", "--budget", "16")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("calibration: crossfit:5") and "no evidence was bought" not in res.stdout
