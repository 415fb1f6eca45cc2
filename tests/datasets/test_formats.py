"""SLAKE, PathVQA, PMC-VQA, MedXpertQA-MM and boe-sim on small files written in each published layout."""

from __future__ import annotations

import builtins
import datetime
import io
import json
import pickle
from pathlib import Path

import pytest

from boe.datasets import DatasetRecordError, detect_format, grade, is_placeholder_answer, load_dataset
from boe.errors import ConfigError
from tests.datasets.helpers import record_at, tiny_png, write_json, write_jsonl, write_lines

# ---------------------------------------------------------------- SLAKE


def _slake(root: Path) -> Path:
    tiny_png(root / "imgs" / "xmlab1" / "source.jpg")
    tiny_png(root / "imgs" / "xmlab2" / "source.jpg")
    base = {"base_type": "vqa", "triple": ["vhead", "_", "_"]}
    write_json(
        root / "train.json",
        [
            {
                "img_id": 1,
                "img_name": "xmlab1/source.jpg",
                "question": "Which organ is abnormal?",
                "answer": "Lung",
                "q_lang": "en",
                "location": "Lung",
                "modality": "CT",
                "answer_type": "OPEN",
                "content_type": "Organ",
                "qid": 0,
                **base,
            },
            {
                "img_id": 1,
                "img_name": "xmlab1/source.jpg",
                "question": "哪个器官不正常?",
                "answer": "肺",
                "q_lang": "zh",
                "location": "Lung",
                "modality": "CT",
                "answer_type": "OPEN",
                "content_type": "Organ",
                "qid": 1,
                **base,
            },
            {
                "img_id": 2,
                "img_name": "xmlab2/source.jpg",
                "question": "How many lungs\tare shown?",
                "answer": 2,
                "q_lang": "en",
                "location": "Chest",
                "modality": "X-Ray",
                "answer_type": "OPEN ",
                "content_type": "Quantity",
                "qid": 2,
                **base,
            },
            {
                "img_id": 2,
                "img_name": "xmlab2/source.jpg",
                "question": "Is this a CT?",
                "answer": "No",
                "q_lang": "en",
                "location": "Chest",
                "modality": "X-Ray",
                "answer_type": "CLOSED",
                "content_type": "Modality",
                "qid": 3,
                **base,
            },
            {"img_id": 2, "img_name": "xmlab2/source.jpg", "question": "", "answer": "No", "q_lang": "en", "qid": 4},
        ],
    )
    write_json(
        root / "test.json",
        [
            {
                "img_id": 1,
                "img_name": "xmlab1/source.jpg",
                "question": "What modality is used?",
                "answer": "CT",
                "q_lang": "en",
                "location": "Lung",
                "modality": "CT",
                "answer_type": "OPEN",
                "content_type": "Modality",
                "qid": 100,
                **base,
            },
        ],
    )
    return root


def test_slake(tmp_path):
    root = _slake(tmp_path / "Slake1.0")
    assert detect_format(root) == "slake"
    ds = load_dataset(root)
    assert [it.question_id for it in ds] == ["train-0", "train-2", "train-3", "test-100"]
    assert ds.dropped == {"language not en": 1}
    (issue,) = ds.issues
    assert (issue.kind, issue.source, issue.question_id) == ("error", "train.json", None)
    assert record_at(root / "train.json", issue.line)["qid"] == 4 and "question" in issue.message
    item = ds.by_id("train-2")
    assert (item.question, item.reference, item.answer_type) == ("How many lungs are shown?", "2", "open")
    assert item.images[0].figure == "xmlab2"
    assert item.images[0].path == (root / "imgs" / "xmlab2" / "source.jpg").resolve()
    assert item.metadata["modality"] == "X-Ray" and item.metadata["content_type"] == "Quantity"
    assert ds.by_id("train-3").answer_type == "closed"
    assert grade("two", item).method == "numeric"


