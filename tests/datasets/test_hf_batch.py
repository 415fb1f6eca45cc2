"""A VQA-RAD parquet in the Hub's layout through the installed `boe`: dry run, batch against the simulator, replay.

The parquet is built here from the repository's VQA-RAD fixture (its images as the Image feature's bytes),
as ``data/{train,test}-00000-of-00001-<hash>.parquet`` with the dataset card's columns ``image``,
``question``, ``answer``; a second copy renames them and is run with only a ``--columns`` mapping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datasets.helpers import FIXTURES, vqa_rad_hub_layout

RENAMED = {"image": "img", "question": "query", "answer": "label"}


def boe(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed `boe` console script."""
    script = Path(sys.executable).parent / "boe"
    return subprocess.run([str(script), *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("BOE_", "OPENAI_"))}
    return {**keep, "BOE_CACHE_DIR": str(tmp_path / "cache"), "BOE_WORKER_LOCKS": str(tmp_path / "locks")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rename", "columns"),
    [
        pytest.param(None, [], id="dataset-card-names"),
        pytest.param(RENAMED, ["--columns", "image=img,question=query,answer=label"], id="columns-mapping"),
    ],
)
def test_hub_parquet_runs_dry_then_for_real_then_replays(sim, tmp_path, env, rename, columns):
    data = vqa_rad_hub_layout(tmp_path / "vqa-rad", FIXTURES / "vqa-rad", rename)
    db = str(tmp_path / "runs.db")
    common = [str(data), *columns, "--db", db, "--run", "rad", "--base-url", sim.base_url, "--model", "boe-sim"]

    no_split = boe("batch", *common, "--dry-run", env=env)  # two published splits: one must be chosen
    assert no_split.returncode == 2, no_split.stderr
    assert "2 splits: test (7 questions), train (28 questions)" in no_split.stderr
    assert "--split test" in no_split.stderr and "Traceback" not in no_split.stderr

    dry = boe("batch", *common, "--split", "test", "--k", "4", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    estimate = json.loads(dry.stdout)
    assert estimate["questions"] == 7 and estimate["todo"] == 7
    assert sim.stats()["requests"] == 0  # a dry run calls nothing

    run = boe("batch", *common, "--split", "test", "--k", "4", "--no-progress", "--json", env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["stored"] == 7 and summary["complete"] and not summary["failed"] and not summary["skipped"]
    assert summary["evaluation"] is not None and summary["calls_paid"] > 0

    replay = boe("replay", "--db", db, "--run", "rad", "--policy", "raw,boe", "--budget", "0,8", "--json", env=env)
    assert replay.returncode == 0, replay.stderr
    rows = json.loads(replay.stdout)["results"]
    assert {(r["policy"], r["budget"]) for r in rows} >= {("raw", 0.0), ("boe", 8.0)}
    assert all(r["n"] == 7 for r in rows)

    again = boe("batch", *common, "--split", "test", "--k", "4", "--no-progress", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["stored"] == 0  # the same command: nothing to do


@pytest.mark.parametrize(
    ("dataset", "extra", "message"),
    [
        pytest.param("unknown", [], "cannot tell the dataset format of", id="undetected"),
        pytest.param("hub", ["--columns", "questions=q"], "--columns: unknown field(s) ['questions']", id="bad-field"),
        pytest.param(
            "rad", ["--columns", "question=q"], "--columns: the vqa-rad format reads its own layout", id="json"
        ),
    ],
)
def test_the_command_line_names_its_flags(tmp_path, env, dataset, extra, message):
    folders = {"unknown": tmp_path / "unknown", "hub": tmp_path / "hub", "rad": FIXTURES / "vqa-rad"}
    folders["unknown"].mkdir()
    (folders["unknown"] / "notes.txt").write_text("not a dataset")
    vqa_rad_hub_layout(folders["hub"], FIXTURES / "vqa-rad")
    args = [str(folders[dataset]), *extra, "--split", "test", "--db", str(tmp_path / "r.db"), "--run", "r"]
    res = boe("batch", *args, "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--dry-run", env=env)
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert res.stderr.startswith("error:") and "Traceback" not in res.stderr
    if dataset == "unknown":
        assert "pass --format one of:" in res.stderr and "format=" not in res.stderr
