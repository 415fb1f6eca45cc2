"""segment-anything behind the Segmenter protocol: a tiny random-weight SAM built with the package's own
builder, saved as a checkpoint, loaded safely, segmenting a real VQA-RAD image with box prompts.

Needs the ``sam`` extra (torch, torchvision, segment-anything): skipped without it, except under
``BOE_CI=1``, where CI must run these tests and a missing extra fails them.
"""

import asyncio
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from boe.errors import ConfigError, InputError
from boe.tools.crop import Box
from boe.tools.images import open_image

pytestmark = pytest.mark.sam

VQA_RAD = Path(__file__).parents[1] / "datasets" / "fixtures" / "vqa-rad" / "images"


def _sam_modules():
    try:
        import segment_anything  # noqa: F401
        import torch
    except ImportError as exc:
        if os.environ.get("BOE_CI") == "1":
            pytest.fail(f"BOE_CI=1 but the sam extra is missing ({exc}); CI installs it (see .ci/run)")
        pytest.skip("needs the sam extra: pip install 'best-of-evidence[sam]'")
    return torch


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A 5M-parameter SAM (2 encoder blocks of width 64) with random weights, saved as a plain state dict."""
    torch = _sam_modules()
    from segment_anything.build_sam import _build_sam

    torch.manual_seed(0)
    sam = _build_sam(encoder_embed_dim=64, encoder_depth=2, encoder_num_heads=2, encoder_global_attn_indexes=[1])
    path = tmp_path_factory.mktemp("sam") / "tiny-sam.pth"
    torch.save(sam.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def images():
    paths = sorted(VQA_RAD.glob("*.jpg"))
    assert len(paths) >= 2, f"the VQA-RAD fixture images are missing from {VQA_RAD}"
    return [open_image(p) for p in paths[:2]]


def test_a_tiny_sam_segments_a_real_image_with_one_embedding_for_many_prompts(tiny_checkpoint, images):
    from boe.tools.segment import make_segmenter
    from boe.tools.segment_sam import SamSegmenter

    seg = make_segmenter(checkpoint=str(tiny_checkpoint))  # auto: a checkpoint means SAM
    assert isinstance(seg, SamSegmenter)
    assert seg.arch.name == "vit(dim=64,depth=2,heads=2,global=[1])" and seg.device == "cpu"
    assert seg.describe() == {
        "name": "sam",
        "args": {"checkpoint": str(tiny_checkpoint), "model": seg.arch.name, "device": "cpu"},
    }
    img = images[0]
    h, w = img.pixels.shape[:2]
    boxes = [Box(10, 10, w // 2, h // 2), Box(w // 4, h // 4, 3 * w // 4, 3 * h // 4), Box(w // 2, h // 2, w, h)]
    results = [seg.segment(img, b) for b in boxes]
    for box, r in zip(boxes, results, strict=True):
        assert r.mask.shape == (h, w) and r.mask.dtype == bool
        assert r.prompt == box and r.segmenter == f"sam:{seg.arch.name}" and np.isfinite(r.score)
    assert [r.embedded for r in results] == [True, False, False]
    assert seg.embeddings_computed == 1 and seg.prompts == 3
    # a second image is embedded once too; going back to the first reuses its kept embedding
    seg.segment(images[1], boxes[0])
    seg.segment(images[1], boxes[1])
    again = seg.segment(img, boxes[0])
    assert seg.embeddings_computed == 2 and seg.prompts == 6 and not again.embedded
    assert (again.mask == results[0].mask).all()  # the kept embedding gives the same mask
    with_point = seg.segment(img, boxes[1], point=(w // 2, h // 2))
    assert with_point.mask.shape == (h, w) and with_point.point == (w // 2, h // 2)


def test_the_checkpoint_must_match_the_named_model(tiny_checkpoint):
    from boe.tools.segment_sam import load_sam

    with pytest.raises(ConfigError, match="holds a vit\\(dim=64.*not vit_b"):
        load_sam(tiny_checkpoint, model="vit_b")
    with pytest.raises(ConfigError, match="--sam-model"):
        load_sam(tiny_checkpoint, model="vit_q")


class Payload:
    """Any pickled object that is not a tensor: weights_only loading must refuse to build it."""

    def __reduce__(self):
        return (print, ("this code must never run",))


def test_loading_is_weights_only(tmp_path, capsys):
    torch = _sam_modules()
    from boe.tools.segment_sam import load_sam

    evil = tmp_path / "evil.pth"
    with evil.open("wb") as fh:
        pickle.dump({"image_encoder.patch_embed.proj.weight": Payload()}, fh, protocol=2)
    with pytest.raises(InputError, match="weights_only=True"):
        load_sam(evil)
    assert "must never run" not in capsys.readouterr().out
    other = tmp_path / "other.pth"
    torch.save({"layer.weight": torch.zeros(2, 2)}, other)
    with pytest.raises(InputError, match="not a segment-anything checkpoint"):
        load_sam(other)
    with pytest.raises(InputError, match="not found"):
        load_sam(tmp_path / "missing.pth")


def test_the_agent_grounds_with_sam_and_records_it(tiny_checkpoint):
    """Grounded checks of one question against the simulator: every view made by SAM, one embedding."""
    from boe.agent import Agent, make_config
    from boe.agent.demo import demo_questions, simulator

    q = demo_questions(["sim-0-00027"])[0]

    async def go(url):
        cfg = make_config(
            base_url=url,
            model="boe-sim",
            root=str(Path(q["images"][0]).parents[1]),
            k=6,
            kinds=("grounded_factor",),
            ledger="full",
            calibration="neutral",
            sam_checkpoint=str(tiny_checkpoint),
        )
        async with Agent(cfg) as agent:
            res = await agent.ask(q["images"][0], q["question"], options=q.get("options"))
            return res, agent.describe(), agent.segmenter

    with simulator() as url:
        res, described, seg = asyncio.run(go(url))
    grounded = [a for a in res.record["actions"] if a["kind"] == "grounded_factor"]
    assert len(grounded) >= 2
    assert (
        described["segmenter"]["name"] == "sam" and described["tools"]["grounded_factor"]["segmenter"]["name"] == "sam"
    )
    for a in grounded:
        assert a["view"]["segmentation"]["segmenter"].startswith("sam:vit(") and a["outcome"] in (
            "confirm",
            "reject",
            "unresolved",
        )
    regions = {tuple(a["view"]["region"]) for a in grounded}  # claims about one place share one segmentation
    assert seg.embeddings_computed == 1 and seg.prompts == len(regions) < len(grounded)
    assert sum(bool(a["view"]["segmentation"].get("reused")) for a in grounded) == len(grounded) - len(regions)
    assert sum(a["view"]["segmentation"]["embedded"] for a in grounded) == 1
