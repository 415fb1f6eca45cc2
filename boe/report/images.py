"""Images for reports: small WebP data URLs within a byte budget, and evidence views as shapes.

A report embeds each distinct image once, downscaled so that the longest side
is at most ``max_side`` pixels; when the images of a run would exceed their
byte budget (what the report's size target leaves them) they are all encoded
again at a smaller size. Crop boxes and
masks are drawn over the image by the page, in the image's own pixel
coordinates, so a thumbnail costs nothing extra for its crops.

View formats read from an action's ``view`` (all optional):

* ``box``: ``[x0, y0, x1, y1]`` in image pixels (a crop);
* ``polygon``: ``[[x, y], ...]`` or ``polygons``: a list of those;
* ``mask``: a path to a mask image (non-zero = inside), ``{"path": ...}``, or an
  uncompressed run-length mask ``{"size": [h, w], "counts": [...]}`` (COCO
  order: column-major, starting with a run of zeros);
* ``segmentation.mask_box``: the box of a mask whose outline was not kept
  (drawn dashed);
* ``image_id`` / ``figure``: which image of the question the view was cut from.
"""

from __future__ import annotations

import base64
import io
import math
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from boe.errors import BoeError, InputError
from boe.report.source import ImageSource, confine

__all__ = ["EncodedImage", "encode_images", "view_shapes"]

#: Longest side of an embedded report image (pixels).
MAX_SIDE = 256
#: Smallest side the images are shrunk to when they would exceed their byte budget.
MIN_SIDE = 48
#: Images encoded to find the side that fits a budget.
SAMPLE = 64
WEBP_QUALITY = 60
#: WebP encoder effort (0-6): 2 is three times faster than the default 4 for a few percent more bytes.
WEBP_METHOD = 2
#: Points kept per mask outline.
MAX_POINTS = 160


@dataclass(frozen=True)
class EncodedImage:
    """An image as a data URL at display size, with the size of the original (the coordinates of its views)."""

    src: str | None
    width: int | None
    height: int | None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"w": self.width, "h": self.height}
        if self.src is not None:
            out["src"] = self.src
        if self.error is not None:
            out["err"] = self.error
        return out


def _pixels(src: ImageSource) -> np.ndarray:
    from boe.tools.images import open_image

    if src.refused is not None:
        raise InputError(src.refused)
    if src.data is not None:
        with tempfile.NamedTemporaryFile(suffix=".img") as tmp:
            tmp.write(src.data)
            tmp.flush()
            return open_image(tmp.name, max_pixels=None).pixels  # pixels only: nothing is sent
    if src.path is None:
        raise FileNotFoundError("the store keeps neither the bytes nor a path of this image")
    return open_image(src.path, max_pixels=None).pixels


def _shrink(pixels: np.ndarray, max_side: int) -> np.ndarray:
    """The image with its longest side at most ``max_side`` (gray when its channels agree)."""
    import cv2

    h, w = pixels.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        pixels = cv2.resize(pixels, size, interpolation=cv2.INTER_AREA)
    if pixels.ndim == 3 and _is_gray(pixels):
        pixels = np.ascontiguousarray(pixels[:, :, 0])
    return pixels


def _encode(pixels: np.ndarray, max_side: int, quality: int) -> str:
    from PIL import Image  # matplotlib's own dependency; its WebP encoder has a speed setting, OpenCV's has not

    px = _shrink(pixels, max_side)
    if px.ndim == 3:
        px = px[:, :, ::-1]  # BGR -> RGB
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(px)).save(buf, "WEBP", quality=quality, method=WEBP_METHOD)
    return "data:image/webp;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _is_gray(pixels: np.ndarray) -> bool:
    a = pixels.astype(np.int16)
    return bool(np.abs(a[:, :, 0] - a[:, :, 1]).max() <= 2 and np.abs(a[:, :, 0] - a[:, :, 2]).max() <= 2)


