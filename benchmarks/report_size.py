"""Report benchmark: a 2,000-question stored run with a distinct image per question; report size and open time.

    python benchmarks/report_size.py                   # 2,000 questions
    python benchmarks/report_size.py --baseline main   # and main's report of the same store, in the same run
    python benchmarks/report_size.py --n 500 --keep /tmp/rep

The run is a pool ledger (``boe.sim.ledgers.pool_ledger``) given what an agent
run holds: a distinct synthetic scan per question (a simulator scan, shifted,
flipped and with noise so that it compresses no better than real radiographs:
about 4 KB per WebP thumbnail against 3.8 KB for the VQA-RAD images), crop
boxes on the grounded checks, rationales and model calls with tokens and
latency. It is imported into a SQLite store (as ``boe import`` does) and
reported with the defaults of ``boe report``; the HTML is opened in headless
Chromium three times for the main page and three times for a question page.
With ``--baseline REV`` the same store is also reported by commit REV's tree
(``git archive``, in a subprocess) and both reports are opened in turn, so
that the machine's load weighs on both alike; the ratios are this tree's over
the baseline's. Targets (issue #9): under 20 MB and under 3 s to open.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: Pixel noise of the variants (grey levels): their thumbnails weigh about as much as real radiographs'.
NOISE = 12.0
_MODALITIES = ("CT", "MRI", "X-ray")
_WHY = {
    "confirm": ("I see a {m} view consistent with the claim.", "the region matches the claim"),
    "reject": ("I see a {m} view that does not show this.", "the crop shows another structure"),
    "unresolved": ("the view is not conclusive", "cannot tell from this crop"),
}


def scan_images(n: int, folder: Path, seed: int = 0, size: int = 384, bases: int = 40) -> list[Path]:
    """``n`` distinct grey scans (JPEG): simulator renders, each shifted, maybe flipped, rescaled and noised."""
    import cv2

    from boe.sim.scans import render, sample_facts

    rng = np.random.default_rng(seed)
    base = [render(sample_facts(rng, size)).astype(np.float32) for _ in range(min(n, bases))]
    noise = [rng.standard_normal(base[0].shape, dtype=np.float32) * np.float32(NOISE) for _ in range(4)]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        img = np.roll(base[i % len(base)], tuple(rng.integers(-24, 25, 2)), axis=(0, 1))
        if rng.random() < 0.5:
            img = img[:, ::-1]
        img = img * np.float32(rng.uniform(0.85, 1.15)) + np.roll(noise[i % 4], int(rng.integers(0, size)), axis=0)
        path = folder / f"scan-{i:05d}.jpg"
        cv2.imwrite(str(path), np.clip(img, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 95])
        paths.append(path)
    return paths


def agent_like(rec: dict[str, Any], image: Path, rng: np.random.Generator, size: int = 384) -> dict[str, Any]:
    """The record with what an agent run stores: image path, views, rationales, model calls."""
    rec["task"]["image"] = str(image)
    calls = [
        {
            "call_id": f"{rec['question_id']}-gen",
            "purpose": "generation",
            "model": "bench",
            "prompt_tokens": int(rng.integers(380, 460)),
            "completion_tokens": int(rng.integers(240, 300)),
            "latency_ms": float(rng.uniform(80, 400)),
            "tags": {"question_id": rec["question_id"]},
        }
    ]
    # every draw of the record at once (a generator call per action and field took most of the build)
    n = len(rec["actions"])
    corner = rng.integers(0, size // 2, (n, 2)).tolist()
    extent = rng.integers(size // 4, size // 2, (n, 2)).tolist()
    why = rng.integers(0, 2, n).tolist()
    modality = rng.integers(0, len(_MODALITIES), n).tolist()
    prompt = rng.integers(260, 380, n).tolist()
    completion = rng.integers(14, 24, n).tolist()
    latency = rng.uniform(10, 90, n).tolist()
    for j, a in enumerate(rec["actions"]):
        kind = a["kind"]
        if kind == "grounded_factor":
            (x0, y0), (w, h) = corner[j], extent[j]
            a["view"] = {"kind": "crop", "figure": "0", "box": [x0, y0, min(size, x0 + w), min(size, y0 + h)]}
        elif kind == "structured":
            a["view"] = {"kind": "record", "source": "dicom"}
        else:
            a["view"] = {"kind": "whole", "figure": "0"}
        a["rationale"] = _WHY[a["outcome"]][why[j]].format(m=_MODALITIES[modality[j]])
        if kind != "structured":
            cid = f"{rec['question_id']}-{a['id']}"
            a["calls"] = [cid]
            calls.append(
                {
                    "call_id": cid,
                    "purpose": kind,
                    "model": "bench",
                    "prompt_tokens": prompt[j],
                    "completion_tokens": completion[j],
                    "latency_ms": latency[j],
                    "tags": {"action": a["id"]},
                }
            )
    rec["model_calls"] = calls
    return rec


def build_store(n: int, folder: Path, seed: int = 1) -> tuple[str, str]:
    """A SQLite store holding one ``n``-question run with a distinct image per question; returns (URL, run)."""
    from boe.db import Store, import_ledger
    from boe.sim.ledgers import pool_ledger

    images = scan_images(n, folder / "images", seed=seed)
    rng = np.random.default_rng(seed)
    ledger = folder / "run.jsonl"

    def records() -> Iterator[dict[str, Any]]:
        for rec, img in zip(pool_ledger(n, seed=seed), images, strict=True):
            yield agent_like(rec, img, rng)

    with ledger.open("w", encoding="utf-8") as fh:
        for rec in records():
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    url = f"sqlite:///{folder / 'run.db'}"
    with Store(url) as store:
        import_ledger(store, [ledger], "scale")
    return url, "scale"


def report(url: str, run: str, folder: Path) -> dict[str, Any]:
    """``boe report``'s defaults on the store, by the importable tree, into ``folder``: its files and timings."""
    from boe.report import make_report

    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    files = make_report(folder / "report.html", db=url, run=run, png_dir=folder / "figures", image_root=folder.parent)
    seconds = time.perf_counter() - t0
    rep = files.report
    images = [e for e in rep.images.values() if e.src]
    payload = json.dumps(rep.payload(), separators=(",", ":"), ensure_ascii=False)
    return {
        "html": str(files.html),
        "seconds": seconds,
        "size": files.size,
        "questions": len(rep.questions),
        "images": len(images),
        "image_bytes": sum(len(e.src or "") for e in images),
        "payload_bytes": len(payload.encode()),
        "pngs": [p.name for p in files.pngs],
        "anchor": rep.table[min(7, len(rep.table) - 1)].anchor,
    }


