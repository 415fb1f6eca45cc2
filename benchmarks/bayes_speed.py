"""`bayes` against `boe` as a user replays them: time, CPU and peak memory of the same command, fit included.

    python benchmarks/bayes_speed.py                  # 3,000 pool questions, budget 16, crossfit:5
    python benchmarks/bayes_speed.py --n 1000 --repeat 1
    python benchmarks/bayes_speed.py --calibration fit
    python benchmarks/bayes_speed.py --baseline main   # also bayes at git ref main, in the same run

Generates (once, cached in .benchmarks/, shared with replay_speed.py) a pool
ledger, then runs, ``--repeat`` times each and alternating,

    boe replay LEDGER --policy P --budget 16 --calibration crossfit:5

for P = boe (the baseline, measured in this run) and P = bayes, each in its own
process (the installed console script next to this interpreter), and prints
the best wall time, that run's CPU (user + system, forked workers included),
the peak resident memory of its largest process and the peak of its process
tree (summed proportional set sizes, sampled from /proc: `tree_pss_mb`), and
bayes's ratios to boe (memory: of the trees). Each process loads the ledger,
fits its calibration (for bayes: plug-in kappa/p and the observation model on
each fold's training questions, with the stance and check weights cross-fitted
inside them) and replays. Issue 27's targets: bayes <= 3x boe's time (wall: what
a user waits for; CPU is reported beside it) and <= 2x its memory. On a shared
machine wall time follows the load; CPU is the steadier figure. ``--baseline REF``
also times bayes as of git commit REF (its ``boe`` package, exported to a temporary
directory, run by this interpreter), alternating with the others, so a change is
measured against its baseline in the same run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from baseline import NEUTRAL, baseline_tree
from replay_speed import ledger_path  # the same cached pool ledger
from rich.console import Console
from rich.table import Table


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    """(wall s, CPU s, peak RSS MB, peak tree PSS MB) of one process and the workers it forks.

    CPU and the peak RSS (of the largest single process) come from the process's own
    resource usage, which includes its waited-for workers; the tree's peak is the
    largest sum of proportional set sizes (shared pages split between the processes
    sharing them) of the process and all its descendants, sampled every 20 ms from
    /proc (0 where /proc has no smaps_rollup).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=NEUTRAL)
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], tree_pss_mb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed: exit {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, peak[0]


def tree_pss_mb(pid: int) -> float:
    """Summed proportional set size (MB) of process ``pid`` and its descendants now (0 without /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("Pss:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack += [int(c) for c in fh.read().split()]
        except OSError:  # the process ended (or /proc has no such file)
            continue
    return total / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=16.0)
    ap.add_argument("--calibration", default="crossfit:5")
    ap.add_argument("--repeat", type=int, default=2, help="runs per policy; the fastest counts")
    ap.add_argument("--cache", type=Path, default=Path(".benchmarks"))
    ap.add_argument("--baseline", metavar="REF", help="also time bayes as of this git commit (e.g. main)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bayes-speed-") as tmp:
        run(args, Path(tmp))


def export(ref: str, into: Path) -> dict[str, str]:
    """The environment that imports the ``boe`` package as of git commit ``ref`` (exported into ``into``)."""
    return {**os.environ, "PYTHONPATH": str(baseline_tree(ref, into))}


def run(args: argparse.Namespace, tmp: Path) -> None:
    """Measure, then print the table."""

    path = ledger_path(args.n, args.seed, args.cache).resolve()
    boe = str(Path(sys.executable).with_name("boe"))
    old_env = export(args.baseline, tmp) if args.baseline else None
    entry = [sys.executable, "-c", "import sys; from boe.cli import main; sys.argv[0] = 'boe'; main()"]
    runs = [("boe", "boe", [boe], None), ("bayes", "bayes", [boe], None)]
    if old_env is not None:
        runs.append((f"bayes@{args.baseline}", "bayes", entry, old_env))
    best: dict[str, tuple[float, float, float, float]] = {}
    for _ in range(args.repeat):
        for label, pol, exe, env in runs:
            cmd = [*exe, "replay", str(path), "--policy", pol, "--budget", f"{args.budget:g}"]
            got = measure([*cmd, "--calibration", args.calibration], env)
            if label not in best or got[0] < best[label][0]:
                best[label] = got

    con = Console(width=110)
    tab = Table(
        title=f"boe replay {path.name} --budget {args.budget:g} --calibration {args.calibration}: "
        f"{args.n:,} questions, {os.cpu_count()} cores, best of {args.repeat}"
    )
    cols = ("policy", "wall s", "CPU s", "peak MB", "tree MB", "x boe wall", "x boe CPU", "x boe memory")
    for col in cols:
        tab.add_column(col, justify="left" if col == "policy" else "right")
    bw, bc, _, bm = best["boe"]
    for pol, (wall, cpu_s, rss, mem) in best.items():
        tab.add_row(pol, f"{wall:.1f}", f"{cpu_s:.1f}", f"{rss:.0f}", f"{mem:.0f}", f"{wall / bw:.2f}",
                    f"{cpu_s / bc:.2f}", f"{mem / bm:.2f}" if bm else "-")  # fmt: skip
    con.print(tab)
    w, c, m = best["bayes"][0] / bw, best["bayes"][1] / bc, best["bayes"][3] / bm if bm else float("nan")
    ok = w <= 3 and m <= 2
    con.print(
        f"bayes / boe: wall {w:.2f}x (target <= 3x), CPU {c:.2f}x, memory (tree) {m:.2f}x (target <= 2x): "
        f"{'ok' if ok else 'OVER TARGET'}"
    )
    if args.baseline:
        ow, oc, _, om = best[f"bayes@{args.baseline}"]
        con.print(
            f"bayes / bayes@{args.baseline}: wall {best['bayes'][0] / ow:.2f}x, CPU {best['bayes'][1] / oc:.2f}x, "
            f"memory (tree) {best['bayes'][3] / om if om else float('nan'):.2f}x; "
            f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )


if __name__ == "__main__":
    main()
