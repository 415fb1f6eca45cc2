"""Seeded synthetic scans: anatomy drawn per body region and plane, textured per modality.

`sample_facts(rng, size)` draws the true facts of one scan (the sidecar record);
`render(facts)` draws its pixels. Left/right, upper/lower follow the image as
displayed (image left is `left`), not the radiological patient convention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import cv2
import numpy as np

from boe.sim.vocab import FINDINGS, MODALITIES, PLANES_BY_FAMILY, REGIONS, SIDES, SIZES, VERTICALS

__all__ = ["ScanFacts", "lesion_mask", "render", "sample_facts"]

# Tissue classes of the label map.
BG, SOFT, FAT, BONE, AIR, FLUID, ORGAN, TABLE, GEL = range(9)

# Body half-width, half-height (fractions of the canvas) per region.
_BODY = {
    "head": (0.30, 0.36),
    "chest": (0.41, 0.29),
    "abdomen": (0.38, 0.31),
    "pelvis": (0.43, 0.26),
    "spine": (0.21, 0.43),
    "limb": (0.155, 0.44),
}

# Lesion size (fractions of the canvas): finding -> size -> (half-length, half-width).
_LESION_SIZE = {
    "nodule": {"small": (0.017, 0.017), "large": (0.028, 0.028)},
    "mass": {"small": (0.042, 0.042), "large": (0.068, 0.068)},
    "hemorrhage": {"small": (0.05, 0.02), "large": (0.085, 0.033)},
    "effusion": {"small": (0.085, 0.035), "large": (0.13, 0.055)},
    "fracture": {"small": (0.045, 0.02), "large": (0.085, 0.026)},
}

# How often each finding (mass, nodule, effusion, fracture, hemorrhage, normal) occurs per region.
_FINDING_PRIOR = {
    "head": (0.2, 0.12, 0.0, 0.14, 0.34, 0.2),
    "chest": (0.2, 0.26, 0.22, 0.08, 0.06, 0.18),
    "abdomen": (0.26, 0.16, 0.18, 0.04, 0.18, 0.18),
    "pelvis": (0.2, 0.12, 0.16, 0.22, 0.12, 0.18),
    "spine": (0.22, 0.1, 0.0, 0.36, 0.14, 0.18),
    "limb": (0.2, 0.08, 0.14, 0.4, 0.0, 0.18),
}

# Mean intensity of each tissue class per modality.
_LEVELS = {
    "ct": {BG: 0, SOFT: 108, FAT: 72, BONE: 236, AIR: 14, FLUID: 88, ORGAN: 126, TABLE: 190, GEL: 0},
    "mr": {BG: 0, SOFT: 96, FAT: 188, BONE: 52, AIR: 10, FLUID: 214, ORGAN: 124, TABLE: 70, GEL: 0},
    "xr": {BG: 8, SOFT: 118, FAT: 100, BONE: 226, AIR: 38, FLUID: 132, ORGAN: 130, TABLE: 8, GEL: 8},
    "us": {BG: 0, SOFT: 92, FAT: 118, BONE: 215, AIR: 30, FLUID: 6, ORGAN: 70, TABLE: 0, GEL: 12},
}

# Lesion intensity per modality and finding (a fracture is the gap in a bone bar).
_LESION_LEVEL = {
    "ct": {"mass": 162, "nodule": 205, "effusion": 80, "hemorrhage": 178, "fracture": 24},
    "mr": {"mass": 165, "nodule": 178, "effusion": 222, "hemorrhage": 204, "fracture": 200},
    "xr": {"mass": 182, "nodule": 210, "effusion": 158, "hemorrhage": 168, "fracture": 60},
    "us": {"mass": 38, "nodule": 172, "effusion": 4, "hemorrhage": 58, "fracture": 20},
}


@dataclass(frozen=True)
class ScanFacts:
    """The true facts of one synthetic scan (the sidecar record the agent never sees)."""

    seed: int
    size: int
    modality: str
    region: str
    plane: str
    finding: str
    side: str | None
    vertical: str | None
    lesion_size: str | None
    body_box: tuple[int, int, int, int]  # x0, y0, x1, y1
    lesion_center: tuple[int, int] | None
    lesion_axes: tuple[int, int] | None  # half-length, half-width in pixels
    lesion_angle: float | None  # degrees
    lesion_box: tuple[int, int, int, int] | None
    shape_params: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The sidecar record as JSON-ready data."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScanFacts:
        """Read a sidecar record."""
        d = dict(data)
        for key in ("body_box", "lesion_center", "lesion_axes", "lesion_box"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _body_geometry(region: str, plane: str, modality: str, size: int) -> tuple[float, float, float, float]:
    """Centre and half-axes of the body outline in pixels."""
    a, b = _BODY[region]
    if plane == "coronal":
        a, b = a * 0.86, min(0.45, b * 1.28) if region not in ("spine", "limb") else b
    elif plane in ("sagittal", "lateral"):
        a = a * 0.8 if region in ("chest", "abdomen", "pelvis") else a
    elif plane == "ap":
        a, b = min(0.47, a * 1.14), min(0.46, b * 1.08)
    cx, cy = 0.5, 0.48 if plane == "axial" and modality != "us" else 0.5
    if modality == "us":
        a, b, cy = a * 0.72, b * 0.72, 0.56
    return cx * size, cy * size, a * size, b * size


def sample_facts(rng: np.random.Generator, size: int = 384) -> ScanFacts:
    """Draw the true facts of one scan: modality, region, plane, finding and its geometry."""
    modality = str(rng.choice(MODALITIES, p=[0.32, 0.28, 0.24, 0.16]))
    region = str(rng.choice(REGIONS))
    plane = str(rng.choice(PLANES_BY_FAMILY[modality]))
    finding = str(rng.choice(FINDINGS, p=_FINDING_PRIOR[region]))
    seed = int(rng.integers(2**31))
    cx, cy, a, b = _body_geometry(region, plane, modality, size)
    body_box = (int(cx - a), int(cy - b), int(cx + a), int(cy + b))
    shape = [float(x) for x in rng.uniform(-1, 1, size=8)]
    base = ScanFacts(
        seed, size, modality, region, plane, finding, None, None, None, body_box, None, None, None, None, shape
    )
    if finding == "normal":
        return base
    labels, body = _label_map(base)
    side = str(rng.choice(SIDES))
    vertical = "lower" if finding == "effusion" else str(rng.choice(VERTICALS))
    lsize = str(rng.choice(SIZES))
    half_len, half_wid = _LESION_SIZE[finding][lsize]
    jitter = float(rng.uniform(0.88, 1.12))
    axes = (max(2, round(half_len * size * jitter)), max(2, round(half_wid * size * jitter)))
    sx = -1 if side == "left" else 1
    sy = -1 if vertical == "upper" else 1
    narrow = region in ("spine", "limb")
    best: tuple[float, ScanFacts] | None = None
    for _ in range(24):
        if finding == "effusion" and not narrow:
            ux, uy = sx * rng.uniform(0.45, 0.6), rng.uniform(0.45, 0.62)
        elif narrow:
            ux, uy = sx * rng.uniform(0.62, 0.8), sy * rng.uniform(0.25, 0.6)
        else:
            ux, uy = sx * rng.uniform(0.3, 0.58), sy * rng.uniform(0.25, 0.58)
        lx, ly = cx + ux * a, cy + uy * b
        if finding in ("hemorrhage", "fracture"):
            angle = float(rng.uniform(60, 120)) if narrow else float(rng.uniform(0, 180))
        else:
            angle = float(rng.uniform(-25, 25))
            if finding == "effusion":
                angle = 90.0 + float(rng.uniform(-8, 8)) if narrow else float(sx * rng.uniform(5, 20))
        reach = max(axes) + (axes[0] // 2 if finding == "fracture" else 0)
        box = (max(0, int(lx - reach)), max(0, int(ly - reach)), min(size, int(lx + reach)), min(size, int(ly + reach)))
        cand = replace(
            base,
            side=side,
            vertical=vertical,
            lesion_size=lsize,
            lesion_center=(round(lx), round(ly)),
            lesion_axes=axes,
            lesion_angle=angle,
            lesion_box=box,
        )
        m = lesion_mask(cand) > 0
        area = max(1, int(m.sum()))
        clash = float(((labels[m] == BONE) | (body[m] == 0)).sum()) / area
        if best is None or clash < best[0]:
            best = (clash, cand)
        if clash < 0.05:
            break
    assert best is not None
    return best[1]


def _ellipse(
    mask: np.ndarray,
    c: tuple[float, float],
    ax: tuple[float, float],
    angle: float = 0.0,
    value: int = 1,
    thickness: int = -1,
) -> None:
    cv2.ellipse(
        mask,
        (round(c[0]), round(c[1])),
        (max(1, round(ax[0])), max(1, round(ax[1]))),
        angle,
        0,
        360,
        value,
        thickness,
        lineType=cv2.LINE_8,
    )


def _body_outline(f: ScanFacts, labels: np.ndarray, cx: float, cy: float, a: float, b: float) -> np.ndarray:
    """Fill the body outline with soft tissue; return the body mask."""
    s = f.size
    body = np.zeros((s, s), np.uint8)
    if f.region == "pelvis" and f.plane not in ("sagittal", "lateral"):
        _ellipse(body, (cx, cy + 0.15 * b), (a * 0.8, b * 0.85))
        for sx in (-1, 1):
            _ellipse(body, (cx + sx * 0.45 * a, cy - 0.1 * b), (a * 0.55, b * 0.8))
    elif f.region in ("spine", "limb"):
        pts = []
        for t in np.linspace(0, 2 * np.pi, 64, endpoint=False):
            r = 1.0 + (0.12 * np.cos(2 * t) if f.region == "limb" else 0.0)
            pts.append(
                (
                    cx + a * r * np.cos(t) * (1.0 if abs(np.sin(t)) < 0.9 else 0.92),
                    cy + b * np.sin(t) * (1.0 if f.region == "limb" else 1.02),
                )
            )
        x0, y0, x1, y1 = cx - a, cy - b, cx + a, cy + b
        cv2.rectangle(body, (round(x0), round(y0 + a * 0.6)), (round(x1), round(y1 - a * 0.6)), 1, -1)
        cv2.fillPoly(body, [np.array(pts, np.int32)], 1)
    else:
        _ellipse(body, (cx, cy), (a, b))
    if f.plane == "axial" and f.modality != "us":
        # patient lying on the table: flattened posterior outline
        body[int(cy + 0.86 * b) :, :] = 0
    if f.plane in ("sagittal", "lateral"):
        # asymmetric profile: anterior bulge on the image left, flatter posterior
        _ellipse(body, (cx - 0.55 * a, cy - 0.05 * b), (a * 0.62, b * 0.7))
        body[:, int(cx + 0.82 * a) :] = 0
    labels[body > 0] = SOFT
    if f.region not in ("spine", "limb"):
        rim = cv2.erode(body, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (9, 9)), iterations=1)
        labels[(body > 0) & (rim == 0)] = FAT
    if f.plane == "axial" and f.modality in ("ct", "mr"):
        ty = int(cy + 0.86 * b) + max(3, s // 64)
        cv2.ellipse(
            labels,
            (round(cx), ty - round(0.9 * a)),
            (round(1.25 * a), round(0.9 * a)),
            0,
            50,
            130,
            TABLE,
            max(3, s // 80),
        )
    return body


def _anatomy(
    f: ScanFacts, labels: np.ndarray, cx: float, cy: float, a: float, b: float, rng: np.random.Generator
) -> None:
    """Draw the internal structures of the region."""
    lateral = f.plane in ("sagittal", "lateral")
    sides = (-1,) if lateral else (-1, 1)
    dx = -0.15 * a if lateral else 0.0
    r = f.region
    if r == "head":
        skull = np.zeros_like(labels)
        _ellipse(skull, (cx, cy), (a * 0.9, b * 0.9), 0, 1, max(4, int(0.1 * a)))
        labels[skull > 0] = BONE
        for sx in sides:
            _ellipse(labels, (cx + dx + sx * 0.17 * a, cy - 0.05 * b), (0.08 * a, 0.22 * b), sx * 12, FLUID)
    elif r == "chest":
        for sx in sides:
            _ellipse(labels, (cx + dx + sx * 0.47 * a, cy - 0.05 * b), (0.36 * a, 0.66 * b), 0, AIR)
        _ellipse(labels, (cx + dx + 0.1 * a, cy + 0.2 * b), (0.26 * a, 0.32 * b), 0, ORGAN)
        _ellipse(
            labels,
            (cx + (0.55 * a if lateral else 0.0), cy + (0.0 if lateral else 0.72 * b)),
            (0.11 * b, 0.11 * b),
            0,
            BONE,
        )
    elif r == "abdomen":
        _ellipse(labels, (cx + dx - 0.38 * a, cy - 0.25 * b), (0.42 * a, 0.45 * b), 0, ORGAN)
        for sx in sides:
            _ellipse(labels, (cx + dx + sx * 0.5 * a, cy + 0.35 * b), (0.12 * a, 0.2 * b), sx * 20, ORGAN)
        _ellipse(
            labels,
            (cx + (0.55 * a if lateral else 0.0), cy + (0.0 if lateral else 0.7 * b)),
            (0.13 * b, 0.13 * b),
            0,
            BONE,
        )
        for _ in range(int(rng.integers(2, 5))):
            px, py = rng.uniform(-0.25, 0.3) * a + cx, rng.uniform(-0.2, 0.35) * b + cy
            _ellipse(labels, (px, py), (0.03 * a + 2, 0.025 * a + 2), 0, AIR)
    elif r == "pelvis":
        for sx in sides:
            _ellipse(labels, (cx + dx + sx * 0.55 * a, cy - 0.1 * b), (0.28 * a, 0.5 * b), sx * 25, BONE)
            _ellipse(labels, (cx + dx + sx * 0.55 * a, cy - 0.1 * b), (0.17 * a, 0.36 * b), sx * 25, SOFT)
        _ellipse(labels, (cx + dx, cy + 0.3 * b), (0.22 * a, 0.3 * b), 0, FLUID)
    elif r == "spine":
        n = 6
        step = 1.7 * b / n
        for i in range(n):
            y = cy - 0.85 * b + (i + 0.5) * step
            w = 0.45 * a
            cv2.rectangle(
                labels,
                (round(cx + dx - w), round(y - 0.36 * step)),
                (round(cx + dx + w), round(y + 0.36 * step)),
                BONE,
                -1,
            )
    elif r == "limb":
        w = 0.32 * a
        cv2.rectangle(labels, (round(cx - w), round(cy - 0.8 * b)), (round(cx + w), round(cy + 0.8 * b)), BONE, -1)
        cv2.rectangle(
            labels, (round(cx - 0.45 * w), round(cy - 0.7 * b)), (round(cx + 0.45 * w), round(cy + 0.7 * b)), FAT, -1
        )
        for sy in (-1, 1):
            _ellipse(labels, (cx, cy + sy * 0.82 * b), (1.5 * w, 0.1 * b), 0, BONE)


def lesion_mask(f: ScanFacts) -> np.ndarray:
    """The lesion's pixels (for a fracture: the bone bar it breaks), 0/1 uint8."""
    m = np.zeros((f.size, f.size), np.uint8)
    if f.finding == "normal" or f.lesion_center is None or f.lesion_axes is None:
        return m
    c, ax, ang = f.lesion_center, f.lesion_axes, f.lesion_angle or 0.0
    if f.finding == "nodule":
        _ellipse(m, c, (ax[0], ax[0]))
    elif f.finding == "mass":
        t = np.linspace(0, 2 * np.pi, 72, endpoint=False)
        p = f.shape_params
        rad = ax[0] * (1 + 0.14 * p[0] * np.cos(3 * t + p[1] * 3) + 0.1 * p[2] * np.cos(5 * t + p[3] * 3))
        pts = np.stack([c[0] + rad * np.cos(t), c[1] + rad * np.sin(t)], 1)
        cv2.fillPoly(m, [np.round(pts).astype(np.int32)], 1)
    elif f.finding == "hemorrhage":
        _ellipse(m, c, ax, ang)
        off = ax[1] * 0.6
        centre = (c[0] + off * f.shape_params[4], c[1] + off * f.shape_params[5])
        _ellipse(m, centre, (ax[0] * 0.6, ax[1] * 0.9), ang + 20)
    elif f.finding == "effusion":
        _ellipse(m, c, ax, ang)
        # hollow the side facing the body centre: a crescent hugging the body wall
        bx, by = (f.body_box[0] + f.body_box[2]) / 2, (f.body_box[1] + f.body_box[3]) / 2
        minor = np.array([-np.sin(np.deg2rad(ang)), np.cos(np.deg2rad(ang))])
        if np.dot(minor, (bx - c[0], by - c[1])) < 0:
            minor = -minor
        cut = np.zeros_like(m)
        _ellipse(cut, (c[0] + minor[0] * ax[1] * 0.9, c[1] + minor[1] * ax[1] * 0.9), (ax[0] * 0.85, ax[1] * 0.9), ang)
        m[cut > 0] = 0
    elif f.finding == "fracture":
        _ellipse(m, c, (ax[0] * 1.5, ax[1] * 1.1), ang)
    return m


