"""A fresh checkout set up as the README says, and the documented commands that need it, run as written.

The module copies this checkout's files (what `git clone` gives, uncommitted edits included) to a temporary
folder and runs the README's first command there verbatim: a new virtual environment, `pip install -e '.[agent]'`
with its dependencies resolved (pip reads the machine's own index), then `boe demo`. That environment is reused by
every test below (in this order): the README's "seeing the evidence" block after the demo, the example plugin
installed into it as docs/extending/plugins.md and its README say, dependencies resolved (it depends on
`best-of-evidence`; PyPI's `boe` is an unrelated project whose `boe` command would replace ours), the example's
own commands, and what the plugin does to every run and what becomes of its ledgers without it.
Only ports and paths are substituted (tests/doc_blocks.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.doc_blocks import ROOT, doc_block, run_commands

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the first test builds the fresh venv (pip resolves)


@dataclass(frozen=True)
class Fresh:
    """The fresh checkout and the shell environment that finds its .venv first (as an activated venv does)."""

    root: Path
    env: dict[str, str]
    demo: str  # what the README's first command printed

    def bin(self, name: str) -> str:
        return str(self.root / ".venv" / "bin" / name)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600)

    def boe(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.bin("boe"), *args], cwd=self.root, env={**self.env, **env}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip


def _copy_checkout(dest: Path) -> None:
    """The files a clone of this checkout holds (tracked, and new files git does not ignore)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files a clone holds")
    for name in filter(None, listed.stdout.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _clean_env(tmp: Path) -> dict[str, str]:
    """This process's environment without its virtual environment, endpoint settings or Python path."""
    ours = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith(("BOE_", "OPENAI_"))
    }
    return {**env, "PATH": os.pathsep.join(path), "COLUMNS": "100", "XDG_CACHE_HOME": str(tmp / "cache")}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    tmp = tmp_path_factory.mktemp("fresh")
    root = tmp / "boe"
    _copy_checkout(root)
    env = _clean_env(tmp)
    (first,) = doc_block("fresh-machine").commands()
    (demo,) = run_commands([first], cwd=root, env=env, timeout=1800)
    venv_env = {**env, "PATH": f"{root / '.venv' / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(root / ".venv")}
    return Fresh(root, venv_env, demo)


@pytest.fixture
def sim_url() -> Iterator[str]:
    """The base URL of a simulator served by this test process."""
    from boe.sim import serve_in_thread

    with serve_in_thread() as handle:
        yield handle.base_url


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_first_command_installs_ours_and_runs_the_demo(fresh: Fresh) -> None:
    assert "demo summary" in fresh.demo and "stored as run" in fresh.demo, fresh.demo[-3000:]
    where = fresh.run(fresh.bin("python"), "-c", "import boe, importlib.metadata as m; print(boe.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(fresh.root / "boe"), where
    assert fresh.run(fresh.bin("pip"), "show", "best-of-evidence").returncode == 0
    assert fresh.run(fresh.bin("pip"), "show", "boe").returncode != 0  # PyPI's unrelated `boe` is not there
    (skipped,) = doc_block("fresh-machine").skipped()  # the test command: CI runs it, as written
    assert skipped in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_seeing_the_evidence_after_the_demo(fresh: Fresh, sim_url: str) -> None:
    """`boe show sim-0-00027 --db boe-demo.db` exited 2 after `boe demo` (two runs); the report needs a run."""
    data = fresh.root / "tests" / "datasets" / "fixtures" / "vqa-rad"
    setup = fresh.boe("batch", str(data), "--split", "test", "--db", "runs.db", "--run", "rad-k16", "--k", "4",
                      "--base-url", sim_url, "--model", "boe-sim", "--no-progress")  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    report, show = run_commands(doc_block("seeing-the-evidence").commands(), cwd=fresh.root, env=fresh.env)
    assert "accuracy at budget" in report and (fresh.root / "report.html").is_file()
    assert any(p.suffix == ".png" for p in (fresh.root / "figs").iterdir())
    assert "boe-sim / sim-0-00003: What imaging modality is this?" in show, show
    assert "note: showing run demo-same-judge-" in show and "also in demo-" in show, show


def test_the_plugin_installs_as_documented_and_boe_stays_ours(fresh: Fresh) -> None:
    outs = run_commands(doc_block("chartqa-install").commands(), cwd=fresh.root, env=fresh.env)
    assert "chart_value" in outs[1] and "boe-chartqa" in outs[1], outs[1]
    requires = fresh.run(fresh.bin("pip"), "show", "boe-chartqa").stdout
    assert "Requires: best-of-evidence" in requires, requires
    assert fresh.run(fresh.bin("pip"), "show", "boe").returncode != 0
    where = fresh.run(fresh.bin("python"), "-c", "import boe; print(boe.__file__)").stdout.strip()
    assert Path(where).is_relative_to(fresh.root / "boe"), where
    listed = json.loads(fresh.boe("plugins", "--json").stdout)
    credited = {(noun, e["name"]) for noun, rows in listed["registries"].items() for e in rows if e["source"] != "boe"}
    assert credited == {("kinds", "chart_value"), ("tools", "chart_value"), ("formats", "chartqa")}
    assert [(p["dist"], p["error"]) for p in listed["plugins"]] == [("boe-chartqa", None)]


def test_the_example_shows_its_check_change_an_answer(fresh: Fresh) -> None:
    install, plugins, replay, show = run_commands(doc_block("chartqa-use").commands(), cwd=fresh.root, env=fresh.env)
    assert "chartqa" in plugins
    boe_row = next(line.split() for line in replay.splitlines() if line.split()[:2] == ["boe", "4"])
    assert boe_row[4:6] == ["1", "1"], replay  # corr 1, harm 1: a wrong lookup costs one as the README says
    assert "The choice changes: 25 → 50." in " ".join(show.split()), show
    assert "selected #1 50 (correct)" in show and "raw majority #0 25 (wrong)" in show


def test_the_example_commands_against_the_simulator(fresh: Fresh) -> None:
    port = str(free_port())
    commands = [c.replace("8011", port) for c in doc_block("chartqa-live").commands()]
    _serve, ask, batch, replay = run_commands(commands, cwd=fresh.root, env=fresh.env)
    # what the README says: the simulator's majority finding, selected (no prior overrules it before a check)
    assert "selected: normal" in ask and "raw majority: normal" in ask
    assert "stored 6" in batch
    assert "chartqa: N=6" in replay
    lines = _ledger(fresh.root / "runs.db", "charts")
    assert len(lines) == 6 and all(r["format"] == "boe-ledger/1.2" for r in lines)
    assert all(r["kinds"] == {"chart_value": {"target": "claim", "plugin": "boe-chartqa"}} for r in lines)


def _ledger(db: Path, run: str) -> list[dict[str, object]]:
    from boe.db import Store

    with Store(f"sqlite:///{db}") as store:
        return [json.loads(line) for line in store.iter_ledger_lines(run)]


def test_the_plugin_is_used_and_its_ledgers_need_it(fresh: Fresh, sim_url: str, tmp_path: Path) -> None:
    """Its checks are bought online and replayed; hidden or uninstalled, every other command works and a ledger
    using its kind is refused naming it. Last in the module: it uninstalls the plugin."""
    example = fresh.root / "examples" / "boe-chartqa"
    db = tmp_path / "runs.db"
    common = ["--base-url", sim_url, "--model", "boe-sim", "--k", "4", "--db", str(db)]
    chart = example / "data" / "charts" / "visitors.png"
    res = fresh.boe("ask", str(chart), "How many thousand visitors came in 2020?", *common, "--run", "ask",
                    "--policy", "random-factor", "--budget", "64", "--ledger", "full", "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chart_value" in [e["kind"] for e in json.loads(res.stdout)["evidence"]]
    (rec,) = _ledger(db, "ask")
    assert rec["kinds"] == {"chart_value": {"target": "claim", "plugin": "boe-chartqa"}}

    res = fresh.boe("batch", str(example / "data"), *common, "--run", "charts", "--ledger", "full", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    recs = _ledger(db, "charts")
    chart_actions = [a for r in recs for a in r["actions"] if a["kind"] == "chart_value"]  # type: ignore[union-attr]
    assert len(recs) == 6 and chart_actions and all(a["observed"] is not False for a in chart_actions)
    out = tmp_path / "replay.jsonl"
    res = fresh.boe("replay", "--db", str(db), "--run", "charts", "--policy", "random-factor,boe", "--budget", "64",
                    "--calibration", "run", "--transcripts", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    bought = {a for line in out.read_text().splitlines() for a in json.loads(line)["actions"]}
    assert bought & {a["id"] for a in chart_actions}, "the replay bought no chart_value check"

    refused = "action kind 'chart_value' needs plugin 'boe-chartqa' (pip install boe-chartqa); it is not installed"
    shipped = str(example / "data" / "charts-ledger.jsonl")
    builtin = str(fresh.root / "tests" / "data" / "golden" / "factor.jsonl")
    hidden = {"BOE_DISABLE_PLUGINS": "chartqa"}
    assert "chart_value" not in fresh.boe("plugins", "--json", **hidden).stdout
    for env in (hidden, {}):
        if not env:  # uninstalled: the same
            res = fresh.run(fresh.bin("pip"), "uninstall", "-y", "-q", "boe-chartqa")
            assert res.returncode == 0, res.stderr
            listed = json.loads(fresh.boe("plugins", "--json").stdout)
            assert listed["plugins"] == [] and "chart_value" not in {e["name"] for e in listed["registries"]["kinds"]}
        for source in ([shipped], ["--db", str(db), "--run", "charts"]):
            res = fresh.boe("replay", *source, "--policy", "boe", "--budget", "4", **env)
            assert res.returncode != 0 and refused in " ".join(res.stderr.split()), res.stderr
        res = fresh.boe("replay", builtin, "--policy", "boe", "--budget", "4", **env)
        assert res.returncode == 0, res.stderr[-2000:]
    res = fresh.boe("ask", str(chart), "How many thousand visitors came in 2020?", *common, "--run", "after", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "chart_value" not in {a["kind"] for a in _ledger(db, "after")[0]["actions"]}  # type: ignore[union-attr]
