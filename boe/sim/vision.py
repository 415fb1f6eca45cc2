"""Pixel analysis with OpenCV: texture statistics, the body outline, anomaly blobs.

These functions see pixels only. They turn a grayscale view into feature
vectors (modality texture, region outline, plane symmetry) and a list of
anomaly candidates (blobs with shape, contrast and centroid); the trained
heads in `boe.sim.perception` turn those into beliefs.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

__all__ = [
    "Blob",
    "ViewFeatures",
    "analyse_view",
    "decode_image",
]

_K3 = np.ones((3, 3), np.uint8)


@dataclass(frozen=True)
class Blob:
    """One anomaly candidate: a connected region that stands out from its surroundings."""

    box: tuple[int, int, int, int]  # x0, y0, x1, y1
    centroid: tuple[float, float]
    area: int
    features: np.ndarray
    mask: np.ndarray  # bool, the blob's pixels inside `box`


@dataclass(frozen=True)
class ViewFeatures:
    """Everything the perception heads read from one view."""

    width: int
    height: int
    modality: np.ndarray
    region: np.ndarray
    plane: np.ndarray
    blobs: tuple[Blob, ...]
    body_box: tuple[int, int, int, int]
    outline_visible: float  # 1 = the whole body outline is inside the view


#: Pixels the simulator perceives at most (its own scans are at most 2048 x 2048); a larger image is downscaled
#: once after decoding, as a VLM's processor does, so a large image within the pixel limit stays cheap.
PERCEIVE_PIXELS = 2048 * 2048


def decode_image(data: bytes) -> np.ndarray | None:
    """Encoded image bytes (PNG, JPEG, ...) to a grayscale uint8 array of at most `PERCEIVE_PIXELS`, or None."""
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None:
        return None
    h, w = arr.shape[:2]
    if h * w > PERCEIVE_PIXELS:
        scale = (PERCEIVE_PIXELS / float(h * w)) ** 0.5
        arr = cv2.resize(arr, (max(1, int(w * scale)), max(1, int(h * scale))), interpolation=cv2.INTER_AREA)
    if arr.dtype != np.uint8:
        lo, hi = float(arr.min()), float(arr.max())
        arr = ((arr.astype(np.float64) - lo) * (255.0 / max(hi - lo, 1e-9))).astype(np.uint8)
    if arr.ndim == 3:
        code = cv2.COLOR_BGRA2GRAY if arr.shape[2] == 4 else cv2.COLOR_BGR2GRAY
        arr = cv2.cvtColor(arr, code)
    return arr


def _largest_component(mask: np.ndarray) -> np.ndarray:
    n, lab, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    if n <= 1:
        return np.zeros_like(mask)
    i = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    out = (lab == i).astype(np.uint8)
    contours, _ = cv2.findContours(out, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(out, contours, -1, 1, thickness=-1)  # fill holes
    return np.asarray(out, np.uint8)


def _width_at(mask: np.ndarray, frac: float) -> float:
    ys = np.flatnonzero(mask.any(axis=1))
    if ys.size == 0:
        return 0.0
    y = int(ys[0] + frac * (ys[-1] - ys[0]))
    widest = float(mask.sum(axis=1).max())
    return float(mask[y].sum()) / max(1.0, widest)


def _modality_features(g: np.ndarray, gs: np.ndarray, body: np.ndarray, inner: np.ndarray, tissue: float) -> np.ndarray:
    view = g.size
    foot = _largest_component((gs > 4).astype(np.uint8))
    outside = cv2.dilate(body, np.ones((7, 7), np.uint8)) == 0
    bg = g[outside]
    gf = g.astype(np.float32)
    hf = np.abs(gf - cv2.GaussianBlur(gf, (0, 0), 1.0))
    mean7 = cv2.blur(gf, (7, 7))
    sq7 = cv2.blur(gf * gf, (7, 7))
    cv = np.sqrt(np.maximum(sq7 - mean7**2, 0)) / (mean7 + 8.0)
    sel = inner > 0 if inner.any() else np.ones_like(body, bool)
    grad = cv2.magnitude(cv2.Sobel(gs, cv2.CV_32F, 1, 0), cv2.Sobel(gs, cv2.CV_32F, 0, 1))
    edge = (body - cv2.erode(body, _K3)) > 0
    rim = (body - cv2.erode(body, np.ones((9, 9), np.uint8))) > 0
    bg_level = float(np.median(bg)) if bg.size else 0.0
    low = cv2.GaussianBlur(gf, (0, 0), max(4.0, g.shape[1] / 12))
    return np.array(
        [
            foot.mean(),
            _width_at(foot, 0.08),
            _width_at(foot, 0.3),
            bg.size / view,
            bg_level / 255.0,
            float(bg.std()) / 255.0 if bg.size > 20 else 0.0,
            float(np.median(hf[sel])) / (tissue + 8.0),
            float(np.median(cv[sel])),
            float((g[sel] > 222).mean()),
            float(np.percentile(grad[edge], 90)) / (4 * max(8.0, tissue - bg_level)) if edge.any() else 0.0,
            (float(g[rim].mean()) - tissue) / 255.0 if rim.any() else 0.0,
            tissue / 255.0,
            float((g[sel] < 0.35 * tissue).mean()),
            float(low[sel].std()) / (tissue + 8.0),
        ]
    )


def _components(mask: np.ndarray, min_area: int) -> list[tuple[np.ndarray, np.ndarray]]:
    n, lab, stats, cent = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    return [(lab == i, cent[i]) for i in range(1, n) if stats[i, cv2.CC_STAT_AREA] >= min_area]


def _region_features(g: np.ndarray, body: np.ndarray, tissue: float) -> tuple[np.ndarray, np.ndarray]:
    h, w = g.shape
    ys, xs = np.nonzero(body)
    if xs.size == 0:
        return np.zeros(14), np.zeros(8)
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    bw, bh = x1 - x0, y1 - y0
    area = float(body.sum())
    contours, _ = cv2.findContours(body, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    hull = cv2.convexHull(max(contours, key=cv2.contourArea))
    solidity = area / max(1.0, cv2.contourArea(hull))
    gs = cv2.GaussianBlur(g, (0, 0), 1.5).astype(np.float32)
    struct = ((np.abs(gs - tissue) > 0.32 * tissue) & (body > 0)).astype(np.uint8)
    dark = ((gs < 0.45 * tissue) & (body > 0)).astype(np.uint8)
    dist = cv2.distanceTransform(body, cv2.DIST_L2, 3)
    scale = max(bw, bh)
    sd = dist[struct > 0]
    ring = float(((sd > 0.01 * scale) & (sd < 0.09 * scale)).mean()) if sd.size else 0.0
    big = max(20, int(0.004 * area))
    comps = _components(struct, big)
    darks = _components(dark, max(20, int(0.03 * area)))
    cx = (x0 + x1) / 2
    central = [c for m, c in comps if abs(c[0] - cx) < 0.22 * bw]
    elong = 0.0
    largest = 0.0
    for m, _c in comps:
        a = float(m.sum())
        if a > largest:
            cys, cxs = np.nonzero(m)
            largest = a
            elong = np.log((np.ptp(cys) + 1) / (np.ptp(cxs) + 1))
    col = struct[y0:y1, int(cx)] if 0 <= int(cx) < w else np.zeros(1, np.uint8)
    transitions = float(np.abs(np.diff(col.astype(np.int8))).sum())
    dark_frac = [float(m.sum()) / area for m, _ in darks]
    mirror = body[:, ::-1]
    shift = int(round(w - x0 - x1))
    mirror = np.roll(mirror, -shift, axis=1)
    sym = float((body & mirror).sum()) / max(1.0, float((body | mirror).sum()))
    bottom = _width_at(body, 0.97)
    table_w = 0.0
    below = (gs > tissue * 1.2) & (body == 0)
    below[: min(h, y1), :] = False
    for m, _c in _components(below, 10):
        mys, mxs = np.nonzero(m)
        if np.ptp(mys) < 0.08 * h:
            table_w = max(table_w, float(np.ptp(mxs)) / w)
    gm = gs[y0:y1, x0:x1]
    corr = float(np.corrcoef(gm.ravel(), gm[:, ::-1].ravel())[0, 1]) if gm.size > 4 and gm.std() > 0 else 0.0
    left_mass = (float(body[:, : int(cx)].sum()) - float(body[:, int(cx) :].sum())) / area
    region = np.array(
        [
            np.log(bw / bh),
            area / (bw * bh),
            solidity,
            bw / w,
            bh / h,
            ring,
            len(comps),
            len(central),
            elong,
            largest / area,
            transitions,
            len(dark_frac),
            max(dark_frac, default=0.0),
            float(struct.sum()) / area,
        ]
    )
    plane = np.array([sym, corr, table_w, bottom, bw / w, np.log(bw / bh), left_mass, len(dark_frac)])
    return region, plane


def _blob_features(
    mask: np.ndarray,
    off: tuple[int, int],
    gs: np.ndarray,
    body: np.ndarray,
    dist: np.ndarray,
    tissue: float,
    ref: float,
    mirror_x: float,
    line: bool,
) -> np.ndarray:
    """Shape, contrast, symmetry and position of one candidate (`mask` is local to a window at `off`)."""
    ox, oy = off
    hh, ww = mask.shape
    h, w = gs.shape
    area = float(mask.sum())
    m8 = mask.astype(np.uint8)
    contours, _ = cv2.findContours(m8, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    cnt = max(contours, key=cv2.contourArea)
    perim = max(1.0, cv2.arcLength(cnt, True))
    hull_area = max(1.0, cv2.contourArea(cv2.convexHull(cnt)))
    (_, _), (rw, rh), _ = cv2.minAreaRect(cnt)
    radius = np.sqrt(area / np.pi)
    win_gs = gs[oy : oy + hh, ox : ox + ww]
    ring = (cv2.dilate(m8, np.ones((9, 9), np.uint8)) > 0) & ~mask & (body[oy : oy + hh, ox : ox + ww] > 0)
    ys, xs = np.nonzero(mask)
    inside = win_gs[ys, xs]
    level = float(inside.mean())
    around = float(win_gs[ring].mean()) if ring.any() else tissue
    gx, gy = xs + ox, ys + oy
    mx = np.clip(np.round(2 * mirror_x - gx).astype(int), 0, w - 1)
    mirror_diff = float(np.abs(gs[gy, mx] - inside).mean())
    norm = tissue + 8.0
    return np.array(
        [
            np.log(radius / ref),
            min(1.5, 4 * np.pi * area / perim**2),
            area / hull_area,
            np.log((max(rw, rh) + 1) / (min(rw, rh) + 1)),
            float(np.clip((level - tissue) / norm, -3, 3)),
            float(np.clip((level - around) / norm, -3, 3)),
            float(np.clip(abs(level - around) / norm, 0, 3)),
            float(inside.std()) / norm,
            float((dist[gy, gx] < 6).mean()),
            min(2.0, mirror_diff / norm),
            float(np.log(area / (h * w))),
            float(dist[int(gy.mean()), int(gx.mean())]) / ref,
            1.0 if line else 0.0,
            float(np.clip((around - tissue) / norm, -3, 3)),
            float(((gx < 3) | (gy < 3) | (gx >= w - 3) | (gy >= h - 3)).mean()),
        ]
    )


def _smooth_for_regions(g: np.ndarray, inner: np.ndarray) -> tuple[np.ndarray, float]:
    """Denoise (harder for speckle) and return the residual noise level of the result."""
    f = g.astype(np.float32)
    raw = np.abs(f - cv2.GaussianBlur(f, (0, 0), 1.0))
    raw_noise = float(np.median(raw[inner])) * 1.4826 if inner.any() else 0.0
    speckle = raw_noise > 0.09 * max(8.0, float(np.median(g[inner])) if inner.any() else 8.0)
    gs = cv2.GaussianBlur(cv2.medianBlur(g, 7), (0, 0), 2.5) if speckle else cv2.GaussianBlur(g, (0, 0), 1.2)
    sf = gs.astype(np.float32)
    res = np.abs(sf - cv2.GaussianBlur(sf, (0, 0), 1.5))
    return gs, float(np.median(res[inner])) * 1.4826 if inner.any() else 1.0


def _labelled(mask: np.ndarray, conn: int) -> tuple[np.ndarray, np.ndarray]:
    _, lab, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=conn)
    return lab, stats


def _blobs(g: np.ndarray, body: np.ndarray, tissue: float, ref: float, max_blobs: int = 16) -> tuple[Blob, ...]:
    """Anomaly candidates: regions enclosed by edges, and thin lines (top-hat / black-hat)."""
    h, w = g.shape
    inner = cv2.erode(body, np.ones((5, 5), np.uint8)) > 0
    if not inner.any():
        return ()
    gs, noise = _smooth_for_regions(g, inner)
    gsf = gs.astype(np.float32)
    mag = cv2.magnitude(cv2.Sobel(gs, cv2.CV_32F, 1, 0), cv2.Sobel(gs, cv2.CV_32F, 0, 1))
    hi = max(36.0, 14.0 * noise, 1.5 * float(np.percentile(mag[inner], 30)))
    edges = cv2.dilate(cv2.Canny(gs, 0.45 * hi, hi, L2gradient=True), _K3)
    body_area = float(body.sum())
    thin = max(3, int(round(min(h, w) / 96)) | 1)
    kern = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * thin + 1, 2 * thin + 1))
    layers = [(_labelled((edges == 0) & inner, 4), False)]
    for hat in (cv2.MORPH_BLACKHAT, cv2.MORPH_TOPHAT):
        resp = cv2.morphologyEx(gs, hat, kern)
        layers.append((_labelled((resp > max(30.0, 8 * noise)) & inner, 8), True))
    # (score, layer, label, x0, y0, x1, y1)
    ranked: list[tuple[float, int, int, int, int, int, int]] = []
    for li, ((lab, stats), line) in enumerate(layers):
        n = stats.shape[0]
        sums = np.bincount(lab.ravel(), weights=gsf.ravel(), minlength=n)
        for i in range(1, n):
            x, y, bw, bh, a = (int(v) for v in stats[i])
            if line and (a < 8 or max(bw, bh) < 4 * thin):
                continue
            if not line and not 10 <= a <= 0.6 * body_area:
                continue
            score = abs(sums[i] / a - tissue) * np.sqrt(a)
            ranked.append((score, li, i, x, y, x + bw, y + bh))
    ranked.sort(key=lambda t: -t[0])
    dist = cv2.distanceTransform(body, cv2.DIST_L2, 3)
    cols = np.nonzero(body.any(axis=0))[0]
    mirror_x = (cols.min() + cols.max()) / 2 if cols.size else w / 2
    out = []
    for _, li, i, x0, y0, x1, y1 in ranked[:max_blobs]:
        (lab, _), line = layers[li]
        pad = 1 if line else 2
        ox, oy = max(0, x0 - pad), max(0, y0 - pad)
        m = lab[oy : min(h, y1 + pad), ox : min(w, x1 + pad)] == i
        if not line:
            m = cv2.dilate(m.astype(np.uint8), _K3) > 0
        feats = _blob_features(m, (ox, oy), gsf, body, dist, tissue, ref, mirror_x, line)
        ys, xs = np.nonzero(m)
        bx0, by0, bx1, by1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
        box = (ox + bx0, oy + by0, ox + bx1, oy + by1)
        centroid = (ox + float(xs.mean()), oy + float(ys.mean()))
        out.append(Blob(box, centroid, int(m.sum()), feats, m[by0:by1, bx0:bx1].copy()))
    return tuple(out)


def analyse_view(g: np.ndarray, ref: float | None = None, crop: bool = False) -> ViewFeatures:
    """Measure one grayscale view; `ref` is the whole figure's pixel size (default: the view's).

    In a `crop` the body outline is mostly cut away, so blobs are searched in the whole view.
    """
    h, w = g.shape
    ref = float(ref or max(h, w))
    gs = cv2.GaussianBlur(g, (0, 0), 2.0)
    body = _largest_component((gs > 25).astype(np.uint8))
    if body.sum() < 0.02 * g.size:
        body = np.ones_like(g, np.uint8)
    inner = cv2.erode(body, np.ones((9, 9), np.uint8))
    tissue = float(np.median(g[inner > 0])) if inner.any() else float(np.median(g))
    modality = _modality_features(g, gs, body, inner, tissue)
    region, plane = _region_features(g, body, tissue)
    if crop:
        search = np.zeros_like(body)
        search[1:-1, 1:-1] = 1
        blobs = _blobs(g, search, tissue, ref)
    else:
        blobs = _blobs(g, body, tissue, ref)
    ys, xs = np.nonzero(body)
    box = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
    touches = [box[0] <= 1, box[1] <= 1, box[2] >= w - 1, box[3] >= h - 1]
    return ViewFeatures(w, h, modality, region, plane, blobs, box, 1.0 - sum(touches) / 4)
