"""Speed of `boe.core.lines.decode_line` (how report, import, export and the ledger model read a line) against a
baseline commit's, on the same lines in the same run.

    python benchmarks/line_decode.py --baseline HEAD~1
    python benchmarks/line_decode.py --baseline main --n 500 --repeat 7

The lines are what an agent run stores (`benchmarks/report_size.py`'s records: a pool ledger with views,
rationales and model calls, about 50 KB a line, thousands of brackets). Each tree decodes every line in a child
process of its own (``PYTHONPATH`` = the tree), the two alternating ``--repeat`` times so that the machine's load
weighs on both alike; the table gives each tree's best and median CPU per line and the ratio of this tree's to
the baseline's. Both trees must give the same values (checked by a hash of the decoded lines).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from baseline import NEUTRAL, ROOT, baseline_tree
from report_size import agent_like
from rich.console import Console
from rich.table import Table

from boe.sim.ledgers import pool_ledger

_CHILD = """
import hashlib, json, sys, time
from boe.core.lines import decode_line
lines = open(sys.argv[1], "rb").read().splitlines()
t = time.process_time()
values = [decode_line(raw) for raw in lines]
cpu = time.process_time() - t
digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
print(json.dumps({"cpu": cpu, "hash": digest}))
"""


def write_lines(n: int, path: Path, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w") as fh:
        for i, rec in enumerate(pool_ledger(n, seed=seed)):
            fh.write(json.dumps(agent_like(rec, Path(f"/images/scan-{i:05d}.jpg"), rng)) + "\n")


def time_tree(tree: Path, lines: Path) -> dict[str, float | str]:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(lines)], cwd=NEUTRAL, env={"PYTHONPATH": str(tree), "PATH": ""},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="git commit to compare with (e.g. HEAD~1, main)")
    ap.add_argument("--n", type=int, default=300, help="lines (questions)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines = Path(tmp) / "agent.jsonl"
        write_lines(args.n, lines)
        size = lines.stat().st_size / args.n
        base = baseline_tree(args.baseline, Path(tmp))
        runs: dict[str, list[dict[str, float | str]]] = {"this tree": [], args.baseline: []}
        for _ in range(args.repeat):
            runs["this tree"].append(time_tree(ROOT, lines))
            runs[args.baseline].append(time_tree(base, lines))
    hashes = {str(r["hash"]) for rs in runs.values() for r in rs}
    table = Table(title=f"decode_line: {args.n} agent-run lines, {size / 1024:.1f} KB each, best of {args.repeat}")
    for col in ("tree", "best ms/line", "median ms/line", "best / baseline"):
        table.add_column(col, justify="right")
    best = {k: min(float(r["cpu"]) for r in rs) for k, rs in runs.items()}
    for k, rs in runs.items():
        med = statistics.median(float(r["cpu"]) for r in rs)
        table.add_row(k, f"{best[k] / args.n * 1e3:.3f}", f"{med / args.n * 1e3:.3f}",
                      f"{best[k] / best[args.baseline]:.2f}")  # fmt: skip
    Console().print(table)
    print("decoded values equal in both trees" if len(hashes) == 1 else f"VALUES DIFFER: {hashes}")
    if len(hashes) != 1:
        sys.exit(1)


if __name__ == "__main__":
    main()
