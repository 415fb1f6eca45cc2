"""What a server is sent of a figure: 8-bit with its contrast, within the pixel limit, pixel bombs refused."""

from __future__ import annotations

import base64
import time

import cv2
import numpy as np
import pytest

from boe.errors import InputError
from boe.tools.crop import Box, crop
from boe.tools.images import MAX_PIXELS, PIXEL_LIMIT, header_size, open_image
from tests.images_hostile import png_bomb


def _sent(url: str) -> np.ndarray:
    data = base64.b64decode(url.split(",", 1)[1])
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)


def _ct_like(h: int = 256, w: int = 256) -> np.ndarray:
    """A 12-bit CT slice stored in 16 bits: body values 900-1300 around a 3000 bone ring, air at 0."""
    yy, xx = np.mgrid[0:h, 0:w]
    r = np.hypot(yy - h / 2, xx - w / 2)
    img = np.zeros((h, w), np.uint16)
    img[r < 0.45 * w] = 3000
    inner = r < 0.4 * w
    img[inner] = (900 + 400 * (xx[inner] / w)).astype(np.uint16)
    img[10, 10] = 4095  # one hot pixel: a min/max window would waste the range on it
    return img


def test_a_16_bit_png_arrives_8_bit_with_its_contrast_kept(tmp_path):
    p = tmp_path / "ct16.png"
    raw = _ct_like()
    assert cv2.imwrite(str(p), raw)
    img = open_image(p)
    sent = _sent(img.data_url)
    assert sent.dtype == np.uint8 and sent.shape == raw.shape
    assert (sent == img.pixels).all()
    body = sent[np.hypot(*np.mgrid[-128:128, -128:128]) < 0.4 * 256]
    # the whole 8-bit range is used, the soft-tissue gradient keeps its grey levels, little saturates
    # (clipping the 16-bit values at 255, as a server's loader may, leaves 64% of this image white)
    assert int(sent.max()) - int(sent.min()) >= 250 and len(np.unique(body)) >= 25
    assert (sent == 255).mean() < 0.2 and (raw > 255).mean() > 0.6
    # order kept: brighter stored values stay brighter
    assert sent[128, 200] > sent[128, 60]


def test_a_float_tiff_arrives_8_bit(tmp_path):
    p = tmp_path / "f.tiff"
    arr = np.linspace(-3.5, 7.25, 200 * 100, dtype=np.float32).reshape(100, 200)
    assert cv2.imwrite(str(p), arr)
    sent = _sent(open_image(p).data_url)
    assert sent.dtype == np.uint8 and len(np.unique(sent)) > 200 and sent[0, 0] < sent[-1, -1]


def test_a_24_megapixel_photo_arrives_within_the_default_pixel_limit_and_crops_keep_full_resolution(tmp_path):
    p = tmp_path / "photo.jpg"
    rng = np.random.default_rng(0)
    photo = cv2.resize(rng.integers(0, 255, (60, 40, 3), dtype=np.uint8), (6000, 4000))
    assert cv2.imwrite(str(p), photo, [cv2.IMWRITE_JPEG_QUALITY, 80])
    img = open_image(p)
    sent = _sent(img.data_url)
    w, h = img.sent_size
    assert (sent.shape[1], sent.shape[0]) == (w, h) and w * h <= MAX_PIXELS
    assert abs(w / h - 1.5) < 0.01  # aspect kept
    assert img.pixels.shape[:2] == (4000, 6000) and (img.ref.width, img.ref.height) == (6000, 4000)
    view = cv2.imdecode(np.frombuffer(crop(img.pixels, Box(0, 0, 600, 400)), np.uint8), cv2.IMREAD_UNCHANGED)
    assert view.shape[:2] == (400, 600)  # a crop comes from the full resolution
    big = cv2.imdecode(np.frombuffer(crop(img.pixels, Box(0, 0, 6000, 4000), MAX_PIXELS), np.uint8), 1)
    assert big.shape[0] * big.shape[1] <= MAX_PIXELS
    small = open_image(p, max_pixels=None)
    assert _sent(small.data_url).shape[:2] == (4000, 6000)


def test_an_8_bit_png_within_the_limit_is_sent_as_it_is(tmp_path):
    p = tmp_path / "a.png"
    assert cv2.imwrite(str(p), np.arange(64 * 64, dtype=np.uint8).reshape(64, 64))
    img = open_image(p)
    assert base64.b64decode(img.data_url.split(",", 1)[1]) == p.read_bytes()


def test_a_pixel_bomb_is_refused_before_decoding(tmp_path):
    p = tmp_path / "bomb.png"
    p.write_bytes(png_bomb(20000, 20000))
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        open_image(p)
    seconds = time.perf_counter() - t0
    msg = str(err.value)
    assert "bomb.png" in msg and "20000x20000 pixels" in msg and "--pixel-limit" in msg
    print(f"refused in {seconds:.3f} s: {msg}")
    with pytest.raises(InputError, match="limit is 0.01 megapixels"):
        open_image(tmp_path / "bomb.png", pixel_limit=10_000)
    assert PIXEL_LIMIT >= 24_000_000


@pytest.mark.parametrize("ext", [".png", ".jpg", ".bmp", ".tiff", ".webp", ".gif"])
def test_header_sizes_match_the_decoded_sizes(tmp_path, ext):
    arr = np.zeros((37, 91, 3), np.uint8)
    arr[5:20, 10:60] = (20, 200, 90)
    p = tmp_path / f"x{ext}"
    if ext == ".gif":
        # a minimal GIF header: OpenCV may not write GIFs
        p.write_bytes(b"GIF89a" + (91).to_bytes(2, "little") + (37).to_bytes(2, "little") + b"\x00" * 20)
    else:
        assert cv2.imwrite(str(p), arr)
    assert header_size(p.read_bytes()) == (91, 37)
