"""`boe demo` as a user runs it: simulator on loopback, the agent, ./boe-demo.db (timed: benchmarks/demo_wall.py)."""

import json
import os
import subprocess
import sys

import pytest

from boe.db import Store

pytestmark = pytest.mark.slow


def test_demo_answers_rescues_and_stores_a_replayable_run(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = subprocess.run(
        [sys.executable, "-c", "from boe.cli import main; main()", "demo", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    summary = out["summary"]
    assert summary["questions"] == 4 and summary["rescued"] >= 1
    rescue = next(r for r in out["results"] if r["correct"] and not r["raw_correct"])
    assert rescue["evidence"] and rescue["raw_majority"]["answer"] != rescue["answer"]
    # the showcase (the first question) is a rescue of a clear majority, not of a tie
    first = out["results"][0]
    votes = [c["answer"] for c in first["candidates"] if c["valid"]]
    assert first["correct"] and not first["raw_correct"]
    assert votes.count(first["raw_majority"]["answer"]) > votes.count(first["answer"])
    # the default controller buys only checks that could change the answer, and nothing on a one-answer pool
    assert all(r["policy"] == "bayes" for r in out["results"])
    assert all(e["could_change_choice"] for r in out["results"] for e in r["evidence"])
    one = [r for r in out["results"] if len({c["answer"] for c in r["candidates"] if c["valid"]}) == 1]
    assert one and all(r["cost"] == 0 and r["closing"].startswith("No check could change this answer") for r in one)
    assert (tmp_path / "boe-demo.db").is_file()
    # the stored run replays offline to the same transcripts
    run = summary["run"]
    replay = tmp_path / "replay.jsonl"
    rep = subprocess.run(
        [
            sys.executable,
            "-c",
            "from boe.cli import main; main()",
            "replay",
            "--db",
            str(tmp_path / "boe-demo.db"),
            "--run",
            run,
            "--policy",
            "bayes",
            "--budget",
            "16",
            "--calibration",
            "run",  # what the agent scored with: the shipped file plus the prior of groups it lacks
            "--transcripts",
            str(replay),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rep.returncode == 0, rep.stderr
    with Store(tmp_path / "boe-demo.db") as store:
        stored = [t.to_dict() for t in store.iter_transcripts(run)]
        assert store.count_questions(run) == 4
    replayed = [json.loads(line) for line in replay.read_text().splitlines()]
    for s, r in zip(stored, replayed, strict=True):
        s.pop("evidence", None)
        assert s == r
    assert [r["transcript"] for r in out["results"]] == replayed


def test_the_demo_summary_reads_whole_at_80_columns(tmp_path):
    """Question ids are not cut, correctness is not 'right' (an answer), the replay command is one line."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "80"}
    res = subprocess.run(
        [sys.executable, "-c", "from boe.cli import main; main()", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    table = res.stdout[res.stdout.index("demo summary") :]
    with Store(f"sqlite:///{tmp_path / 'boe-demo.db'}") as store:
        run = next(r for r in store.list_runs() if not r.name.startswith("demo-same-judge"))
        qids = [t.question_id for t in store.iter_transcripts(run.name)]
    assert qids and all(f"│{q} " in table for q in qids), table
    assert " right" not in table.split("raw majority right on")[0], table
    replay = [line.strip() for line in table.splitlines() if line.strip().startswith("boe replay")]
    assert replay and replay[0].endswith("--transcripts replay.jsonl"), table
