"""VQA-Med 2019 on the shipped real text files (when present) and on synthetic lines in the same layout."""

from __future__ import annotations

import pytest

from boe.datasets import DatasetRecordError, detect_format, grade, load_dataset
from boe.datasets._vqamed import expand_answer
from tests.datasets.helpers import FIXTURES

FIXTURE = FIXTURES / "vqa-med"
TEST_FILE = "test/VQAMed2019_Test_Questions_w_Ref_Answers.txt"


def test_real_test_file(shared_data):
    ds = load_dataset(shared_data / "vqa-med-2019" / TEST_FILE, require_images=False)
    assert (ds.format, len(ds), ds.issues) == ("vqa-med", 500, ())
    cats = [it.metadata["category"] for it in ds]
    assert {c: cats.count(c) for c in set(cats)} == {"modality": 125, "plane": 125, "organ": 125, "abnormality": 125}
    assert ds.root == (shared_data / "vqa-med-2019" / "test").resolve()
    assert all(it.missing_images for it in ds)  # the images are not shipped
    assert not any("\t" in it.question for it in ds)

    multi = ds.by_id("test/abnormality/synpic54143")
    assert multi.reference == "anaplastic oligodendroglioma"
    assert set(multi.alternatives) == {"multi-cystic complex mass", "neoplasm"}
    assert grade("Neoplasm", multi).score == 1.0

    optional = ds.by_id("test/abnormality/synpic35171")
    assert optional.reference == "(angioinvasive aspergillosis with) septic cerebral emboli"
    assert "septic cerebral emboli" in optional.alternatives
    assert grade("septic cerebral emboli", optional).method == "exact"

    organ = ds.by_id("test/organ/synpic12184")
    assert organ.answers == ("gastrointestinal", "genitourinary", "spine and contents", "musculoskeletal")


def test_real_images_are_required_by_default(shared_data):
    ds = load_dataset(shared_data / "vqa-med-2019" / TEST_FILE)
    assert len(ds) == 0 and len(ds.issues) == 500
    assert {i.kind for i in ds.issues} == {"missing_image"}
    assert ds.issues[0].source == "VQAMed2019_Test_Questions_w_Ref_Answers.txt" and ds.issues[0].line == 1


def test_real_category_file(shared_data):
    path = shared_data / "vqa-med-2019" / "train" / "QAPairsByCategory" / "C1_Modality_train.txt"
    ds = load_dataset(path, require_images=False)
    assert len(ds) == 3200 and not ds.issues
    assert {it.metadata["category"] for it in ds} == {"modality"}
    assert {it.metadata["split"] for it in ds} == {"train"}
    assert ds.root == (shared_data / "vqa-med-2019" / "train").resolve()
    assert ds[0].images[0].path == ds.root / "Train_images" / "synpic41148.jpg"
    tabbed = [it for it in ds if it.metadata["image_id"] == "synpic23493"]
    assert tabbed[0].question == "is this a t1 weighted image?"
    closed = [it for it in ds if it.answer_type == "closed"]
    assert closed and {it.reference for it in closed} == {"yes", "no"}


def test_questions_only_file_is_refused(shared_data):
    with pytest.raises(DatasetRecordError, match="no reference answers") as exc:
        load_dataset(
            shared_data / "vqa-med-2019" / "test" / "VQAMed2019_Test_Questions.txt",
            format="vqa-med",
            require_images=False,
        )
    assert exc.value.line == 1


def test_real_directory_is_detected(shared_data):
    assert detect_format(shared_data / "vqa-med-2019") == "vqa-med"


def test_fixture_directory():
    ds = load_dataset(FIXTURE, require_images=False)
    assert detect_format(FIXTURE) == "vqa-med"
    ids = [it.question_id for it in ds]
    assert len(ids) == len(set(ids)) == 15
    # the questions-only test file is not picked up; malformed lines are reported with file and line
    assert [(i.source, i.line, i.kind) for i in ds.issues] == [
        ("train/QAPairsByCategory/C1_Modality_train.txt", 5, "error"),
        ("test/VQAMed2019_Test_Questions_w_Ref_Answers.txt", 5, "error"),
    ]
    assert {it.metadata["split"] for it in ds} == {"train", "val", "test"}


