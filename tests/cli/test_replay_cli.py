"""`boe replay` and `boe sim ledger` as scripts call them: real processes, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def boe(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boe", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_help_imports_nothing_heavy():
    code = (
        "import sys, runpy; sys.argv=['boe','--help']\n"
        "try:\n    runpy.run_module('boe', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "heavy=[m for m in ('torch','segment_anything','langgraph','openai','sqlalchemy','cv2','matplotlib')\n"
        "       if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    code = (
        "import sys, boe, boe.core, boe.core.replay\n"
        "print([m for m in ('torch','langgraph','openai','sqlalchemy','cv2') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_sim_ledger_then_replay_json(tmp_path):
    ledger = tmp_path / "pool.jsonl"
    out = boe("sim", "ledger", "--kind", "pool", "--n", "150", "--seed", "2")
    assert out.returncode == 0, out.stderr
    ledger.write_text(out.stdout)
    assert len(out.stdout.splitlines()) == 150
    tr = tmp_path / "tr.jsonl"
    cal = tmp_path / "cal.json"
    res = boe(
        "replay",
        str(ledger),
        "--policy",
        "raw,boe,random-factor",
        "--budget",
        "4,16",
        "--json",
        "--compare",
        "boe:random-factor",
        "--transcripts",
        str(tr),
        "--save-calibration",
        str(cal),
        "--calibration",
        "crossfit:3",
        "--resamples",
        "300",
        "--seed",
        "5",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # nothing but the JSON document on stdout
    assert doc["format"] == "boe-replay/1" and doc["questions"] == 150
    assert doc["calibration"]["mode"] == "crossfit:3" and doc["calibration"]["seed"] == 5
    assert doc["bootstrap"] == {"resamples": 300, "seed": 5}
    assert {(r["policy"], r["budget"]) for r in doc["results"]} == {
        (p, b) for p in ("raw", "boe", "random-factor") for b in (4.0, 16.0)
    }
    raw = [r for r in doc["results"] if r["policy"] == "raw"][0]
    assert raw["delta_acc"] == 0 and raw["mean_cost"] == 0 and raw["rescue_rate"] == 0
    assert [c["budget"] for c in doc["comparisons"]] == [4.0, 16.0]
    assert all(0 <= c["mcnemar_p"] <= 1 and c["ci95"][0] <= c["diff"] <= c["ci95"][1] for c in doc["comparisons"])
    lines = [json.loads(x) for x in tr.read_text().splitlines()]
    assert len(lines) == 150 * 3 * 2
    assert set(lines[0]) >= {"question_id", "policy", "budget", "selected", "actions", "cost", "scores", "utility"}
    assert json.loads(cal.read_text())["groups"]
    # the saved calibration replays as a file
    res = boe("replay", str(ledger), "--policy", "boe", "--budget", "16", "--calibration", str(cal))
    assert res.returncode == 0 and "boe" in res.stdout


def test_malformed_line_in_the_middle_of_5000(tmp_path):
    out = boe("sim", "ledger", "--kind", "factor-code", "--m", "3", "--n", "5000", "--seed", "1")
    lines = out.stdout.splitlines()
    lines[2500] = lines[2500].replace('"outcome":"confirm"', '"outcome":"perhaps"', 1)
    ledger = tmp_path / "l.jsonl"
    ledger.write_text("\n".join(lines) + "\n")
    res = boe("replay", str(ledger), "--policy", "boe", "--budget", "8", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["questions"] == 4999
    assert f"{ledger}:2501" in res.stderr.replace("\n", "") and "outcome" in res.stderr  # the console wraps long paths
    strict = boe("replay", str(ledger), "--policy", "boe", "--budget", "8", "--strict")
    assert strict.returncode != 0 and ":2501" in strict.stderr and "Traceback" not in strict.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--policy", "best"], "unknown policy", id="policy"),
        pytest.param(["--budget", "x"], "not a number", id="budget"),
        pytest.param(["--calibration", "crossfit:1"], "K must be", id="folds"),
        pytest.param(["--compare", "boe"], "expects A:B", id="compare"),
        pytest.param(["--compare", "boe:whole"], "not among", id="compare-missing"),
        pytest.param(["--calibration", "nope.json"], "cannot read calibration", id="calfile"),
    ],
)
def test_bad_options_are_clear(pool_file, args, message):
    res = boe("replay", str(pool_file), *args)
    assert res.returncode != 0
    assert message in res.stderr and "Traceback" not in res.stderr


def test_nothing_valid_exits_nonzero(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    res = boe("replay", str(bad))
    assert res.returncode == 1 and "nothing could be replayed" in res.stderr
    res = boe("replay", str(tmp_path / "missing.jsonl"))
    assert res.returncode == 2 and "cannot open ledger" in res.stderr


def test_table_output(pool_file):
    res = boe("replay", str(pool_file), "--policy", "raw,boe", "--budget", "16", "--compare", "boe:raw")
    assert res.returncode == 0, res.stderr
    assert "pool" in res.stdout and "McNemar" in res.stdout
    # the default is held out, and the first line says which calibration was used
    assert res.stdout.startswith("calibration: crossfit:5") and "held out" in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 80  # the table fits a terminal
    res = boe("replay", str(pool_file), "--policy", "raw,boe", "--budget", "16", "--calibration", "fit")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("calibration: fit") and "in-sample" in res.stderr


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("# 2. set up and run the tests\n", 1)[1].splitlines()[0]
    assert "pytest" in block
    assert block in (ROOT / ".ci" / "run").read_text().splitlines()  # a line of its own (the vLLM suite follows it)


def test_replay_warns_when_a_policy_buys_checks_an_online_run_never_ran(tmp_path):
    """Online runs store unbought checks as placeholders ("observed": false); replay says so when it reads them."""
    from boe.sim.ledgers import pool_ledger

    recs = list(pool_ledger(20, seed=5))
    for rec in recs:  # pretend an online run bought only the first structured check
        for i, a in enumerate(rec["actions"]):
            if i > 0:
                a["observed"] = False
                a["outcome"] = "unresolved"
    ledger = tmp_path / "online.jsonl"
    ledger.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = boe("replay", str(ledger), "--policy", "random-factor,raw", "--budget", "8", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["warnings"]) == 1 and "random-factor at budget 8" in doc["warnings"][0]
    assert "warning:" in res.stderr and "placeholders" in res.stderr
    res = boe("replay", str(ledger), "--policy", "raw", "--budget", "8", "--json")
    assert json.loads(res.stdout)["warnings"] == []


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `boe` console script (what users run)."""
    script = Path(sys.executable).parent / "boe"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=600)