def test_slake_languages_and_splits(tmp_path):
    root = _slake(tmp_path)
    zh = load_dataset(root, lang="zh")
    assert [it.question_id for it in zh] == ["train-1"] and zh[0].reference == "肺"
    assert grade("肺", zh[0]).score == 1.0
    assert len(load_dataset(root, lang=None)) == 5
    assert [it.question_id for it in load_dataset(root, split="test")] == ["test-100"]
    with pytest.raises(ConfigError, match="lang"):
        load_dataset(root, lang="fr")
    with pytest.raises(ConfigError, match="unknown split"):
        load_dataset(root, split="dev")


# ---------------------------------------------------------------- PathVQA

PATH_RECORDS = [
    {"image": "train_0001", "question": "What is present?", "answer": "granuloma"},
    {"image": "train_0001", "question": "Is inflammation present?", "answer": "yes"},
    {"image": "train_0001", "question": "What does this show?", "answer": "caseous necrosis"},
    {"image": "train_0002", "question": "Are the cells dividing?", "answer": "No"},
    {"image": "train_0002", "question": "What stains pink?", "answer": "eosin"},
    {"image": "", "question": "What is this?", "answer": "x"},
]


def _pathvqa(root: Path) -> Path:
    (root / "qas" / "train").mkdir(parents=True)
    (root / "qas" / "train" / "train_qa.pkl").write_bytes(pickle.dumps(PATH_RECORDS))
    tiny_png(root / "images" / "train" / "train_0001.jpg")
    tiny_png(root / "images" / "train" / "train_0002.jpg")
    write_jsonl(
        root / "test.jsonl", [{"image": "test_0001", "question": "What organ is this?", "answer": "liver"}, "{not json"]
    )
    tiny_png(root / "images" / "test" / "test_0001.jpg")
    return root


def test_pathvqa_drops_yes_no_like_the_paper(tmp_path):
    root = _pathvqa(tmp_path / "pvqa")
    assert detect_format(root) == "pathvqa"
    ds = load_dataset(root)
    assert [it.question_id for it in ds] == [
        "train/train_0001/1",
        "train/train_0001/3",
        "train/train_0002/2",
        "test/test_0001/1",
    ]
    assert ds.dropped == {"yes/no answer": 2}
    assert {it.answer_type for it in ds} == {"open"}
    assert [(i.source, i.line, i.kind) for i in ds.issues] == [
        ("qas/train/train_qa.pkl", 6, "error"),  # a pickle has no lines: the record number
        ("test.jsonl", 2, "error"),
    ]
    assert ds.by_id("train/train_0001/1").images[0].path == (root / "images" / "train" / "train_0001.jpg").resolve()


def test_pathvqa_keep_yes_no_keeps_ids_stable(tmp_path):
    root = _pathvqa(tmp_path)
    dropped = {it.question_id: it.reference for it in load_dataset(root)}
    kept = {it.question_id: it for it in load_dataset(root, keep_yes_no=True)}
    assert set(dropped) < set(kept)
    assert all(kept[q].reference == ref for q, ref in dropped.items())
    assert kept["train/train_0001/2"].answer_type == "closed" and kept["train/train_0002/1"].reference == "No"
    assert load_dataset(root, keep_yes_no=True).options["keep_yes_no"] is True


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        pytest.param(
            "class",
            pickle.dumps([{"image": "x", "question": "q", "answer": datetime.date(2020, 1, 1)}]),
            id="refuses-classes",
        ),
        pytest.param("truncated", pickle.dumps(PATH_RECORDS)[:20], id="truncated"),
        pytest.param("dict", pickle.dumps({"a": 1}), id="not-a-list"),
    ],
)
def test_pathvqa_bad_pickles(tmp_path, name, payload):
    f = tmp_path / "qas" / "train" / "train_qa.pkl"
    f.parent.mkdir(parents=True)
    f.write_bytes(payload)
    with pytest.raises(DatasetRecordError, match="train_qa.pkl"):
        load_dataset(f, format="pathvqa")


