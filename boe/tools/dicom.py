"""Reading a DICOM file: one frame's pixels through pydicom's own modality and VOI transforms, and its header tags.

The grey levels sent to a model are those a DICOM viewer shows: the stored
values go through the modality LUT (Modality LUT Sequence or Rescale Slope /
Intercept, `pydicom.pixels.apply_modality_lut`), then the VOI LUT Sequence or
the window (Window Center / Width with its VOI LUT Function: LINEAR,
LINEAR_EXACT or SIGMOID, `pydicom.pixels.apply_voi_lut`), and the VOI output
range is mapped to 8 bits; MONOCHROME1 is inverted. A file without a VOI
transform (or with one pydicom refuses) is shown through its value range. Of
an enhanced multi-frame file, the chosen frame's functional groups (Frame VOI
LUT, Pixel Value Transformation) are used.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from boe.errors import InputError, MissingExtraError
from boe.tools.pixels import PIXEL_LIMIT, to_uint8, too_many_pixels

__all__ = ["read_dicom", "voi_to_8bit"]

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
_VIEW_PLANES = {"PA": "pa", "AP": "ap", "LL": "lateral", "RL": "lateral", "LAT": "lateral", "LATERAL": "lateral"}
# per-frame functional groups (enhanced multi-frame files) -> the attributes they carry for that frame
_FRAME_GROUPS = {
    "PixelValueTransformationSequence": ("RescaleSlope", "RescaleIntercept"),
    "FrameVOILUTSequence": ("WindowCenter", "WindowWidth", "VOILUTFunction"),
}


def read_dicom(
    data: bytes, name: str, frame: int | None = None, pixel_limit: int | None = PIXEL_LIMIT
) -> tuple[np.ndarray, dict[str, str], dict[str, Any]]:
    """8-bit pixels of one frame, slot values from the header tags, and the header values read."""
    try:
        import pydicom
    except ImportError as exc:
        raise MissingExtraError("agent", "pydicom", "reading DICOM images") from exc
    try:
        ds = pydicom.dcmread(io.BytesIO(data))
        rows, cols = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
    except Exception as exc:  # pydicom raises many types for broken files
        raise InputError(f"{name!r} is a DICOM file without a readable header: {exc}") from exc
    if pixel_limit is not None and rows * cols > pixel_limit:
        raise InputError(too_many_pixels(name, cols, rows, pixel_limit, len(data)))
    try:
        frames = max(1, int(ds.get("NumberOfFrames", 1) or 1))
    except (TypeError, ValueError):
        frames = 1
    header: dict[str, Any] = {"frames": frames}
    index: int | None = None
    if frames > 1:
        index = frames // 2 if frame is None else frame
        if not 0 <= index < frames:
            raise InputError(f"{name!r} has {frames} frames (0..{frames - 1}); frame {index} does not exist")
        header["frame"] = index
    elif frame not in (None, 0):
        raise InputError(f"{name!r} has a single frame; frame {frame} does not exist")
    try:
        # only the chosen frame is decoded: the pixel limit holds per frame, and a compressed file of many
        # frames would otherwise decode all of them (frames x rows x columns)
        arr = np.asarray(ds.pixel_array if index is None else _dicom_frame(ds, index))
    except Exception as exc:  # pydicom raises many types for broken files
        raise InputError(f"{name!r} is a DICOM file without readable pixel data: {exc}") from exc
    photometric = str(ds.get("PhotometricInterpretation", "") or "").upper()
    if photometric not in ("", "MONOCHROME1", "MONOCHROME2"):
        pixels = to_uint8(arr[:, :, ::-1] if arr.ndim == 3 and arr.shape[2] == 3 else arr)  # RGB -> BGR
    else:
        if index is not None:
            _frame_attributes(ds, index)
        pixels, header["window"] = voi_to_8bit(arr, ds)
        if photometric == "MONOCHROME1":
            pixels = 255 - pixels
    meta, header["tags"], header["sources"] = _slots(ds)
    return pixels, meta, header


def voi_to_8bit(arr: np.ndarray, ds: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """8-bit grey levels of stored values ``arr`` through ``ds``'s modality LUT and VOI transform, and which.

    The VOI LUT Sequence's output range is 0..2^n-1 for its n bits per entry
    (fewer when its data never reach the upper half of that range, as in the
    common 12-bit table declared as 16-bit); a window's is the range pydicom
    maps it onto. Without a VOI transform: the stored 8-bit values as they
    are, else the value range.
    """
    from pydicom.pixels.processing import apply_modality_lut

    try:
        values = np.asarray(apply_modality_lut(arr, ds))
    except Exception:  # a broken modality LUT: the stored values
        values = arr
    try:
        voi = _voi(values, ds)
    except Exception as exc:  # a VOI transform pydicom refuses (a zero width, an unknown function, a bad LUT)
        pixels, info = _value_range(values, ds)
        info["refused"] = f"{type(exc).__name__}: {exc}"[:200]
        return pixels, info
    if voi is None:
        return _value_range(values, ds)
    out, lo, hi, info = voi
    if hi <= lo:
        return np.zeros(out.shape, np.uint8), info
    scaled = np.clip((out.astype(np.float64) - lo) * (255.0 / (hi - lo)), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(scaled), info


def _voi(values: np.ndarray, ds: Any) -> tuple[np.ndarray, float, float, dict[str, Any]] | None:
    """pydicom's VOI output for ``values``, its output range and a description; None without a VOI transform."""
    from pydicom.pixels.processing import apply_voi_lut

    seq = ds.get("VOILUTSequence")
    if seq and seq[0].get("LUTDescriptor") is not None and seq[0].get("LUTData") is not None:
        entries, first, bits = (int(v) for v in seq[0].LUTDescriptor)
        entries = entries or 2**16
        if bits == 8 and entries > 256:  # pydicom 3.0 indexes an 8-bit table through uint8 (entry 256 -> 0)
            seq[0].LUTDescriptor = [seq[0].LUTDescriptor[0], seq[0].LUTDescriptor[1], 16]
        # a value indexes the table: the nearest entry, clipped to the table (pydicom's uint16 index would wrap)
        index = np.clip(np.round(values), first, first + entries - 1).astype(np.int64)
        out = np.asarray(apply_voi_lut(index, ds))
        top = int(np.max(apply_voi_lut(np.arange(first, first + entries, dtype=np.int64), ds)))
        if 0 < top < 2 ** (bits - 1):
            bits = top.bit_length()
        info: dict[str, Any] = {"source": "voi-lut", "bits": bits}
        explanation = str(seq[0].get("LUTExplanation", "") or "").strip()
        if explanation:
            info["explanation"] = explanation[:64]
        return out, 0.0, float(2**bits - 1), info
    if ds.get("WindowCenter") is None or ds.get("WindowWidth") is None:
        return None
    out = np.asarray(apply_voi_lut(values, ds, prefer_lut=False), dtype=np.float64)
    # the ends of the range pydicom maps a window onto: every window function reaches them far outside the window
    with np.errstate(over="ignore", invalid="ignore"):
        ends = np.asarray(apply_voi_lut(np.array([-1e300, 1e300]), ds, prefer_lut=False), dtype=np.float64)
    function = str(ds.get("VOILUTFunction", "") or "LINEAR").strip().upper()
    info = {"center": _first(ds.get("WindowCenter")), "width": _first(ds.get("WindowWidth")), "source": "header"}
    if function != "LINEAR":
        info["function"] = function
    return out, float(ends[0]), float(ends[1]), info


