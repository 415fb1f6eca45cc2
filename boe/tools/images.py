"""Reading the input image safely: existence, permissions, dataset root, format, metadata.

`open_image` turns a path into a `LoadedImage` (pixels, the bytes sent to the
model as a data URL, DICOM metadata mapped to slot values) or raises
`InputError` with a message a user can act on. Graph state only ever holds
the `ImageRef` (path and content id); pixels stay in process memory.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from boe.errors import InputError, MissingExtraError

__all__ = ["MAX_IMAGE_BYTES", "ImageRef", "LoadedImage", "check_path", "encode_png", "open_image"]

MAX_IMAGE_BYTES = 64 * 1024 * 1024

_DICOM_MODALITY = {
    "CT": "ct",
    "MR": "mr",
    "US": "us",
    "CR": "xr",
    "DX": "xr",
    "RG": "xr",
    "DR": "xr",
    "MG": "mammography",
    "NM": "nuclear",
    "PT": "nuclear",
    "XA": "angiography",
    "RF": "fluoroscopy",
}


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise MissingExtraError("agent", "opencv-python-headless", "reading images") from exc
    return cv2


@dataclass(frozen=True)
class ImageRef:
    """What graph state and the store keep about an input image (no pixels)."""

    path: str
    image_id: str  # sha256 of the file bytes, first 16 hex digits
    figure: str
    mime: str
    width: int
    height: int
    metadata: dict[str, str] = field(default_factory=dict)  # slot -> value from DICOM tags
    dicom: dict[str, Any] | None = None  # the DICOM header values read (tags, frame, window), None for other formats

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(eq=False)
class LoadedImage:
    """An image in memory: 8-bit pixels (gray or BGR) and the data URL sent to models."""

    ref: ImageRef
    pixels: np.ndarray
    data_url: str


def check_path(path: str | Path, root: str | Path | None = None) -> Path:
    """The resolved path of an existing regular file (inside ``root`` when given), else `InputError`."""
    p = Path(path).expanduser()
    try:
        resolved = p.resolve(strict=False)
    except (OSError, RuntimeError) as exc:
        raise InputError(f"cannot resolve image path {str(path)!r}: {exc}") from exc
    if root is not None:
        r = Path(root).expanduser().resolve()
        if not r.is_dir():
            raise InputError(f"dataset root {str(root)!r} is not a directory")
        if not resolved.is_relative_to(r):
            raise InputError(f"image path {str(path)!r} is outside the dataset root {str(r)!r}")
    if not resolved.exists():
        raise InputError(f"image not found: {str(path)!r}")
    if not resolved.is_file():
        raise InputError(f"image path {str(path)!r} is not a regular file")
    return resolved


def open_image(
    path: str | Path, root: str | Path | None = None, figure: str = "0", *, frame: int | None = None
) -> LoadedImage:
    """Read, validate and decode one image file (PNG, JPEG, BMP, TIFF, WebP or DICOM).

    A DICOM file's pixels go through its modality LUT (rescale slope and
    intercept) and its window (WindowCenter / WindowWidth, else the value
    range) to 8 bits; of a multi-frame file, ``frame`` (default: the middle
    one) is read. Its Modality, BodyPartExamined and ViewPosition /
    ImageOrientationPatient tags become slot values in ``ref.metadata``.
    """
    resolved = check_path(path, root)
    try:
        size = resolved.stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise InputError(f"image {str(path)!r} is {size} bytes; the limit is {MAX_IMAGE_BYTES}")
        data = resolved.read_bytes()
    except PermissionError as exc:
        raise InputError(f"cannot read image {str(path)!r}: permission denied") from exc
    except IsADirectoryError as exc:
        raise InputError(f"image path {str(path)!r} is a directory") from exc
    except OSError as exc:
        raise InputError(f"cannot read image {str(path)!r}: {exc.strerror or exc}") from exc
    if not data:
        raise InputError(f"image {str(path)!r} is empty")
    image_id = hashlib.sha256(data).hexdigest()[:16]
    metadata: dict[str, str] = {}
    header: dict[str, Any] | None = None
    if len(data) > 132 and data[128:132] == b"DICM":
        pixels, metadata, header = _read_dicom(data, str(path), frame)
        mime, payload = "image/png", encode_png(pixels)
    else:
        cv2 = _cv2()
        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if arr is None or arr.size == 0:
            raise InputError(f"{str(path)!r} is not an image this tool can read (PNG, JPEG, BMP, TIFF, WebP, DICOM)")
        pixels = _to_uint8(arr)
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            mime, payload = "image/png", data
        elif data[:3] == b"\xff\xd8\xff":
            mime, payload = "image/jpeg", data
        else:
            mime, payload = "image/png", encode_png(pixels)
    h, w = pixels.shape[:2]
    ref = ImageRef(str(resolved), image_id, figure, mime, int(w), int(h), metadata, header)
    url = f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"
    return LoadedImage(ref, pixels, url)


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of an 8-bit image."""
    cv2 = _cv2()
    ok, buf = cv2.imencode(".png", pixels)
    if not ok:
        raise InputError("could not encode the image as PNG")
    return bytes(buf.tobytes())


def _to_uint8(arr: np.ndarray) -> np.ndarray:
    """8-bit gray or BGR pixels from any decoded array (alpha dropped, wide types rescaled)."""
    cv2 = _cv2()
    if arr.ndim == 3 and arr.shape[2] == 4:
        arr = cv2.cvtColor(arr, cv2.COLOR_BGRA2BGR)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.dtype != np.uint8:
        a = arr.astype(np.float64)
        lo, hi = float(np.min(a)), float(np.max(a))
        arr = np.zeros(a.shape, np.uint8) if hi <= lo else ((a - lo) * (255.0 / (hi - lo))).round().astype(np.uint8)
    return np.ascontiguousarray(arr)


