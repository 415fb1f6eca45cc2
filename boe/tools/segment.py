"""Segmentation for grounded views: segment-anything with a user checkpoint, or an OpenCV segmenter.

A `Segmenter` turns a box prompt (the claim's region) into a mask of the
image's size. The grounded judge then shows the model one of three views
(`make_view`): the tight crop of the mask's box (``crop``), that crop with
everything outside the mask blacked out (``mask``), or the whole figure with
the mask tinted and outlined (``overlay``). Localisation only chooses what
the judge sees; a mask is never evidence by itself.

Segmenters register by name (`SEGMENTERS`) so a run records what it used
and can rebuild it: ``opencv`` (no weights; GrabCut in the box, Otsu
thresholding when GrabCut cannot run, the largest connected component) and
``sam`` (`boe.tools.segment_sam`, the ``sam`` extra: torch and
segment-anything, a checkpoint the user supplies).
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from boe.core.registry import Registry
from boe.errors import ConfigError
from boe.tools.crop import Box, crop, location_box
from boe.tools.images import LoadedImage, encode_image, fit_pixels
from boe.tools.pixels import load_cv2

__all__ = [
    "SEGMENTERS",
    "VIEW_KINDS",
    "WHOLE_SHARE",
    "OpenCVSegmenter",
    "Segmentation",
    "Segmenter",
    "View",
    "make_segmenter",
    "make_view",
    "mask_box",
    "register_segmenter",
    "to_rgb",
]

ViewKind = Literal["crop", "mask", "overlay"]
VIEW_KINDS: tuple[str, ...] = ("crop", "mask", "overlay")


@dataclass(frozen=True)
class Segmentation:
    """One mask for one prompt, with what produced it and what it cost."""

    mask: np.ndarray  # bool, the image's height x width
    prompt: Box
    segmenter: str  # "sam:vit_b", "opencv:grabcut", ...
    score: float | None = None  # the segmenter's own quality estimate, when it has one
    seconds: float = 0.0
    embedded: bool = False  # this call computed the image embedding (SAM); False when it was reused
    point: tuple[int, int] | None = None

    @functools.cached_property
    def box(self) -> Box | None:
        """The mask's bounding box (None for an empty mask), computed once (the log and the view both read it)."""
        return mask_box(self.mask)

    @property
    def area(self) -> float:
        """The mask's share of the image."""
        return float(self.mask.mean()) if self.mask.size else 0.0

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (no pixels) for the evidence log."""
        box = self.box
        return {
            "segmenter": self.segmenter,
            "prompt_box": self.prompt.as_list(),
            **({"prompt_point": list(self.point)} if self.point is not None else {}),
            "mask_box": None if box is None else box.as_list(),
            "mask_area": round(self.area, 4),
            "score": None if self.score is None else round(float(self.score), 4),
            "seconds": round(self.seconds, 4),
            "embedded": self.embedded,
        }


@runtime_checkable
class Segmenter(Protocol):
    """Box (or point) prompt -> mask of the whole image."""

    name: str

    def describe(self) -> dict[str, Any]:
        """Name and arguments, enough to rebuild the segmenter (recorded with the run)."""
        ...

    def segment(self, image: LoadedImage, box: Box, point: tuple[int, int] | None = None) -> Segmentation:
        """The mask of the structure inside ``box`` (near ``point`` when given). Thread-safe."""
        ...


#: Segmenter factories by name; ``sam`` is a lazy entry (its module imports torch only when a model loads).
SEGMENTERS: Registry[Callable[..., Segmenter]] = Registry("segmenters", "segmenter")
SEGMENTERS.add("sam", "boe.tools.segment_sam:_sam_factory")


def register_segmenter(name: str, *, override: bool = False) -> Callable[[Any], Any]:
    """Decorator: make a segmenter factory available to `make_segmenter` under ``name`` (duplicates refused)."""

    def deco(factory: Any) -> Any:
        SEGMENTERS.add(name, factory, override=override)
        return factory

    return deco


def make_segmenter(
    name: str = "auto",
    *,
    checkpoint: str | None = None,
    model: str = "auto",
    device: str = "cpu",
    **kwargs: Any,
) -> Segmenter:
    """The segmenter a run uses: ``sam`` with a checkpoint, else ``opencv`` (``auto`` picks by the checkpoint)."""
    if name == "auto":
        name = "sam" if checkpoint else "opencv"
    if name not in SEGMENTERS:
        raise ConfigError(f"unknown segmenter {name!r}; known: auto, {', '.join(sorted(SEGMENTERS))}")
    if name == "sam":
        if not checkpoint:
            raise ConfigError("the sam segmenter needs a checkpoint (--sam-checkpoint PATH)")
        return SEGMENTERS.get_obj(name)(checkpoint=checkpoint, model=model, device=device, **kwargs)
    if checkpoint:
        raise ConfigError(f"a SAM checkpoint was given but the segmenter is {name!r}")
    return SEGMENTERS.get_obj(name)(**kwargs)


def to_rgb(pixels: np.ndarray) -> np.ndarray:
    """8-bit RGB from 8-bit gray or BGR pixels (what segment-anything expects)."""
    if pixels.ndim == 2:
        return np.ascontiguousarray(np.stack([pixels] * 3, axis=-1))
    return np.ascontiguousarray(pixels[:, :, ::-1])


def _gray(pixels: np.ndarray) -> np.ndarray:
    if pixels.ndim == 2:
        return pixels
    cv2 = load_cv2()
    return np.asarray(cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY))


def mask_box(mask: np.ndarray) -> Box | None:
    """Bounding box of the true pixels of a mask (exclusive upper corner), None when empty."""
    ys = np.flatnonzero(mask.any(axis=1))
    if ys.size == 0:
        return None
    xs = np.flatnonzero(mask.any(axis=0))
    return Box(int(xs[0]), int(ys[0]), int(xs[-1]) + 1, int(ys[-1]) + 1)


def _clip_box(box: Box, width: int, height: int) -> Box:
    x0, x1 = max(0, min(box.x0, width - 1)), max(1, min(box.x1, width))
    y0, y1 = max(0, min(box.y0, height - 1)), max(1, min(box.y1, height))
    return Box(x0, y0, max(x1, x0 + 1), max(y1, y0 + 1))


def _largest_component(mask: np.ndarray, near: tuple[int, int] | None = None) -> np.ndarray:
    """The connected component holding ``near`` when it is set, else the largest one."""
    cv2 = load_cv2()
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n <= 1:
        return np.zeros(mask.shape, bool)
    if near is not None:
        label = int(labels[near[1], near[0]])
        if label > 0:
            return np.asarray(labels == label)
    best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return np.asarray(labels == best)


@register_segmenter("opencv")
@dataclass
class OpenCVSegmenter:
    """A segmenter without weights: GrabCut initialised with the box, or Otsu thresholding inside it.

    ``method="grabcut"`` (the default) runs GrabCut on the image scaled to at
    most ``max_side`` pixels and falls back to Otsu when GrabCut cannot run
    (a box with no background around it, a flat image); ``method="otsu"``
    thresholds the box's pixels. Either way the largest connected component
    (the one under the point prompt, when given) inside the box is the mask.
    """

    method: Literal["grabcut", "otsu"] = "grabcut"
    iterations: int = 3
    max_side: int = 256
    name: str = field(default="opencv", init=False)

    def __post_init__(self) -> None:
        if self.method not in ("grabcut", "otsu"):
            raise ConfigError(f"OpenCV segmenter method must be grabcut or otsu, got {self.method!r}")
        if self.iterations < 1 or self.max_side < 32:
            raise ConfigError("GrabCut needs at least one iteration and max_side >= 32")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": {"method": self.method, "iterations": self.iterations, "max_side": self.max_side},
        }

    def segment(self, image: LoadedImage, box: Box, point: tuple[int, int] | None = None) -> Segmentation:
        t0 = time.perf_counter()
        gray = _gray(image.pixels)
        h, w = gray.shape
        box = _clip_box(box, w, h)
        used = self.method
        mask = None
        if self.method == "grabcut":
            mask = self._grabcut(gray, box)
            if mask is None:
                used = "otsu"
        if mask is None:
            mask = self._otsu(gray, box)
        inside = np.zeros_like(mask)
        inside[box.y0 : box.y1, box.x0 : box.x1] = mask[box.y0 : box.y1, box.x0 : box.x1]
        mask = _largest_component(inside, point)
        return Segmentation(mask, box, f"opencv:{used}", seconds=time.perf_counter() - t0, point=point)

    def _grabcut(self, gray: np.ndarray, box: Box) -> np.ndarray | None:
        cv2 = load_cv2()
        h, w = gray.shape
        scale = min(1.0, self.max_side / max(h, w))
        small = cv2.resize(gray, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
        sh, sw = small.shape
        x0, y0 = int(box.x0 * scale), int(box.y0 * scale)
        x1, y1 = min(sw, max(x0 + 1, round(box.x1 * scale))), min(sh, max(y0 + 1, round(box.y1 * scale)))
        # GrabCut models the background from the pixels outside the rectangle: it needs some
        if x1 - x0 < 4 or y1 - y0 < 4 or (x1 - x0) * (y1 - y0) >= 0.97 * sw * sh or small.std() < 1.0:
            return None
        gc = np.zeros(small.shape, np.uint8)
        bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
        bgr = cv2.cvtColor(small, cv2.COLOR_GRAY2BGR)
        # GrabCut seeds its colour models from OpenCV's per-thread RNG, which earlier calls advance:
        # reseed so the same image and box give the same mask whatever ran before.
        cv2.setRNGSeed(0)
        try:
            cv2.grabCut(bgr, gc, (x0, y0, x1 - x0, y1 - y0), bgd, fgd, self.iterations, cv2.GC_INIT_WITH_RECT)
        except cv2.error:
            return None
        fg = ((gc == cv2.GC_FGD) | (gc == cv2.GC_PR_FGD)).astype(np.uint8)
        if not fg.any():
            return None
        return np.asarray(cv2.resize(fg, (w, h), interpolation=cv2.INTER_NEAREST) > 0)

    def _otsu(self, gray: np.ndarray, box: Box) -> np.ndarray:
        cv2 = load_cv2()
        roi = cv2.GaussianBlur(gray[box.y0 : box.y1, box.x0 : box.x1], (5, 5), 0)
        mask = np.zeros(gray.shape, bool)
        if roi.size == 0 or int(roi.max()) == int(roi.min()):
            mask[box.y0 : box.y1, box.x0 : box.x1] = True  # nothing to separate: the whole box
            return mask
        _, fg = cv2.threshold(roi, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
        mask[box.y0 : box.y1, box.x0 : box.x1] = fg > 0
        return mask


@dataclass(frozen=True)
class View:
    """What a grounded judge is shown: the encoded image and where it came from (``whole``: no image of its own,
    the figure itself, already attached, is the view)."""

    kind: str
    data: bytes
    box: Box  # the part of the figure the view shows
    fallback: str | None = None  # why the region box was used instead of the mask's
    mime: str = "image/png"

    @functools.cached_property
    def data_url(self) -> str:
        """The image as a base64 data URL, encoded once however many judges are shown the view."""
        return f"data:{self.mime};base64," + base64.b64encode(self.data).decode("ascii")


#: A crop covering this share of the figure or more is no view of its own: the judge is shown the figure itself.
WHOLE_SHARE = 0.9


def make_view(
    kind: str,
    pixels: np.ndarray,
    seg: Segmentation,
    *,
    pad: float = 0.08,
    min_frac: float = 0.3,
    max_pixels: int | None = None,
    mime: str = "image/png",
    whole_share: float | None = None,
) -> View:
    """The ``crop``, ``mask`` or ``overlay`` view of a segmentation (the region box when the mask is empty),
    cut from the full-resolution pixels, downscaled to at most ``max_pixels`` and encoded as ``mime`` (the
    figure's own format: JPEG stays JPEG). A crop covering ``whole_share`` of the figure or more is the
    ``whole`` view: nothing is encoded (the figure, already in the request, is shown instead)."""
    if kind not in VIEW_KINDS:
        raise ConfigError(f"grounded view must be one of {', '.join(VIEW_KINDS)}, got {kind!r}")
    h, w = pixels.shape[:2]
    mbox = seg.box
    fallback = None
    if mbox is None:
        fallback = "the mask is empty; the view shows the prompt region"
        mask = np.zeros((h, w), bool)
        mask[seg.prompt.y0 : seg.prompt.y1, seg.prompt.x0 : seg.prompt.x1] = True
        mbox = seg.prompt
    else:
        mask = seg.mask
    box = location_box([], w, h, within=mbox, pad=pad, min_frac=min_frac)
    if kind == "crop":
        if whole_share is not None and box.width * box.height >= whole_share * w * h:
            return View("whole", b"", Box(0, 0, w, h), fallback, mime)
        return View(kind, crop(pixels, box, max_pixels, mime), box, fallback, mime)
    if kind == "mask":
        masked = pixels.copy()
        masked[~mask] = 0
        return View(kind, crop(masked, box, max_pixels, mime), box, fallback, mime)
    cv2 = load_cv2()
    bgr = cv2.cvtColor(pixels, cv2.COLOR_GRAY2BGR) if pixels.ndim == 2 else pixels.copy()
    tint = bgr.copy()
    tint[mask] = (0, 200, 0)
    out = cv2.addWeighted(bgr, 0.65, tint, 0.35, 0)
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(out, contours, -1, (0, 255, 255), max(1, round(min(h, w) / 200)))
    return View(kind, encode_image(fit_pixels(out, max_pixels), mime), Box(0, 0, w, h), fallback, mime)
