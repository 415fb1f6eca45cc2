"""Grounded views: a box from a claim's location words, padded, never too small.

Localisation only chooses what the grounded judge sees; it is never evidence
by itself. Location words follow the image as displayed (image left is
``left``), the convention of the built-in simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from boe.tools.images import encode_image, fit_pixels
from boe.tools.pixels import load_cv2

__all__ = ["LOCATION_WORDS", "Box", "content_box", "crop", "location_box"]

LOCATION_WORDS = frozenset({"left", "right", "upper", "lower", "central", "bilateral"})


@dataclass(frozen=True)
class Box:
    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    def as_list(self) -> list[int]:
        return [self.x0, self.y0, self.x1, self.y1]


def content_box(pixels: np.ndarray) -> Box:
    """Bounding box of the imaged body (Otsu foreground, small specks ignored); the whole image if none."""
    cv2 = load_cv2()
    gray = pixels if pixels.ndim == 2 else cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY)
    h, w = gray.shape
    blur = cv2.GaussianBlur(gray, (5, 5), 0)
    _, mask = cv2.threshold(blur, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    n, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    keep = [i for i in range(1, n) if stats[i, cv2.CC_STAT_AREA] >= 0.01 * h * w]
    if not keep:
        return Box(0, 0, w, h)
    x0 = min(int(stats[i, cv2.CC_STAT_LEFT]) for i in keep)
    y0 = min(int(stats[i, cv2.CC_STAT_TOP]) for i in keep)
    x1 = max(int(stats[i, cv2.CC_STAT_LEFT] + stats[i, cv2.CC_STAT_WIDTH]) for i in keep)
    y1 = max(int(stats[i, cv2.CC_STAT_TOP] + stats[i, cv2.CC_STAT_HEIGHT]) for i in keep)
    return Box(x0, y0, x1, y1)


def location_box(
    words: list[str] | tuple[str, ...],
    width: int,
    height: int,
    *,
    within: Box | None = None,
    pad: float = 0.08,
    min_frac: float = 0.3,
) -> Box:
    """The part of ``within`` (default: the image) the location words name, padded, at least ``min_frac`` a side."""
    if width <= 0 or height <= 0:
        raise ValueError("image size must be positive")
    base = within or Box(0, 0, width, height)
    x0, y0, x1, y1 = float(base.x0), float(base.y0), float(base.x1), float(base.y1)
    ws = set(words)
    if "bilateral" not in ws and not ("left" in ws and "right" in ws):
        mid = (x0 + x1) / 2
        if "left" in ws:
            x1 = mid
        elif "right" in ws:
            x0 = mid
    if not ("upper" in ws and "lower" in ws):
        mid = (y0 + y1) / 2
        if "upper" in ws:
            y1 = mid
        elif "lower" in ws:
            y0 = mid
    if "central" in ws and not ws & {"left", "right", "upper", "lower"}:
        cw, ch = (x1 - x0) / 4, (y1 - y0) / 4
        x0, x1, y0, y1 = x0 + cw, x1 - cw, y0 + ch, y1 - ch
    px, py = pad * width, pad * height
    x0, x1 = max(0.0, x0 - px), min(float(width), x1 + px)
    y0, y1 = max(0.0, y0 - py), min(float(height), y1 + py)
    x0, x1 = _at_least(x0, x1, min_frac * width, width)
    y0, y1 = _at_least(y0, y1, min_frac * height, height)
    return Box(int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1)))


def _at_least(lo: float, hi: float, size: float, limit: int) -> tuple[float, float]:
    """Grow [lo, hi] about its centre to ``size`` if smaller, then shift it inside [0, limit]."""
    size = min(size, float(limit))
    if hi - lo < size:
        c = (lo + hi) / 2
        lo, hi = c - size / 2, c + size / 2
    if lo < 0:
        hi, lo = hi - lo, 0.0
    if hi > limit:
        lo, hi = lo - (hi - limit), float(limit)
    return max(lo, 0.0), min(hi, float(limit))


def crop(pixels: np.ndarray, box: Box, max_pixels: int | None = None, mime: str = "image/png") -> bytes:
    """The boxed part of an image (downscaled to at most ``max_pixels``), encoded as ``mime`` (PNG or JPEG)."""
    h, w = pixels.shape[:2]
    x0, y0 = max(0, box.x0), max(0, box.y0)
    x1, y1 = min(w, box.x1), min(h, box.y1)
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"empty crop box {box}")
    return encode_image(fit_pixels(np.ascontiguousarray(pixels[y0:y1, x0:x1]), max_pixels), mime)
