"""The OpenCV segmenter, the grounded views, and the grounded judge's use of them (no torch needed)."""

import asyncio
import base64

import cv2
import numpy as np
import pytest

from boe.errors import ConfigError
from boe.kinds import make_tool
from boe.tools.client import ModelClient
from boe.tools.crop import Box
from boe.tools.images import open_image
from boe.tools.protocol import ToolRequest
from boe.tools.segment import OpenCVSegmenter, Segmentation, make_segmenter, make_view, mask_box
from tests.agent.fakevlm import FakeVLM


@pytest.fixture
def disc(tmp_path):
    """A dark 200x160 image with a grey body and a bright disc (centre 60,70, radius 20) in its upper left."""
    img = np.full((160, 200), 10, np.uint8)
    cv2.rectangle(img, (20, 20), (180, 140), 90, -1)
    cv2.circle(img, (60, 70), 20, 230, -1)
    p = tmp_path / "disc.png"
    cv2.imwrite(str(p), img)
    truth = np.zeros(img.shape, np.uint8)
    cv2.circle(truth, (60, 70), 20, 1, -1)
    return open_image(p), truth.astype(bool)


def iou(a, b):
    return (a & b).sum() / (a | b).sum()


@pytest.mark.parametrize("method", [pytest.param("grabcut", id="grabcut"), pytest.param("otsu", id="otsu")])
def test_the_opencv_segmenter_finds_the_structure_in_the_box(disc, method):
    img, truth = disc
    seg = OpenCVSegmenter(method=method).segment(img, Box(30, 40, 95, 105))
    assert seg.mask.shape == img.pixels.shape and seg.mask.dtype == bool
    assert iou(seg.mask, truth) > 0.8, iou(seg.mask, truth)
    assert seg.segmenter.startswith("opencv:") and seg.describe()["mask_box"] == seg.box.as_list()
    assert not seg.mask[:, 100:].any()  # nothing outside the box


def test_grabcut_falls_back_to_otsu_when_the_box_leaves_no_background(disc):
    img, _ = disc
    seg = OpenCVSegmenter().segment(img, Box(0, 0, 200, 160))
    assert seg.segmenter == "opencv:otsu" and seg.mask.any()


def test_a_point_prompt_picks_its_component(tmp_path):
    img = np.zeros((100, 100), np.uint8)
    cv2.circle(img, (25, 50), 12, 200, -1)
    cv2.circle(img, (75, 50), 18, 200, -1)
    p = tmp_path / "two.png"
    cv2.imwrite(str(p), img)
    loaded = open_image(p)
    seg = OpenCVSegmenter(method="otsu")
    big = seg.segment(loaded, Box(0, 0, 100, 100))
    small = seg.segment(loaded, Box(0, 0, 100, 100), point=(25, 50))
    assert big.box.x0 > 50 and small.box.x1 < 50


