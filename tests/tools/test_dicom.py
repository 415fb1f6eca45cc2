"""DICOM grey levels equal pydicom's modality + VOI pipeline (to 1 grey level) on synthetic 12-bit files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pydicom
import pytest
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.pixels.processing import apply_modality_lut, apply_voi_lut
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from boe.tools.images import open_image

# the reference feeds pydicom's float rescale output to its VOI LUT, as its documentation shows; pydicom warns then
pytestmark = pytest.mark.filterwarnings("ignore:Applying a VOI LUT on a float input array")

STORED = np.arange(4096, dtype=np.uint16).reshape(64, 64)  # every 12-bit value once
GAMMA = np.sqrt(np.arange(4096) / 4095.0)


def _lut(descriptor: list[int], data: np.ndarray, *, as_ow: bool = False) -> Sequence:
    item = Dataset()
    item.add_new(0x00283002, "SS" if descriptor[1] < 0 else "US", descriptor)  # LUTDescriptor
    if as_ow:
        item.add_new(0x00283006, "OW", struct.pack(f"<{len(data)}H", *data.astype(int)))
    else:
        item.add_new(0x00283006, "US", [int(v) for v in data])
    item.LUTExplanation = "synthetic"
    return Sequence([item])


def _write(path: Path, pixels: np.ndarray = STORED, **tags: Any) -> Path:
    """A 12-bit grey file (unsigned unless PixelRepresentation=1), with ``tags`` set."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = "CT"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = pixels.shape[-2:]
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 12, 11
    ds.PixelRepresentation = 1 if pixels.dtype == np.int16 else 0
    for name, value in tags.items():
        setattr(ds, name, value)
    ds.PixelData = np.ascontiguousarray(pixels).tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


def _pydicom_8bit(ds: Dataset, stored: np.ndarray, lut_bits: int | None = None) -> np.ndarray:
    """pydicom's modality LUT then VOI LUT / window, its output range mapped to 0..255; MONOCHROME1 inverted."""
    out = np.asarray(apply_voi_lut(apply_modality_lut(stored, ds), ds), dtype=np.float64)
    if ds.get("VOILUTSequence"):
        lo, hi = 0.0, 2.0 ** (lut_bits or ds.VOILUTSequence[0].LUTDescriptor[2]) - 1
    else:  # a window's output range: the stored value range through the rescale (PS3.3 C.11.2.1.2 as pydicom reads it)
        bits = int(ds.BitsStored)
        lo, hi = (0.0, 2.0**bits - 1) if ds.PixelRepresentation == 0 else (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1)
        slope, intercept = float(ds.get("RescaleSlope", 1)), float(ds.get("RescaleIntercept", 0))
        lo, hi = lo * slope + intercept, hi * slope + intercept
    eight = np.clip((out - lo) * 255.0 / (hi - lo), 0, 255)
    if ds.PhotometricInterpretation == "MONOCHROME1":
        eight = 255.0 - eight
    return eight


