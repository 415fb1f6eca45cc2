"""VQA-RAD on the shipped real subset (when present) and on the real records copied into the fixtures."""

from __future__ import annotations

import pytest

from boe.datasets import detect_format, grade, load_dataset
from boe.datasets._vqarad import question_types
from tests.datasets.helpers import FIXTURES, shared_data_dir

FIXTURE = FIXTURES / "vqa-rad"


@pytest.fixture(params=["fixture", "shared"])
def vqarad_dir(request):
    if request.param == "fixture":
        return FIXTURE
    d = shared_data_dir()
    if d is None:
        pytest.skip("real data not found: set BOE_SHARED_DATA or place shared/data beside the repository")
    return d / "vqa-rad"


def test_shared_subset_loads_completely(shared_data):
    ds = load_dataset(shared_data / "vqa-rad")
    assert (ds.format, len(ds), ds.issues) == ("vqa-rad", 799, ())
    ids = [it.question_id for it in ds]
    assert len(set(ids)) == 799
    assert sum(i.startswith("train-") for i in ids) == 649 and sum(i.startswith("test-") for i in ids) == 150
    assert all(im.path.is_file() and im.path.is_relative_to(ds.root) for it in ds for im in it.images)
    assert {it.answer_type for it in ds} == {"open", "closed"}
    assert not any("\t" in it.question or "\t" in it.reference or "  " in it.question for it in ds)


def test_split_option(vqarad_dir):
    train = load_dataset(vqarad_dir, split="train", require_images=False)
    test = load_dataset(vqarad_dir, split="test", require_images=False)
    assert train and test
    assert {it.metadata["split"] for it in train} == {"train"}
    assert {it.metadata["split"] for it in test} == {"test"}
    assert len(train) + len(test) == len(load_dataset(vqarad_dir, require_images=False))


@pytest.mark.parametrize(
    ("qid", "answer_type", "types", "reference"),
    [
        pytest.param("train-3371", "closed", ["OTHER"], "Maybe", id="closed-with-trailing-space"),
        pytest.param("train-3372", "closed", ["OTHER"], "Yes", id="closed-with-trailing-space-2"),
        pytest.param("train-2767", "closed", ["POS", "PRES"], "Yes", id="combined-type"),
        pytest.param("train-3457", "closed", ["PRES"], "No", id="misspelt-PRSE"),
        pytest.param("train-597", "open", ["ORGAN"], "Heart lungs", id="tab-in-answer"),
        pytest.param("test-754", "open", ["ORGAN"], "Skull cartilage and medulla", id="tab-in-test-answer"),
    ],
)
def test_record_quirks(vqarad_dir, qid, answer_type, types, reference):
    item = load_dataset(vqarad_dir, require_images=False).by_id(qid)
    assert item.answer_type == answer_type
    assert item.metadata["question_types"] == types
    assert item.reference == reference
    assert item.answer_raw is not None and item.answer_raw.strip() != ""


def test_tab_in_question_is_one_space(vqarad_dir):
    item = load_dataset(vqarad_dir, require_images=False).by_id("test-49")
    assert item.question == "was the patient positioned appropriately without tilting?"


def test_tab_answer_still_matches_a_plain_answer(vqarad_dir):
    item = load_dataset(vqarad_dir, require_images=False).by_id("train-597")
    assert item.answer_raw == "Heart \tlungs"
    assert grade("heart, lungs", item).score == 1.0


def test_fixture_reports_missing_images_per_item():
    ds = load_dataset(FIXTURE)
    missing = {i.question_id for i in ds.issues}
    assert {i.kind for i in ds.issues} == {"missing_image"}
    assert missing == {"train-597", "train-2767", "train-3371", "train-3372", "train-3457", "test-49"}
    issue = next(i for i in ds.issues if i.question_id == "train-597")
    assert issue.source == "trainset_subset.json" and issue.line == 52 and "synpic34449.jpg" in issue.message
    assert len(ds) == 35

    lenient = load_dataset(FIXTURE, require_images=False)
    assert len(lenient) == 41 and not lenient.issues
    assert {it.question_id for it in lenient if it.missing_images} == missing
    assert lenient.by_id("train-597").missing_images == ("synpic34449",)


def test_item_fields(vqarad_dir):
    item = load_dataset(vqarad_dir).by_id("train-1525")
    assert item.dataset == "vqa-rad"
    assert item.question_id == "train-1525"
    assert item.reference == "T2"
    assert [im.figure for im in item.images] == ["synpic51426"]
    assert item.images[0].path == (vqarad_dir / "images" / "synpic51426.jpg").resolve()
    assert item.metadata["organ"] in {"head", "chest", "abd"}
    assert item.options is None and item.label is None and not item.options_hidden
    assert item.root == vqarad_dir.resolve()


def test_detected(vqarad_dir):
    assert detect_format(vqarad_dir) == "vqa-rad"
    assert detect_format(vqarad_dir / "trainset_subset.json") == "vqa-rad"


def test_one_file(vqarad_dir):
    ds = load_dataset(vqarad_dir / "testset_subset.json", require_images=False)
    assert ds and all(it.question_id.startswith("test-") for it in ds)


@pytest.mark.parametrize(
    ("raw", "types"),
    [
        pytest.param("POS, PRES", ["POS", "PRES"], id="comma"),
        pytest.param("PRES, COLOR", ["PRES", "COLOR"], id="comma-2"),
        pytest.param("PRSE", ["PRES"], id="typo"),
        pytest.param(" pres ,pres", ["PRES"], id="spaces-and-repeat"),
        pytest.param("", [], id="empty"),
    ],
)
def test_question_types(raw, types):
    assert question_types(raw) == types
