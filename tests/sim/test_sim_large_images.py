"""The simulator perceives a large image (within the pixel limit) downscaled, as a VLM's processor does."""

from __future__ import annotations

import cv2
import numpy as np

from boe.sim.vision import PERCEIVE_PIXELS, decode_image


def test_a_large_image_is_perceived_downscaled_and_a_small_one_as_it_is():
    big = np.zeros((3000, 4500, 3), np.uint8)  # 13.5 MP: its full-size float copies cost gigabytes at 99 MP
    cv2.circle(big, (2250, 1500), 900, (200, 200, 200), -1)
    ok, png = cv2.imencode(".png", big)
    assert ok
    g = decode_image(png.tobytes())
    assert g is not None and g.dtype == np.uint8 and g.ndim == 2
    assert g.shape[0] * g.shape[1] <= PERCEIVE_PIXELS and abs(g.shape[1] / g.shape[0] - 1.5) < 0.01
    assert g[g.shape[0] // 2, g.shape[1] // 2] == 200 and g[5, 5] == 0

    small = (np.arange(512 * 600) % 251).astype(np.uint8).reshape(512, 600)
    ok, png = cv2.imencode(".png", small)
    assert np.array_equal(decode_image(png.tobytes()), small)