CASES = [
    pytest.param({"RescaleSlope": 1, "RescaleIntercept": -1024, "WindowCenter": 40, "WindowWidth": 400}, id="rescale"),
    pytest.param(
        {"RescaleSlope": 0.5, "RescaleIntercept": -100, "WindowCenter": 300, "WindowWidth": 800}, id="rescale-slope"
    ),
    pytest.param({"WindowCenter": 2048, "WindowWidth": 1000}, id="linear"),
    pytest.param({"WindowCenter": 2048, "WindowWidth": 1000, "VOILUTFunction": "LINEAR_EXACT"}, id="linear-exact"),
    pytest.param({"WindowCenter": 2048, "WindowWidth": 1000, "VOILUTFunction": "SIGMOID"}, id="sigmoid"),
    pytest.param(
        {
            "WindowCenter": 1500,
            "WindowWidth": 600,
            "VOILUTFunction": "SIGMOID",
            "RescaleSlope": 1,
            "RescaleIntercept": 0,
        },
        id="sigmoid-rescale",
    ),
    pytest.param({"WindowCenter": [2048, 1000], "WindowWidth": [1000, 500]}, id="first-of-two-windows"),
    pytest.param({"VOILUTSequence": _lut([4096, 0, 16], np.round(65535 * GAMMA))}, id="voi-lut-16bit"),
    pytest.param(
        {"VOILUTSequence": _lut([2048, 1024, 16], np.round(65535 * GAMMA[::2]), as_ow=True)}, id="voi-lut-ow-offset"
    ),
    pytest.param(
        {
            "RescaleSlope": 1,
            "RescaleIntercept": -1024,
            "VOILUTSequence": _lut([4096, -1024, 16], np.round(65535 * GAMMA)),
            "WindowCenter": 40,  # the VOI LUT Sequence is preferred, as pydicom does
            "WindowWidth": 400,
        },
        id="voi-lut-after-rescale",
    ),
    pytest.param({"PhotometricInterpretation": "MONOCHROME1", "WindowCenter": 2048, "WindowWidth": 2000}, id="mono1"),
    pytest.param(
        {"PhotometricInterpretation": "MONOCHROME1", "VOILUTSequence": _lut([4096, 0, 16], np.round(65535 * GAMMA))},
        id="mono1-voi-lut",
    ),
]


@pytest.mark.parametrize("tags", CASES)
def test_pixels_equal_pydicoms_within_one_grey_level(tmp_path, tags):
    img = open_image(_write(tmp_path / "x.dcm", **tags))
    ds = pydicom.dcmread(tmp_path / "x.dcm")
    expect = _pydicom_8bit(ds, ds.pixel_array)
    assert img.pixels.dtype == np.uint8 and img.pixels.shape == (64, 64)
    assert np.abs(img.pixels.astype(float) - expect).max() <= 1.0
    assert 0 in img.pixels and 255 in img.pixels  # every case spans the whole grey range
    assert img.ref.dicom["window"]["source"] == ("voi-lut" if "VOILUTSequence" in tags else "header")


def test_signed_pixels_through_the_window(tmp_path):
    signed = (STORED.astype(np.int32) - 2048).astype(np.int16)
    img = open_image(_write(tmp_path / "s.dcm", signed, WindowCenter=0, WindowWidth=1000, VOILUTFunction="SIGMOID"))
    ds = pydicom.dcmread(tmp_path / "s.dcm")
    assert np.abs(img.pixels.astype(float) - _pydicom_8bit(ds, ds.pixel_array)).max() <= 1.0


def test_a_12_bit_table_declared_16_bit_spans_the_grey_range(tmp_path):
    """Vendors often declare 16 bits per entry for 12-bit table data: the data's own depth is used then."""
    seq = _lut([4096, 0, 16], np.round(4095 * GAMMA))
    img = open_image(_write(tmp_path / "x.dcm", VOILUTSequence=seq))
    ds = pydicom.dcmread(tmp_path / "x.dcm")
    assert np.abs(img.pixels.astype(float) - _pydicom_8bit(ds, ds.pixel_array, lut_bits=12)).max() <= 1.0
    assert img.ref.dicom["window"] == {"source": "voi-lut", "bits": 12, "explanation": "synthetic"}
    assert img.pixels.max() == 255


