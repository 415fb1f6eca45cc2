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
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from boe.sim.perception import Belief, BlobBelief
from boe.sim.vocab import LESIONS, MODALITIES, PLANES_BY_FAMILY, REGIONS

__all__ = ["NoiseConfig", "Percept", "PerceptSampler", "image_bias", "sample_percept"]


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


class _Choice:
    """softmax(logits / T) ready to draw from: what `rng.choice(len(p), p=p)` does (one uniform, the normalised
    cdf) without its argument checks -- the same index and the same generator state (tests/sim/test_percept.py);
    argmax at T = 0, no draw."""

    __slots__ = ("cdf", "fixed")

    def __init__(self, logits: np.ndarray, temperature: float) -> None:
        if temperature <= 0:
            self.fixed: int | None = int(np.argmax(logits))
            self.cdf: list[float] = []
            return
        z = logits / temperature
        p = np.exp(z - z.max())
        p = p / p.sum()
        cdf = p.cumsum()
        cdf /= cdf[-1]
        self.fixed, self.cdf = None, cdf.tolist()

    def draw(self, rng: np.random.Generator) -> int:
        return self.fixed if self.fixed is not None else bisect_right(self.cdf, rng.random())


def _visibility(blob: BlobBelief, cfg: NoiseConfig) -> float:
    """1 when the blob fills `visible_area` of the view or more, less when it is small in the view."""
    return float(min(max(blob.rel_area / cfg.visible_area, 0.01), 1.0))


def _hypothesis_logits(belief: Belief, bias: dict[str, np.ndarray], cfg: NoiseConfig) -> np.ndarray:
    """Log-odds that each blob is the finding, discounted when it is small in the view; last = none."""
    out = np.full(len(belief.blobs) + 1, cfg.none_logit)
    for i, b in enumerate(belief.blobs):
        vis = _visibility(b, cfg)
        out[i] = cfg.lesion * b.lesion_logit + bias["lesion"][i] + cfg.notice_power * np.log(vis)
        out[i] += cfg.crop_attention * vis if belief.crop else 0.0
    return out


class PerceptSampler:
    """`sample_percept` for one view, bias and temperature: each distribution is computed once, on first use, so
    that many draws of one request (a judge's verdict distribution) pay only for their uniforms."""

    def __init__(
        self,
        belief: Belief,
        bias: dict[str, np.ndarray],
        temperature: float,
        cfg: NoiseConfig,
        *,
        assume_lesion: bool = False,
    ) -> None:
        self.belief, self.bias, self.cfg = belief, bias, cfg
        self.t = 0.0 if temperature <= 0 else temperature + cfg.temperature_floor
        self.assume_lesion = assume_lesion
        self._choices: dict[tuple[str, object], _Choice] = {}

    def _choice(self, key: tuple[str, object]) -> _Choice:
        got = self._choices.get(key)
        if got is None:
            got = self._choices[key] = _Choice(self._logits(*key), self.t)
        return got

    def _logits(self, slot: str, arg: object) -> np.ndarray:
        belief, bias, cfg = self.belief, self.bias, self.cfg
        outline = belief.outline_visible
        out: np.ndarray
        if slot == "modality":
            view_scale = float(np.clip(np.sqrt(belief.width * belief.height) / 256, 0.35, 1.0))
            out = cfg.modality * view_scale * belief.modality_logp + bias["modality"]
        elif slot == "region":
            out = cfg.region * outline * belief.region_logp + bias["region"]
        elif slot == "plane":
            modality = str(arg)
            out = cfg.plane * outline * belief.plane_logp[modality] + bias["plane"][: len(PLANES_BY_FAMILY[modality])]
        elif slot == "hypothesis":
            out = _hypothesis_logits(belief, bias, cfg)
            if self.assume_lesion and len(out) > 1:
                out[-1] = -np.inf
        else:
            pick = int(arg)  # type: ignore[call-overload]
            b = belief.blobs[pick]
            if slot == "finding":
                out = cfg.finding * np.sqrt(_visibility(b, cfg)) * b.finding_logp + bias["finding"][pick]
            else:  # a binary choice: index 0 is "yes"
                if slot == "side":
                    lo = cfg.side * b.side_margin * (1 if b.side == "left" else -1) + bias["side"][pick]
                elif slot == "vertical":
                    lo = cfg.side * b.vertical_margin * (1 if b.vertical == "upper" else -1) + bias["vertical"][pick]
                else:
                    lo = cfg.size * b.size_logit + bias["size"][pick]
                out = np.array([lo, 0.0])
        return out

    def sample(self, rng: np.random.Generator) -> Percept:
        """One impression, drawn from ``rng`` in the order `sample_percept` always drew."""
        belief, choice = self.belief, self._choice
        outline = belief.outline_visible
        modality = MODALITIES[choice(("modality", None)).draw(rng)]
        region = REGIONS[choice(("region", None)).draw(rng)]
        plane = PLANES_BY_FAMILY[modality][choice(("plane", modality)).draw(rng)]
        pick = choice(("hypothesis", None)).draw(rng)
        if pick == len(belief.blobs):
            return Percept(modality, region, plane, "normal", None, None, None, None, outline)
        b = belief.blobs[pick]
        finding = LESIONS[choice(("finding", pick)).draw(rng)]
        side = "left" if choice(("side", pick)).draw(rng) == 0 else "right"
        vertical = "upper" if choice(("vertical", pick)).draw(rng) == 0 else "lower"
        size = "large" if choice(("size", pick)).draw(rng) == 0 else "small"
        return Percept(modality, region, plane, finding, side, vertical, size, b, outline)


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
    return PerceptSampler(belief, bias, temperature, cfg, assume_lesion=assume_lesion).sample(rng)
