"""`boe demo` wall time as a user runs it (simulator on loopback, the agent, ./boe-demo.db), against a baseline.

    python benchmarks/demo_wall.py                     # this tree, 3 runs
    python benchmarks/demo_wall.py --baseline main     # and main's, the trees in turn, in the same run

Each run is ``boe demo --json`` in a fresh folder with an empty cache (a fresh
``XDG_CACHE_HOME``), in a fresh process. A baseline runs commit REV's tree
(``git archive``) with its package first on ``PYTHONPATH``. The runs of the
two trees alternate, so that a change in the machine's load weighs on both;
the ratio is this tree's median over the baseline's. Target: under a minute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baseline import baseline_tree

ROOT = Path(__file__).resolve().parents[1]


def demo_seconds(tree: Path, folder: Path) -> float:
    """Wall seconds of one ``boe demo --json`` by the package in ``tree``, run in ``folder``."""
    folder.mkdir(parents=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache"), "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    # cwd: ``python -c`` puts the working directory first on sys.path; the folder holds no package
    subprocess.run(
        [sys.executable, "-c", "from boe.cli import main; main()", "demo", "--json"],
        cwd=folder,
        env=env,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="also time this commit's demo (git archive)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="boe-demo-bench-") as tmpdir:
        tmp = Path(tmpdir)
        trees = {"this tree": ROOT}
        if args.baseline:
            trees = {"baseline": baseline_tree(args.baseline, tmp), **trees}
        times: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.repeat):
            for name, tree in trees.items():
                times[name].append(demo_seconds(tree, tmp / f"{name.replace(' ', '-')}-{i}"))
        load = os.getloadavg()[0]
    print(f"boe demo --json, {args.repeat} runs a tree, load average {load:.1f}")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        label = f"{name} ({args.baseline})" if name == "baseline" else name
        print(f"{label:<20} median {medians[name]:.1f} s (runs: {', '.join(f'{v:.1f}' for v in t)})")
    if "baseline" in medians:
        print(f"this tree / baseline {medians['this tree'] / medians['baseline']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
