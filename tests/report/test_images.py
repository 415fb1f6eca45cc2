"""Images for reports: thumbnails within a byte budget, unreadable images, views as shapes."""

from __future__ import annotations

import base64

import cv2
import numpy as np
import pytest

from boe.report.images import encode_images, view_shapes
from boe.report.source import ImageSource


def _scans(tmp_path, n, size=300, noise=12.0):
    rng = np.random.default_rng(0)
    out = {}
    for i in range(n):
        img = np.zeros((size, size + 40), np.uint8)
        cv2.circle(img, (size // 2 + i, size // 2), size // 3, 140, -1)
        img = np.clip(img + rng.normal(0, noise, img.shape), 0, 255).astype(np.uint8)
        p = tmp_path / f"s{i}.png"
        cv2.imwrite(str(p), img)
        out[str(p)] = ImageSource(str(p), str(p))
    return out


def _decoded(src: str) -> np.ndarray:
    head, _, data = src.partition(",")
    assert head == "data:image/webp;base64"
    return cv2.imdecode(np.frombuffer(base64.b64decode(data), np.uint8), cv2.IMREAD_UNCHANGED)


def test_thumbnails_keep_the_original_size_for_the_views_and_shrink_to_the_budget(tmp_path):
    sources = _scans(tmp_path, 12)
    full = encode_images(sources, max_side=256)
    for e in full.values():
        assert (e.width, e.height) == (340, 300)  # the coordinates crop boxes are given in
        assert max(_decoded(e.src).shape[:2]) == 256
    total = sum(len(e.src) for e in full.values())
    small = encode_images(sources, max_side=256, budget=total // 3)
    assert sum(len(e.src) for e in small.values()) <= total // 3
    assert all(max(_decoded(e.src).shape[:2]) < 256 and e.width == 340 for e in small.values())


def test_an_unreadable_image_is_reported_not_fatal(tmp_path):
    bad = tmp_path / "not-an-image.png"
    bad.write_text("hello")
    out = encode_images(
        {
            "gone": ImageSource("gone", str(tmp_path / "missing.png"), width=64, height=48),
            "bad": ImageSource("bad", str(bad)),
        }
    )
    assert (
        out["gone"].src is None
        and "missing.png" in out["gone"].error
        and (out["gone"].width, out["gone"].height) == (64, 48)
    )
    assert out["bad"].src is None and out["bad"].error


def test_embedded_bytes_are_read_like_files(tmp_path):
    img = np.full((40, 60, 3), (10, 200, 30), np.uint8)  # a colour image stays in colour
    ok, buf = cv2.imencode(".png", img)
    out = encode_images({"k": ImageSource("k", data=buf.tobytes())})
    px = _decoded(out["k"].src)
    assert (out["k"].width, out["k"].height) == (60, 40) and px.ndim == 3 and px[..., 1].mean() > 150


@pytest.mark.parametrize(
    "view, expect",
    [
        pytest.param(
            {"kind": "crop", "figure": "0", "box": [1, 2, 30, 40]},
            {"k": "crop", "f": 0, "b": [1, 2, 30, 40]},
            id="crop",
        ),
        pytest.param({"kind": "record", "source": "dicom"}, {"k": "record", "f": 0, "s": "dicom"}, id="record"),
        pytest.param({"kind": "crop", "box": [5, 5, 5, 9]}, {"k": "crop", "f": 0}, id="empty-box-dropped"),
        pytest.param(
            {"kind": "mask", "box": [0, 0, 50, 50], "segmentation": {"mask_box": [10, 12, 20, 30]}},
            {"k": "mask", "f": 0, "b": [0, 0, 50, 50], "mb": [10, 12, 20, 30]},
            id="mask-box-without-outline",
        ),
        pytest.param(
            {"kind": "overlay", "polygon": [[0, 0], [10, 0], [10, 10]]},
            {"k": "overlay", "f": 0, "m": [[0, 0, 10, 0, 10, 10]]},
            id="polygon",
        ),
    ],
)
def test_view_shapes(view, expect):
    assert view_shapes(view) == expect


def test_masks_become_outlines_from_files_and_run_lengths(tmp_path):
    mask = np.zeros((20, 30), np.uint8)
    mask[5:15, 8:20] = 255
    cv2.imwrite(str(tmp_path / "m.png"), mask)
    from_file = view_shapes({"kind": "mask", "mask": "m.png"}, base_dir=tmp_path)["m"]
    xs, ys = from_file[0][0::2], from_file[0][1::2]
    assert (min(xs), max(xs), min(ys), max(ys)) == (8, 19, 5, 14)
    col_major = (mask > 0).T.reshape(-1)  # COCO's uncompressed RLE runs down the columns, zeros first
    runs, cur, n = [], 0, 0
    for v in col_major:
        if v != cur:
            runs.append(n)
            cur, n = v, 0
        n += 1
    runs.append(n)
    from_rle = view_shapes({"kind": "mask", "mask": {"size": [20, 30], "counts": [int(r) for r in runs]}})["m"]
    assert sorted(from_rle[0]) == sorted(from_file[0])
    assert "m" not in view_shapes({"kind": "mask", "mask": {"size": [2, 2], "counts": [1, 1]}})  # counts do not add up


def test_a_view_finds_its_figure_by_image_id_or_figure_name():
    from boe.report.questions import _Figures

    figs = _Figures(["i0", "i1", "i2"], {"A": 0, "B": 1, "C": 2}, {"aaaa1111bbbb2222": 0, "cccc3333dddd4444": 2})
    assert figs.index({"image_id": "cccc3333dddd4444", "figure": "A"}) == 2
    assert figs.index({"figure": "B"}) == 1
    assert figs.index({"figure": "9"}) == 0 and figs.index({}) == 0
    assert view_shapes({"kind": "crop", "figure": "C", "box": [0, 0, 4, 4]}, figs.index)["f"] == 2
