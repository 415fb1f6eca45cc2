"""Sampled impressions: what one draw of the simulated VLM "sees" in a view.

A `Belief` (from pixels) becomes a `Percept` by sampling each slot at the
request temperature. Noise grows with temperature and with how small the
relevant structure is in the view, so a crop around a finding is judged more
reliably than the whole image. Each image also carries a fixed, image-seeded
bias (the model's consistent misreading of that image), so some errors repeat
across all K samples. The finding is drawn first as a *which-blob* hypothesis,
and side, vertical position, size and presence all follow from the chosen blob:
a sample that misperceives the finding gets the related slots wrong with it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from boe.sim.perception import Belief, BlobBelief
from boe.sim.vocab import LESIONS, MODALITIES, PLANES_BY_FAMILY, REGIONS

__all__ = ["NoiseConfig", "Percept", "image_bias", "sample_percept"]


@dataclass(frozen=True)
class NoiseConfig:
    """How sharp the simulated model's perception is (calibrated by benchmarks/sim_difficulty.py)."""

    modality: float = 0.25  # multiplies the modality head's log-probabilities
    region: float = 0.25
    plane: float = 0.25
    lesion: float = 2.0  # multiplies each blob's lesion log-odds
    finding: float = 2.5  # multiplies the finding head's log-probabilities (at full visibility)
    size: float = 2.0
    side: float = 6.0  # log-odds of the perceived side per unit of offset from the midline
    visible_area: float = 0.05  # blob area / view area at which a blob is fully visible
    notice_power: float = 1.5  # how much a small blob is overlooked: log-odds += power * log(visibility)
    none_logit: float = -0.5  # the weight of "no finding" against the blobs' log-odds
    crop_attention: float = 2.5  # log-odds added to blobs in a zoomed view (a crop draws the eye)
    bias: float = 1.2  # std of the fixed per-image logit bias
    confusion_rate: float = 0.12  # chance per image and slot of a confident, fixed misreading
    confusion_strength: float = 8.0  # logits added to the misread value
    temperature_floor: float = 0.15  # added to any temperature above 0
    unresolved_outline: float = 0.5  # region/plane judged unresolved below this outline visibility


@dataclass(frozen=True)
class Percept:
    """One sampled impression of a view."""

    modality: str
    region: str
    plane: str
    finding: str  # a lesion name or "normal"
    side: str | None
    vertical: str | None
    size: str | None
    blob: BlobBelief | None
    outline_visible: float


def image_bias(key: bytes, n_blobs: int, cfg: NoiseConfig) -> dict[str, np.ndarray]:
    """The fixed per-image logit bias, seeded by the image content: small noise plus rare confusions."""
    seed = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    k = max(1, n_blobs)

    def bias(shape: tuple[int, ...], signed: bool = False) -> np.ndarray:
        out = rng.normal(0, cfg.bias, shape)
        hit = rng.random(shape[:-1]) < cfg.confusion_rate
        if signed:
            out[..., 0] += hit * cfg.confusion_strength * rng.choice([-1.0, 1.0], shape[:-1])
        else:
            idx = rng.integers(0, shape[-1], shape[:-1])
            spike = np.zeros(shape)
            np.put_along_axis(spike, idx[..., None], cfg.confusion_strength, axis=-1)
            out += hit[..., None] * spike
        return out

    return {
        "modality": bias((len(MODALITIES),)),
        "region": bias((len(REGIONS),)),
        "plane": bias((3,)),
        "lesion": rng.normal(0, cfg.bias, k),
        "finding": bias((k, len(LESIONS))),
        "side": bias((k, 1), signed=True)[:, 0],
        "vertical": bias((k, 1), signed=True)[:, 0],
        "size": bias((k, 1), signed=True)[:, 0],
    }


def _draw(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Sample an index from softmax(logits / T); argmax at T = 0."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def _visibility(blob: BlobBelief, cfg: NoiseConfig) -> float:
    """1 when the blob fills `visible_area` of the view or more, less when it is small in the view."""
    return float(np.clip(blob.rel_area / cfg.visible_area, 0.01, 1.0))


def _hypothesis_logits(belief: Belief, bias: dict[str, np.ndarray], cfg: NoiseConfig) -> np.ndarray:
    """Log-odds that each blob is the finding, discounted when it is small in the view; last = none."""
    out = np.full(len(belief.blobs) + 1, cfg.none_logit)
    for i, b in enumerate(belief.blobs):
        vis = _visibility(b, cfg)
        out[i] = cfg.lesion * b.lesion_logit + bias["lesion"][i] + cfg.notice_power * np.log(vis)
        out[i] += cfg.crop_attention * vis if belief.crop else 0.0
    return out


def _binary(logodds: float, temperature: float, rng: np.random.Generator) -> bool:
    return _draw(np.array([logodds, 0.0]), temperature, rng) == 0


def sample_percept(
    belief: Belief,
    bias: dict[str, np.ndarray],
    temperature: float,
    rng: np.random.Generator,
    cfg: NoiseConfig,
    *,
    assume_lesion: bool = False,
) -> Percept:
    """Draw one impression; `assume_lesion` forces a blob (for questions that presuppose a finding)."""
    t = 0.0 if temperature <= 0 else temperature + cfg.temperature_floor
    view_scale = float(np.clip(np.sqrt(belief.width * belief.height) / 256, 0.35, 1.0))
    modality = MODALITIES[_draw(cfg.modality * view_scale * belief.modality_logp + bias["modality"], t, rng)]
    outline = belief.outline_visible
    region = REGIONS[_draw(cfg.region * outline * belief.region_logp + bias["region"], t, rng)]
    planes = PLANES_BY_FAMILY[modality]
    pz = cfg.plane * outline * belief.plane_logp[modality] + bias["plane"][: len(planes)]
    plane = planes[_draw(pz, t, rng)]
    hyp = _hypothesis_logits(belief, bias, cfg)
    if assume_lesion and len(hyp) > 1:
        hyp = hyp.copy()
        hyp[-1] = -np.inf
    pick = _draw(hyp, t, rng)
    if pick == len(belief.blobs):
        return Percept(modality, region, plane, "normal", None, None, None, None, outline)
    b = belief.blobs[pick]
    vis = _visibility(b, cfg)
    finding = LESIONS[_draw(cfg.finding * np.sqrt(vis) * b.finding_logp + bias["finding"][pick], t, rng)]
    side_lo = cfg.side * b.side_margin * (1 if b.side == "left" else -1) + bias["side"][pick]
    side = "left" if _binary(side_lo, t, rng) else "right"
    vert_lo = cfg.side * b.vertical_margin * (1 if b.vertical == "upper" else -1) + bias["vertical"][pick]
    vertical = "upper" if _binary(vert_lo, t, rng) else "lower"
    size = "large" if _binary(cfg.size * b.size_logit + bias["size"][pick], t, rng) else "small"
    return Percept(modality, region, plane, finding, side, vertical, size, b, outline)
