"""Judge verdict probabilities in the ledger (spec section 11): recorded on judge actions where the server gives
logprobs, absent elsewhere, read by no policy: a ledger replays to the same transcripts with or without them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from boe.sim import serve_in_thread
from boe.sim.dataset import generate_dataset

JUDGED = {"vlm_factor", "grounded_factor", "whole_response", "answer_response"}


def _boe(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_judge_actions_carry_p_outcome_and_replay_ignores_it(tmp_path: Path) -> None:
    data = generate_dataset(tmp_path / "ds", 6, seed=8, size=64)
    with serve_in_thread() as sim:
        _boe("batch", str(data), "--base-url", sim.base_url, "--model", "boe-sim-vlm", "--judge-model",
             "boe-sim-judge", "--db", str(tmp_path / "r.db"), "--run", "r", "--k", "6", "--no-progress")  # fmt: skip
    ledger = tmp_path / "ledger.jsonl"
    _boe("export", "--db", str(tmp_path / "r.db"), "--run", "r", "--out", str(ledger))
    records = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    judged = [a for r in records for a in r["actions"] if a["kind"] in JUDGED]
    assert judged and all(0 < a["p_outcome"] < 1 for a in judged)
    assert all("p_outcome" not in a for r in records for a in r["actions"] if a["kind"] not in JUDGED)
    assert all("p_outcome" not in e for r in records for e in r["evidence_log"])
    stripped = tmp_path / "stripped.jsonl"
    with stripped.open("w") as fh:
        for r in records:
            r["actions"] = [{k: v for k, v in a.items() if k != "p_outcome"} for a in r["actions"]]
            fh.write(json.dumps(r) + "\n")
    outs = []
    for path in (ledger, stripped):
        out = tmp_path / f"{path.stem}.transcripts"
        _boe("replay", str(path), "--policy", "raw,boe,boe-factor,random-factor,whole,bayes", "--budget", "0,4,16",
             "--calibration", "fit", "--transcripts", str(out), "--json")  # fmt: skip
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
