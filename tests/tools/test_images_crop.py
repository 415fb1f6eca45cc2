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
            lambda d: _write(d / "bad.dcm", b"\0" * 128 + b"DICM" + b"\x02\x00garbage"),
            "DICOM",
            id="bad-dicom",
            # pydicom warns as it reads on: the library leaves warnings to the program (the CLI's are tested)
            marks=pytest.mark.filterwarnings("ignore::UserWarning:pydicom"),
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


def test_dicom_window_from_the_header(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("MR_small.dcm"))  # WindowCenter 600, WindowWidth 1600
    p = tmp_path / "mr.dcm"
    ds.save_as(p)
    img = open_image(p)
    raw = ds.pixel_array.astype(float)
    expect = np.clip((raw - (600 - 800)) * 255 / 1600, 0, 255).round().astype(np.uint8)
    assert np.abs(img.pixels.astype(int) - expect).max() <= 1  # rounding at .5 may differ
    assert img.ref.dicom["window"] == {"center": 600.0, "width": 1600.0, "source": "header"}
    ds.WindowCenter, ds.WindowWidth = 100, 200  # a narrower window saturates more pixels
    ds.save_as(p)
    narrow = open_image(p)
    assert (narrow.pixels == 255).sum() > (img.pixels == 255).sum()


def test_dicom_rescale_then_value_range(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))  # RescaleIntercept -1024, no window
    p = tmp_path / "ct.dcm"
    ds.save_as(p)
    img = open_image(p)
    hu = ds.pixel_array.astype(float) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    assert img.ref.dicom["window"]["source"] == "range"
    assert img.ref.dicom["window"]["center"] == pytest.approx((hu.min() + hu.max()) / 2)
    assert img.pixels.min() == 0 and img.pixels.max() == 255


def _multiframe(tmp_path, n=3):
    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    frame = ds.pixel_array
    frames = np.stack([np.full_like(frame, 100 * i) for i in range(n)])  # frame i is flat at value 100 i
    frames[:, 0, 0] = 0
    frames[:, 0, 1] = 100 * (n - 1)  # the same value range in every frame
    ds.NumberOfFrames = n
    ds.PixelData = frames.tobytes()
    p = tmp_path / "multi.dcm"
    ds.save_as(p)
    return p


@pytest.mark.parametrize(
    ("frame", "value"), [pytest.param(None, 127.5, id="middle"), pytest.param(2, 255, id="chosen")]
)
def test_dicom_multi_frame(tmp_path, frame, value):
    img = open_image(_multiframe(tmp_path), frame=frame)
    assert img.pixels.shape == (128, 128) and abs(int(img.pixels[64, 64]) - value) <= 0.5
    assert img.ref.dicom["frames"] == 3 and img.ref.dicom["frame"] == (1 if frame is None else frame)


def test_dicom_frame_out_of_range(tmp_path):
    with pytest.raises(InputError, match="3 frames"):
        open_image(_multiframe(tmp_path), frame=3)
    ds = pydicom.dcmread(get_testdata_file("MR_small.dcm"))
    p = tmp_path / "one.dcm"
    ds.save_as(p)
    with pytest.raises(InputError, match="single frame"):
        open_image(p, frame=1)


@pytest.mark.parametrize(
    ("tags", "metadata"),
    [
        pytest.param({}, {"modality": "mr", "plane": "axial"}, id="as-shipped"),
        pytest.param(
            {"BodyPartExamined": "HEAD", "ViewPosition": "LL"},
            {"modality": "mr", "region": "head", "plane": "lateral"},
            id="body-part-and-view",
        ),
        pytest.param(
            {"ImageOrientationPatient": [0, 1, 0, 0, 0, -1]}, {"modality": "mr", "plane": "sagittal"}, id="sagittal"
        ),
        pytest.param(
            {"ImageOrientationPatient": [1, 0, 0, 0, 0, -1]}, {"modality": "mr", "plane": "coronal"}, id="coronal"
        ),
        pytest.param({"Modality": None}, {"plane": "axial"}, id="no-modality"),
        pytest.param({"Modality": "OT"}, {"plane": "axial"}, id="other-modality"),
    ],
)
def test_dicom_header_tags_become_slot_values(tmp_path, tags, metadata):
    ds = pydicom.dcmread(get_testdata_file("MR_small.dcm"))
    for name, value in tags.items():
        if value is None:
            delattr(ds, name)
        else:
            setattr(ds, name, value)
    p = tmp_path / "mr.dcm"
    ds.save_as(p)
    img = open_image(p)
    assert img.ref.metadata == metadata
    assert set(img.ref.dicom["sources"]) == set(metadata)
