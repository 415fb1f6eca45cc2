"""CPU of one `boe replay` command, at this tree and at a baseline commit, alternating; same results checked.

    python benchmarks/replay_cpu.py --baseline cbd214b                 # bayes and bayes-lookahead, 1,000 questions
    python benchmarks/replay_cpu.py --baseline main --ledger tests/data/golden/factor.jsonl --budget 0,4,8,16,24
    python benchmarks/replay_cpu.py --baseline main --policy raw,boe,bayes --calibration fit --repeat 5
    python benchmarks/replay_cpu.py --baseline main --policy raw,bayes --pool adaptive --budget 8,16

Each tree runs ``python -m boe replay LEDGER --policy P --budget B --calibration C --resamples 0 --json`` in a
child process (``PYTHONPATH`` = the tree; the cross-fit's forked workers counted with it), the two alternating
``--repeat`` times so that the machine's load weighs on both alike. The table gives each tree's best and median
CPU (user + system, children included) and the ratio of the bests; the results (policy, budget, accuracy, mean cost)
must be equal. The default ledger is `replay_speed.py`'s cached pool ledger of ``--n`` questions.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import NEUTRAL, ROOT, baseline_tree
from replay_speed import ledger_path  # the same cached pool ledger
from rich.console import Console
from rich.table import Table


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_tree(tree: Path, args: list[str]) -> tuple[float, list[tuple[object, ...]]]:
    """The child's CPU and its results' (policy, budget, accuracy, mean cost)."""
    before = children_cpu()
    out = subprocess.run(
        [sys.executable, "-m", "boe", "replay", *args, "--resamples", "0", "--json"], cwd=NEUTRAL,
        env={"PYTHONPATH": str(tree), "PATH": "", "HOME": NEUTRAL}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    cpu = children_cpu() - before
    rows = json.loads(out.stdout)["results"]
    return cpu, [(r["policy"], r["budget"], r["accuracy"], r["mean_cost"]) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="git commit to compare with (e.g. main, HEAD~1)")
    ap.add_argument("--ledger", type=Path, help="a ledger file (default: a cached pool ledger of --n questions)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--policy", default="bayes,bayes-lookahead")
    ap.add_argument("--budget", default="4,8,16")
    ap.add_argument("--calibration", default="crossfit:5")
    ap.add_argument("--pool", default="fixed", help="--pool of the replay (e.g. adaptive)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ledger = (args.ledger or ledger_path(args.n, 0, ROOT / ".benchmarks")).resolve()
    cmd = [str(ledger), "--policy", args.policy, "--budget", args.budget, "--calibration", args.calibration]
    cmd += ["--pool", args.pool]
    with tempfile.TemporaryDirectory() as tmp:
        base = baseline_tree(args.baseline, Path(tmp))
        cpu: dict[str, list[float]] = {"this tree": [], args.baseline: []}
        results = []
        for _ in range(args.repeat):
            for name, tree in (("this tree", ROOT), (args.baseline, base)):
                c, rows = run_tree(tree, cmd)
                cpu[name].append(c)
                results.append(rows)
    best = {k: min(v) for k, v in cpu.items()}
    title = f"boe replay {ledger.name} {' '.join(cmd[1:])}: CPU s, {args.repeat} runs each"
    table = Table(title=title)
    for col in ("tree", "best", "median", "best / baseline"):
        table.add_column(col, justify="right")
    for k, v in cpu.items():
        table.add_row(k, f"{best[k]:.2f}", f"{statistics.median(v):.2f}", f"{best[k] / best[args.baseline]:.2f}")
    Console().print(table)
    same = all(r == results[0] for r in results)
    print("results equal in both trees" if same else "RESULTS DIFFER")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
