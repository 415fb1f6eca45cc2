"""Batch throughput against the simulator with injected latency: questions/min at several concurrencies.

    python benchmarks/batch_throughput.py                          # K=16, 200 ms, concurrency 1, 8, 32, 64
    python benchmarks/batch_throughput.py --kinds vlm_factor,whole_response   # no grounded checks (no segmenter)
    python benchmarks/batch_throughput.py --concurrency 8,32 --questions 16,48 --size 384

For each concurrency C a fresh store and run answer the first N questions of
one simulator dataset with ``--ledger full`` (every check of every menu), in
this process, through `boe.batch.BatchRunner`. The simulator (``boe sim
serve --latency-ms``) runs in a process of its own, so its CPU is measured
apart from the framework's (from /proc).

**Ideal.** A question makes ``n`` model calls (measured: paid calls per
question) in ``r`` sequential rounds (generation, then the whole menu at
once; a claim-extraction round when replies lack slots). With at most C
calls in flight and latency L, the latency-bound rate is
``min(C / (n L), A / (r L))`` questions per second, A the questions in
progress at once (C + 2): the calls bound, since n >> r. The ratio column is
measured / ideal. ``request ms`` is the mean time a request held its
slot (sent to reply read): what it adds to the injected latency is time
queued in this process's event loop and in the simulator, and it is what
keeps the ratio under 1 when the slots are full.

**CPU.** ``framework ms/q`` is the CPU time (user + system, every thread of
this process and the figure pool) spent while the batch ran, per stored
question: waiting is not CPU time, and start-up is excluded. Of it: the
OpenCV segmentations of grounded views (measured again, single-threaded, on
the prompts the run stored), the store (writes on the writer thread, cache
reads) and grading. ``sim ms/q`` is the simulator's CPU. On a machine with
few cores the two compete with each other (and with everything else
running: the load average is printed), so ``CPU ceiling`` is the rate the
measured CPU allows: ``60 / max(fw, sim, (fw + sim) / cores)`` per minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def start_simulator(latency_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "boe", "sim", "serve", "--port", str(port), "--latency-ms", str(latency_ms)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url + "/v1"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the simulator did not start")


def sim_requests(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/sim/stats", timeout=5) as r:
        return int(json.load(r)["requests"])


def run_level(data: Path, base_url: str, c: int, n: int, args: argparse.Namespace, tmp: Path) -> Any:
    from boe.agent import make_config
    from boe.batch import BatchConfig, BatchRunner

    agent = make_config(
        base_url=base_url,
        model="boe-sim",
        k=args.k,
        ledger="full",
        concurrency=c,
        kinds=tuple(args.kinds),
    )
    cfg = BatchConfig(
        dataset=str(data),
        agent=agent,
        db=f"sqlite:///{tmp / f'c{c}.db'}",
        run=f"c{c}",
        limit=n,
        cpu_workers=args.cpu_workers,
    )
    return asyncio.run(BatchRunner(cfg).run())


def question_shape(db: str, run: str) -> dict[str, float]:
    """Per question: sequential call rounds, segmentations computed (not reused) and their distinct prompts."""
    from boe.db import Store

    rounds = segs = distinct = n = 0
    prompts: list[tuple[Any, list[int]]] = []
    with Store(db) as store:
        for rec in store.iter_record_dicts(run):
            n += 1
            purposes = {c.get("purpose") for c in rec.get("model_calls") or []}
            judged = purposes & {"factor_judge", "grounded_factor_judge", "whole_judge"}
            rounds += 1 + ("claim_extraction" in purposes) + bool(judged)
            seen = set()
            for a in rec["actions"]:
                s = ((a.get("view") or {}).get("segmentation")) or {}
                if s.get("prompt_box") and not s.get("reused"):  # a view shared by claims of one region: cut once
                    segs += 1
                    key = ((a.get("view") or {}).get("image_id"), tuple(s["prompt_box"]))
                    if key not in seen:
                        seen.add(key)
                        prompts.append((rec.get("image_ref", {}).get("path"), s["prompt_box"]))
            distinct += len(seen)
    return {"rounds": rounds / n, "segmentations": segs / n, "distinct_prompts": distinct / n, "prompts": prompts}  # type: ignore[dict-item]


def segmentation_cpu(prompts: list[tuple[str, list[int]]], sample: int = 40) -> float:
    """CPU seconds of one OpenCV segmentation, measured single-threaded on stored prompts."""
    from boe.tools.crop import Box
    from boe.tools.images import open_image
    from boe.tools.segment import make_segmenter

    seg = make_segmenter("opencv")
    picked = prompts[:: max(1, len(prompts) // sample)][:sample]
    if not picked:
        return 0.0
    images = {p: open_image(p) for p, _ in picked}
    t0 = time.process_time()
    for path, box in picked:
        seg.segment(images[path], Box(*box))
    return (time.process_time() - t0) / len(picked)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--size", type=int, default=128, help="scan size in pixels (the simulator's CPU grows with it)")
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--questions", default="3,16,48,64", help="questions per concurrency level")
    ap.add_argument("--kinds", default="structured,vlm_factor,grounded_factor,whole_response")
    ap.add_argument("--cpu-workers", type=int, default=0)
    ap.add_argument("--seed", type=int, default=404)
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    sizes = [int(x) for x in args.questions.split(",")]
    if len(sizes) != len(levels):
        ap.error("--questions needs one count per --concurrency level")
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    cores = os.cpu_count() or 1

    from boe.sim.dataset import generate_dataset

    lat = args.latency_ms / 1000.0
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        data = generate_dataset(tmp / "data", max(sizes), seed=args.seed, size=args.size)
        sim, url = start_simulator(args.latency_ms)
        try:
            shape: dict[str, Any] = {}
            for c, n in zip(levels, sizes, strict=True):
                load = os.getloadavg()[0]
                s0, r0 = proc_cpu(sim.pid), sim_requests(url)
                s = run_level(data, url, c, n, args, tmp)
                sim_cpu, served = proc_cpu(sim.pid) - s0, sim_requests(url) - r0
                shape = question_shape(f"sqlite:///{tmp / f'c{c}.db'}", f"c{c}")
                calls = s.calls_paid / s.stored
                ideal = min(c / (calls * lat), (c + 2) / (shape["rounds"] * lat)) * 60.0
                fw = s.cpu_ms_per_question
                sim_ms = 1000.0 * sim_cpu / s.stored
                ceiling = 60_000.0 / max(fw, sim_ms, (fw + sim_ms) / cores)
                assert served == s.requests, (served, s.requests)
                rows.append(
                    {
                        "c": c,
                        "n": s.stored,
                        "qpm": s.per_minute,
                        "ideal": ideal,
                        "calls": calls,
                        "rounds": shape["rounds"],
                        "fw": fw,
                        "sim": sim_ms,
                        "ceiling": ceiling,
                        "store": 1000.0 * (s.cpu_breakdown["store_writes"] + s.cpu_breakdown["cache_reads"]) / s.stored,
                        "grading": 1000.0 * s.cpu_breakdown["grading_and_rows"] / s.stored,
                        "load": load,
                        "peak": s.peak_in_flight,
                        "seconds": s.seconds,
                        "call_ms": s.request_ms,
                    }
                )
                print(f"  concurrency {c}: {s.stored} questions in {s.seconds:.1f} s", file=sys.stderr)
        finally:
            sim.terminate()
            sim.wait(10)
        seg_cpu = segmentation_cpu(shape.get("prompts") or []) if "grounded_factor" in args.kinds else 0.0

    seg_ms = 1000.0 * seg_cpu * shape.get("segmentations", 0.0)
    print(
        f"boe batch --ledger full against the simulator: K={args.k}, {args.size}px scans, "
        f"{args.latency_ms:g} ms injected latency, kinds {','.join(args.kinds)}, {cores} cores"
    )
    print(
        table(
            [
                [
                    str(r["c"]),
                    str(r["n"]),
                    f"{r['qpm']:.1f}",
                    f"{r['ideal']:.1f}",
                    f"{r['qpm'] / r['ideal']:.2f}",
                    f"{r['ceiling']:.1f}",
                    f"{r['qpm'] / min(r['ideal'], r['ceiling']):.2f}",
                    f"{r['fw']:.0f}",
                    f"{r['sim']:.0f}",
                    f"{r['calls']:.1f}",
                    f"{r['call_ms']:.0f}",
                    str(r["peak"]),
                    f"{r['load']:.1f}",
                ]
                for r in rows
            ],
            [
                "concurrency",
                "questions",
                "q/min",
                "ideal",
                "ratio",
                "CPU ceiling",
                "ratio to min",
                "framework ms/q",
                "sim ms/q",
                "calls/q",
                "request ms",
                "peak in flight",
                "load avg",
            ],
        )
    )
    fw = sum(r["fw"] * r["n"] for r in rows) / sum(r["n"] for r in rows)
    store = sum(r["store"] * r["n"] for r in rows) / sum(r["n"] for r in rows)
    grading = sum(r["grading"] * r["n"] for r in rows) / sum(r["n"] for r in rows)
    print(
        f"framework CPU per question (all levels): {fw:.0f} ms, of which OpenCV segmentation ~{seg_ms:.0f} ms "
        f"({shape.get('segmentations', 0):.1f} segmentations a question at {1000 * seg_cpu:.1f} ms, "
        f"{shape.get('distinct_prompts', 0):.1f} distinct prompts), store {store:.1f} ms, grading and rows "
        f"{grading:.1f} ms; the rest is the agent (LangGraph, planner, views) and the HTTP client "
        f"({fw - seg_ms - store - grading:.0f} ms, {rows[-1]['calls']:.1f} calls)"
    )
    print(f"rounds per question {rows[-1]['rounds']:.2f}; ideal = min(C / (calls x L), (C + 2) / (rounds x L))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