def _value_range(values: np.ndarray, ds: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """8-bit pixels through the whole value range (stored 8-bit values as they are)."""
    if int(ds.get("BitsStored", 16) or 16) <= 8 and values.min() >= 0 and values.max() <= 255:
        return np.ascontiguousarray(np.asarray(values).round().astype(np.uint8)), {
            "center": 127.5,
            "width": 256.0,
            "source": "8-bit",
        }
    lo, hi = float(np.min(values)), float(np.max(values))
    if hi <= lo:
        return np.zeros(values.shape, np.uint8), {"center": lo, "width": 0.0, "source": "range"}
    scaled = np.clip((values.astype(np.float64) - lo) * (255.0 / (hi - lo)), 0, 255).round().astype(np.uint8)
    return np.ascontiguousarray(scaled), {"center": (lo + hi) / 2.0, "width": hi - lo, "source": "range"}


def _frame_attributes(ds: Any, index: int) -> None:
    """Copy the frame's rescale and window from its functional groups onto ``ds`` (enhanced multi-frame files)."""
    groups = []
    per_frame = ds.get("PerFrameFunctionalGroupsSequence")
    if per_frame and index < len(per_frame):
        groups.append(per_frame[index])
    shared = ds.get("SharedFunctionalGroupsSequence")
    if shared:
        groups.append(shared[0])
    for seq_name, names in _FRAME_GROUPS.items():
        for group in groups:  # the frame's own values win over the shared ones
            seq = group.get(seq_name)
            if seq:
                for attr in names:
                    if attr in seq[0] and attr not in ds:
                        setattr(ds, attr, seq[0][attr].value)
                break


def _dicom_frame(ds: Any, index: int) -> np.ndarray:
    """One frame of a multi-frame DICOM dataset, decoded alone."""
    from pydicom.pixels import pixel_array  # type: ignore[attr-defined]

    return np.asarray(pixel_array(ds, index=index))


def _first(value: Any) -> float | None:
    """The first number of a (possibly multi-valued) DICOM element."""
    if value is None:
        return None
    try:
        seq = list(value) if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__") else [value]
        return float(seq[0]) if seq else None
    except (TypeError, ValueError):
        return None


def _slots(ds: Any) -> tuple[dict[str, str], dict[str, Any], dict[str, str]]:
    """Slot values from Modality, BodyPartExamined and ViewPosition / ImageOrientationPatient; the tags; sources."""
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
    sources = {
        slot: tag
        for slot, tag in (
            ("modality", "Modality"),
            ("region", "BodyPartExamined"),
            ("plane", "ViewPosition" if view.upper() in _VIEW_PLANES else "ImageOrientationPatient"),
        )
        if slot in meta
    }
    return meta, tags, sources


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
