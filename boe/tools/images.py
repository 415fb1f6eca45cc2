"""Reading the input image safely: existence, permissions, dataset root, format, metadata.

`open_image` turns a path into a `LoadedImage` (pixels, the bytes sent to the
model as a data URL, DICOM metadata mapped to slot values) or raises
`InputError` with a message a user can act on. Graph state only ever holds
the `ImageRef` (path and content id); pixels stay in process memory.

Two pixel limits apply. ``pixel_limit`` (default `PIXEL_LIMIT`) refuses a file
whose header declares more pixels, before anything is decoded (a 400 KB PNG can
declare 20000x20000). ``max_pixels`` (default `MAX_PIXELS`) bounds what is
*sent*: a larger figure is downscaled once for the model, while ``pixels``
keeps the full resolution that crops are cut from. Whatever the file holds
(16-bit or float PNG/TIFF, DICOM), what is sent is 8-bit with the contrast kept.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from boe.errors import InputError
from boe.tools.pixels import PIXEL_LIMIT, load_cv2, to_uint8, too_many_pixels

__all__ = [
    "MAX_IMAGE_BYTES",
    "MAX_PIXELS",
    "PIXEL_LIMIT",
    "ImageRef",
    "LoadedImage",
    "check_path",
    "check_pixels",
    "encode_image",
    "encode_png",
    "fit_pixels",
    "header_size",
    "open_image",
]

MAX_IMAGE_BYTES = 64 * 1024 * 1024
#: Pixels of a figure as sent to a model (about 1,340 Qwen2.5-VL tokens); larger figures are downscaled.
MAX_PIXELS = 1024 * 1024


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
    pixels: np.ndarray  # full resolution (crops are cut from these)
    data_url: str  # what is sent: 8-bit, at most ``max_pixels``, encoded once
    sent_size: tuple[int, int] = (0, 0)  # width, height of the sent image (0, 0: the pixels' own size)
    max_pixels: int | None = MAX_PIXELS  # the limit views cut from these pixels are sent within


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
    path: str | Path,
    root: str | Path | None = None,
    figure: str = "0",
    *,
    frame: int | None = None,
    max_pixels: int | None = MAX_PIXELS,
    pixel_limit: int | None = PIXEL_LIMIT,
) -> LoadedImage:
    """Read, validate and decode one image file (PNG, JPEG, BMP, TIFF, WebP or DICOM).

    A file whose header declares more than ``pixel_limit`` pixels is refused
    before decoding; the image sent is downscaled to at most ``max_pixels``
    (None: no limit) and is always 8-bit.

    A DICOM file's pixels go through pydicom's modality LUT and VOI LUT or
    window (else the value range) to 8 bits (`boe.tools.dicom`); of a
    multi-frame file, ``frame`` (default: the middle one) is read. Its Modality, BodyPartExamined and ViewPosition /
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
        from boe.tools.dicom import read_dicom

        pixels, metadata, header = read_dicom(data, str(path), frame, pixel_limit)
        passthrough = None
    else:
        if check_pixels(data, str(path), pixel_limit) is None and pixel_limit is not None:
            # a size the header does not give cannot be limited before decoding (a 4 MB PBM can declare 20000x20000)
            raise InputError(
                f"{str(path)!r} is not an image this tool can read: its width and height cannot be read from its "
                f"header ({len(data)} bytes; PNG, JPEG, BMP, TIFF, WebP, GIF or DICOM)"
            )
        cv2 = load_cv2()
        try:
            arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        except cv2.error as exc:  # OpenCV's own limits (e.g. more than 2^30 pixels in a format not checked above)
            raise InputError(f"{str(path)!r} cannot be decoded: {str(exc).strip().splitlines()[-1]}") from exc
        if arr is None or arr.size == 0:
            raise InputError(f"{str(path)!r} is not an image this tool can read (PNG, JPEG, BMP, TIFF, WebP, DICOM)")
        if pixel_limit is not None and arr.shape[0] * arr.shape[1] > pixel_limit:
            raise InputError(too_many_pixels(str(path), int(arr.shape[1]), int(arr.shape[0]), pixel_limit, len(data)))
        pixels = to_uint8(arr)
        eight_bit = arr.dtype == np.uint8
        if eight_bit and data[:8] == b"\x89PNG\r\n\x1a\n":
            passthrough = "image/png"
        elif eight_bit and data[:3] == b"\xff\xd8\xff":
            passthrough = "image/jpeg"
        else:
            passthrough = None
    h, w = pixels.shape[:2]
    sent = fit_pixels(pixels, max_pixels)
    if sent is pixels and passthrough is not None:
        mime, payload = passthrough, data  # an 8-bit PNG/JPEG within the limit goes as it is
    elif passthrough == "image/jpeg":  # a downscaled photo stays a JPEG (a PNG of it is several times larger)
        ok, buf = load_cv2().imencode(".jpg", sent, [load_cv2().IMWRITE_JPEG_QUALITY, 92])
        if not ok:
            raise InputError(f"could not encode {str(path)!r} for the model")
        mime, payload = "image/jpeg", bytes(buf.tobytes())
    else:
        mime, payload = "image/png", encode_png(sent)
    ref = ImageRef(str(resolved), image_id, figure, mime, int(w), int(h), metadata, header)
    url = f"data:{mime};base64,{base64.b64encode(payload).decode('ascii')}"
    return LoadedImage(ref, pixels, url, (int(sent.shape[1]), int(sent.shape[0])), max_pixels)


