"""`boe ask --approve`: a person at the terminal approves or vetoes each purchase; the stored run replays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BOE = str(Path(sys.executable).parent / "boe")


def test_terminal_vetoes_are_stored_and_replay_to_the_online_choice(scan: Path, tmp_path: Path) -> None:
    from boe.sim import serve_in_thread

    db = tmp_path / "runs.db"
    with serve_in_thread() as sim:
        res = subprocess.run(
            [
                BOE, "ask", str(scan), "what imaging modality was used?", "--base-url", sim.base_url,
                "--model", "boe-sim-vlm", "--judge-model", "boe-sim-judge", "--k", "6", "--approve",
                "--db", str(db), "--run", "hands", "--json",
            ],
            input="n: not this one\n\n",  # veto the first proposal, buy the next, then end of input
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "buy it? [Y/n[: reason]]" in res.stderr
    assert "no more answers on standard input" in res.stderr
    online = json.loads(res.stdout)["transcript"]
    assert len(online["actions"]) == 1, online  # one approved purchase, every later proposal vetoed at EOF
    assert online["skipped"], online
    out = tmp_path / "t.jsonl"
    rep = subprocess.run(
        [
            BOE, "replay", "--db", f"sqlite:///{db}", "--run", "hands", "--policy", online["policy"],
            "--budget", str(online["budget"]), "--calibration", "run", "--transcripts", str(out),
        ],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr[-2000:]
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    for key in ("selected", "actions", "skipped", "cost"):
        assert line[key] == online[key], key
