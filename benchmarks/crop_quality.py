"""Grounded views on simulator scans: how many hold the lesion, and the segmenter's CPU per call.

    python benchmarks/crop_quality.py                     # 400 scans (those with a finding), this tree's segmenter
    python benchmarks/crop_quality.py --baseline main     # and the baseline commit's, in the same run
    python benchmarks/crop_quality.py --args iterations=2 # this tree's segmenter with other arguments

For each scan with a finding the region is what a grounded check on the lesion's true place asks for (its side and
upper/lower words inside the imaged body, as `GroundedFactorJudge.view_box` computes it); the segmenter is prompted
with it and the crop view is cut as the judge cuts it. ``holds`` is the share of views whose box contains the
lesion's centre, ``whole`` the share containing every lesion pixel, ``area`` the view's area over the region's
(how much the segmentation zooms in); ``ms/call`` is single-threaded CPU per segmentation (``thread_time``).
A baseline runs in a subprocess on its own tree (``git archive``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from baseline import baseline_tree

ROOT = Path(__file__).resolve().parents[1]


def measure(data: str, seg_args: dict[str, Any]) -> dict[str, float]:
    """Views holding the lesion and CPU per segmentation, for the importable tree's OpenCV segmenter."""
    import numpy as np

    from boe.sim.scans import ScanFacts, lesion_mask
    from boe.tools.crop import content_box, location_box
    from boe.tools.images import open_image
    from boe.tools.segment import WHOLE_SHARE, make_segmenter, make_view

    seg = make_segmenter("opencv", **seg_args)
    held = whole = n = 0
    cpu = share = 0.0
    for line in (Path(data) / "facts.jsonl").read_text().splitlines():
        row = json.loads(line)
        f = ScanFacts.from_dict({k: v for k, v in row.items() if k != "image_id"})
        if f.finding == "normal" or f.lesion_center is None:
            continue
        image = open_image(str(Path(data) / "images" / f"{row['image_id']}.png"))
        h, w = image.pixels.shape[:2]
        words = [x for x in (f.side, f.vertical) if x]
        region = location_box(words, w, h, within=content_box(image.pixels))
        t0 = time.thread_time()
        s = seg.segment(image, region)
        cpu += time.thread_time() - t0
        box = make_view("crop", image.pixels, s, max_pixels=image.max_pixels, whole_share=WHOLE_SHARE).box
        m = lesion_mask(f) > 0
        cx, cy = f.lesion_center
        held += box.x0 <= cx < box.x1 and box.y0 <= cy < box.y1
        inside = np.zeros_like(m)
        inside[box.y0 : box.y1, box.x0 : box.x1] = True
        whole += bool(m.any()) and not (m & ~inside).any()
        share += box.width * box.height / (region.width * region.height)
        n += 1
    return {"views": n, "holds": held / n, "whole": whole / n, "area": share / n, "ms_per_call": 1000.0 * cpu / n}


def run_tree(tree: Path, data: Path, seg_args: dict[str, Any]) -> dict[str, float]:
    code = f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from crop_quality import measure; "
    code += f"print(json.dumps(measure({str(data)!r}, {seg_args!r})))"
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    # cwd: ``python -c`` puts the working directory first on sys.path, ahead of PYTHONPATH
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree, check=True)
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", help="also measure this commit's segmenter (git archive)")
    ap.add_argument("--scans", type=int, default=400, help="scans generated (those with a finding are measured)")
    ap.add_argument("--size", type=int, default=384)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--args", default="", help="segmenter arguments for this tree, k=v,k=v (integers)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from boe.sim.dataset import generate_dataset

    seg_args = {k: int(v) for k, v in (kv.split("=") for kv in args.args.split(",") if kv)}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        data = generate_dataset(tmp / "data", args.scans, seed=args.seed, size=args.size)
        trees = {"this tree": ROOT}
        if args.baseline:
            trees = {"baseline": baseline_tree(args.baseline, tmp), **trees}
        rows = {name: run_tree(tree, data, seg_args if tree == ROOT else {}) for name, tree in trees.items()}
    print(
        f"grounded crop views on {args.scans} simulator scans ({args.size} px, seed {args.seed}), "
        f"load {os.getloadavg()[0]:.1f}; this tree's segmenter args {seg_args or 'default'}"
    )
    print("tree | views | holds the lesion's centre | holds all of it | view area / region area | segmentation ms/call")
    for name, r in rows.items():
        print(
            f"{name} | {r['views']:.0f} | {r['holds']:.1%} | {r['whole']:.1%} | {r['area']:.2f} | "
            f"{r['ms_per_call']:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
