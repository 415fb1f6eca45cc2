"""Regenerate the golden files (run only when a behaviour change is intended, and say so in the commit).

    python -m tests.golden.make_golden

The golden files pin behaviour across refactors: replay transcripts of the committed ledgers under every
policy and budget, and the normalised ledgers the agent stores for a fixed simulator dataset.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
DATA = HERE.parent / "data" / "golden"
LEDGERS = ("factor", "pool", "echo-answers")
POLICIES = "raw,boe,boe-factor,random-factor,whole,label-guided,bayes,bayes-lookahead"
BUDGETS = "0,4,8,16,24"
CALIBRATIONS = ("fit", "crossfit:5")
# What varies between two identical runs: wall time, call ids and the simulator's prefix-cache state.
VOLATILE = {"seconds", "latency_ms", "call_id", "calls", "cached_tokens", "cache_hit", "requests"}
AGENT_RUNS: dict[str, list[str]] = {
    "full": ["--ledger", "full", "--policy", "boe"],  # the paper's controller, named (the default is bayes)
    "online": ["--ledger", "online", "--policy", "boe", "--budget", "12"],
}


def boe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as users do (`python -m boe`), failing loudly."""
    done = subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"boe {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def replay_transcripts(ledger: Path, calibration: str, out: Path) -> None:
    """Every policy x budget transcript of one ledger."""
    boe(
        "replay", str(ledger), "--policy", POLICIES, "--budget", BUDGETS,
        "--calibration", calibration, "--transcripts", str(out), "--json",
    )  # fmt: skip


def normalise(value: Any, root: str) -> Any:
    """A stored ledger record without what legitimately varies between runs."""
    if isinstance(value, dict):
        return {k: normalise(v, root) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, list):
        return [normalise(v, root) for v in value]
    if isinstance(value, str) and root in value:
        return value.replace(root, "<data>")
    return value


def agent_ledger(data: Path, base_url: str, db: Path, run: str, extra: list[str]) -> list[dict[str, Any]]:
    """Run `boe batch` on the simulator into a fresh store and return its normalised records by question."""
    boe(
        "batch", str(data), "--base-url", base_url, "--model", "boe-sim-vlm", "--judge-model", "boe-sim-judge",
        "--db", str(db), "--run", run, "--k", "6", "--concurrency", "1", "--no-progress", *extra,
    )  # fmt: skip
    out = db.with_suffix(f".{run}.jsonl")
    boe("export", "--db", str(db), "--run", run, "--out", str(out))
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    records.sort(key=lambda r: r["question_id"])
    return [normalise(r, str(data)) for r in records]


def sim_dataset(folder: Path) -> Path:
    """The fixed simulator dataset of the agent goldens."""
    from boe.sim.dataset import generate_dataset

    return generate_dataset(folder, 12, seed=5, size=64)


def main() -> None:
    from boe.sim import serve_in_thread

    for name in LEDGERS:
        for cal in CALIBRATIONS:
            replay_transcripts(DATA / f"{name}.jsonl", cal, DATA / f"{name}.{cal.replace(':', '')}.transcripts")
    with tempfile.TemporaryDirectory() as tmp:
        data = sim_dataset(Path(tmp) / "data")
        handle = serve_in_thread()
        try:
            for run, extra in AGENT_RUNS.items():
                records = agent_ledger(data, handle.base_url, Path(tmp) / f"{run}.db", run, extra)
                text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
                (DATA / f"agent-{run}.normalised.jsonl").write_text(text)
        finally:
            handle.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