def _draw_lesion(f: ScanFacts, labels: np.ndarray, img: np.ndarray, body: np.ndarray, rng: np.random.Generator) -> None:
    """Paint the finding into the intensity image (before texture)."""
    if f.finding == "normal" or f.lesion_center is None or f.lesion_axes is None:
        return
    m = lesion_mask(f) & body
    level = _LESION_LEVEL[f.modality][f.finding]
    if f.finding == "fracture":
        img[m > 0] = _LEVELS[f.modality][BONE] if f.modality != "mr" else 60
        line = np.zeros_like(m)
        c, ax = f.lesion_center, f.lesion_axes
        ang = np.deg2rad((f.lesion_angle or 0.0) + 90 + 25 * f.shape_params[6])
        half = ax[0] * 0.55
        p0 = (round(c[0] - half * np.cos(ang)), round(c[1] - half * np.sin(ang)))
        p1 = (round(c[0] + half * np.cos(ang)), round(c[1] + half * np.sin(ang)))
        cv2.line(line, p0, p1, 1, max(2, f.size // 150))
        img[(line > 0) & (body > 0)] = level
        return
    if f.finding == "mass":
        tex = cv2.GaussianBlur(rng.normal(0, 1, img.shape).astype(np.float32), (0, 0), 2.5)
        vals = level + 60 * tex
        img[m > 0] = vals[m > 0]
    elif f.finding == "hemorrhage":
        img[m > 0] = level
        rim = m - cv2.erode(m, np.ones((3, 3), np.uint8))
        img[rim > 0] = level * (0.35 if f.modality == "mr" else 0.85)
    else:
        img[m > 0] = level


def _fan(size: int) -> np.ndarray:
    fan = np.zeros((size, size), np.uint8)
    apex = (size // 2, int(0.03 * size))
    cv2.ellipse(fan, apex, (int(0.95 * size), int(0.95 * size)), 90, -38, 38, 1, -1)
    return fan


def _texture(f: ScanFacts, img: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Modality appearance: blur, bias field, noise, speckle."""
    s = f.size
    if f.modality == "ct":
        img = cv2.GaussianBlur(img, (0, 0), 0.7)
        img = img + rng.normal(0, 5.5, img.shape).astype(np.float32) * (labels != BG)
        img = img + np.abs(rng.normal(0, 1.2, img.shape)).astype(np.float32)
    elif f.modality == "mr":
        img = cv2.GaussianBlur(img, (0, 0), 1.0)
        field = cv2.resize(rng.normal(0, 1, (4, 4)).astype(np.float32), (s, s), interpolation=cv2.INTER_CUBIC)
        img = img * (1 + 0.16 * field / max(1e-6, float(np.abs(field).max())))
        n1, n2 = rng.normal(0, 7, img.shape), rng.normal(0, 7, img.shape)
        img = np.sqrt((img + n1) ** 2 + n2**2).astype(np.float32)
    elif f.modality == "xr":
        img = cv2.GaussianBlur(img, (0, 0), max(2.0, s / 150))
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / s
        vignette = 1 - 0.25 * ((xx - 0.5) ** 2 + (yy - 0.5) ** 2)
        img = img * vignette + rng.normal(0, 2.5, img.shape).astype(np.float32)
    else:
        fan = _fan(s)
        depth = np.linspace(1.1, 0.7, s, dtype=np.float32)[:, None]
        shadow = np.zeros_like(img)
        bone = (labels == BONE).astype(np.uint8)
        below = np.maximum.accumulate(bone, axis=0)
        shadow[(below > 0) & (bone == 0)] = 1
        img = img * depth * (1 - 0.6 * shadow)
        speckle = rng.rayleigh(1.0, img.shape).astype(np.float32) / 1.2533
        speckle = np.asarray(cv2.GaussianBlur(speckle, (0, 0), sigmaX=1.4, sigmaY=0.8), np.float32)
        img = np.asarray(cv2.GaussianBlur(img, (0, 0), 1.0), np.float32) * speckle
        img[fan == 0] = 0
    return np.asarray(np.clip(img, 0, 255), np.float32)


def _label_map(f: ScanFacts) -> tuple[np.ndarray, np.ndarray]:
    """Tissue labels and the body mask of the scan's anatomy (no finding)."""
    rng = np.random.default_rng(f.seed)
    s = f.size
    cx, cy, a, b = _body_geometry(f.region, f.plane, f.modality, s)
    labels = np.full((s, s), BG, np.uint8)
    if f.modality == "us":
        labels[_fan(s) > 0] = GEL
    body = _body_outline(f, labels, cx, cy, a, b)
    _anatomy(f, labels, cx, cy, a, b, rng)
    labels[(body == 0) & (labels != TABLE) & (labels != GEL)] = BG
    return labels, body


def render(f: ScanFacts) -> np.ndarray:
    """The scan's pixels: a grayscale uint8 image of f.size x f.size."""
    labels, body = _label_map(f)
    rng = np.random.default_rng(f.seed + 1)
    levels = _LEVELS[f.modality]
    lut = np.array([levels[i] for i in range(9)], np.float32)
    img = lut[labels] * rng.uniform(0.93, 1.07)
    _draw_lesion(f, labels, img, body, rng)
    return _texture(f, img.astype(np.float32), labels, rng).astype(np.uint8)