@pytest.mark.parametrize(
    ("entries", "first"), [pytest.param(4096, 0, id="4096-entries"), pytest.param(256, 1900, id="256-from-1900")]
)
def test_an_8_bit_table_is_indexed_without_wrapping(tmp_path, entries, first):
    """pydicom 3.0's `apply_voi` indexes an 8-bit table through uint8 (an input 256 past the first maps to entry 0)."""
    table = np.round(255 * GAMMA[:: 4096 // entries])
    img = open_image(_write(tmp_path / "x.dcm", VOILUTSequence=_lut([entries, first, 8], table)))
    assert np.array_equal(img.pixels, table[np.clip(STORED.astype(int) - first, 0, entries - 1)].astype(np.uint8))
    assert img.ref.dicom["window"] == {"source": "voi-lut", "bits": 8, "explanation": "synthetic"}


def test_window_function_is_recorded(tmp_path):
    img = open_image(_write(tmp_path / "x.dcm", WindowCenter=2048, WindowWidth=1000, VOILUTFunction="SIGMOID"))
    assert img.ref.dicom["window"] == {"center": 2048.0, "width": 1000.0, "source": "header", "function": "SIGMOID"}


def test_without_a_window_the_value_range_is_shown(tmp_path):
    img = open_image(_write(tmp_path / "x.dcm", RescaleSlope=1, RescaleIntercept=-1024))
    expect = np.round(STORED.astype(float) * 255 / 4095)
    assert np.abs(img.pixels.astype(float) - expect).max() <= 1.0
    assert img.ref.dicom["window"] == {"center": (4095 - 2048) / 2, "width": 4095.0, "source": "range"}


@pytest.mark.parametrize(
    "tags",
    [
        pytest.param({"WindowCenter": 2048, "WindowWidth": 1000, "VOILUTFunction": "CUBIC"}, id="unknown-function"),
        pytest.param({"WindowCenter": 2048, "WindowWidth": 0}, id="zero-width"),
        pytest.param({"VOILUTSequence": _lut([4096, 0, 9], np.round(511 * GAMMA))}, id="lut-depth-9"),
    ],
)
def test_a_voi_transform_pydicom_refuses_falls_back_to_the_value_range(tmp_path, tags):
    img = open_image(_write(tmp_path / "x.dcm", **tags))
    assert np.abs(img.pixels.astype(float) - np.round(STORED.astype(float) * 255 / 4095)).max() <= 1.0
    assert img.ref.dicom["window"]["source"] == "range" and img.ref.dicom["window"]["refused"]


def _frames(n: int = 3) -> np.ndarray:
    return np.stack([np.roll(STORED, 64 * i) for i in range(n)])


def test_multi_frame_top_level_window(tmp_path):
    frames = _frames()
    p = _write(
        tmp_path / "m.dcm", frames, NumberOfFrames=3, WindowCenter=1000, WindowWidth=700, VOILUTFunction="SIGMOID"
    )
    ds = pydicom.dcmread(p)
    for index in range(3):
        img = open_image(p, frame=index)
        assert np.abs(img.pixels.astype(float) - _pydicom_8bit(ds, frames[index])).max() <= 1.0


def test_enhanced_multi_frame_uses_the_frames_functional_groups(tmp_path):
    """Rescale shared by every frame, a window per frame (the layout of enhanced CT and MR files)."""

    def group(seq: str, **values: Any) -> Dataset:
        inner = Dataset()
        for k, v in values.items():
            setattr(inner, k, v)
        outer = Dataset()
        setattr(outer, seq, Sequence([inner]))
        return outer

    windows = [(0, 400), (500, 1000), (-500, 2000)]
    shared = group("PixelValueTransformationSequence", RescaleSlope=1, RescaleIntercept=-1024)
    per_frame = [group("FrameVOILUTSequence", WindowCenter=c, WindowWidth=w) for c, w in windows]
    frames = _frames()
    p = _write(
        tmp_path / "e.dcm",
        frames,
        NumberOfFrames=3,
        SharedFunctionalGroupsSequence=Sequence([shared]),
        PerFrameFunctionalGroupsSequence=Sequence(per_frame),
    )
    for index, (c, w) in enumerate(windows):
        img = open_image(p, frame=index)
        flat = pydicom.dcmread(p)
        flat.RescaleSlope, flat.RescaleIntercept, flat.WindowCenter, flat.WindowWidth = 1, -1024, c, w
        assert np.abs(img.pixels.astype(float) - _pydicom_8bit(flat, frames[index])).max() <= 1.0
        assert img.ref.dicom["window"]["center"] == c and img.ref.dicom["frame"] == index
