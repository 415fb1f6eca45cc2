"""Beliefs from pixels: the trained perception heads applied to the features of one view."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from boe.sim.linear import SoftmaxModel
from boe.sim.vision import analyse_view
from boe.sim.vocab import LESIONS, MODALITIES

__all__ = ["Belief", "BlobBelief", "Heads", "load_heads", "perceive"]

HEADS_FILE = Path(__file__).parent / "data" / "perception.json"
HEADS_VERSION = 2


@dataclass(frozen=True)
class Heads:
    """The trained classifiers: modality, region, plane per modality, lesion-vs-anatomy, finding, size."""

    modality: SoftmaxModel
    region: SoftmaxModel
    plane: dict[str, SoftmaxModel]
    lesion: dict[str, SoftmaxModel]  # "whole" | "crop" -> lesion-vs-anatomy head
    finding: SoftmaxModel
    size_split: dict[str, float]  # finding -> log relative radius between small and large
    size_scale: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return {
            "version": HEADS_VERSION,
            "modality": self.modality.to_dict(),
            "region": self.region.to_dict(),
            "plane": {k: m.to_dict() for k, m in self.plane.items()},
            "lesion": {k: m.to_dict() for k, m in self.lesion.items()},
            "finding": self.finding.to_dict(),
            "size_split": self.size_split,
            "size_scale": self.size_scale,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Heads:
        """Rebuild from `to_dict` output; refuses an unknown version."""
        if d.get("version") != HEADS_VERSION:
            raise ValueError(f"perception heads version {d.get('version')!r} is not {HEADS_VERSION}")
        return cls(
            SoftmaxModel.from_dict(d["modality"]),
            SoftmaxModel.from_dict(d["region"]),
            {k: SoftmaxModel.from_dict(m) for k, m in d["plane"].items()},
            {k: SoftmaxModel.from_dict(m) for k, m in d["lesion"].items()},
            SoftmaxModel.from_dict(d["finding"]),
            {k: float(v) for k, v in d["size_split"].items()},
            {k: float(v) for k, v in d["size_scale"].items()},
        )


@cache
def load_heads(path: str | None = None) -> Heads:
    """The shipped perception heads (or those in `path`)."""
    with open(path or HEADS_FILE, encoding="utf-8") as fh:
        return Heads.from_dict(json.load(fh))


@dataclass(frozen=True)
class BlobBelief:
    """What the simulator believes about one anomaly candidate."""

    box: tuple[int, int, int, int]
    centroid: tuple[float, float]
    lesion_logit: float  # log-odds that the blob is a finding (not anatomy)
    finding_logp: np.ndarray  # over LESIONS
    size_logit: float  # log-odds that the finding is large
    rel_area: float  # blob area / view area
    side: str
    vertical: str
    side_margin: float  # |offset from the body's midline| / body half-width, 0..1
    vertical_margin: float


@dataclass(frozen=True)
class Belief:
    """Log-probabilities per slot for one view, and its anomaly candidates."""

    width: int
    height: int
    modality_logp: np.ndarray  # over MODALITIES
    region_logp: np.ndarray  # over REGIONS
    plane_logp: dict[str, np.ndarray]  # modality -> over PLANES_BY_FAMILY[modality]
    blobs: tuple[BlobBelief, ...]
    outline_visible: float
    body_box: tuple[int, int, int, int]
    crop: bool = False


def perceive(gray: np.ndarray, *, crop: bool = False, ref: float | None = None, heads: Heads | None = None) -> Belief:
    """Look at one grayscale view (a whole figure, or a `crop` of one) and form beliefs.

    It sees pixels only, never sidecar facts. `ref` is the whole figure's pixel size.
    """
    heads = heads or load_heads()
    v = analyse_view(gray, ref=ref, crop=crop)
    modality = heads.modality.logits(v.modality)[0]
    region = heads.region.logits(v.region)[0]
    plane = {m: heads.plane[m].logits(v.plane)[0] for m in MODALITIES}
    bx0, by0, bx1, by1 = v.body_box
    mid_x, mid_y = (bx0 + bx1) / 2, (by0 + by1) / 2
    half_w, half_h = max(1.0, (bx1 - bx0) / 2), max(1.0, (by1 - by0) / 2)
    blobs = []
    if v.blobs:
        feats = np.stack([b.features for b in v.blobs])
        lesion = heads.lesion["crop" if crop else "whole"].logits(feats)
        finding = heads.finding.logits(feats)
        for b, les, fnd in zip(v.blobs, lesion, finding, strict=True):
            p = np.exp(fnd)
            logr = float(b.features[0])
            size = sum(p[i] * (logr - heads.size_split[f]) / heads.size_scale[f] for i, f in enumerate(LESIONS))
            dx, dy = b.centroid[0] - mid_x, b.centroid[1] - mid_y
            blobs.append(
                BlobBelief(
                    b.box,
                    b.centroid,
                    float(les[1] - les[0]),
                    fnd,
                    float(size),
                    b.area / (v.width * v.height),
                    "left" if dx < 0 else "right",
                    "upper" if dy < 0 else "lower",
                    min(1.0, abs(dx) / half_w),
                    min(1.0, abs(dy) / half_h),
                )
            )
    return Belief(v.width, v.height, modality, region, plane, tuple(blobs), v.outline_visible, v.body_box, crop)
