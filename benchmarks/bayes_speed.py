"""Replay speed of `bayes` against the plug-in `boe` at paper scale.

    python benchmarks/bayes_speed.py              # 24,237 pool questions, budget 16
    python benchmarks/bayes_speed.py --n 3000     # a quicker look
    python benchmarks/bayes_speed.py --lookahead  # also time bayes-lookahead

Generates (once, cached in .benchmarks/, shared with replay_speed.py) a pool
ledger, loads it, fits the calibration once (plug-in kappa/p and the `bayes`
observation model, timed separately), then replays `boe` and `bayes` at the
budget under that calibration, each ``--repeat`` times, and prints the best
wall and CPU times and their ratio. The target is bayes <= 3x boe.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from replay_speed import cpu, ledger_path  # the same cached paper-scale ledger and CPU clock
from rich.console import Console
from rich.table import Table

from boe.core.bayes import Bayes
from boe.core.loading import load_ledgers
from boe.core.replay import plan_calibration, replay


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=24237)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=16.0)
    ap.add_argument("--repeat", type=int, default=2, help="replays per policy; the best time counts")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: the engine's choice, up to 2)")
    ap.add_argument("--lookahead", action="store_true", help="also time bayes-lookahead")
    ap.add_argument("--cache", type=Path, default=Path(".benchmarks"))
    args = ap.parse_args()

    path = ledger_path(args.n, args.seed, args.cache)
    t0 = time.perf_counter()
    questions, groups = load_ledgers([path], workers=args.workers)
    t_load = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), cpu()
    plan = plan_calibration(questions, groups.keys, "fit")
    t_plug, c_plug = time.perf_counter() - t0, cpu() - c0
    t0, c0 = time.perf_counter(), cpu()
    plan = plan_calibration(questions, groups.keys, "fit", extra_fit=Bayes().fit_extra)
    t_fit, c_fit = time.perf_counter() - t0 - t_plug, cpu() - c0 - c_plug

    policies = ["boe", "bayes"] + (["bayes-lookahead"] if args.lookahead else [])
    best: dict[str, tuple[float, float, float, float]] = {}
    for _ in range(args.repeat):
        for pol in policies:
            t0, c0 = time.perf_counter(), cpu()
            run = replay(questions, groups.keys, [pol], [args.budget], plan, workers=args.workers)[0]
            wall, cpu_s = time.perf_counter() - t0, cpu() - c0
            acc = float(np.mean([questions[i].utility[run.selected[i]] for i in range(len(questions))]))
            if pol not in best or wall < best[pol][0]:
                best[pol] = (wall, cpu_s, acc, float(run.cost.mean()))

    con = Console(width=110)
    n = len(questions)
    tab = Table(
        title=f"bayes vs boe replay: {n:,} questions, budget {args.budget:g}, {os.cpu_count()} cores "
        f"(best of {args.repeat})"
    )
    for col in ("step", "wall s", "CPU s", "x boe (wall)", "accuracy (in-sample fit)", "mean cost"):
        tab.add_column(col, justify="left" if col == "step" else "right")
    tab.add_row("load", f"{t_load:.1f}", "", "", "", "")
    tab.add_row("fit plug-in calibration", f"{t_plug:.1f}", f"{c_plug:.1f}", "", "", "")
    tab.add_row("fit bayes observation model", f"{t_fit:.1f}", f"{c_fit:.1f}", "", "", "")
    base = best["boe"][0]
    for pol in policies:
        wall, cpu_s, acc, cost = best[pol]
        tab.add_row(f"replay {pol}", f"{wall:.1f}", f"{cpu_s:.1f}", f"{wall / base:.2f}", f"{acc:.4f}", f"{cost:.2f}")
    con.print(tab)
    ratio = best["bayes"][0] / base
    con.print(f"bayes / boe replay time: {ratio:.2f}x (target <= 3x): {'ok' if ratio <= 3 else 'SLOWER THAN TARGET'}")


if __name__ == "__main__":
    main()
