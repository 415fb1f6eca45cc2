"""`boe sim calibrate`: the shipped simulator calibration's recipe (the agent's full ledger, then the one fit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BOE = str(Path(sys.executable).with_name("boe"))


def test_sim_calibrate_fits_the_agents_full_ledger(tmp_path: Path) -> None:
    out, db = tmp_path / "cal.json", tmp_path / "ledger.db"
    args = [BOE, "sim", "calibrate", "--n", "5", "--seed", "3", "--out", str(out), "--db", f"sqlite:///{db}"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    cal = json.loads(out.read_text())
    assert cal["groups"] and "bayes" in cal["extra"]
    info = cal["info"]
    assert info["questions"] == 5 and info["datasets"] == {"boe-sim": 5} and info["method"] == "fit"
    assert info["command"].startswith("boe sim calibrate --n 5 --seed 3 --dicom-n 0 --judge-model boe-sim-judge")
    assert f"on 5 questions -> {out}" in res.stdout
    # the kept full ledger is reused: the same fit again without running the agent
    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads(out.read_text())["groups"] == cal["groups"]