def baseline_report(ref: str, url: str, run: str, folder: Path) -> dict[str, Any]:
    """`report` run by commit ``ref``'s tree in a subprocess (its package first on ``PYTHONPATH``)."""
    from baseline import baseline_tree

    tree = baseline_tree(ref, folder)
    code = f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from report_size import report; "
    code += f"print(json.dumps(report({url!r}, {run!r}, __import__('pathlib').Path({str(folder / 'base')!r}))))"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # cwd: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree, check=True)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="also report the same store with this commit's tree (git archive)")
    ap.add_argument("--keep", type=Path, default=None, help="Write everything here (default: a temporary folder).")
    args = ap.parse_args()
    for path in (ROOT, ROOT / "benchmarks"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))

    from boe.report.browser import find_chromium, open_page

    with tempfile.TemporaryDirectory(prefix="boe-report-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        url, run = build_store(args.n, folder)
        t_data = time.perf_counter() - t0
        reports = {"this tree": report(url, run, folder / "this")}
        if args.baseline:
            reports["baseline"] = baseline_report(args.baseline, url, run, folder)
        print(f"questions            {args.n:,}; load average {os.getloadavg()[0]:.1f}")
        print(f"data (scans, import) {t_data:.1f} s")
        for name, r in reports.items():
            print(f"{name} ({args.baseline or 'HEAD'})" if name == "baseline" else name)
            print(f"  boe report         {r['seconds']:.1f} s")
            print(f"  report size        {r['size'] / 2**20:.2f} MB ({r['size']:,} bytes)")
            print(
                f"    images           {r['images']:,} distinct, {r['image_bytes'] / 2**20:.2f} MB as data URLs "
                f"({r['image_bytes'] / max(r['images'], 1) / 1024:.1f} KB each)"
            )
            print(f"    question data    {r['payload_bytes'] / 2**20:.2f} MB")
            print(f"  PNG figures        {', '.join(r['pngs'])}")
        if find_chromium() is None:
            print("open time            (no chromium: apt-get install chromium)")
            return
        for label, fragment in (("main page", False), ("question page", True)):
            times: dict[str, list[float]] = {name: [] for name in reports}
            for _ in range(args.repeat):  # the trees in turn, so that a change in the machine's load hits both
                for name, r in reports.items():
                    times[name].append(open_page(r["html"], r["anchor"] if fragment else None).open_ms)
            medians = {name: statistics.median(t) for name, t in times.items()}
            for name, t in times.items():
                print(
                    f"open {label:<15} {name:<9} median {medians[name]:.0f} ms "
                    f"(runs: {', '.join(f'{v:.0f}' for v in t)})"
                )
            if "baseline" in medians:
                print(f"open {label:<15} this tree / baseline {medians['this tree'] / medians['baseline']:.2f}x")


if __name__ == "__main__":
    main()
