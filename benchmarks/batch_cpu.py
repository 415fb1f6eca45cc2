"""`boe batch` CPU per question, this tree against a baseline commit, measured in the same run.

    python benchmarks/batch_cpu.py                       # baseline: main; 60 questions, K=16, concurrency 32
    python benchmarks/batch_cpu.py --baseline HEAD~3 --repeat 3 --questions 30

The baseline is the commit's tree (``git archive``) in a temporary folder, run with this
interpreter (``PYTHONPATH`` puts it first). Each run is the real command in a subprocess:

    boe batch DATA --base-url SIM --model boe-sim --judge-model boe-sim-judge --k 16 --ledger full \\
        --concurrency 32 --db DB --run r --json --no-progress

against one `boe sim serve` (this tree's simulator, its own process, warmed up by an unrecorded batch of 8
questions) on a fresh store, the two trees taking turns (``--repeat`` rounds, the baseline first in odd rounds
and second in even ones; medians reported). Columns: ``batch ms/q`` is what the batch
reports of itself (CPU of its work loop, every thread, per stored question); ``segmentation ms/q``
is the OpenCV segmentations' CPU, measured the same way for both trees: the segmentations the run
stored, computed again single-threaded by the tree's own segmenter; ``framework ms/q`` is the
difference; ``in-run framework ms/q`` is the batch's CPU less the segmentations' CPU as the run itself
measured it (the segmenting threads' own clocks, contending with the rest; on a loaded machine the second
measurement of the same segmenter differed by 7% between the two trees of one run); ``process ms/q`` is the
whole process (start-up and imports included, from the operating system); ``sim ms/q`` is the simulator's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from baseline import baseline_tree

ROOT = Path(__file__).resolve().parents[1]


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def start_simulator() -> tuple[subprocess.Popen[bytes], str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "boe", "sim", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the simulator did not start")


def run_batch(tree: Path, data: Path, url: str, db: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One `boe batch` of ``tree``; its JSON summary with the process's CPU added."""
    cmd = [sys.executable, "-m", "boe", "batch", str(data), "--base-url", url, "--model", "boe-sim"]
    cmd += ["--judge-model", "boe-sim-judge", "--k", str(args.k), "--ledger", "full"]
    cmd += ["--concurrency", str(args.concurrency), "--db", f"sqlite:///{db}", "--run", "r", "--json", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(tree), "BOE_WORKER_LOCKS": str(db.parent / "locks")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=db.parent)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"boe batch ({tree}) exited {done.returncode}: {done.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    out["process_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def segmentation_cpu(db: Path, tree: Path) -> float:
    """CPU seconds of the run's segmentations (those it computed, not reused), computed again single-threaded."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
from batch_throughput import question_shape
from boe.tools.crop import Box
from boe.tools.images import open_image
from boe.tools.segment import make_segmenter
shape = question_shape({f"sqlite:///{db}"!r}, "r")
seg = make_segmenter("opencv")
images = {{}}
t0 = time.thread_time()
for path, box in shape["prompts"]:
    image = images.get(path) or images.setdefault(path, open_image(path))
    seg.segment(image, Box(*box))
print(time.thread_time() - t0)
"""
    # the tree's own segmenter (a segmenter made cheaper is credited to its tree, not to both)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    # cwd: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="main", help="the commit to compare with (git archive)")
    ap.add_argument("--questions", type=int, default=60)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--size", type=int, default=384, help="scan size in pixels")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from boe.sim.dataset import generate_dataset

    rows: dict[str, list[dict[str, float]]] = {"baseline": [], "this tree": []}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        trees = {"baseline": baseline_tree(args.baseline, tmp), "this tree": ROOT}
        data = generate_dataset(tmp / "data", args.questions, seed=args.seed, size=args.size)
        warmup = generate_dataset(tmp / "warmup", 8, seed=args.seed + 1, size=args.size)
        sim, url = start_simulator()
        try:
            # the simulator's first requests cost it more (and answer slower, which costs the client more event-loop
            # turns): an unrecorded warm-up batch first, and the trees take turns going first
            run_batch(ROOT, warmup, url, tmp / "warmup.db", args)
            for r in range(args.repeat):
                for name, tree in sorted(trees.items(), reverse=r % 2 == 1):
                    db = tmp / f"{name.replace(' ', '-')}-{r}.db"
                    s0 = proc_cpu(sim.pid)
                    out = run_batch(tree, data, url, db, args)
                    sim_cpu = proc_cpu(sim.pid) - s0
                    n = out["stored"]
                    seg = segmentation_cpu(db, tree)
                    rows[name].append(
                        {
                            "batch": out["cpu_ms_per_question"],
                            "segmentation": 1000.0 * seg / n,
                            "process": 1000.0 * out["process_cpu"] / n,
                            "sim": 1000.0 * sim_cpu / n,
                            "qpm": out["questions_per_minute"],
                            "own_split": out.get("segmentation_cpu_ms_per_question") or float("nan"),
                        }
                    )
                    print(f"  {name} round {r + 1}: {n} questions, {out['cpu_ms_per_question']} ms/q", file=sys.stderr)
        finally:
            sim.terminate()
            sim.wait(10)
    print(
        f"boe batch against the simulator: {args.questions} questions, K={args.k}, --ledger full, judge boe-sim-judge, "
        f"concurrency {args.concurrency}, {args.size}px scans, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
        f"medians of {args.repeat} round(s); baseline {args.baseline}"
    )
    header = ["tree", "batch ms/q", "segmentation ms/q", "framework ms/q", "in-run framework ms/q", "process ms/q"]
    header += ["sim ms/q", "q/min"]
    print(" | ".join(header))
    med: dict[str, dict[str, float]] = {}
    for name, rs in rows.items():
        m = med[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        fw = m["batch"] - m["segmentation"]
        print(
            f"{name} | {m['batch']:.0f} | {m['segmentation']:.0f} | {fw:.0f} | {m['batch'] - m['own_split']:.0f} | "
            f"{m['process']:.0f} | {m['sim']:.0f} | {m['qpm']:.1f}"
        )
    b, t = med["baseline"], med["this tree"]
    print(
        f"ratio this/baseline: batch {t['batch'] / b['batch']:.2f}, framework "
        f"{(t['batch'] - t['segmentation']) / (b['batch'] - b['segmentation']):.2f}, in-run framework "
        f"{(t['batch'] - t['own_split']) / (b['batch'] - b['own_split']):.2f} (the run's own segmentation CPU, threads "
        f"contending: {t['own_split']:.0f} and {b['own_split']:.0f} ms/q)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
