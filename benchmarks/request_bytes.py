"""Bytes sent per question: a baseline commit against this tree, in one run, on VQA-RAD images.

Each tree runs ``boe batch --ledger full`` (every check of every question's menu, grounded checks included)
against its own fresh simulator, and every chat request body the simulator receives is counted: all of them,
and those of grounded checks (a ``<view ... image="N"/>`` marker). The baseline is ``git archive REF`` unpacked
in a temporary folder and run with ``PYTHONPATH`` pointing at it (same interpreter, same dependencies).

    python benchmarks/request_bytes.py                      # baseline main, 12 test questions of ../shared
    python benchmarks/request_bytes.py --baseline HEAD~5 --data tests/datasets/fixtures/vqa-rad --limit 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from boe.sim import serve_in_thread  # noqa: E402
from boe.sim.server import _Handler  # noqa: E402


class _Counting(_Handler):
    """The simulator's handler, counting the bytes of every chat request body."""

    counts: dict[str, int]
    lock = threading.Lock()

    def _read_body(self) -> bytes | None:
        body = super()._read_body()
        if body is not None and self.path.rstrip("/").endswith("/chat/completions"):
            grounded = b'image=\\"' in body  # the grounded judge's <view ... image="N"/> marker
            with self.lock:
                self.counts["requests"] += 1
                self.counts["bytes"] += len(body)
                self.counts["grounded_requests"] += grounded
                self.counts["grounded_bytes"] += len(body) if grounded else 0
        return body


def run_tree(tree: Path | None, data: Path, split: str, limit: int, k: int, work: Path) -> dict[str, Any]:
    """``boe batch --ledger full`` from ``tree`` (None: this one) against a fresh counting simulator."""
    counts = {"requests": 0, "bytes": 0, "grounded_requests": 0, "grounded_bytes": 0}
    handler = type("Counting", (_Counting,), {"counts": counts})
    sim = serve_in_thread()
    sim.server.RequestHandlerClass = handler
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    name = "baseline" if tree is not None else "this-tree"
    args = [
        sys.executable, "-m", "boe", "batch", str(data), "--split", split, "--limit", str(limit),
        "--base-url", sim.base_url, "--model", "boe-sim-vlm", "--judge-model", "boe-sim-judge",
        "--k", str(k), "--ledger", "full", "--db", str(work / f"{name}.db"), "--run", name,
        "--no-progress",
    ]  # fmt: skip
    t0 = time.perf_counter()
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=work)
        where = subprocess.run(
            [sys.executable, "-c", "import boe; print(boe.__file__)"], env=env, capture_output=True, text=True
        ).stdout.strip()
    finally:
        sim.close()
    if done.returncode != 0:
        raise SystemExit(f"{name}: boe batch exited {done.returncode}: {done.stderr[-2000:]}")
    return {"tree": name, "boe": where, "seconds": round(time.perf_counter() - t0, 1), **counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", default="main", help="git ref of the baseline (default: main)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "vqa-rad"), help="a VQA-RAD folder")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=12, help="questions (default 12)")
    ap.add_argument("--k", type=int, default=8, help="candidates per question (default 8)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    opts = ap.parse_args()
    data = Path(opts.data).resolve()
    with tempfile.TemporaryDirectory(prefix="boe-bytes-") as tmp:
        work = Path(tmp)
        base = work / "baseline-src"
        base.mkdir()
        archive = subprocess.run(["git", "archive", opts.baseline, "boe"], cwd=ROOT, capture_output=True, check=True)
        with tarfile.open(fileobj=__import__("io").BytesIO(archive.stdout)) as tar:
            tar.extractall(base, filter="data")
        rows = [
            run_tree(base, data, opts.split, opts.limit, opts.k, work),
            run_tree(None, data, opts.split, opts.limit, opts.k, work),
        ]
    for r in rows:
        r["bytes_per_question"] = r["bytes"] / opts.limit
        r["grounded_bytes_per_question"] = r["grounded_bytes"] / opts.limit
    ratio = rows[1]["bytes_per_question"] / rows[0]["bytes_per_question"]
    grounded_ratio = rows[1]["grounded_bytes_per_question"] / max(1.0, rows[0]["grounded_bytes_per_question"])
    if opts.json:
        print(json.dumps({"baseline": opts.baseline, "rows": rows, "ratio": ratio, "grounded_ratio": grounded_ratio}))
        return
    print(f"{opts.limit} questions of {data} ({opts.split}), K={opts.k}, --ledger full; baseline {opts.baseline}")
    print(f"{'tree':10} {'requests':>8} {'grounded':>8} {'bytes/question':>15} {'grounded bytes/q':>17} {'s':>6}")
    for r in rows:
        print(
            f"{r['tree']:10} {r['requests']:8d} {r['grounded_requests']:8d} {r['bytes_per_question']:15,.0f} "
            f"{r['grounded_bytes_per_question']:17,.0f} {r['seconds']:6.1f}"
        )
    print(f"this tree / baseline: all requests {ratio:.3f}, grounded-check requests {grounded_ratio:.3f}")


if __name__ == "__main__":
    main()