def test_pathvqa_csv(tmp_path):
    write_lines(
        tmp_path / "val.csv",
        ["image,question,answer", 'val_0001,What is seen?,"fibrin, blood"', "val_0002,Is it benign?,yes"],
    )
    tiny_png(tmp_path / "images" / "val" / "val_0001.png")
    ds = load_dataset(tmp_path / "val.csv")
    assert [(it.question_id, it.reference) for it in ds] == [("val/val_0001/1", "fibrin, blood")]
    assert ds[0].images[0].path.name == "val_0001.png"


# ---------------------------------------------------------------- PMC-VQA

PMC_HEADER = "index,Figure_path,Caption,Question,Choice A,Choice B,Choice C,Choice D,Answer,Answer_label"
PMC_ROWS = [
    "0,PMC1_F1.jpg,cap,What imaging is shown?, A:CT , B:MRI , C:Ultrasound , D:X-ray ,MRI,B",
    "1,PMC1_F1.jpg,cap,Which finding is seen?, A:Mass , B:Cyst , C:Edema , D:None of the above ,None of the above,D",
    "2,PMC2_F1.jpg,cap,What organ is shown?, A:Liver , B:Kidney , C:Spleen , D:Heart ,Spleen,",
    "3,PMC2_F1.jpg,cap,What stain is used?, A:H&E , B:PAS , C:Trichrome , D:Giemsa ,PAS,C",
    "4,PMC2_F1.jpg,cap,What is the size?, A:Small , B:Large , C:Cannot be determined , D:Medium ,"
    "Cannot be determined,C",
    '5,PMC3_F2.jpg,cap,Where is the lesion?,"A:\u00a0left lobe ","B: right lobe","C:both lobes","D:neither",B,',
    "6,../escape.jpg,cap,What is it?, A:a , B:b , C:c , D:d ,a,A",
    "7,PMC1_F1.jpg,cap,What is wrong?, A:x , B:y , C:z , D:w ,q,",
]


def _pmc(root: Path) -> Path:
    write_lines(root / "test_2.csv", [PMC_HEADER, *PMC_ROWS])
    for name in ("PMC1_F1.jpg", "PMC2_F1.jpg", "PMC3_F2.jpg"):
        tiny_png(root / "images" / name)
    tiny_png(root.parent / "escape.jpg")
    return root


def test_pmc_vqa_option_hidden_protocol(tmp_path):
    root = _pmc(tmp_path / "pmc")
    assert detect_format(root) == "pmc-vqa"
    ds = load_dataset(root)
    assert [it.question_id for it in ds] == ["test_2-0", "test_2-2", "test_2-5"]
    assert ds.dropped == {"placeholder reference": 2}
    kinds = {i.line: i.kind for i in ds.issues}
    assert kinds == {5: "error", 8: "path", 9: "error"}  # label/answer disagree, ../ escape, no label
    first = ds.by_id("test_2-0")
    assert (first.answer_type, first.reference, first.label, first.options_hidden) == ("open", "MRI", "B", True)
    assert first.options == {"A": "CT", "B": "MRI", "C": "Ultrasound", "D": "X-ray"}
    assert first.for_generator()["options"] is None
    assert ds.by_id("test_2-2").label == "C"  # no Answer_label: taken from the Answer text
    lesion = ds.by_id("test_2-5")  # the label sits in Answer; NBSP and stray spaces cleaned
    assert (lesion.reference, lesion.options["A"]) == ("right lobe", "left lobe")
    assert grade("MRI scan", first).score == 1.0 and grade("B", first).score == 0.0
    issue = next(i for i in ds.issues if i.line == 5)
    assert "Answer_label 'C' disagrees" in issue.message and issue.source == "test_2.csv"


def test_pmc_vqa_with_options_shown(tmp_path):
    root = _pmc(tmp_path / "pmc")
    ds = load_dataset(root, hide_options=False)
    assert ds.dropped == {}
    item = ds.by_id("test_2-1")
    assert (item.answer_type, item.reference, item.alternatives) == ("mcq", "D", ("None of the above",))
    assert item.for_generator()["options"]["D"] == "None of the above"
    assert grade("D", item).score == 1.0 and grade("(A)", item).score == 0.0
    assert len(load_dataset(root, hide_options=False, filter_placeholders=True)) == len(ds) - 2


