"""The README's "your endpoint, your dataset" recipe, run as written against the simulator on VQA-RAD images.

The commands are the README block tagged ``doc-test: your-endpoint-your-dataset`` (tests/doc_blocks.py); its
`vllm serve` line is excepted there (the test serves `boe sim serve` instead). Only what names the user's machine is
substituted: the endpoint, model and key values of the ``export`` lines, and ``DATA`` (a copy of the shipped VQA-RAD
fixture). Every other word runs through the installed `boe` console script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import doc_block

pytestmark = pytest.mark.slow  # more than a few seconds in all (tests/conftest.py starts such files first)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "datasets" / "fixtures" / "vqa-rad"


def recipe_lines() -> list[str]:
    """The shell lines of the README's recipe block that a test runs (comments and blank lines dropped)."""
    return doc_block("your-endpoint-your-dataset").commands()


def substitute(line: str, base_url: str, data: Path) -> str:
    """The line as this machine runs it."""
    if line.startswith("export "):
        out = []
        for assign in line.split()[1:]:
            name, _, _ = assign.partition("=")
            value = {
                "BOE_BASE_URL": base_url,
                "BOE_MODEL": "boe-sim",
                "BOE_JUDGE_BASE_URL": base_url,
                "BOE_JUDGE_MODEL": "boe-sim-judge",
                "BOE_API_KEY": "sk-test-recipe",
            }[name]
            out.append(f"{name}={value}")
        return "export " + " ".join(out)
    if line.startswith("DATA="):
        return f"DATA={data}"
    return line


def test_recipe_lines_are_the_documented_steps():
    lines = recipe_lines()
    verbs = [ln.split()[1] for ln in lines if ln.startswith("boe ")]
    assert verbs == ["batch", "batch", "replay", "report", "calibrate", "ask"]
    assert "--dry-run" in lines[[i for i, ln in enumerate(lines) if ln.startswith("boe batch")][0]]
    skipped = [ln.split()[:2] for ln in doc_block("your-endpoint-your-dataset").skipped()]
    assert skipped == [["vllm", "serve"]] * 2  # the generator and a separate judge
    assert any(ln.startswith("export BOE_JUDGE_BASE_URL=") for ln in lines)


def test_readme_recipe_runs_on_vqa_rad_images(sim, tmp_path):
    data = tmp_path / "vqa-rad"
    shutil.copytree(FIXTURE, data)
    work = tmp_path / "work"
    work.mkdir()
    script = ["set -euo pipefail"]
    commands: list[str] = []
    for line in recipe_lines():
        run = substitute(line, sim.base_url, data)
        if run.startswith("boe "):
            script.append(f"echo '@@@ {len(commands)}'")
            commands.append(run)
            run += " 2>&1"
        script.append(run)
    bindir = Path(sys.executable).parent
    assert (bindir / "boe").is_file(), "the boe console script is not installed next to this python"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("BOE_BASE_URL", "BOE_MODEL", "BOE_JUDGE_BASE_URL", "BOE_JUDGE_MODEL", "OPENAI_API_KEY")
    }
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", COLUMNS="80", BOE_WORKER_LOCKS=str(tmp_path / "l"))
    res = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    parts = re.split(r"^@@@ (\d+)\n", res.stdout, flags=re.M)[1:]
    out = {
        commands[int(parts[i])].split()[1] + ("-dry" if "--dry-run" in commands[int(parts[i])] else ""): parts[i + 1]
        for i in range(0, len(parts), 2)
    }

    # the dry run counts the test split only and says why a record is missing, as the run does
    assert "7 questions" in out["batch-dry"] and "missing_image 1" in out["batch-dry"]
    # the run ends with raw vs selected accuracy under a held-out calibration, and the next commands
    assert "accuracy on 7 labelled questions" in out["batch"] and "crossfit:5" in out["batch"]
    assert "boe calibrate --db" in out["batch"]
    # replay and report name the honest default at their top; nothing there is the simulator's calibration
    assert out["replay"].startswith("calibration: crossfit:5")
    assert out["report"].startswith("calibration: crossfit:5")
    for step in ("replay", "report"):
        assert "sim-calibration" not in out[step]
    assert max(len(ln) for ln in out["replay"].splitlines()) <= 80
    # calibrate wrote a file that says what it covers, and ask scores with it (no prior stands in)
    cal = json.loads((work / "rad-calibration.json").read_text())
    assert cal["info"]["datasets"] == {"vqa-rad": 7} and cal["info"]["method"] == "fit"
    assert "bayes" in cal["extra"]
    assert "calibration: rad-calibration.json" in out["ask"] and "PRIOR" not in out["ask"]
    assert "selected:" in out["ask"]
    assert (work / "rad-report.html").stat().st_size > 10_000