def test_views_of_a_segmentation(disc):
    img, truth = disc
    seg = Segmentation(truth, Box(30, 40, 95, 105), "test")
    crop = make_view("crop", img.pixels, seg, pad=0.0, min_frac=0.0)
    assert crop.box == mask_box(truth) == Box(40, 50, 81, 91)
    out = cv2.imdecode(np.frombuffer(crop.data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert (out == img.pixels[50:91, 40:81]).all()
    masked = cv2.imdecode(np.frombuffer(make_view("mask", img.pixels, seg, pad=0.0, min_frac=0.0).data, np.uint8), -1)
    inside = truth[50:91, 40:81]
    assert (masked[~inside] == 0).all() and (masked[inside] == img.pixels[50:91, 40:81][inside]).all()
    overlay = make_view("overlay", img.pixels, seg)
    ov = cv2.imdecode(np.frombuffer(overlay.data, np.uint8), cv2.IMREAD_COLOR)
    assert ov.shape == (160, 200, 3) and overlay.box == Box(0, 0, 200, 160)
    assert ov[70, 60, 1] > ov[70, 60, 0] and ov[10, 10, 1] == ov[10, 10, 0]  # tinted green only on the mask
    with pytest.raises(ConfigError, match="grounded view"):
        make_view("x-ray", img.pixels, seg)


def test_an_empty_mask_shows_the_prompt_region(disc):
    img, _ = disc
    seg = Segmentation(np.zeros((160, 200), bool), Box(30, 40, 95, 105), "test")
    view = make_view("crop", img.pixels, seg, pad=0.0, min_frac=0.0)
    assert view.box == Box(30, 40, 95, 105) and "empty" in view.fallback


def test_make_segmenter():
    assert make_segmenter().describe()["name"] == "opencv"
    with pytest.raises(ConfigError, match="needs a checkpoint"):
        make_segmenter("sam")
    with pytest.raises(ConfigError, match="unknown segmenter"):
        make_segmenter("watershed")
    with pytest.raises(ConfigError, match="method"):
        OpenCVSegmenter(method="snake")


@pytest.mark.parametrize("kind", ["crop", "mask", "overlay"])
def test_the_grounded_judge_shows_the_segmented_view_and_records_it(disc, kind):
    img, truth = disc
    rec = FakeVLM([], {"finding": "mass"})

    async def go():
        client = ModelClient(
            base_url="http://judge.test/v1",
            model="m",
            role="judge",
            http_client=rec.client(),
        )
        tool = make_tool("grounded_factor", client=client, segmenter=OpenCVSegmenter(), view=kind)
        claim = {"id": "finding=mass", "slot": "finding", "value": "mass", "location": ["left", "upper"]}
        req = ToolRequest(action={"id": "g:finding=mass"}, question="q", image=img, claim=claim, seed=0)
        try:
            return await tool.run(req), tool.describe()
        finally:
            await client.aclose()

    res, described = asyncio.run(go())
    assert res.outcome == "confirm" and described["segmenter"]["name"] == "opencv"
    view = res.view
    assert view["kind"] == kind and view["figure"] == "0" and view["image_id"] == img.ref.image_id
    assert view["location"] == ["left", "upper"] and view["segmentation"]["segmenter"].startswith("opencv")
    # the figure first (the question's shared prefix), then the view
    whole, url = [p["image_url"]["url"] for p in rec.bodies[0]["messages"][1]["content"] if p["type"] == "image_url"]
    assert whole == img.data_url
    sent = cv2.imdecode(np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8), cv2.IMREAD_UNCHANGED)
    x0, y0, x1, y1 = view["box"]
    if kind == "overlay":
        assert sent.shape == (160, 200, 3)
    else:
        assert sent.shape[:2] == (y1 - y0, x1 - x0)
        if kind == "crop":
            assert (sent == img.pixels[y0:y1, x0:x1]).all()
    assert f'<view kind="{kind}" figure="0" image="2"/>' in rec.bodies[0]["messages"][1]["content"][-1]["text"]


def test_claims_about_one_region_share_one_segmentation(disc):
    """Three claims at the same place, judged at once: one segmentation, three judge calls, the reuse recorded."""
    img, _ = disc
    rec = FakeVLM([], {"finding": "mass"})

    class Counting(OpenCVSegmenter):
        calls = 0

        def segment(self, image, box, point=None):
            type(self).calls += 1
            return super().segment(image, box, point)

    async def go():
        client = ModelClient(base_url="http://judge.test/v1", model="m", role="judge", http_client=rec.client())
        tool = make_tool("grounded_factor", client=client, segmenter=Counting())
        reqs = [
            ToolRequest(
                action={"id": f"g:{slot}={value}"},
                question="q",
                image=img,
                seed=0,
                claim={"id": f"{slot}={value}", "slot": slot, "value": value, "location": ["left", "upper"]},
            )
            for slot, value in (("finding", "mass"), ("finding", "nodule"), ("attribute", "large"))
        ]
        other = ToolRequest(
            action={"id": "g:finding=cyst"},
            question="q",
            image=img,
            seed=0,
            claim={"id": "finding=cyst", "slot": "finding", "value": "cyst", "location": ["right", "lower"]},
        )
        try:
            return await asyncio.gather(*(tool.run(r) for r in [*reqs, other]))
        finally:
            await client.aclose()

    results = asyncio.run(go())
    assert Counting.calls == 2 and len(rec.bodies) == 4  # two places, four judge calls
    same = [r.view for r in results[:3]]
    assert len({tuple(v["box"]) for v in same}) == 1
    assert sum(bool(v["segmentation"].get("reused")) for v in same) == 2
    assert [v["segmentation"]["seconds"] for v in same if v["segmentation"].get("reused")] == [0.0, 0.0]
    assert not results[3].view["segmentation"].get("reused") and results[3].view["box"] != same[0]["box"]
