"""Synthetic scans: seeded, with the facts showing in the pixels; DICOM tags; the dataset layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pydicom
import pytest
from typer.testing import CliRunner

from boe.cli import app
from boe.errors import InputError
from boe.sim.dataset import demo_dir, generate_dataset, load_facts, load_sim_dataset
from boe.sim.scans import ScanFacts, lesion_mask, render, sample_facts
from boe.sim.vocab import FINDINGS, MODALITIES, REGIONS


def _facts(seed: int, **want: str) -> ScanFacts:
    rng = np.random.default_rng(seed)
    for _ in range(500):
        f = sample_facts(rng, 384)
        if all(getattr(f, k) == v for k, v in want.items()):
            return f
    raise AssertionError(f"no scan with {want}")


def test_render_is_seeded() -> None:
    f = _facts(1)
    assert np.array_equal(render(f), render(f))
    assert render(f).shape == (384, 384) and render(f).dtype == np.uint8
    assert not np.array_equal(render(f), render(_facts(2)))


def test_facts_round_trip_and_lesion_geometry() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        f = sample_facts(rng, 384)
        assert ScanFacts.from_dict(json.loads(json.dumps(f.to_dict()))) == f
        assert f.modality in MODALITIES and f.region in REGIONS and f.finding in FINDINGS
        if f.finding == "normal":
            assert f.lesion_box is None and lesion_mask(f).sum() == 0
            continue
        x0, y0, x1, y1 = f.lesion_box
        assert x0 <= f.lesion_center[0] <= x1 and y0 <= f.lesion_center[1] <= y1
        mid_x = (f.body_box[0] + f.body_box[2]) / 2
        assert (f.lesion_center[0] < mid_x) == (f.side == "left")
        assert lesion_mask(f).sum() > 0


def test_modality_shows_in_texture() -> None:
    us = render(_facts(3, modality="us"))
    ct = render(_facts(3, modality="ct"))
    xr = render(_facts(3, modality="xr"))
    assert us[0, 0] == 0 and us[0, -1] == 0 and us[25:35, 185:200].mean() > 3  # a fan: dark corners, apex on top
    assert np.median(ct[:20, :20]) <= 3  # CT: black air around the body

    def grain(img: np.ndarray) -> float:
        f = img.astype(np.float32)
        return float(np.median(np.abs(f - cv2.GaussianBlur(f, (0, 0), 1.0))[img > 60]))

    assert grain(xr) < grain(ct) < grain(us)  # projection is smooth, speckle is rough


def test_dataset_layout(sim_dir: Path, sim_questions: list[dict[str, Any]], sim_facts: dict[str, Any]) -> None:
    meta = json.loads((sim_dir / "dataset.json").read_text())
    assert meta["format"] == "boe-sim" and meta["n_questions"] == 24 and meta["n_images"] == 12
    assert len(sim_questions) == 24 and len(sim_facts) == 12
    for q in sim_questions:
        assert Path(q["images"][0]).is_absolute() and Path(q["images"][0]).is_file()
        assert "finding" not in q and "lesion_box" not in q  # the sidecar stays out of the records
        assert q["answer_type"] in ("open", "closed", "choice")
        if q["options"]:
            assert len(q["options"]) >= 2 and all(k in "ABCD" for k in q["options"])
        facts = sim_facts[q["image_id"]]
        if q["asks"] in ("modality", "region", "plane", "finding") and q["answer_type"] != "closed":
            assert q["answer"] == facts[q["asks"]]


def test_dicom_has_metadata_tags(sim_questions: list[dict[str, Any]], sim_facts: dict[str, Any]) -> None:
    q = sim_questions[0]
    ds = pydicom.dcmread(q["dicom"])
    facts = sim_facts[q["image_id"]]
    assert ds.Modality == {"ct": "CT", "mr": "MR", "xr": "DX", "us": "US"}[facts["modality"]]
    assert ds.BodyPartExamined in ("HEAD", "CHEST", "ABDOMEN", "PELVIS", "SPINE", "EXTREMITY")
    png = cv2.imread(q["images"][0], cv2.IMREAD_GRAYSCALE)
    assert np.array_equal(ds.pixel_array, png)


def test_dataset_refuses_bad_input(tmp_path: Path, sim_dir: Path) -> None:
    with pytest.raises(InputError, match="not empty"):
        generate_dataset(sim_dir, 2)
    with pytest.raises(InputError, match="not a boe-sim dataset"):
        load_sim_dataset(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dataset.json").write_text('{"format": "boe-sim", "version": 99}')
    with pytest.raises(InputError, match="version 99"):
        load_sim_dataset(bad)


def test_cli_dataset_command(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["sim", "dataset", "--n", "3", "--seed", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(load_sim_dataset(out)) == 3
    assert len(load_facts(out)) == 3


def test_shipped_demo_set() -> None:
    rows = load_sim_dataset(demo_dir())
    assert 20 <= len(rows) <= 40
    size = sum(p.stat().st_size for p in demo_dir().rglob("*") if p.is_file())
    assert size < 3_000_000
    assert {r["asks"] for r in rows} >= {"modality", "finding", "presence"}
