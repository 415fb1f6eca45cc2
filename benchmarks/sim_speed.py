"""The simulator's own CPU per request, on the requests a real `boe batch` sends it, against a baseline tree.

    python benchmarks/sim_speed.py --baseline HEAD~1   # this tree and the tree of HEAD~1, same requests, same run

Most of the test suite's time is spent waiting for the simulator (a 200-question `--ledger full --k 4` batch sent
it 4,089 requests, and its 32 draws per judge verdict cost 19 ms a request), so its speed is the suite's. A `boe
batch` of ``--n`` generated questions records every request body the simulator is sent; each tree then answers
all of them in a subprocess of its own (the same bodies, in the same order), and the table reports CPU per
request and the ratio to the baseline, with a digest of the replies: equal digests mean the trees answer every
request byte for byte alike (ids and timestamps aside), as the goldens require.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import NEUTRAL, baseline_tree
from rich.console import Console
from rich.table import Table

ANSWER = r"""
import hashlib, json, pickle, sys, time
from boe.sim import serve_in_thread
from boe.sim import server as S
bodies = pickle.load(open(sys.argv[1], "rb"))
digest = hashlib.sha256()
with serve_in_thread() as sim:
    class Handler: pass
    h = Handler(); h.server = sim.server
    best = None
    for _ in range(int(sys.argv[2])):
        t = time.process_time()
        replies = [S._Handler._complete(h, b, None) for b in bodies]
        spent = time.process_time() - t
        best = spent if best is None else min(best, spent)
    for content, usage in replies:
        content.pop("created")
        digest.update(json.dumps([content, usage], sort_keys=True).encode())
print(json.dumps({"cpu": best, "digest": digest.hexdigest()[:16]}))
"""


def record(n: int, seed: int, into: Path) -> Path:
    """Every request body a `boe batch` of ``n`` generated questions sends the simulator (pickled)."""
    from boe.sim import serve_in_thread
    from boe.sim import server as S
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(into / "data", n, seed=seed, size=96)
    bodies: list[bytes] = []
    answer = S._Handler._complete

    def keep(self: S._Handler, body: bytes, fault: str | None) -> object:
        bodies.append(body)
        return answer(self, body, fault)

    S._Handler._complete = keep  # type: ignore[method-assign]
    try:
        with serve_in_thread() as sim:
            args = [str(data), "--base-url", sim.base_url, "--model", "boe-sim", "--db", f"sqlite:///{into / 'b.db'}",
                    "--run", "r", "--k", "4", "--ledger", "full", "--concurrency", "8", "--no-progress"]  # fmt: skip
            subprocess.run([sys.executable, "-m", "boe", "batch", *args], check=True, capture_output=True)
    finally:
        S._Handler._complete = answer  # type: ignore[method-assign]
    path = into / "bodies.pkl"
    path.write_bytes(pickle.dumps(bodies))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="questions of the recorded batch")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--repeat", type=int, default=3, help="passes over the requests per tree; the fastest counts")
    ap.add_argument("--baseline", metavar="REF", help="also time the simulator as of this git commit")
    args = ap.parse_args()
    import json

    with tempfile.TemporaryDirectory(prefix="sim-speed-") as tmp:
        bodies = record(args.n, args.seed, Path(tmp))
        trees = [("this tree", os.environ.get("PYTHONPATH", ""))]
        if args.baseline:
            trees.append((args.baseline, str(baseline_tree(args.baseline, Path(tmp)))))
        got = {}
        for label, path in trees:
            env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
            out = subprocess.run([sys.executable, "-c", ANSWER, str(bodies), str(args.repeat)], env=env,
                                 check=True, capture_output=True, text=True, cwd=NEUTRAL)  # fmt: skip
            got[label] = json.loads(out.stdout)
        n = len(pickle.loads(bodies.read_bytes()))
    tab = Table(title=f"simulator CPU on the {n:,} requests of a {args.n}-question batch (K 4, full ledger)")
    for col in ("tree", "ms CPU / request", "x baseline", "replies digest"):
        tab.add_column(col, justify="left" if col in ("tree", "replies digest") else "right")
    base = got[args.baseline]["cpu"] if args.baseline else None
    for label, r in got.items():
        ratio = f"{r['cpu'] / base:.2f}" if base else "-"
        tab.add_row(label, f"{r['cpu'] / n * 1000:.2f}", ratio, r["digest"])
    Console(width=110).print(tab)


if __name__ == "__main__":
    main()
