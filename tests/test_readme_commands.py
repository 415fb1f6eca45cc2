"""README shell blocks that run in this environment against the simulator, as written (tests/doc_blocks.py).

Only ports and paths change: the endpoint's port is the simulator's, and the files a command names (scan.dcm,
a.png, agent.toml) are put where it looks for them: the simulator's own scans, and the README's `agent.toml`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, doc_block, run_commands

DEMO = ROOT / "boe" / "sim" / "data" / "demo" / "images"
pytestmark = pytest.mark.slow


def shell_env(tmp_path: Path) -> dict[str, str]:
    """This environment's `boe` first on PATH, no endpoint settings inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOE_", "OPENAI_"))}
    bindir = Path(sys.executable).parent
    assert (bindir / "boe").is_file(), "the boe console script is not installed next to this python"
    return {**env, "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": "100",
            "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip


def readme_toml() -> str:
    """The README's agent.toml."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"The `agent.toml` above:\n\n```toml\n(.*?)```", text, re.S)
    assert m, "the README lost its agent.toml block"
    return m.group(1)


def test_ask_your_endpoint(sim, tmp_path: Path) -> None:
    port = str(sim.base_url.rsplit(":", 1)[1].split("/")[0])
    shutil.copy(DEMO / "img-0-00003.dcm", tmp_path / "scan.dcm")
    for n, name in enumerate(("a.png", "b.png", "c.png")):
        shutil.copy(DEMO / f"img-0-0000{n}.png", tmp_path / name)
    (tmp_path / "agent.toml").write_text(readme_toml().replace(":8000/", f":{port}/"), encoding="utf-8")
    block = doc_block("ask-your-endpoint")
    commands = [c.replace(":8000/", f":{port}/") for c in block.commands()]
    outs = run_commands(commands, cwd=tmp_path, env=shell_env(tmp_path))
    asks = [(c, o) for c, o in zip(commands, outs, strict=True) if c.startswith("boe ask")]
    assert len(asks) == 4 and all("selected:" in o for _, o in asks), outs
    dicom, figures, _measured, configured = (o for _, o in asks)
    # the DICOM header feeds the cost-1 record check, bought unless every candidate gives one answer (then the
    # default controller buys nothing: issue 25; tests/agent/test_agent_mock.py checks the DICOM record check)
    assert "the record states" in dicom or "No check could change this answer" in dicom, dicom
    assert " fig " in figures.split("candidates", 1)[1].splitlines()[1]  # a figure column: 3 figures
    assert "8 candidates" in configured and "budget 8," in configured  # --k 8 over the file's k = 16


def test_store_interchange_and_replay(tmp_path: Path) -> None:
    outs = run_commands(doc_block("store-and-replay").commands(), cwd=tmp_path, env=shell_env(tmp_path))
    assert "stored 2000 question(s)" in outs[1] and "exported 2000 question(s)" in outs[2]
    original = [json.loads(line) for line in (tmp_path / "pool.jsonl").read_text().splitlines()]
    exported = [json.loads(line) for line in (tmp_path / "pool-out.jsonl").read_text().splitlines()]
    assert [r["question_id"] for r in exported] == [r["question_id"] for r in original]
    assert exported[0]["candidates"] == original[0]["candidates"] and exported[0]["actions"] == original[0]["actions"]
    assert outs[3].startswith("calibration: crossfit:5") and "boe:random-factor   16   2000" in outs[3]
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2000 * 4 * 5


def test_adaptive_pool(tmp_path: Path) -> None:
    outs = run_commands(doc_block("adaptive-pool").commands(), cwd=tmp_path, env=shell_env(tmp_path))
    first = json.loads((tmp_path / "pool16.jsonl").read_text().splitlines()[0])
    assert first["format"] == "boe-ledger/1.3" and all(c["cost"] == 0.25 for c in first["candidates"])
    assert "samples" in outs[1] and "total" in outs[1]  # a drawn pool's table
    rows = json.loads((tmp_path / "adaptive.json").read_text())["results"]
    assert [r["policy"] for r in rows] == ["bayes"] and rows[0]["n"] == 300
    # one budget holds samples and checks; the pool stops early on most questions
    assert rows[0]["total_cost"] <= 8.0 + 1e-9 and 4.0 <= rows[0]["samples"] < 16.0