def _read_dicom(data: bytes, name: str, frame: int | None = None) -> tuple[np.ndarray, dict[str, str], dict[str, Any]]:
    try:
        import pydicom
        from pydicom.pixels.processing import apply_modality_lut
    except ImportError as exc:
        raise MissingExtraError("agent", "pydicom", "reading DICOM images") from exc
    try:
        ds = pydicom.dcmread(io.BytesIO(data))
        arr = np.asarray(ds.pixel_array)
    except Exception as exc:  # pydicom raises many types for broken files
        raise InputError(f"{name!r} is a DICOM file without readable pixel data: {exc}") from exc
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    colour = str(ds.get("PhotometricInterpretation", "") or "").upper() not in ("", "MONOCHROME1", "MONOCHROME2")
    header: dict[str, Any] = {"frames": frames}
    if frames > 1 and arr.ndim >= 3 and arr.shape[0] == frames:
        index = frames // 2 if frame is None else frame
        if not 0 <= index < frames:
            raise InputError(f"{name!r} has {frames} frames (0..{frames - 1}); frame {index} does not exist")
        arr = arr[index]
        header["frame"] = index
    elif frame not in (None, 0):
        raise InputError(f"{name!r} has a single frame; frame {frame} does not exist")
    if colour:
        pixels = _to_uint8(arr[:, :, ::-1] if arr.ndim == 3 and arr.shape[2] == 3 else arr)  # RGB -> BGR
    else:
        try:
            values = np.asarray(apply_modality_lut(arr, ds), dtype=np.float64)
        except Exception:  # a broken LUT: the stored values
            values = arr.astype(np.float64)
        pixels, window = _window(values, ds)
        header["window"] = window
        if str(ds.get("PhotometricInterpretation", "")).upper() == "MONOCHROME1":
            pixels = 255 - pixels
    meta: dict[str, str] = {}
    tags: dict[str, Any] = {}
    modality = str(ds.get("Modality", "") or "").strip().upper()
    if modality:
        tags["Modality"] = modality
    if modality in _DICOM_MODALITY:
        meta["modality"] = _DICOM_MODALITY[modality]
    body = str(ds.get("BodyPartExamined", "") or "").strip()
    if body:
        tags["BodyPartExamined"] = body
        from boe.vocab import vocabulary

        canon = vocabulary().canonical("region", body)
        if canon is not None and canon.known:
            meta["region"] = canon.value
    view = str(ds.get("ViewPosition", "") or "").strip()
    if view:
        tags["ViewPosition"] = view
    iop = ds.get("ImageOrientationPatient")
    if iop is not None:
        tags["ImageOrientationPatient"] = [_first([x]) for x in iop]
    plane = _dicom_plane(ds)
    if plane:
        meta["plane"] = plane
    header["tags"] = tags
    header["sources"] = {
        slot: tag
        for slot, tag in (
            ("modality", "Modality"),
            ("region", "BodyPartExamined"),
            ("plane", "ViewPosition" if view.upper() in _VIEW_PLANES else "ImageOrientationPatient"),
        )
        if slot in meta
    }
    return pixels, meta, header


_VIEW_PLANES = {"PA": "pa", "AP": "ap", "LL": "lateral", "RL": "lateral", "LAT": "lateral", "LATERAL": "lateral"}


def _first(value: Any) -> float | None:
    """The first number of a (possibly multi-valued) DICOM element."""
    if value is None:
        return None
    try:
        seq = list(value) if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__") else [value]
        return float(seq[0]) if seq else None
    except (TypeError, ValueError):
        return None


def _window(values: np.ndarray, ds: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """8-bit pixels through the file's window (WindowCenter / WindowWidth), else its value range."""
    centre, width = _first(ds.get("WindowCenter")), _first(ds.get("WindowWidth"))
    if centre is not None and width is not None and width > 1:
        lo, hi = centre - width / 2.0, centre + width / 2.0
        source = "header"
    elif int(ds.get("BitsStored", 16) or 16) <= 8 and values.min() >= 0 and values.max() <= 255:
        return np.ascontiguousarray(values.round().astype(np.uint8)), {
            "center": 127.5,
            "width": 256.0,
            "source": "8-bit",
        }
    else:
        lo, hi = float(np.min(values)), float(np.max(values))
        source = "range"
    if hi <= lo:
        return np.zeros(values.shape, np.uint8), {"center": lo, "width": 0.0, "source": source}
    scaled = np.clip((values - lo) * (255.0 / (hi - lo)), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(scaled), {"center": (lo + hi) / 2.0, "width": hi - lo, "source": source}


def _dicom_plane(ds: Any) -> str | None:
    view = str(ds.get("ViewPosition", "") or "").strip().upper()
    if view in _VIEW_PLANES:
        return _VIEW_PLANES[view]
    iop = ds.get("ImageOrientationPatient")
    if iop is None or len(iop) != 6:
        return None
    try:
        row = np.array([float(x) for x in iop[:3]])
        col = np.array([float(x) for x in iop[3:]])
    except (TypeError, ValueError):
        return None
    normal = np.abs(np.cross(row, col))
    if not np.isfinite(normal).all() or normal.max() < 0.5:
        return None
    return ("sagittal", "coronal", "axial")[int(np.argmax(normal))]