def test_fixture_quirks_are_in_the_files():
    qa = FIXTURE / "train" / "QAPairsByCategory"
    assert (FIXTURE / "val" / "QAPairsByCategory" / "C2_Plane_val.txt").read_bytes().count(b"\r\n") == 2
    assert (qa / "C3_Organ_train.txt").read_bytes().startswith(b"\xef\xbb\xbf")
    assert not (qa / "C3_Organ_train.txt").read_bytes().endswith(b"\n")
    assert b"\t" in (qa / "C1_Modality_train.txt").read_bytes()


@pytest.mark.parametrize(
    ("qid", "question", "reference", "alternatives"),
    [
        pytest.param("train/modality/synpic90002", "is this a t2 weighted image?", "no", (), id="tab-in-question"),
        pytest.param(
            "train/organ/synpic90001", "which organ system is shown?", "skull and contents", (), id="bom-first-line"
        ),
        pytest.param(
            "train/organ/synpic90003",
            "what part of the body is imaged?",
            "lung, mediastinum, pleura",
            (),
            id="no-final-newline-comma-kept",
        ),
        pytest.param("val/plane/synpic90102", "which plane is shown?", "sagittal", (), id="crlf"),
        pytest.param(
            "train/abnormality/synpic90006",
            "what is the primary abnormality?",
            "hodgkin\u2019s lymphoma",
            (),
            id="curly-apostrophe",
        ),
        pytest.param(
            "test/organ/synpic90202",
            "what organ system is imaged?",
            "face, sinuses, and neck",
            ("skull and contents",),
            id="hash-alternative",
        ),
        pytest.param(
            "test/abnormality/synpic90203",
            "what is abnormal?",
            "(iatrogenic) pneumoperitoneum",
            ("iatrogenic pneumoperitoneum", "pneumoperitoneum"),
            id="optional-part",
        ),
        pytest.param(
            "test/modality/synpic90201",
            "what modality is used?",
            "ct w/contrast (iv)",
            ("ct w/contrast iv", "ct w/contrast"),
            id="optional-tail",
        ),
    ],
)
def test_fixture_lines(qid, question, reference, alternatives):
    item = load_dataset(FIXTURE, require_images=False).by_id(qid)
    assert (item.question, item.reference, item.alternatives) == (question, reference, alternatives)


def test_fixture_images_and_answer_types():
    ds = load_dataset(FIXTURE, require_images=False)
    present = ds.by_id("train/modality/synpic90001")
    assert present.missing_images == ()
    assert present.images[0].path == (FIXTURE / "train" / "Train_images" / "synpic90001.jpg").resolve()
    assert ds.by_id("train/organ/synpic90001").missing_images == ()  # the same image serves both categories
    assert ds.by_id("test/modality/synpic90206").answer_type == "closed"
    assert ds.by_id("test/modality/synpic90201").answer_type == "open"
    strict_images = load_dataset(FIXTURE)
    assert {it.question_id for it in strict_images} == {"train/modality/synpic90001", "train/organ/synpic90001"}


def test_split_option():
    ds = load_dataset(FIXTURE, split="val", require_images=False)
    assert [it.question_id for it in ds] == ["val/plane/synpic90101", "val/plane/synpic90102"]


def test_strict_raises_on_the_first_bad_line():
    with pytest.raises(DatasetRecordError) as exc:
        load_dataset(FIXTURE, require_images=False, strict=True)
    err = exc.value
    assert (err.source, err.line) == ("train/QAPairsByCategory/C1_Modality_train.txt", 5)
    assert "C1_Modality_train.txt:5" in str(err)


@pytest.mark.parametrize(
    ("raw", "forms"),
    [
        pytest.param("axial", ["axial"], id="plain"),
        pytest.param("a#b", ["a", "b"], id="hash"),
        pytest.param("a# #b#", ["a", "b"], id="empty-parts"),
        pytest.param("aml (angiomyolipoma)", ["aml (angiomyolipoma)", "aml angiomyolipoma", "aml"], id="tail"),
        pytest.param("(x) y (z)", ["(x) y (z)", "x y z", "x y", "y z", "y"], id="two-parts"),
        pytest.param("lung, mediastinum, pleura", ["lung, mediastinum, pleura"], id="commas-are-not-separators"),
    ],
)
def test_expand_answer(raw, forms):
    assert expand_answer(raw) == forms
