"""The simulated model in-process: pixel beliefs, noise, judges on crops, schema filling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from boe.sim.model import ModelInput, SimModel
from boe.sim.percept import sample_percept
from boe.sim.perception import perceive
from boe.sim.requests import GENERATION_SCHEMA, generation_request
from boe.sim.scans import render, sample_facts
from boe.sim.schema_fill import fill_schema
from boe.sim.vision import decode_image
from boe.sim.vocab import LESIONS, MODALITIES, PLANES_BY_FAMILY, REGIONS


def _scans(n: int, seed: int, abnormal: bool = False) -> list[tuple[Any, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        f = sample_facts(rng, 384)
        if abnormal and f.finding == "normal":
            continue
        out.append((f, render(f)))
    return out


def _png(pixels: np.ndarray) -> bytes:
    return cv2.imencode(".png", pixels)[1].tobytes()


def test_pixel_beliefs_read_modality_region_plane() -> None:
    scans = _scans(16, seed=21)
    hits = np.zeros(3)
    for f, img in scans:
        b = perceive(img)
        hits += [
            MODALITIES[int(np.argmax(b.modality_logp))] == f.modality,
            REGIONS[int(np.argmax(b.region_logp))] == f.region,
            PLANES_BY_FAMILY[f.modality][int(np.argmax(b.plane_logp[f.modality]))] == f.plane,
        ]
    assert (hits >= 14).all(), hits


def test_decode_rejects_non_images() -> None:
    assert decode_image(b"not a png") is None
    assert decode_image(_png(np.zeros((10, 12), np.uint8))).shape == (10, 12)


def test_a_crop_around_the_finding_is_judged_better_than_the_whole_image() -> None:
    model = SimModel()
    right = {"whole": 0, "crop": 0}
    for f, img in _scans(30, seed=31, abnormal=True):
        x0, y0, x1, y1 = f.lesion_box
        cx, cy, half = (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) + 16
        crop = img[int(max(0, cy - half)) : int(cy + half), int(max(0, cx - half)) : int(cx + half)]
        for kind, pixels in (("whole", img), ("crop", crop)):
            view = model.view(_png(pixels), kind)
            rng = np.random.default_rng(0)
            right[kind] += sum(
                sample_percept(view.belief, view.bias, 1.0, rng, model.noise).finding == f.finding for _ in range(8)
            )
    assert right["crop"] >= right["whole"] + 0.1 * 30 * 8, right


def test_wrong_findings_carry_their_blob_with_them() -> None:
    model = SimModel()
    f, img = _scans(1, seed=41, abnormal=True)[0]
    view = model.view(_png(img))
    rng = np.random.default_rng(1)
    for _ in range(40):
        p = sample_percept(view.belief, view.bias, 1.0, rng, model.noise, assume_lesion=True)
        assert p.blob is not None and p.finding in LESIONS
        if p.blob.side_margin > 0.5 and abs(view.bias["side"][view.belief.blobs.index(p.blob)]) < 3:
            assert p.side == p.blob.side  # side follows the chosen blob, not the true lesion


def _generate(model: SimModel, img: bytes, strict: bool, temperature: float, n: int) -> list[str]:
    req = generation_request(img, "What abnormality is seen?")
    req["response_format"]["json_schema"]["strict"] = strict
    msgs = req["messages"]
    inp = ModelInput(
        msgs[0]["content"], msgs[1]["content"][1]["text"], (img,), temperature, req["response_format"], seed=9
    )
    return model.complete(inp, n)


def test_strict_schema_replies_always_parse_others_sometimes_do_not() -> None:
    model = SimModel(invalid_rate=0.2)
    img = _png(_scans(1, seed=51)[0][1])
    strict = _generate(model, img, True, 1.5, 64)
    assert all(set(json.loads(t)) == set(GENERATION_SCHEMA["required"]) for t in strict)

    def valid(text: str) -> bool:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return False
        return (
            isinstance(data, dict)
            and set(data) == set(GENERATION_SCHEMA["required"])
            and all(v is None or isinstance(v, str) for v in data.values())
        )

    loose = _generate(model, img, False, 1.5, 64)
    assert 0 < sum(not valid(t) for t in loose) < 32
    greedy = _generate(model, img, False, 0.0, 8)
    assert len(set(greedy)) == 1 and valid(greedy[0])  # temperature 0: one deterministic, clean answer


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param(
            {
                "type": "object",
                "properties": {
                    "modality": {"type": "string", "enum": ["CT", "MRI", "X-ray", "Ultrasound"]},
                    "size_mm": {"type": "number"},
                    "count": {"type": "integer"},
                    "has_mass": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                },
            },
            id="flat",
        ),
        pytest.param(
            {
                "$defs": {
                    "Lesion": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string"},
                            "side": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                        },
                    }
                },
                "type": "object",
                "properties": {
                    "lesions": {"type": "array", "items": {"$ref": "#/$defs/Lesion"}},
                    "answer": {"type": ["string", "null"]},
                },
            },
            id="refs",
        ),
    ],
)
def test_generic_schema_filling(schema: dict[str, Any]) -> None:
    model = SimModel()
    f, img = _scans(1, seed=61, abnormal=True)[0]
    view = model.view(_png(img))
    p = sample_percept(view.belief, view.bias, 0.0, np.random.default_rng(0), model.noise)
    out = fill_schema(schema, p, "yes", 0.0, np.random.default_rng(0))

    def check(value: Any, node: dict[str, Any]) -> None:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if "anyOf" in node:
            assert any(_fits(value, o) for o in node["anyOf"])
            return
        assert _fits(value, node)
        if node.get("type") == "object":
            assert set(value) == set(node["properties"])
            for k, sub in node["properties"].items():
                check(value[k], sub)
        if node.get("type") == "array":
            assert len(value) >= node.get("minItems", 0)
            for item in value:
                check(item, node["items"])

    check(out, schema)


def _fits(value: Any, node: dict[str, Any]) -> bool:
    types = node.get("type", "object")
    types = types if isinstance(types, list) else [types]
    py = {
        "object": dict,
        "array": list,
        "string": str,
        "number": (int, float),
        "integer": int,
        "boolean": bool,
        "null": type(None),
    }
    if "enum" in node and value not in node["enum"]:
        return False
    return any(isinstance(value, py[t]) for t in types)


def test_demo_images_decode(tmp_path: Path) -> None:
    from boe.sim.dataset import demo_dir, load_sim_dataset

    row = load_sim_dataset(demo_dir())[0]
    assert perceive(cv2.imread(row["images"][0], cv2.IMREAD_GRAYSCALE)).width > 0


def test_the_simulator_never_writes_past_a_strings_max_length() -> None:
    """As a structured-output backend does: the string closes at its bound (and the reply stays valid)."""
    f, img = _scans(1, seed=5)[0]
    schema = json.loads(json.dumps(GENERATION_SCHEMA))
    for prop in schema["properties"].values():
        prop["maxLength"] = 2
    fmt = {"type": "json_schema", "json_schema": {"name": "boe_generation", "schema": schema, "strict": True}}
    user = "TASK: boe_generation\n<question>What imaging modality is this?</question>"
    replies = SimModel().complete(ModelInput("s", user, (_png(img),), 1.0, fmt, seed=3), 8)
    for reply in replies:
        obj = json.loads(reply)
        assert obj["answer"] and all(v is None or len(v) <= 2 for v in obj.values()), obj
    third_party = {"type": "object", "properties": {"summary": {"type": "string", "maxLength": 7}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "other", "schema": third_party}}
    reply = SimModel().complete(ModelInput("s", "describe the image", (_png(img),), 0.0, fmt, seed=1), 1)[0]
    assert 0 < len(json.loads(reply)["summary"]) <= 7
