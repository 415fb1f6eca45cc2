"""The `bayes` fits of a cross-fitted replay alone: CPU, at this tree and at a baseline commit, same models.

    python benchmarks/bayes_fit_speed.py --baseline main             # 3,000 pool questions, crossfit:5
    python benchmarks/bayes_fit_speed.py --baseline main --n 1000 --repeat 5
    python benchmarks/bayes_fit_speed.py --baseline main --ledger run.jsonl  # e.g. `boe export` of an agent run

Each run is its own process (this tree's ``boe``, or the tree of git commit
``--baseline`` exported to a temporary directory), alternating, ``--repeat``
times each: it loads the cached pool ledger (shared with replay_speed.py; or ``--ledger``),
builds the shared training tables (`Bayes.prepare_fit`) and fits the
observation model of every fold of ``--calibration`` (`Bayes.fit_extra`, the
stance and check weights' inner cross-fits included) in one process, timing
that CPU only (`time.process_time`), without the replay around it. The best
of each is printed, with the ratio, and the fitted models (every fold's
``model_dump``) are compared: a change that only makes the fits cheaper must
leave them equal to the last bit (exit 1 when they differ). The fits are the
part of ``boe replay --policy bayes`` that grows with the training questions;
`bayes_speed.py` times the whole command.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import NEUTRAL, baseline_tree
from replay_speed import ledger_path  # the same cached pool ledger
from rich.console import Console
from rich.table import Table

# what each timed process runs: argv = ledger, calibration, output path
CHILD = """
import json, sys, time
import numpy as np
from boe.api import load_questions
from boe.core.bayes import Bayes
from boe.core.replay import plan_calibration

loaded = load_questions(sys.argv[1])
qs, keys = loaded.questions, list(loaded.groups.keys)
pol, models = Bayes(), []

def fit(questions, train, cal):
    cal = pol.fit_extra(questions, train, cal, keys)
    models.append(cal.extra["bayes"])
    return cal

t = time.process_time()
pol.prepare_fit(qs)
plan_calibration(qs, keys, sys.argv[2], extra_fit=fit, workers=1)
cpu = time.process_time() - t
with open(sys.argv[3], "w") as fh:
    json.dump({"cpu": cpu, "models": models}, fh, sort_keys=True)
"""


def run(tree: Path | None, ledger: Path, calibration: str, out: Path) -> tuple[float, list[object]]:
    """(fit CPU s, fitted models) of one process importing ``boe`` from ``tree`` (None: the installed one)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "BOE_WORKERS": "1"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    subprocess.run([sys.executable, "-c", CHILD, str(ledger), calibration, str(out)], env=env, check=True, cwd=NEUTRAL)
    got = json.loads(out.read_text())
    return float(got["cpu"]), list(got["models"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibration", default="crossfit:5")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tree; the fastest counts")
    ap.add_argument("--cache", type=Path, default=Path(".benchmarks"))
    ap.add_argument("--baseline", metavar="REF", required=True, help="git commit to time beside this tree")
    ap.add_argument("--ledger", type=Path, help="fit this ledger file instead of a generated pool ledger")
    args = ap.parse_args()
    ledger = args.ledger.resolve() if args.ledger else ledger_path(args.n, args.seed, args.cache).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"this tree": None, args.baseline: baseline_tree(args.baseline, Path(tmp))}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        models: dict[str, list[object]] = {}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                t, models[name] = run(tree, ledger, args.calibration, Path(tmp) / "out.json")
                cpu[name].append(t)
    best = {name: min(ts) for name, ts in cpu.items()}
    table = Table(title=f"bayes fits of {ledger.name} ({args.calibration}), best of {args.repeat}")
    for col in ("tree", "fit CPU s", "x baseline", "runs"):
        table.add_column(col)
    for name, t in best.items():
        table.add_row(name, f"{t:.3f}", f"{t / best[args.baseline]:.3f}", " ".join(f"{x:.2f}" for x in cpu[name]))
    Console().print(table)
    same = models["this tree"] == models[args.baseline]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"fitted models ({len(models['this tree'])} folds) equal to {args.baseline}'s: {same}; load average {load}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
