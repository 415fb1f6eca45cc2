"""Report benchmark: a 2,000-question stored run with a distinct image per question; report size and open time.

    python benchmarks/report_size.py                # 2,000 questions
    python benchmarks/report_size.py --n 500 --keep /tmp/rep

The run is a pool ledger (``boe.sim.ledgers.pool_ledger``) given what an agent
run holds: a distinct synthetic scan per question (a simulator scan, shifted,
flipped and with noise so that it compresses no better than real radiographs:
about 4 KB per WebP thumbnail against 3.8 KB for the VQA-RAD images), crop
boxes on the grounded checks, rationales and model calls with tokens and
latency. It is imported into a SQLite store (as ``boe import`` does) and
reported with the defaults of ``boe report``; the HTML is opened in headless
Chromium three times for the main page and three times for a question page.
Targets (issue #9): under 20 MB and under 3 s to open.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Pixel noise of the variants (grey levels): their thumbnails weigh about as much as real radiographs'.
NOISE = 12.0
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
    for a in rec["actions"]:
        kind = a["kind"]
        if kind == "grounded_factor":
            x0, y0 = (int(v) for v in rng.integers(0, size // 2, 2))
            w, h = (int(v) for v in rng.integers(size // 4, size // 2, 2))
            a["view"] = {"kind": "crop", "figure": "0", "box": [x0, y0, min(size, x0 + w), min(size, y0 + h)]}
        elif kind == "structured":
            a["view"] = {"kind": "record", "source": "dicom"}
        else:
            a["view"] = {"kind": "whole", "figure": "0"}
        a["rationale"] = _WHY[a["outcome"]][int(rng.integers(0, 2))].format(m=rng.choice(["CT", "MRI", "X-ray"]))
        if kind != "structured":
            cid = f"{rec['question_id']}-{a['id']}"
            a["calls"] = [cid]
            calls.append(
                {
                    "call_id": cid,
                    "purpose": kind,
                    "model": "bench",
                    "prompt_tokens": int(rng.integers(260, 380)),
                    "completion_tokens": int(rng.integers(14, 24)),
                    "latency_ms": float(rng.uniform(10, 90)),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="Write everything here (default: a temporary folder).")
    args = ap.parse_args()

    from boe.report import make_report
    from boe.report.browser import find_chromium, open_page

    with tempfile.TemporaryDirectory(prefix="boe-report-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        url, run = build_store(args.n, folder)
        t_data = time.perf_counter() - t0
        t0 = time.perf_counter()
        files = make_report(folder / "report.html", db=url, run=run, png_dir=folder / "figures", image_root=folder)
        t_report = time.perf_counter() - t0
        report = files.report
        images = [e for e in report.images.values() if e.src]
        print(f"questions            {len(report.questions):,}")
        print(f"data (scans, import) {t_data:.1f} s")
        print(f"boe report           {t_report:.1f} s")
        print(f"report size          {files.size / 2**20:.2f} MB ({files.size:,} bytes)")
        print(
            f"  images             {len(images):,} distinct, {sum(len(e.src or '') for e in images) / 2**20:.2f} MB "
            f"as data URLs ({sum(len(e.src or '') for e in images) / max(len(images), 1) / 1024:.1f} KB each)"
        )
        payload = json.dumps(report.payload(), separators=(",", ":"), ensure_ascii=False)
        print(f"  question data      {len(payload.encode()) / 2**20:.2f} MB")
        print(f"PNG figures          {', '.join(p.name for p in files.pngs)}")
        if find_chromium() is None:
            print("open time            (no chromium: apt-get install chromium)")
            return
        first = report.table[min(7, len(report.table) - 1)].anchor
        for label, fragment in (("main page", None), ("question page", first)):
            times = [open_page(files.html, fragment).open_ms for _ in range(args.repeat)]
            print(
                f"open {label:<15} median {statistics.median(times):.0f} ms "
                f"(runs: {', '.join(f'{t:.0f}' for t in times)})"
            )


if __name__ == "__main__":
    main()