@pytest.mark.parametrize(
    ("text", "placeholder"),
    [
        pytest.param("None of the above", True, id="none-of-the-above"),
        pytest.param("All of the above.", True, id="all-of-the-above"),
        pytest.param("Both A and B", True, id="both-a-and-b"),
        pytest.param("A and C", True, id="a-and-c"),
        pytest.param("Cannot be determined", True, id="cannot-be-determined"),
        pytest.param("Can't determine from the image", True, id="cant-determine"),
        pytest.param("It cannot be determined from the given information", True, id="cannot-inside"),
        pytest.param("Not mentioned", True, id="not-mentioned"),
        pytest.param("Not specified in the figure", True, id="not-specified"),
        pytest.param("Unknown", True, id="unknown"),
        pytest.param("The image does not show it", True, id="image-does-not-show"),
        pytest.param("Neither", True, id="neither"),
        pytest.param("Not enough information", True, id="not-enough-info"),
        pytest.param("Pneumonia", False, id="diagnosis"),
        pytest.param("No evidence of metastasis", False, id="negative-finding"),
        pytest.param("Both kidneys", False, id="both-kidneys"),
        pytest.param("Anterior mediastinum", False, id="anatomy"),
        pytest.param("A 5 cm mass", False, id="measurement"),
        pytest.param("Normal", False, id="normal"),
    ],
)
def test_placeholder_filter(text, placeholder):
    assert is_placeholder_answer(text) is placeholder


def test_pmc_vqa_missing_columns(tmp_path):
    write_lines(tmp_path / "train.csv", ["Figure_path,Question,Choice A,Choice B", "a.jpg,Q?,A:x,B:y"])
    with pytest.raises(DatasetRecordError, match="neither an Answer_label nor an Answer"):
        load_dataset(tmp_path / "train.csv", require_images=False)
    write_lines(tmp_path / "bad.csv", ["Figure,Question", "a.jpg,Q?"])
    with pytest.raises(DatasetRecordError, match="lacks column"):
        load_dataset(tmp_path / "bad.csv", format="pmc-vqa")


# ---------------------------------------------------------------- MedXpertQA-MM

MX_OPTIONS = {"A": "Sarcoidosis", "B": "Tuberculosis", "C": "Lymphoma", "D": "Silicosis", "E": "Histoplasmosis"}


def _medxpert(root: Path) -> Path:
    inline = " ".join(f"({k}) {v}" for k, v in MX_OPTIONS.items())
    write_jsonl(
        root / "MM" / "test.jsonl",
        [
            {
                "id": "MM-1",
                "question": f"A 40-year-old man has a cough.\nWhat is the diagnosis? Answer Choices: {inline}",
                "options": MX_OPTIONS,
                "label": "C",
                "images": ["MM-1-a.jpeg", "MM-1-b.jpeg"],
                "medical_task": "Diagnosis",
                "body_system": "Respiratory",
                "question_type": "Reasoning",
            },
            {
                "id": "MM-2",
                "question": "Which is it? Answer Choices: (A) x (B) y",
                "options": MX_OPTIONS,
                "label": "A",
                "images": ["MM-2-a.png"],
            },
            {"id": "MM-3", "question": "Q?", "options": MX_OPTIONS, "label": "F", "images": ["MM-1-a.jpeg"]},
            {"id": "MM-4", "question": "Q?", "options": MX_OPTIONS, "label": "A", "images": []},
            {"id": "MM-5", "question": "Q?", "options": {"A": "x", "1": "y"}, "label": "A", "images": ["MM-2-a.png"]},
            "[1, 2",
            {"id": "MM-7", "question": "Q?", "options": MX_OPTIONS, "label": "B", "images": ["/etc/hostname"]},
            {"id": "MM-1", "question": "again?", "options": MX_OPTIONS, "label": "B", "images": ["MM-2-a.png"]},
        ],
    )
    for name in ("MM-1-a.jpeg", "MM-1-b.jpeg", "MM-2-a.png"):
        tiny_png(root / "MM" / "images" / name)
    return root


