"""A registered segmenter (a plugin's) can be chosen by a run's configuration and the --segmenter option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from boe.agent.settings import make_config
from boe.errors import ConfigError
from boe.kinds import ToolContext
from boe.tools.segment import SEGMENTERS, OpenCVSegmenter, register_segmenter

BOE = str(Path(sys.executable).with_name("boe"))
IMAGE = str(Path(__file__).resolve().parents[2] / "boe" / "sim" / "data" / "demo" / "images" / "img-0-00000.png")


class Otsu(OpenCVSegmenter):
    """OpenCV's Otsu thresholding under a name of its own."""

    def __init__(self) -> None:
        super().__init__(method="otsu")


@pytest.fixture
def otsu():
    register_segmenter("otsu-plugin")(Otsu)
    yield
    SEGMENTERS.pop("otsu-plugin")


def test_a_registered_segmenter_is_a_valid_choice_and_the_run_builds_it(otsu):
    cfg = make_config(base_url="http://127.0.0.1:1/v1", model="m", segmenter="otsu-plugin")
    seg = ToolContext(cfg).get_segmenter()
    assert isinstance(seg, Otsu) and seg.method == "otsu"


def test_an_unknown_segmenter_is_refused_naming_the_known_ones(otsu):
    with pytest.raises(ConfigError, match=r"unknown segmenter 'nope'; known: auto, opencv, otsu-plugin, sam"):
        make_config(base_url="http://127.0.0.1:1/v1", model="m", segmenter="nope")
    with pytest.raises(ConfigError, match="a SAM checkpoint was given with the otsu-plugin segmenter"):
        make_config(base_url="http://127.0.0.1:1/v1", model="m", segmenter="otsu-plugin", sam_checkpoint="x.pth")


def test_the_command_refuses_an_unknown_segmenter_before_calling_anything():
    res = subprocess.run(
        [
            BOE,
            "ask",
            IMAGE,
            "What is shown?",
            "--base-url",
            "http://127.0.0.1:1/v1",
            "--model",
            "m",
            "--segmenter",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "unknown segmenter 'nope'; known: auto, opencv, sam" in res.stderr
