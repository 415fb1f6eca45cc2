import json
from pathlib import Path

import pytest

from boe.vocab import vocabulary
from scripts.derive_vocab import derive

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.parametrize(
    ("slot", "text", "value", "known"),
    [
        pytest.param("modality", "MRI scan", "mr", True, id="mri"),
        pytest.param("modality", "CT - GI & IV Contrast", "ct", True, id="vqa-med-label"),
        pytest.param("modality", "Chest X-ray", "xr", True, id="xray"),
        pytest.param("modality", "US", "us", True, id="us-exact"),
        pytest.param("modality", "photograph", "photograph", False, id="unknown"),
        pytest.param("plane", "PA view", "pa", True, id="pa"),
        pytest.param("plane", "an axial CT image", "axial", True, id="phrase"),
        pytest.param("region", "the brain", "head", True, id="organ-to-region"),
        pytest.param("region", "Lung, mediastinum, pleura", "chest", True, id="organ-system"),
        pytest.param("finding", "no mass seen", "normal", True, id="negated"),
        pytest.param("finding", "large left pleural effusion", "effusion", True, id="finding-phrase"),
        pytest.param("attribute", "Left", "left", True, id="side"),
        pytest.param("attribute", "5 cm", "5 cm", False, id="free-attribute"),
    ],
)
def test_canonical(slot, text, value, known):
    c = vocabulary().canonical(slot, text)
    assert c is not None and (c.value, c.known) == (value, known)


def test_empty_values_are_no_claim():
    v = vocabulary()
    for text in (None, "", "null", "N/A", "unknown"):
        assert v.canonical("modality", text) is None
    assert v.canonical("finding", "none").value == "normal"


def test_rivals_follow_exclusive_families():
    v = vocabulary()
    ct, mr = v.canonical("modality", "ct"), v.canonical("modality", "mri")
    left, right, large = (v.canonical("attribute", t) for t in ("left", "right", "large"))
    free = v.canonical("attribute", "5 cm")
    assert ct.rivals(mr) and mr.rivals(ct) and not ct.rivals(ct)
    assert left.rivals(right) and not left.rivals(large)
    assert not free.rivals(left) and not left.rivals(free)


def test_question_types_recognise_most_vqa_rad_questions():
    if not SHARED.is_dir():
        pytest.skip("shared data not present")
    rad = json.loads((SHARED / "vqa-rad" / "trainset_subset.json").read_text())
    rad += json.loads((SHARED / "vqa-rad" / "testset_subset.json").read_text())
    v = vocabulary()
    for qtype, floor in (("MODALITY", 0.8), ("PLANE", 0.7), ("POS", 0.8)):
        rows = [r for r in rad if r["question_type"].strip() == qtype]
        hit = sum(v.question_type(r["question"]).name == qtype for r in rows)
        assert hit / len(rows) >= floor, (qtype, hit, len(rows))


def test_shipped_term_lists_are_what_derive_writes():
    if not SHARED.is_dir():
        pytest.skip("shared data not present")
    shipped = Path(__file__).resolve().parents[2] / "boe" / "vocab" / "data"
    for name, text in derive(SHARED).items():
        assert (shipped / name).read_text(encoding="utf-8") == text, name


def test_term_lists_hold_no_question_answer_pairs():
    shipped = Path(__file__).resolve().parents[2] / "boe" / "vocab" / "data"
    for f in shipped.glob("*.txt"):
        text = f.read_text(encoding="utf-8")
        assert "synpic" not in text and "?" not in text, f.name
