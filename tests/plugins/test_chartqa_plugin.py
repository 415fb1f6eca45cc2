"""The example plugin (examples/boe-chartqa) installed into the test environment and used end to end.

Installs it with pip (offline: --no-build-isolation, the environment's setuptools), then runs the
installed `boe` console script against the built-in simulator: `boe plugins`, `boe ask`, `boe batch
--ledger full` and `boe replay` buy its chart_value checks. With the plugin hidden (its entry point
disabled) and then uninstalled, every other command still works and a ledger using the kind is refused
naming the plugin.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "boe-chartqa"
BOE = Path(sys.executable).with_name("boe")
PIP = [sys.executable, "-m", "pip"]


def boe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BOE), *args], capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200", **env}
    )


def _installed() -> bool:
    res = subprocess.run([*PIP, "show", "boe-chartqa"], capture_output=True, text=True)
    return res.returncode == 0


@pytest.fixture(scope="module")
def plugin() -> Iterator[None]:
    was = _installed()
    cmd = [*PIP, "install", "-q", "--no-deps", "-e", str(EXAMPLE)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:  # no index to fetch the build backend from: build with this environment's own
        res = subprocess.run(
            [*cmd[:-2], "--no-build-isolation", *cmd[-2:]], capture_output=True, text=True, timeout=600
        )
    if res.returncode != 0:
        if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("wheel") is None:
            pytest.skip("pip could fetch no build backend and this environment has none (setuptools, wheel)")
        pytest.fail(f"pip install -e {EXAMPLE} failed:\n{res.stderr[-3000:]}")
    try:
        yield
    finally:
        if not was:
            subprocess.run([*PIP, "uninstall", "-y", "-q", "boe-chartqa"], capture_output=True, text=True)


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    from boe.sim import serve_in_thread

    with serve_in_thread() as handle:
        yield handle.base_url


def _lines(db: Path, run: str) -> list[dict[str, object]]:
    from boe.db import Store

    with Store(f"sqlite:///{db}") as store:
        return [json.loads(line) for line in store.iter_ledger_lines(run)]


def test_the_plugin_is_listed_used_and_required(plugin, sim, tmp_path):
    listed = json.loads(boe("plugins", "--json").stdout)
    kinds = {e["name"]: e for e in listed["registries"]["kinds"]}
    assert kinds["chart_value"]["source"] == "boe-chartqa"
    assert {e["name"]: e["source"] for e in listed["registries"]["formats"]}["chartqa"] == "boe-chartqa"
    assert [p["dist"] for p in listed["plugins"]] == ["boe-chartqa"] and listed["plugins"][0]["error"] is None

    db = tmp_path / "runs.db"
    common = ["--base-url", sim, "--model", "boe-sim", "--k", "4", "--db", str(db)]
    chart = EXAMPLE / "data" / "charts" / "visitors.png"
    res = boe("ask", str(chart), "How many thousand visitors came in 2020?", *common, "--run", "ask",
              "--policy", "random-factor", "--budget", "64", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    bought = [e["kind"] for e in json.loads(res.stdout)["evidence"]]
    assert "chart_value" in bought, bought
    (rec,) = _lines(db, "ask")
    assert rec["format"] == "boe-ledger/1.2"
    assert rec["kinds"] == {"chart_value": {"target": "claim", "plugin": "boe-chartqa"}}

    res = boe("batch", str(EXAMPLE / "data"), *common, "--run", "charts", "--ledger", "full", "--no-progress", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    recs = _lines(db, "charts")
    assert len(recs) == 6
    chart_actions = [a for r in recs for a in r["actions"] if a["kind"] == "chart_value"]
    assert chart_actions and all(a["observed"] is not False for a in chart_actions)

    out = tmp_path / "replay.jsonl"
    res = boe("replay", "--db", str(db), "--run", "charts", "--policy", "random-factor,boe", "--budget", "64",
              "--calibration", "run", "--transcripts", str(out), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    chart_ids = {a["id"] for a in chart_actions}
    bought_ids = {a for line in out.read_text().splitlines() for a in json.loads(line)["actions"]}
    assert bought_ids & chart_ids, "the replay bought no chart_value check"

    # the plugin hidden: everything else works, the ledger that uses its kind is refused naming the plugin
    hidden = {"BOE_DISABLE_PLUGINS": "chartqa"}
    res = boe("plugins", "--json", **hidden)
    assert "chart_value" not in res.stdout
    ledger = tmp_path / "charts.jsonl"
    ledger.write_text("".join(json.dumps(r) + "\n" for r in recs))
    refused = "action kind 'chart_value' needs plugin 'boe-chartqa' (pip install boe-chartqa); it is not installed"
    builtin = str(ROOT / "tests" / "data" / "golden" / "factor.jsonl")
    res = boe("replay", str(ledger), "--policy", "boe", "--budget", "4", **hidden)
    assert res.returncode != 0 and refused in " ".join(res.stderr.split()), res.stderr
    res = boe("replay", builtin, "--policy", "boe", "--budget", "4", **hidden)
    assert res.returncode == 0, res.stderr[-2000:]

    # uninstalled: the same
    subprocess.run([*PIP, "uninstall", "-y", "-q", "boe-chartqa"], capture_output=True, text=True, check=True)
    listed = json.loads(boe("plugins", "--json").stdout)
    assert listed["plugins"] == [] and "chart_value" not in {e["name"] for e in listed["registries"]["kinds"]}
    res = boe("replay", "--db", str(db), "--run", "charts", "--policy", "boe", "--budget", "4")
    assert res.returncode != 0 and refused in " ".join(res.stderr.split()), res.stderr
    res = boe("replay", builtin, "--policy", "boe", "--budget", "4")
    assert res.returncode == 0, res.stderr[-2000:]
    res = boe("ask", str(chart), "How many thousand visitors came in 2020?", *common, "--run", "after", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chart_value" not in {a["kind"] for a in _lines(db, "after")[0]["actions"]}
