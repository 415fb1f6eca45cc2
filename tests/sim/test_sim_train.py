"""Fitting the perception heads on generated scans (the shipped file: `python scripts/train_sim_perception.py`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from boe.sim.perception import HEADS_FILE, Heads, load_heads
from boe.sim.vocab import MODALITIES
from scripts.train_sim_perception import collect, fit_heads


def test_shipped_heads_load_and_refuse_other_versions() -> None:
    heads = load_heads()
    assert set(heads.plane) == set(MODALITIES) and set(heads.lesion) == {"whole", "crop"}
    data = json.loads(HEADS_FILE.read_text())
    data["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        Heads.from_dict(data)


@pytest.mark.slow
def test_training_learns_modality_from_pixels() -> None:
    heads = fit_heads(collect(60, seed=3, sizes=(256,)))
    again = Heads.from_dict(json.loads(json.dumps(heads.to_dict())))
    test = collect(12, seed=4, sizes=(256,))
    x = np.stack(test.rows["modality"])
    y = np.asarray(test.labels["modality"])
    assert np.allclose(heads.modality.logits(x), again.modality.logits(x), atol=1e-3)  # 6 decimals stored
    assert (again.modality.logits(x).argmax(1) == y).mean() >= 0.8
