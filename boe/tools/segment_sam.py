"""segment-anything (SAM) behind the `Segmenter` protocol, loaded safely from a user-supplied checkpoint.

    seg = SamSegmenter.from_checkpoint("sam_vit_b_01ec64.pth", model="vit_b", device="cpu")
    seg.segment(image, Box(40, 40, 200, 180))        # a mask of the image's size

torch and segment-anything are imported here, inside the loader, never on
``import boe``: without the ``sam`` extra, asking for this segmenter raises
`MissingExtraError` naming it. The checkpoint is read with
``torch.load(..., weights_only=True)`` (no pickled code runs); the encoder's
shape is read from the weights themselves, so a checkpoint of another size
than ``--sam-model`` names is refused with a clear message, and small
models (tests build one with ``_build_sam``) load too.

The image embedding (vit_b: ~15 s on two CPU cores) is computed once per
image and kept (a few images, least recently used first out); every further
prompt on that image costs only the mask decoder (~0.06 s).
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from boe.errors import ConfigError, InputError, MissingExtraError
from boe.tools.crop import Box
from boe.tools.images import LoadedImage
from boe.tools.segment import Segmentation, register_segmenter, to_rgb

__all__ = ["SAM_MODELS", "SamArch", "SamSegmenter", "infer_arch", "load_sam", "require_sam"]

#: The released encoder shapes: (embed dim, depth, heads, global-attention blocks).
SAM_MODELS: dict[str, tuple[int, int, int, tuple[int, ...]]] = {
    "vit_b": (768, 12, 12, (2, 5, 8, 11)),
    "vit_l": (1024, 24, 16, (5, 11, 17, 23)),
    "vit_h": (1280, 32, 16, (7, 15, 23, 31)),
}
_PREFIX = "image_encoder."
_SAM_PACKAGES = (("torch", "torch"), ("torchvision", "torchvision"), ("segment_anything", "segment-anything"))
_GLOBAL_REL_POS = 2 * (1024 // 16) - 1  # global blocks attend over the 64x64 token grid


def require_sam(purpose: str = "segmentation with a SAM checkpoint") -> None:
    """Raise `MissingExtraError` naming the ``sam`` extra when torch or segment-anything cannot be found."""
    for module, package in _SAM_PACKAGES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingExtraError("sam", package, purpose)


@dataclass(frozen=True)
class SamArch:
    """The image-encoder shape of a checkpoint."""

    embed_dim: int
    depth: int
    heads: int
    global_attn: tuple[int, ...]

    @property
    def name(self) -> str:
        """``vit_b`` / ``vit_l`` / ``vit_h`` for the released shapes, else a description."""
        for name, shape in SAM_MODELS.items():
            if shape == (self.embed_dim, self.depth, self.heads, self.global_attn):
                return name
        return f"vit(dim={self.embed_dim},depth={self.depth},heads={self.heads},global={list(self.global_attn)})"


def infer_arch(state: dict[str, Any]) -> SamArch:
    """Read the encoder shape from a SAM state dict (patch embedding, block count, relative positions)."""
    try:
        embed = int(state[f"{_PREFIX}patch_embed.proj.weight"].shape[0])
        start = f"{_PREFIX}blocks."
        blocks = sorted({int(k[len(start) :].split(".", 1)[0]) for k in state if k.startswith(start)})
        head_dim = int(state[f"{_PREFIX}blocks.0.attn.rel_pos_h"].shape[1])
        glob = tuple(i for i in blocks if int(state[f"{_PREFIX}blocks.{i}.attn.rel_pos_h"].shape[0]) == _GLOBAL_REL_POS)
    except (KeyError, AttributeError, IndexError, ValueError) as exc:
        raise InputError(f"not a segment-anything checkpoint: missing or odd image-encoder weight ({exc})") from None
    if not blocks or blocks != list(range(len(blocks))) or head_dim <= 0 or embed % head_dim:
        raise InputError("not a segment-anything checkpoint: the image-encoder blocks do not add up")
    return SamArch(embed, len(blocks), embed // head_dim, glob)


def _device(torch: Any, device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--sam-device {device}: CUDA is not available on this machine (use cpu)")
        return device
    if device != "cpu":
        raise ConfigError(f"--sam-device must be cpu, cuda, cuda:N or auto, got {device!r}")
    return device


def load_sam(checkpoint: str | Path, model: str = "auto", device: str = "cpu") -> tuple[Any, SamArch, str]:
    """(the SAM module in eval mode on ``device``, its encoder shape, the device) from a checkpoint file.

    ``model`` is ``auto`` (take the shape from the weights) or one of
    ``vit_b | vit_l | vit_h``, which the weights must then match.
    """
    if model != "auto" and model not in SAM_MODELS:
        raise ConfigError(f"--sam-model must be auto, {', '.join(SAM_MODELS)}; got {model!r}")
    require_sam()
    path = Path(checkpoint).expanduser()
    if not path.is_file():
        raise InputError(f"SAM checkpoint not found: {str(checkpoint)!r}")
    try:
        import torch
        from segment_anything.build_sam import _build_sam
    except ImportError as exc:
        raise MissingExtraError("sam", exc.name or "segment-anything", "segmentation with a SAM checkpoint") from exc
    dev = _device(torch, device)
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError... for bad or unsafe files
        raise InputError(
            f"cannot read SAM checkpoint {str(checkpoint)!r} as plain weights (weights_only=True): "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc
    if isinstance(state, dict) and not any(k.startswith(_PREFIX) for k in state):
        for key in ("model", "state_dict"):
            if isinstance(state.get(key), dict):
                state = state[key]
                break
    if not isinstance(state, dict):
        raise InputError(f"SAM checkpoint {str(checkpoint)!r} does not hold a state dict")
    arch = infer_arch(state)
    if model != "auto" and arch.name != model:
        raise ConfigError(f"SAM checkpoint {str(checkpoint)!r} holds a {arch.name} model, not {model}")
    sam = _build_sam(arch.embed_dim, arch.depth, arch.heads, list(arch.global_attn), checkpoint=None)
    try:
        sam.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"SAM checkpoint {str(checkpoint)!r} does not fit a {arch.name} model: {exc}") from exc
    sam.to(dev)
    sam.eval()
    return sam, arch, dev


class SamSegmenter:
    """`SamPredictor` with the image embedding computed once per image and reused for every prompt."""

    name = "sam"

    def __init__(self, sam: Any, *, arch: SamArch, checkpoint: str, device: str, cache_images: int = 4) -> None:
        from segment_anything import SamPredictor

        if cache_images < 1:
            raise ConfigError("the SAM embedding cache must hold at least one image")
        self.predictor = SamPredictor(sam)
        self.arch = arch
        self.checkpoint = checkpoint
        self.device = device
        self.cache_images = cache_images
        self._embeddings: OrderedDict[str, tuple[Any, tuple[int, int], tuple[int, int]]] = OrderedDict()
        self._current: str | None = None
        self._lock = threading.Lock()
        self.embeddings_computed = 0
        self.prompts = 0
        self.embed_seconds = 0.0
        self.prompt_seconds = 0.0

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, model: str = "auto", device: str = "cpu", cache_images: int = 4
    ) -> SamSegmenter:
        """Load a checkpoint safely (see `load_sam`) and wrap it."""
        sam, arch, dev = load_sam(checkpoint, model, device)
        return cls(sam, arch=arch, checkpoint=str(checkpoint), device=dev, cache_images=cache_images)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": {"checkpoint": self.checkpoint, "model": self.arch.name, "device": self.device},
        }

    def _embed(self, image: LoadedImage) -> bool:
        """Make ``image`` the predictor's image; True when its embedding had to be computed."""
        key = image.ref.image_id
        if self._current == key:
            return False
        p = self.predictor
        hit = self._embeddings.get(key)
        if hit is not None:
            p.features, p.original_size, p.input_size = hit
            p.is_image_set = True
            self._embeddings.move_to_end(key)
            self._current = key
            return False
        t0 = time.perf_counter()
        p.set_image(to_rgb(image.pixels), image_format="RGB")
        self.embed_seconds += time.perf_counter() - t0
        self.embeddings_computed += 1
        self._embeddings[key] = (p.features, p.original_size, p.input_size)
        while len(self._embeddings) > self.cache_images:
            self._embeddings.popitem(last=False)
        self._current = key
        return True

    def segment(self, image: LoadedImage, box: Box, point: tuple[int, int] | None = None) -> Segmentation:
        import torch

        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            embedded = self._embed(image)
            t1 = time.perf_counter()
            kwargs: dict[str, Any] = {"box": np.array(box.as_list(), dtype=np.float32), "multimask_output": False}
            if point is not None:
                kwargs.update(point_coords=np.array([point], np.float32), point_labels=np.array([1]))
            masks, scores, _ = self.predictor.predict(**kwargs)
            self.prompts += 1
            self.prompt_seconds += time.perf_counter() - t1
        best = int(np.argmax(scores))
        return Segmentation(
            np.asarray(masks[best], dtype=bool),
            box,
            f"sam:{self.arch.name}",
            score=float(scores[best]),
            seconds=time.perf_counter() - t0,
            embedded=embedded,
            point=point,
        )


@register_segmenter("sam")
def _sam_factory(checkpoint: str, model: str = "auto", device: str = "cpu", **kwargs: Any) -> SamSegmenter:
    return SamSegmenter.from_checkpoint(checkpoint, model=model, device=device, **kwargs)
