"""What a server is sent as images: each image once per request, views in the figure's own format, no view that
is nearly the whole figure (issue 23 item 3), checked on every request of a full-ledger batch on VQA-RAD images."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import cv2
import numpy as np

from boe.sim import serve_in_thread
from boe.sim.server import _Handler
from boe.tools.segment import WHOLE_SHARE, Segmentation, make_view

VQA_RAD = Path(__file__).parents[1] / "datasets" / "fixtures" / "vqa-rad"


def _images(body: dict) -> list[str]:
    return [p["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
            if p.get("type") == "image_url"]  # fmt: skip


def _decode(url: str) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8), cv2.IMREAD_UNCHANGED)


def test_every_request_of_a_full_batch_sends_each_image_once_and_views_as_jpeg(tmp_path: Path) -> None:
    bodies: list[dict] = []
    lock = threading.Lock()

    class Recording(_Handler):
        def _read_body(self) -> bytes | None:
            body = super()._read_body()
            if body is not None and self.path.rstrip("/").endswith("/chat/completions"):
                with lock:
                    bodies.append(json.loads(body))
            return body

    with serve_in_thread() as sim:
        sim.server.RequestHandlerClass = Recording
        done = subprocess.run(
            [sys.executable, "-m", "boe", "batch", str(VQA_RAD), "--split", "test", "--limit", "2", "--k", "4",
             "--base-url", sim.base_url, "--model", "boe-sim-vlm", "--judge-model", "boe-sim-judge",
             "--db", str(tmp_path / "runs.db"), "--run", "r", "--no-progress"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    grounded = whole = 0
    for body in bodies:
        urls = _images(body)
        assert len(set(urls)) == len(urls), "a request carries the same image twice"
        text = body["messages"][-1]["content"][-1]["text"]
        marker = re.search(r'<view kind="(\w+)" figure="[^"]*" image="(\d+)"/>', text)
        if marker is None:
            continue
        grounded += 1
        kind, index = marker.group(1), int(marker.group(2))
        figure = _decode(urls[0])
        if kind == "whole":  # the figure itself is the view: nothing else attached
            whole += 1
            assert index == 1 and len(urls) == 1
            continue
        assert index == len(urls) == 2 and urls[1].startswith("data:image/jpeg;base64,")  # JPEG figure, JPEG view
        view = _decode(urls[1])
        assert view.shape[0] * view.shape[1] < WHOLE_SHARE * figure.shape[0] * figure.shape[1]
    assert grounded and all(u.startswith("data:image/jpeg") for b in bodies for u in _images(b))
    assert whole < grounded  # some claims name a region: their views are crops


def test_views_keep_the_source_format_and_a_nearly_whole_crop_is_the_figure() -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (200, 240), dtype=np.uint8)
    small = np.zeros(pixels.shape, bool)
    small[20:60, 30:90] = True
    seg = Segmentation(small, prompt=make_box(0, 0, 240, 200), segmenter="test")
    jpeg = make_view("crop", pixels, seg, mime="image/jpeg", whole_share=WHOLE_SHARE)
    png = make_view("crop", pixels, seg, whole_share=WHOLE_SHARE)
    assert jpeg.data[:3] == b"\xff\xd8\xff" and jpeg.data_url.startswith("data:image/jpeg;base64,")
    assert png.data[:8] == b"\x89PNG\r\n\x1a\n" and png.kind == "crop"
    assert len(jpeg.data) < len(png.data)  # noise compresses badly as PNG
    everything = Segmentation(np.ones(pixels.shape, bool), prompt=make_box(0, 0, 240, 200), segmenter="test")
    view = make_view("crop", pixels, everything, mime="image/jpeg", whole_share=WHOLE_SHARE)
    assert view.kind == "whole" and view.data == b""
    assert make_view("mask", pixels, everything, whole_share=WHOLE_SHARE).kind == "mask"  # only crops are replaced


def make_box(x0: int, y0: int, x1: int, y1: int):
    from boe.tools.crop import Box

    return Box(x0, y0, x1, y1)
