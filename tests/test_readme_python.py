"""The README's Python API examples, run as written against the simulator.

The ```python blocks between ``<!-- python-api -->`` and ``<!-- /python-api -->`` run in order in one namespace,
in a fresh folder; only the endpoint address is substituted (the test serves `boe sim serve` on a free port).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- python-api -->", "<!-- /python-api -->"
README_URL = "http://127.0.0.1:8000/v1"


def python_blocks() -> list[str]:
    """The README's Python API blocks, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert START in text and END in text, "the README lost its python-api markers"
    section = text.split(START, 1)[1].split(END, 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 4, "the python-api section lost its examples"
    return blocks


def test_readme_python_examples_run(sim, tmp_path: Path) -> None:
    blocks = python_blocks()
    assert all(README_URL not in b or "base_url" in b for b in blocks)
    script = "\n\n".join(b.replace(README_URL, sim.base_url) for b in blocks)
    (tmp_path / "readme_examples.py").write_text(script, encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "readme_examples.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    # what each block claims to do, checked on what it left behind
    assert "raw majority:" in out and "questions stored" in out
    cal = json.loads((tmp_path / "sim-calibration.json").read_text())
    assert cal["groups"] and cal["info"]["method"] == "fit" and "bayes" in cal.get("extra", {})
    assert len((tmp_path / "transcripts.jsonl").read_text().splitlines()) == 300 * 3 * 2
    pool_cal = json.loads((tmp_path / "pool-calibration.json").read_text())
    assert pool_cal["groups"] and pool_cal["info"]["questions"] == 300
    assert "('cheap-first', 4.0)" in out


def test_import_boe_stays_light_and_exposes_the_api() -> None:
    code = (
        "import sys, boe\n"
        "heavy = [m for m in ('langgraph', 'openai', 'sqlalchemy', 'torch', 'cv2') if m in sys.modules]\n"
        "names = [n for n in boe.__all__ if not hasattr(boe, n)]\n"
        "print(heavy, names, 'boe.api' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    # every name resolves (loading boe.api on first access) and nothing heavy comes with it
    assert out.stdout.strip() == "[] [] True", out.stdout
    code = "import sys, boe; print('boe.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"  # `import boe` alone does not load it
    assert (ROOT / "boe" / "py.typed").is_file()
