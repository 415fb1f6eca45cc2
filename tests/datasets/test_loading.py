"""What every format shares: detection, the registry, image paths inside the root, issues, strictness, items."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from boe.datasets import (
    Dataset,
    DatasetItem,
    DatasetRecordError,
    Drop,
    ImageFile,
    LoadContext,
    RecordProblem,
    available_formats,
    detect_format,
    load_dataset,
    register_format,
)
from boe.datasets._registry import FORMATS
from boe.errors import ConfigError, InputError
from tests.datasets.helpers import FIXTURES, record_at, tiny_png, write_json, write_lines


def _rad(qid, image, **extra):
    rec = {
        "qid": qid,
        "image_name": image,
        "image_organ": "HEAD",
        "answer": "yes",
        "answer_type": "CLOSED",
        "question_type": "PRES",
        "question": f"Question {qid}?",
        "phrase_type": "freeform",
    }
    rec.update(extra)
    return rec


def test_every_builtin_format_is_registered():
    assert set(available_formats()) == {
        "vqa-rad",
        "vqa-med",
        "slake",
        "pathvqa",
        "pmc-vqa",
        "medxpertqa",
        "boe-sim",
        "hf",
    }


@pytest.mark.parametrize(
    ("image", "why"),
    [
        pytest.param("../outside.jpg", "outside the dataset root", id="dotdot"),
        pytest.param("images/../../outside.jpg", "outside the dataset root", id="dotdot-inside-a-path"),
        pytest.param("{outside}", "outside the dataset root", id="absolute-outside"),
        pytest.param("link.jpg", "links to", id="symlink-out"),
        pytest.param("", "empty or invalid", id="empty-name"),
    ],
)
def test_image_paths_must_stay_inside_the_root(tmp_path, image, why):
    root = tmp_path / "rad"
    outside = tiny_png(tmp_path / "outside.jpg")
    tiny_png(root / "images" / "ok.jpg")
    (root / "images" / "link.jpg").symlink_to(outside)
    image = image.format(outside=outside)
    f = write_json(root / "trainset.json", [_rad(1, "ok.jpg"), _rad(2, image)])
    ds = load_dataset(root)
    assert [it.question_id for it in ds] == ["train-1"]
    (issue,) = ds.issues
    assert issue.kind == "path" and why in issue.message
    assert (issue.source, issue.question_id) == ("trainset.json", None)
    assert record_at(f, issue.line)["qid"] == 2
    with pytest.raises(DatasetRecordError, match=why) as exc:
        load_dataset(root, strict=True)
    assert exc.value.kind == "path" and f"trainset.json:{issue.line}" in str(exc.value)
    with pytest.raises(DatasetRecordError):  # a missing-image waiver does not waive the root
        load_dataset(root, strict=True, require_images=False)


def test_absolute_path_inside_the_root_is_fine(tmp_path):
    img = tiny_png(tmp_path / "images" / "a.jpg")
    write_json(tmp_path / "trainset.json", [_rad(1, str(img))])
    (item,) = load_dataset(tmp_path)
    assert item.images[0].path == img.resolve()


def test_a_different_root(tmp_path):
    tiny_png(tmp_path / "pictures" / "images" / "a.jpg")
    f = write_json(tmp_path / "json" / "testset.json", [_rad(5, "a.jpg")])
    assert load_dataset(f).issues[0].kind == "missing_image"
    ds = load_dataset(f, root=tmp_path / "pictures")
    assert ds[0].images[0].path == (tmp_path / "pictures" / "images" / "a.jpg").resolve()
    assert ds[0].root == (tmp_path / "pictures").resolve()
    with pytest.raises(InputError, match="not a directory"):
        load_dataset(f, root=tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("records", "message"),
    [
        pytest.param([_rad(1, "a.jpg"), _rad(1, "a.jpg")], "appears twice", id="duplicate-id"),
        pytest.param([_rad(1, "a.jpg"), "just text"], "expected an object", id="not-an-object"),
        pytest.param([_rad(1, "a.jpg"), {"qid": 2, "image_name": "a.jpg"}], "missing field", id="missing-fields"),
        pytest.param(
            [_rad(1, "a.jpg"), _rad(2, "a.jpg", answer_type="MAYBE")], "neither OPEN nor CLOSED", id="bad-answer-type"
        ),
        pytest.param([_rad(1, "a.jpg"), _rad(2, "a.jpg", answer=" \t ")], "'answer' is empty", id="blank-answer"),
        pytest.param([_rad(1, "a.jpg"), _rad(2, "a.jpg", question=["a list"])], "must be text", id="list-question"),
    ],
)
def test_bad_records_are_skipped_and_reported(tmp_path, records, message):
    tiny_png(tmp_path / "images" / "a.jpg")
    write_json(tmp_path / "trainset.json", records)
    seen = []
    ds = load_dataset(tmp_path, on_issue=seen.append)
    assert [it.question_id for it in ds] == ["train-1"]
    assert len(ds.issues) == 1 and message in ds.issues[0].message
    assert seen == list(ds.issues)
    assert ds.describe()["issues"] == {ds.issues[0].kind: 1}
    assert message in ds.summary() or "issues" in ds.summary()
    with pytest.raises(DatasetRecordError, match=message):
        load_dataset(tmp_path, strict=True)


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        pytest.param('[{"qid": 1}\n,\n{"qid": ', "invalid JSON", 4, id="truncated"),  # EOF is on line 4
        pytest.param('{"qid": 1}', "expected a JSON array", None, id="not-an-array"),
        pytest.param('[{"qid": 1} {"qid": 2}]', "expected ',' or ']'", 1, id="missing-comma"),
    ],
)
def test_unreadable_files_fail_whatever_strict_says(tmp_path, text, message, line):
    write_lines(tmp_path / "trainset.json", [text])
    with pytest.raises(DatasetRecordError, match=message) as exc:
        load_dataset(tmp_path / "trainset.json", format="vqa-rad")
    assert exc.value.line == line and exc.value.source == "trainset.json"


def test_not_utf8(tmp_path):
    (tmp_path / "C1_Modality_train.txt").write_bytes(b"synpic1|what is \xff?|ct\n")
    with pytest.raises(DatasetRecordError, match="not UTF-8"):
        load_dataset(tmp_path / "C1_Modality_train.txt", format="vqa-med")


def test_detection(tmp_path):
    assert detect_format(FIXTURES / "vqa-rad") == "vqa-rad"
    assert detect_format(FIXTURES / "vqa-med") == "vqa-med"
    with pytest.raises(InputError, match="cannot tell"):
        detect_format(tmp_path)
    write_json(tmp_path / "trainset.json", [_rad(1, "a.jpg")])
    write_lines(tmp_path / "train.csv", ["Figure_path,Question,Answer", "a.jpg,Q?,x"])
    with pytest.raises(InputError, match="several dataset formats.*pmc-vqa, vqa-rad"):
        detect_format(tmp_path)
    assert len(load_dataset(tmp_path, format="vqa-rad", require_images=False)) == 1
    with pytest.raises(InputError, match="does not exist"):
        load_dataset(tmp_path / "missing")


def test_options_are_checked_before_reading(tmp_path):
    with pytest.raises(ConfigError, match="no option.*keep_yes_no.*accepts: split"):
        load_dataset(FIXTURES / "vqa-rad", keep_yes_no=True)
    with pytest.raises(ConfigError, match="unknown dataset format 'coco'"):
        load_dataset(FIXTURES / "vqa-rad", format="coco")
    with pytest.raises(ConfigError, match="unknown split 'dev'"):
        load_dataset(FIXTURES / "vqa-rad", split="dev")


def test_a_new_format_by_name(tmp_path):
    f = write_lines(tmp_path / "qa.tsv", ["1\tWhat is it?\tcyst\ta.png", "2\tSkip me\tx\ta.png", "3\tbroken"])
    tiny_png(tmp_path / "a.png")

    @register_format("test-tsv", description="tab-separated test format")
    def load_tsv(path: Path, ctx: LoadContext, *, skip: str = "Skip me"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            with ctx.record(path, n):
                parts = line.split("\t")
                if len(parts) != 4:
                    raise RecordProblem("expected 4 columns")
                if parts[1] == skip:
                    raise Drop("skipped question")
                yield ctx.item(
                    question_id=parts[0],
                    question=parts[1],
                    reference=parts[2],
                    answer_type="open",
                    images=[ctx.image(parts[3])],
                )

    try:
        ds = load_dataset(f, format="test-tsv")
        assert [it.question_id for it in ds] == ["1"]
        assert ds.dropped == {"skipped question": 1}
        assert [(i.line, i.message) for i in ds.issues] == [(3, "expected 4 columns")]
        assert ds.options["skip"] == "Skip me" and available_formats()["test-tsv"] == "tab-separated test format"
        with pytest.raises(ConfigError, match="already registered"):
            register_format("test-tsv")(lambda path, ctx: iter(()))
    finally:
        FORMATS.pop("test-tsv", None)


# ---------------------------------------------------------------- items and the dataset


def _item(**kw):
    base = {"question_id": "q1", "dataset": "x", "question": "What?", "reference": "cyst", "answer_type": "open"}
    base.update(kw)
    return DatasetItem(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        pytest.param({"question_id": ""}, "question_id", id="no-id"),
        pytest.param({"reference": " "}, "reference", id="no-reference"),
        pytest.param({"answer_type": "free"}, "answer_type", id="bad-type"),
        pytest.param(
            {"answer_type": "mcq", "options": {"A": "x", "B": "y"}}, "needs options and a label", id="mcq-without-label"
        ),
        pytest.param({"options": {"A": "x"}, "label": "B"}, "not one of the options", id="label-not-an-option"),
        pytest.param({"options": {"a": "x"}}, "capital letters", id="lowercase-key"),
        pytest.param({"options": {"A": ""}}, "no text", id="empty-option"),
        pytest.param(
            {"answer_type": "mcq", "options": {"A": "x"}, "label": "A", "options_hidden": True},
            "cannot hide",
            id="hidden-mcq",
        ),
        pytest.param(
            {"images": (ImageFile("f", Path("/a")), ImageFile("f", Path("/b")))}, "unique", id="duplicate-figures"
        ),
        pytest.param({"missing_images": ("nope",)}, "unknown figures", id="missing-unknown-figure"),
    ],
)
def test_item_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        _item(**kw)


def test_for_generator_never_shows_evaluation_data():
    item = _item(
        options={"A": "cyst", "B": "mass"},
        options_hidden=True,
        label="A",
        alternatives=("simple cyst",),
        metadata={"modality": "CT"},
        images=(ImageFile("fig1", Path("/data/a.png")),),
        answer_raw="cyst",
    )
    view = item.for_generator()
    assert view == {"question_id": "q1", "question": "What?", "options": None, "images": [("fig1", "/data/a.png")]}
    shown = _item(answer_type="mcq", options={"A": "cyst", "B": "mass"}, label="A", reference="A")
    assert shown.for_generator()["options"] == {"A": "cyst", "B": "mass"}
    assert item.answers == ("cyst", "simple cyst")
    assert item.as_dict()["images"] == [["fig1", "/data/a.png"]]


def test_subset_is_deterministic_and_order_free():
    items = tuple(_item(question_id=f"q{i}") for i in range(50))
    a = Dataset("x", "x", Path("."), items)
    b = Dataset("x", "x", Path("."), items[::-1])
    assert a.subset(10, seed=1) == b.subset(10, seed=1)
    assert a.subset(10, seed=1) != a.subset(10, seed=2)
    assert len(a.subset(100)) == 50 and a.subset(0) == ()
    assert a[0] is items[0] and len(a[1:3]) == 2 and list(a) == list(items)
    with pytest.raises(KeyError):
        a.by_id("nope")


def test_importing_the_package_stays_light():
    code = (
        "import sys, boe.datasets as d; d.available_formats(); "
        "heavy = [m for m in ('cv2', 'openai', 'langgraph', 'sqlalchemy', 'boe.tools', 'boe.agent') "
        "if m in sys.modules]; print(heavy)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
