"""Fit the perception heads on generated scans (their sidecar facts are the training labels).

Run `python scripts/train_sim_perception.py --n 1500 --seed 7 --out boe/sim/data/perception.json`
to rebuild the shipped file. At answer time the heads see pixels only.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field

import cv2
import numpy as np

from boe.sim.linear import SoftmaxModel, fit_softmax
from boe.sim.perception import Heads
from boe.sim.scans import ScanFacts, lesion_mask, render, sample_facts
from boe.sim.vision import ViewFeatures, analyse_view
from boe.sim.vocab import LESIONS, MODALITIES, PLANES_BY_FAMILY, REGIONS

__all__ = ["TrainingData", "collect", "fit_heads", "train_perception"]

_K5 = np.ones((5, 5), np.uint8)


@dataclass
class TrainingData:
    """Feature rows and labels per head."""

    rows: dict[str, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    labels: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    sizes: dict[str, dict[str, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def add(self, head: str, row: np.ndarray, label: int) -> None:
        """Append one labelled row."""
        self.rows[head].append(row)
        self.labels[head].append(label)


def _label_blobs(data: TrainingData, f: ScanFacts, v: ViewFeatures, lm: np.ndarray, head: str) -> None:
    """Label each candidate as the finding, as anatomy, or skip it when ambiguous."""
    near = cv2.dilate(lm, _K5) > 0
    total = max(1, int(lm.sum()))
    for b in v.blobs:
        x0, y0, x1, y1 = b.box
        inside = float((b.mask & near[y0:y1, x0:x1]).sum()) / max(1, b.area)
        cover = float((b.mask & (lm[y0:y1, x0:x1] > 0)).sum()) / total
        if inside >= 0.6 and cover >= (0.04 if f.finding == "fracture" else 0.15):
            data.add(head, b.features, 1)
            data.add("finding", b.features, LESIONS.index(f.finding))
            assert f.lesion_size is not None
            data.sizes[f.finding][f.lesion_size].append(float(b.features[0]))
        elif inside < 0.1:
            data.add(head, b.features, 0)


def _crop(img: np.ndarray, lm: np.ndarray, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    x0, y0, x1, y1 = box
    return img[y0:y1, x0:x1], lm[y0:y1, x0:x1]


def _crop_boxes(rng: np.random.Generator, f: ScanFacts, s: int) -> list[tuple[int, int, int, int]]:
    """Views an agent might cut: tight and loose boxes around the finding, halves, random squares."""
    boxes = []
    if f.lesion_box is not None:
        x0, y0, x1, y1 = f.lesion_box
        cx, cy = (x0 + x1) / 2 + rng.normal(0, 4), (y0 + y1) / 2 + rng.normal(0, 4)
        for lo, hi in ((0.6, 1.2), (1.2, 2.4)):
            half = max(x1 - x0, y1 - y0) * rng.uniform(lo, hi) + rng.uniform(6, 30)
            boxes.append(
                (int(max(0, cx - half)), int(max(0, cy - half)), int(min(s, cx + half)), int(min(s, cy + half)))
            )
    half = s // 2
    boxes.append(((0, 0, half, s), (half, 0, s, s), (0, 0, s, half), (0, half, s, s))[int(rng.integers(4))])
    side = int(s * rng.uniform(0.2, 0.6))
    x0, y0 = int(rng.integers(0, s - side)), int(rng.integers(0, s - side))
    boxes.append((x0, y0, x0 + side, y0 + side))
    return boxes


def collect(n: int, seed: int, sizes: tuple[int, ...] = (384, 448, 512)) -> TrainingData:
    """Render `n` scans and measure whole views, crops around findings and random crops."""
    rng = np.random.default_rng(seed)
    data = TrainingData()
    for _ in range(n):
        s = int(rng.choice(sizes))
        f = sample_facts(rng, s)
        img = render(f)
        lm = lesion_mask(f)
        v = analyse_view(img)
        data.add("modality", v.modality, MODALITIES.index(f.modality))
        data.add("region", v.region, REGIONS.index(f.region))
        data.add(f"plane/{f.modality}", v.plane, PLANES_BY_FAMILY[f.modality].index(f.plane))
        _label_blobs(data, f, v, lm, "lesion/whole")
        for box in _crop_boxes(rng, f, s):
            crop, clm = _crop(img, lm, box)
            cv = analyse_view(crop, ref=s, crop=True)
            data.add("modality", cv.modality, MODALITIES.index(f.modality))
            if f.finding != "normal":
                _label_blobs(data, f, cv, clm, "lesion/crop")
            else:
                for b in cv.blobs:
                    data.add("lesion/crop", b.features, 0)
    return data


def fit_heads(data: TrainingData) -> Heads:
    """Fit every head on the collected rows."""

    def fit(head: str, classes: tuple[str, ...], expansion: str = "linear") -> SoftmaxModel:
        x = np.stack(data.rows[head])
        y = np.asarray(data.labels[head])
        return fit_softmax(
            x, y, classes, l2=1e-3, iters=3000 if expansion == "quadratic" else 1500, expansion=expansion
        )

    split, scale = {}, {}
    for f in LESIONS:
        small, large = data.sizes[f]["small"], data.sizes[f]["large"]
        if not small or not large:  # too little data: a neutral split at a typical lesion size
            split[f], scale[f] = -3.3, 0.2
            continue
        ms, ml = float(np.median(small)), float(np.median(large))
        split[f] = (ms + ml) / 2
        scale[f] = max(0.05, float(np.std(small + large)) / 2)
    return Heads(
        fit("modality", MODALITIES),
        fit("region", REGIONS),
        {m: fit(f"plane/{m}", PLANES_BY_FAMILY[m]) for m in MODALITIES},
        {kind: fit(f"lesion/{kind}", ("anatomy", "lesion"), "quadratic") for kind in ("whole", "crop")},
        fit("finding", LESIONS, "quadratic"),
        split,
        scale,
    )


def train_perception(n: int = 1500, seed: int = 7) -> Heads:
    """Collect and fit in one go."""
    return fit_heads(collect(n, seed))


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: rebuild the heads file."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    heads = train_perception(args.n, args.seed)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(heads.to_dict(), fh, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main()