def test_medxpertqa(tmp_path):
    root = _medxpert(tmp_path / "medxpert")
    assert detect_format(root) == "medxpertqa"
    ds = load_dataset(root)
    assert [it.question_id for it in ds] == ["MM-1", "MM-2"]
    assert [(i.line, i.kind) for i in ds.issues] == [
        (3, "error"),
        (4, "error"),
        (5, "error"),
        (6, "error"),
        (7, "path"),
        (8, "duplicate"),
    ]
    item = ds.by_id("MM-1")
    assert item.question == "A 40-year-old man has a cough. What is the diagnosis?"
    assert (item.answer_type, item.reference, item.alternatives, item.label) == ("mcq", "C", ("Lymphoma",), "C")
    assert [im.figure for im in item.images] == ["MM-1-a", "MM-1-b"]
    assert item.root == root.resolve() and item.images[0].path == (root / "MM" / "images" / "MM-1-a.jpeg").resolve()
    assert item.metadata == {
        "split": "test",
        "n_images": 2,
        "medical_task": "Diagnosis",
        "body_system": "Respiratory",
        "question_type": "Reasoning",
    }
    # inline choices that disagree with the options stay in the question
    assert ds.by_id("MM-2").question == "Which is it? Answer Choices: (A) x (B) y"
    assert load_dataset(root, strip_inline_options=False).by_id("MM-1").question.endswith("(E) Histoplasmosis")


@pytest.mark.parametrize(
    ("answer", "correct"),
    [
        pytest.param("C", True, id="letter"),
        pytest.param("(C) Lymphoma", True, id="letter-and-text"),
        pytest.param("lymphoma", True, id="option-text"),
        pytest.param("The answer is C.", True, id="sentence"),
        pytest.param("B", False, id="other-letter"),
        pytest.param("F", False, id="letter-not-offered"),
        pytest.param("C. Tuberculosis", False, id="letter-text-conflict"),
        pytest.param("", False, id="empty"),
    ],
)
def test_medxpertqa_exact_option_matching(tmp_path, answer, correct):
    item = load_dataset(_medxpert(tmp_path)).by_id("MM-1")
    g = grade(answer, item)
    assert g.correct is correct
    assert g.method == ("empty" if not answer else "option")


# ---------------------------------------------------------------- boe-sim

FACT_MARKER = "SECRET-FACT-7f3a"


def _sim(root: Path, version: int = 1) -> Path:
    write_json(
        root / "dataset.json",
        {"format": "boe-sim", "version": version, "seed": 0, "size": 64, "n_questions": 4, "n_images": 2},
    )
    write_jsonl(
        root / "questions.jsonl",
        [
            {
                "id": "sim-0-00000",
                "image_id": "img-0-00000",
                "images": ["images/img-0-00000.png"],
                "dicom": None,
                "question": "What imaging modality is this?",
                "options": None,
                "answer": "ct",
                "answer_type": "open",
                "asks": "modality",
                "slot": "modality",
            },
            {
                "id": "sim-0-00001",
                "image_id": "img-0-00000",
                "images": ["images/img-0-00000.png"],
                "dicom": None,
                "question": "Is there a mass in the left lung?",
                "options": None,
                "answer": "no",
                "answer_type": "closed",
                "asks": "presence",
                "slot": "attribute",
            },
            {
                "id": "sim-0-00002",
                "image_id": "img-0-00001",
                "images": ["images/img-0-00001.png"],
                "dicom": None,
                "question": "Which side is the lesion on?",
                "options": {"A": "right", "B": "left"},
                "answer": "left",
                "answer_type": "choice",
                "asks": "side",
                "slot": "attribute",
            },
            {
                "id": "sim-0-00003",
                "image_id": "img-0-00001",
                "images": ["../outside.png"],
                "dicom": None,
                "question": "What region?",
                "options": None,
                "answer": "chest",
                "answer_type": "open",
                "asks": "region",
                "slot": "region",
            },
        ],
    )
    write_jsonl(root / "facts.jsonl", [{"image_id": "img-0-00000", "note": FACT_MARKER}])
    tiny_png(root / "images" / "img-0-00000.png")
    tiny_png(root / "images" / "img-0-00001.png")
    tiny_png(root.parent / "outside.png")
    return root


