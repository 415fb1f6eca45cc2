"""Pixel limits hold before decoding: formats whose header gives no size, and multi-frame DICOM files."""

from __future__ import annotations

import tracemalloc

import cv2
import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file
from pydicom.uid import RLELossless

from boe.errors import InputError
from boe.tools.images import open_image


def test_an_image_whose_header_gives_no_size_is_refused_before_decoding(tmp_path, monkeypatch):
    # a 50 MB PBM declares 20000x20000 (400 MB once decoded); OpenCV reads it, header_size does not
    p = tmp_path / "bomb.pbm"
    p.write_bytes(b"P4\n20000 20000\n" + bytes(64))
    decoded: list[int] = []
    real = cv2.imdecode
    monkeypatch.setattr(cv2, "imdecode", lambda *a, **k: decoded.append(1) or real(*a, **k))
    with pytest.raises(InputError, match=r"bomb\.pbm.*width and height cannot be read from its header"):
        open_image(p)
    assert decoded == []


def test_formats_with_a_readable_header_still_open(tmp_path):
    for ext in ("png", "jpg", "bmp", "tif", "webp"):
        p = tmp_path / f"x.{ext}"
        assert cv2.imwrite(str(p), np.full((20, 30, 3), 90, np.uint8))
        assert open_image(p).pixels.shape[:2] == (20, 30), ext


def test_a_multi_frame_dicom_decodes_only_the_frame_it_reads(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    shape, dtype = ds.pixel_array.shape, ds.pixel_array.dtype
    n = 400  # 13 MB of pixels in a 0.3 MB RLE file: decoding every frame to read one is a decompression bomb
    frames = np.zeros((n, *shape), dtype)
    frames[n // 2, 10:20, 10:20] = 500
    frames[n // 2, 0, 0] = 1000
    ds.NumberOfFrames = n
    ds.compress(RLELossless, frames)
    p = tmp_path / "frames.dcm"
    ds.save_as(p)
    tracemalloc.start()
    try:
        img = open_image(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert img.ref.dicom["frames"] == n and img.ref.dicom["frame"] == n // 2
    assert img.pixels[15, 15] > img.pixels[50, 50]  # the middle frame was read
    assert peak < frames.nbytes / 4, peak