def encode_images(
    sources: Mapping[str, ImageSource],
    *,
    max_side: int = MAX_SIDE,
    budget: int | None = None,
    quality: int = WEBP_QUALITY,
    workers: int = 2,
) -> dict[str, EncodedImage]:
    """Every image as a WebP data URL (longest side <= ``max_side``), all of them within ``budget`` bytes
    (the side shrinks until they fit, down to ``MIN_SIDE``).

    An image that cannot be read gets an entry with the reason (and its size
    when the store knows it) instead of pixels.
    """
    keys = list(sources)
    small: dict[str, np.ndarray] = {}  # at most max_side: a second, smaller encoding needs no second read
    size: dict[str, tuple[int, int]] = {}
    out: dict[str, EncodedImage] = {}

    def load(key: str) -> tuple[str, tuple[int, int, np.ndarray] | str]:
        try:
            px = _pixels(sources[key])
        except (BoeError, OSError, ValueError) as exc:
            return key, str(exc) or type(exc).__name__
        return key, (int(px.shape[1]), int(px.shape[0]), _shrink(px, max_side))

    def encode_all(side: int) -> int:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            urls = list(pool.map(lambda k: (k, _encode(small[k], side, quality)), list(small)))
        for key, url in urls:
            w, h = size[key]
            out[key] = EncodedImage(url, w, h)
        return sum(len(u) for _, u in urls)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for key, got in pool.map(load, keys):
            if isinstance(got, str):
                s = sources[key]
                out[key] = EncodedImage(None, s.width, s.height, got)
            else:
                size[key] = got[:2]
                small[key] = got[2]
    side = max_side
    total = encode_all(side)
    if budget is not None and total > budget:
        # How bytes fall with the side depends on the images (noise averages away): try smaller sides on a
        # sample until the projected total fits, then encode everything at that side.
        sample = list(small)[:: max(1, len(small) // SAMPLE)]
        while total > budget and side > MIN_SIDE:
            side = max(MIN_SIDE, int(side * 0.9))
            part = sum(len(_encode(small[k], side, quality)) for k in sample)
            if part * len(small) / len(sample) <= budget * 0.97 or side == MIN_SIDE:
                total = encode_all(side)
    return out


def view_shapes(
    view: Mapping[str, Any] | None,
    figure_of: Callable[[Mapping[str, Any]], int] | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any] | None:
    """The drawable form of an action's view: kind, figure index, box, mask outlines and mask box (image pixels).

    ``figure_of`` maps the view to the index of the question's image it was cut from (by its ``image_id`` or
    ``figure``); without it a numeric ``figure`` is the index.
    """
    if not isinstance(view, Mapping):
        return None
    out: dict[str, Any] = {"k": str(view.get("kind") or "view")}
    if figure_of is not None:
        out["f"] = figure_of(view)
    else:
        try:
            out["f"] = int(view.get("figure") or 0)
        except (TypeError, ValueError):
            out["f"] = 0
    box = view.get("box")
    if _is_box(box):
        out["b"] = [round(float(v), 1) for v in box]  # type: ignore[union-attr]
    polys: list[list[float]] = []
    if view.get("polygon") is not None:
        polys += _polygons([view["polygon"]])
    if view.get("polygons") is not None:
        polys += _polygons(view["polygons"])
    if view.get("mask") is not None:
        polys += _mask_polygons(view["mask"], base_dir)
    if polys:
        out["m"] = polys
    seg = view.get("segmentation")
    if not polys and isinstance(seg, Mapping) and _is_box(seg.get("mask_box")):
        out["mb"] = [round(float(v), 1) for v in seg["mask_box"]]  # where the mask was, when its outline is not kept
    src = view.get("source") or view.get("field")
    if isinstance(src, str):
        out["s"] = src
    return out


def _is_box(box: Any) -> bool:
    return (
        isinstance(box, (list, tuple))
        and len(box) == 4
        and all(isinstance(v, (int, float)) and math.isfinite(v) for v in box)
        and box[2] > box[0]
        and box[3] > box[1]
    )


def _polygons(items: Any) -> list[list[float]]:
    out = []
    for poly in items if isinstance(items, list) else []:
        pts = []
        for p in poly if isinstance(poly, list) else []:
            if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p):
                pts += [round(float(p[0]), 1), round(float(p[1]), 1)]
        if len(pts) >= 6:
            out.append(pts)
    return out


def _mask_polygons(mask: Any, base_dir: Path | None) -> list[list[float]]:
    """Outlines of a mask given as a file, ``{"path": ...}`` or an uncompressed RLE; [] when unreadable."""
    import cv2

    arr: np.ndarray | None = None
    if isinstance(mask, Mapping) and "counts" in mask and "size" in mask:
        arr = _decode_rle(mask)
    else:
        path = mask.get("path") if isinstance(mask, Mapping) else mask
        if isinstance(path, str):
            inside, _ = confine(path, base_dir)  # a mask file outside the image root is not read
            arr = cv2.imread(inside, cv2.IMREAD_GRAYSCALE) if inside is not None else None
    if arr is None or arr.size == 0:
        return []
    binary = (arr > 0).astype(np.uint8)
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    out = []
    for c in sorted(contours, key=cv2.contourArea, reverse=True)[:8]:
        eps = 0.5
        approx = c
        while len(approx) > MAX_POINTS:
            approx = cv2.approxPolyDP(c, eps, True)
            eps *= 2
        pts = approx.reshape(-1, 2)
        if len(pts) >= 3:
            out.append([float(v) for xy in pts for v in xy])
    return out


def _decode_rle(mask: Mapping[str, Any]) -> np.ndarray | None:
    try:
        h, w = (int(v) for v in mask["size"])
        counts = [int(c) for c in mask["counts"]]
    except (TypeError, ValueError):
        return None
    if sum(counts) != h * w:
        return None
    flat = np.zeros(h * w, np.uint8)
    pos, val = 0, 0
    for c in counts:
        if val:
            flat[pos : pos + c] = 1
        pos += c
        val ^= 1
    return flat.reshape(w, h).T  # column-major