def test_sim_ledger_answer_checks_and_an_echoing_judge_then_replay(tmp_path):
    out = _console("sim", "ledger", "--kind", "pool", "--profile", "echo-answers", "--n", "300", "--seed", "4")
    assert out.returncode == 0, out.stderr
    recs = [json.loads(x) for x in out.stdout.splitlines()]
    for r in recs:
        assert r["format"] == "boe-ledger/1.1"
        answers = {c["answer"] for c in r["candidates"] if c["valid"]}
        checks = [a for a in r["actions"] if a["kind"] == "answer_response"]
        assert {r["candidates"][a["candidate"]]["answer"] for a in checks} == answers and len(checks) == len(answers)
    # a judge that always echoes confirms exactly the claims more candidates assert than deny
    out = _console("sim", "ledger", "--kind", "pool", "--n", "40", "--echo", "1", "--unresolved", "0", "--seed", "4")
    for r in map(json.loads, out.stdout.splitlines()):
        assert r["format"] == "boe-ledger/1"
        for a in r["actions"]:
            if a["kind"] == "vlm_factor":
                signs = [e["sign"] for e in r["edges"] if e["claim"] == a["claim"]]
                assert (a["outcome"] == "confirm") == (signs.count(1) > signs.count(-1))
    ledger = tmp_path / "echo.jsonl"
    ledger.write_text(_console("sim", "ledger", "--kind", "pool", "--profile", "echo-answers", "--n", "300").stdout)
    res = _console(
        "replay",
        str(ledger),
        "--policy",
        "raw,boe,bayes,whole",
        "--budget",
        "16",
        "--json",
        "--calibration",
        "crossfit:3",
        "--resamples",
        "200",
    )
    assert res.returncode == 0, res.stderr
    acc = {r["policy"]: r["accuracy"] for r in json.loads(res.stdout)["results"]}
    assert acc["bayes"] > acc["raw"] and acc["boe"] >= acc["raw"] - 0.02
    bad = _console("sim", "ledger", "--kind", "pool", "--n", "2", "--answer-acc", "1.5")
    assert bad.returncode != 0 and "answer channel" in bad.stderr and "Traceback" not in bad.stderr


def test_default_policy_is_the_default_controller(pool_file):
    """README: "The default controller is `bayes`"; `boe replay` without --policy replays it, like `boe.replay`."""
    res = boe("replay", str(pool_file), "--budget", "4", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["settings"]["policies"] == ["bayes"]
    assert {r["policy"] for r in out["results"]} == {"bayes"}
    import inspect

    from boe.api import replay

    assert inspect.signature(replay).parameters["policies"].default == ("bayes",)
