from pathlib import Path

import cv2
import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file

from boe.errors import InputError
from boe.tools.crop import Box, content_box, crop, location_box
from boe.tools.images import check_path, open_image


@pytest.fixture
def scan(tmp_path):
    img = np.zeros((200, 300), np.uint8)
    cv2.ellipse(img, (150, 100), (120, 80), 0, 0, 360, 180, -1)
    p = tmp_path / "scan.png"
    cv2.imwrite(str(p), img)
    return p


def test_png_is_sent_as_it_is(scan):
    img = open_image(scan)
    assert img.ref.mime == "image/png" and (img.ref.width, img.ref.height) == (300, 200)
    assert img.data_url.startswith("data:image/png;base64,iVBOR")
    assert len(img.ref.image_id) == 16 and img.ref.path == str(scan.resolve())


def test_other_formats_are_re_encoded_as_png(tmp_path):
    p = tmp_path / "x.bmp"
    cv2.imwrite(str(p), np.full((10, 12, 3), 90, np.uint8))
    img = open_image(p)
    assert img.ref.mime == "image/png" and img.pixels.shape == (10, 12, 3)


def test_dicom_pixels_and_tags(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    ds.BodyPartExamined = "CHEST"
    p = tmp_path / "ct.dcm"
    ds.save_as(p)
    img = open_image(p)
    assert img.pixels.dtype == np.uint8 and img.pixels.shape == (128, 128)
    assert img.ref.metadata == {"modality": "ct", "region": "chest", "plane": "axial"}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda d: d / "missing.png", "image not found", id="missing"),
        pytest.param(lambda d: d, "not a regular file", id="directory"),
        pytest.param(lambda d: _write(d / "notes.png", b"hello, not an image"), "not an image", id="not-image"),
        pytest.param(lambda d: _write(d / "empty.png", b""), "is empty", id="empty"),
        pytest.param(
            lambda d: _write(d / "bad.dcm", b"\0" * 128 + b"DICM" + b"\x02\x00garbage"), "DICOM", id="bad-dicom"
        ),
    ],
)
def test_bad_inputs_give_input_errors(tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        open_image(make(tmp_path))


def test_unreadable_file(scan, monkeypatch):
    def deny(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(InputError, match="permission denied"):
        open_image(scan)


def test_paths_outside_the_root_are_refused(tmp_path, scan):
    root = tmp_path / "data"
    root.mkdir()
    inside = root / "a.png"
    inside.write_bytes(scan.read_bytes())
    assert check_path(inside, root) == inside.resolve()
    with pytest.raises(InputError, match="outside the dataset root"):
        check_path(scan, root)
    with pytest.raises(InputError, match="outside the dataset root"):
        check_path(root / ".." / "scan.png", root)
    link = root / "link.png"
    link.symlink_to(scan)
    with pytest.raises(InputError, match="outside the dataset root"):
        check_path(link, root)


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def test_content_box_finds_the_body(scan):
    box = content_box(open_image(scan).pixels)
    assert abs(box.x0 - 30) <= 2 and abs(box.x1 - 271) <= 2 and abs(box.y0 - 20) <= 2 and abs(box.y1 - 181) <= 2


@pytest.mark.parametrize(
    ("words", "expect"),
    [
        pytest.param(["left"], Box(0, 0, 58, 100), id="left"),
        pytest.param(["right"], Box(42, 0, 100, 100), id="right"),
        pytest.param(["upper"], Box(0, 0, 100, 58), id="upper"),
        pytest.param(["left", "lower"], Box(0, 42, 58, 100), id="left-lower"),
        pytest.param(["left", "right"], Box(0, 0, 100, 100), id="both-sides"),
        pytest.param([], Box(0, 0, 100, 100), id="none"),
    ],
)
def test_location_box(words, expect):
    assert location_box(words, 100, 100, pad=0.08, min_frac=0.3) == expect


def test_location_box_respects_the_minimum_size_and_the_image():
    tiny = Box(90, 90, 100, 100)
    box = location_box(["right", "lower"], 100, 100, within=tiny, pad=0.0, min_frac=0.3)
    assert box.width == 30 and box.height == 30 and box.x1 == 100 and box.y1 == 100


def test_crop_returns_the_boxed_pixels():
    pix = np.arange(100, dtype=np.uint8).reshape(10, 10)
    png = crop(pix, Box(2, 3, 6, 8))
    out = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    assert out.shape == (5, 4) and (out == pix[3:8, 2:6]).all()
    with pytest.raises(ValueError):
        crop(pix, Box(5, 5, 5, 9))