def fit_pixels(pixels: np.ndarray, max_pixels: int | None) -> np.ndarray:
    """The image downscaled (area interpolation, aspect kept) to at most ``max_pixels``; itself if it fits."""
    h, w = pixels.shape[:2]
    if max_pixels is None or h * w <= max_pixels:
        return pixels
    scale = math.sqrt(max_pixels / float(h * w))
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))  # floors: nw * nh <= max_pixels
    return np.ascontiguousarray(load_cv2().resize(pixels, (nw, nh), interpolation=load_cv2().INTER_AREA))


def check_pixels(data: bytes, name: str, limit: int | None = PIXEL_LIMIT) -> tuple[int, int] | None:
    """The (width, height) an image's header declares (None if it cannot be read); `InputError` above ``limit``."""
    size = header_size(data)
    if size is not None and limit is not None and size[0] * size[1] > limit:
        raise InputError(too_many_pixels(name, size[0], size[1], limit, len(data)))
    return size


def header_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from an image header (PNG, JPEG, GIF, BMP, WebP, TIFF) without decoding; None if unknown."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:3] == b"\xff\xd8\xff":
            return _jpeg_size(data)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return int(w), int(h)
        if data[:2] == b"BM" and len(data) >= 26:
            w, h = struct.unpack("<ii", data[18:26])
            return abs(int(w)), abs(int(h))
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp_size(data)
        if data[:4] in (b"II*\x00", b"MM\x00*"):
            return _tiff_size(data)
    except (struct.error, IndexError, ValueError):
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i, n = 2, len(data)
    while i + 9 < n:
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            i += 1 if marker == 0xFF else 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        if length < 2:
            return None
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8X":
        w = 1 + int.from_bytes(data[24:27], "little")
        h = 1 + int.from_bytes(data[27:30], "little")
        return w, h
    if kind == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return int(w & 0x3FFF), int(h & 0x3FFF)
    return None


def _tiff_size(data: bytes) -> tuple[int, int] | None:
    """The largest width x height among a TIFF's image directories (pages)."""
    end = "<" if data[:2] == b"II" else ">"
    offset = struct.unpack(end + "I", data[4:8])[0]
    best: tuple[int, int] | None = None
    seen = 0
    while offset and offset + 2 <= len(data) and seen < 64:
        seen += 1
        count = struct.unpack(end + "H", data[offset : offset + 2])[0]
        w = h = 0
        for k in range(count):
            e = offset + 2 + 12 * k
            if e + 12 > len(data):
                break
            tag, typ = struct.unpack(end + "HH", data[e : e + 4])
            if tag in (256, 257):
                value = struct.unpack(end + ("H" if typ == 3 else "I"), data[e + 8 : e + (10 if typ == 3 else 12)])[0]
                if tag == 256:
                    w = int(value)
                else:
                    h = int(value)
        if w and h and (best is None or w * h > best[0] * best[1]):
            best = (w, h)
        nxt = offset + 2 + 12 * count
        if nxt + 4 > len(data):
            break
        offset = struct.unpack(end + "I", data[nxt : nxt + 4])[0]
    return best


#: JPEG quality of a view cut from a JPEG figure (the figure itself went as its own file or at 92).
VIEW_JPEG_QUALITY = 90


def encode_image(pixels: np.ndarray, mime: str) -> bytes:
    """The bytes of an 8-bit image in the format of its source: JPEG for ``image/jpeg`` (a view cut from a photo
    or a scan shared as JPEG: a PNG of it is several times larger), PNG (lossless) for anything else."""
    if mime != "image/jpeg":
        return encode_png(pixels)
    ok, buf = load_cv2().imencode(".jpg", pixels, [load_cv2().IMWRITE_JPEG_QUALITY, VIEW_JPEG_QUALITY])
    if not ok:
        raise InputError("could not encode the image as JPEG")
    return bytes(buf.tobytes())


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of an 8-bit image."""
    cv2 = load_cv2()
    ok, buf = cv2.imencode(".png", pixels)
    if not ok:
        raise InputError("could not encode the image as PNG")
    return bytes(buf.tobytes())