def test_boe_sim_never_reads_facts(tmp_path, monkeypatch):
    root = _sim(tmp_path / "simset")
    opened: list[str] = []
    real_open = builtins.open
    real_io_open = io.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_io(file, *args, **kwargs):
        opened.append(str(file))
        return real_io_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy_io)
    ds = load_dataset(root)
    monkeypatch.undo()
    assert any(p.endswith("questions.jsonl") for p in opened)
    assert not any(p.endswith("facts.jsonl") for p in opened)
    assert FACT_MARKER not in json.dumps([it.as_dict() for it in ds])
    assert [it.question_id for it in ds] == ["sim-0-00000", "sim-0-00001", "sim-0-00002"]
    assert [(i.line, i.kind) for i in ds.issues] == [(4, "path")]


def test_boe_sim_items(tmp_path):
    root = _sim(tmp_path / "simset")
    assert detect_format(root) == "boe-sim"
    assert detect_format(root / "questions.jsonl") == "boe-sim"
    ds = load_dataset(root)
    open_q, closed_q, choice_q = ds
    assert (open_q.reference, open_q.answer_type, open_q.metadata["slot"]) == ("ct", "open", "modality")
    assert closed_q.answer_type == "closed" and grade("No.", closed_q).score == 1.0
    assert (choice_q.answer_type, choice_q.reference, choice_q.label) == ("mcq", "B", "B")
    assert grade("B", choice_q).score == 1.0 and grade("left", choice_q).score == 1.0
    assert open_q.images[0].figure == "img-0-00000"
    assert open_q.images[0].path == (root / "images" / "img-0-00000.png").resolve()


def test_boe_sim_refuses_unknown_versions(tmp_path):
    root = _sim(tmp_path / "simset", version=2)
    with pytest.raises(DatasetRecordError, match="version"):
        load_dataset(root, format="boe-sim")
    (root / "dataset.json").unlink()
    with pytest.raises(DatasetRecordError, match="not a boe-sim dataset"):
        load_dataset(root, format="boe-sim")


def test_boe_sim_synonyms_from_the_simulator(tmp_path):
    pytest.importorskip("boe.sim.vocab")
    root = tmp_path / "simset"
    write_json(root / "dataset.json", {"format": "boe-sim", "version": 1})
    write_jsonl(
        root / "questions.jsonl",
        [
            {
                "id": "s1",
                "images": ["images/a.png"],
                "question": "Which modality?",
                "answer": "mr",
                "answer_type": "choice",
                "options": {"A": "CT", "B": "MRI", "C": "ultrasound"},
                "asks": "modality",
                "slot": "modality",
            },
            {
                "id": "s2",
                "images": ["images/a.png"],
                "question": "Which modality?",
                "answer": "xr",
                "answer_type": "open",
                "asks": "modality",
                "slot": "modality",
            },
        ],
    )
    tiny_png(root / "images" / "a.png")
    ds = load_dataset(root)
    assert ds.by_id("s1").label == "B"
    assert grade("X-ray", ds.by_id("s2")).score == 1.0


def test_boe_sim_reads_what_the_simulator_writes(tmp_path):
    pytest.importorskip("cv2")
    sim = pytest.importorskip("boe.sim.dataset")
    root = sim.generate_dataset(tmp_path / "gen", 6, seed=3, size=64)
    ds = load_dataset(root)
    theirs = sim.load_sim_dataset(root)
    assert not ds.issues
    assert [it.question_id for it in ds] == [q["id"] for q in theirs]
    for item, q in zip(ds, theirs, strict=True):
        assert [str(im.path) for im in item.images] == q["images"]
        if q["answer_type"] == "choice":
            assert item.label is not None and q["answer"] in item.alternatives
        else:
            assert item.reference == q["answer"]
