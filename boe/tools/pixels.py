"""Decoded pixels as a model is sent them: 8-bit grey or BGR, and the limit on how many are decoded."""

from __future__ import annotations

from typing import Any

import numpy as np

from boe.errors import MissingExtraError

__all__ = ["PIXEL_LIMIT", "WINDOW_PERCENTILES", "load_cv2", "to_uint8", "too_many_pixels"]

#: Decoded width x height refused before decoding (a 24-megapixel photo passes; a pixel bomb does not).
PIXEL_LIMIT = 100_000_000


def load_cv2() -> Any:
    """OpenCV (the ``agent`` extra), or `MissingExtraError` naming it."""
    try:
        import cv2
    except ImportError as exc:
        raise MissingExtraError("agent", "opencv-python-headless", "reading images") from exc
    return cv2


def too_many_pixels(name: str, w: int, h: int, limit: int, nbytes: int | None = None) -> str:
    """The message refusing an image of ``w`` x ``h`` pixels above ``limit``."""
    size = f", {nbytes} bytes" if nbytes is not None else ""
    return (
        f"image {name!r} is {w}x{h} pixels ({w * h / 1e6:.1f} megapixels{size}); the limit is {limit / 1e6:g} "
        "megapixels (--pixel-limit)"
    )


def to_uint8(arr: np.ndarray) -> np.ndarray:
    """8-bit gray or BGR pixels from any decoded array (alpha dropped, wide types rescaled)."""
    cv2 = load_cv2()
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = cv2.cvtColor(arr, cv2.COLOR_BGRA2BGR)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.dtype != np.uint8:
        arr = _window_8bit(arr)
    return np.ascontiguousarray(arr)


#: Percentiles of the window a wide (16-bit, float) image is mapped to 8 bits through: a few extreme pixels
#: (a marker, a saturated edge) would otherwise squeeze the rest into a handful of grey levels.
WINDOW_PERCENTILES = (0.5, 99.5)


def _window_8bit(arr: np.ndarray) -> np.ndarray:
    """8-bit pixels of a wide image: its 0.5-99.5 percentile window (the full range when that is flat)."""
    a = arr.astype(np.float32)
    finite = np.isfinite(a)
    if not finite.all():
        a = np.where(finite, a, np.nan)
    sample = a[:: max(1, a.shape[0] // 512), :: max(1, a.shape[1] // 512)]
    sample = sample[np.isfinite(sample)]
    if sample.size == 0:
        return np.zeros(a.shape, np.uint8)
    lo, hi = (float(v) for v in np.percentile(sample, WINDOW_PERCENTILES))
    if hi <= lo:
        lo, hi = float(np.min(sample)), float(np.max(sample))
    if hi <= lo:
        return np.zeros(a.shape, np.uint8)
    out = np.clip((a - lo) * (255.0 / (hi - lo)), 0, 255)
    eight: np.ndarray = np.nan_to_num(out, nan=0.0).round().astype(np.uint8)
    return eight
