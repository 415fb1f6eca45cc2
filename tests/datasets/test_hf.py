"""Format hf: parquet as the Hub lays it out, save_to_disk folders, arrow files, imagefolders, column mappings."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from boe.batch.plan import load_batch_dataset
from boe.datasets import DatasetRecordError, detect_format, load_dataset
from boe.errors import ConfigError, InputError, MissingExtraError
from tests.datasets.helpers import FIXTURES, hub_table, tiny_png, vqa_rad_hub_layout, write_jsonl

RAD = FIXTURES / "vqa-rad"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Images carried in dataset files are written under this test's folder."""
    monkeypatch.setenv("BOE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "images"


def _records(split: str) -> list[dict[str, str]]:
    rows = json.loads((RAD / f"{split}set_subset.json").read_text(encoding="utf-8"))
    return [r for r in rows if (RAD / "images" / r["image_name"]).is_file()]


def test_the_hub_layout_of_vqa_rad_is_detected_and_read(tmp_path, cache):
    data = vqa_rad_hub_layout(tmp_path / "vqa-rad", RAD)
    assert detect_format(data) == "hf"
    ds = load_dataset(data, split="test")
    expect = _records("test")
    assert ds.name == "vqa-rad" and ds.format == "hf" and ds.root == cache.resolve() and not ds.issues
    assert [it.question for it in ds] == [" ".join(r["question"].split()) for r in expect]
    assert [it.reference for it in ds] == [" ".join(r["answer"].split()) for r in expect]
    assert [it.question_id for it in ds] == [f"test-{i}" for i in range(len(expect))]
    for item, rec in zip(ds, expect, strict=True):
        (figure, path), *_ = item.images
        assert figure == Path(rec["image_name"]).stem and path.parent.parent == cache.resolve()
        assert path.read_bytes() == (RAD / "images" / rec["image_name"]).read_bytes()  # the bytes, written once
        assert item.answer_type == ("closed" if rec["answer"].lower() in ("yes", "no") else "open")
        assert item.metadata["split"] == "test" and item.for_generator()["images"] == [(figure, str(path))]
    assert len(list(cache.rglob("*.jpg"))) == len({r["image_name"] for r in expect})


def test_a_folder_with_both_splits_needs_one_for_a_batch(tmp_path):
    data = vqa_rad_hub_layout(tmp_path / "vqa-rad", RAD)
    with pytest.raises(ConfigError, match=r"2 splits: test \(7 questions\), train \(28 questions\).*--split test"):
        load_batch_dataset(str(data), None, None)
    assert len(load_batch_dataset(str(data), None, "all")) == 35
    assert len(load_batch_dataset(str(data), "hf", "train")) == 28
    with pytest.raises(ConfigError, match="split 'val' is not in .*; it has: test, train"):
        load_dataset(data, split="val")


def test_one_parquet_file_takes_its_split_from_its_name(tmp_path):
    data = vqa_rad_hub_layout(tmp_path / "vqa-rad", RAD)
    (test_file,) = data.glob("data/test-*.parquet")
    ds = load_dataset(test_file)
    assert ds.name == "vqa-rad" and {it.metadata["split"] for it in ds} == {"test"} and len(ds) == 7


@pytest.mark.parametrize(
    "columns",
    [
        pytest.param({"question": "query", "answer": "label", "image": "img"}, id="mapping"),
        pytest.param("question=query, answer=label,image=img", id="text"),
    ],
)
def test_other_column_names_are_mapped(tmp_path, columns):
    data = vqa_rad_hub_layout(tmp_path / "rad", RAD, rename={"question": "query", "answer": "label", "image": "img"})
    message = (
        r"has no column for answer or image .*its columns: img, query, label. Name them: --columns answer=COLUMN,image"
    )
    with pytest.raises(DatasetRecordError, match=message):
        load_dataset(data, split="test")
    ds = load_dataset(data, split="test", columns=columns)
    assert len(ds) == 7 and ds.options["columns"] == columns
    assert ds[0].question == " ".join(_records("test")[0]["question"].split())


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        pytest.param({"questions": "q"}, r"unknown field\(s\) \['questions'\]; fields: question, answer", id="field"),
        pytest.param("question", "'question' is not FIELD=COLUMN", id="no-equals"),
        pytest.param("question=a,question=b", "field 'question' is mapped twice", id="twice"),
    ],
)
def test_a_bad_mapping_is_refused_before_anything_is_read(tmp_path, columns, message):
    with pytest.raises(ConfigError, match=message):
        load_dataset(vqa_rad_hub_layout(tmp_path / "rad", RAD), split="test", columns=columns)


def test_a_mapped_column_that_is_not_there_names_the_file_and_its_columns(tmp_path):
    data = vqa_rad_hub_layout(tmp_path / "rad", RAD)
    with pytest.raises(DatasetRecordError, match=r"test-.*\.parquet: has no column 'query' \(mapped to question\)"):
        load_dataset(data, split="test", columns={"question": "query"})


def _arrow_stream(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=3)


def _save_to_disk(folder: Path, table: pa.Table) -> None:
    """One split as `datasets.save_to_disk` writes it: an arrow stream file, dataset_info.json, state.json."""
    _arrow_stream(folder / "data-00000-of-00001.arrow", table)
    features = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
    (folder / "dataset_info.json").write_text(json.dumps({"citation": "", "features": features}))
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_fingerprint": "0", "_split": None}
    (folder / "state.json").write_text(json.dumps(state))


def test_a_save_to_disk_dataset_dict_is_read_split_by_split(tmp_path, cache):
    saved = tmp_path / "saved"
    for split in ("train", "test"):
        _save_to_disk(saved / split, hub_table(_records(split), RAD / "images"))
    (saved / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    assert detect_format(saved) == "hf"
    ds = load_dataset(saved)
    assert ds.name == "saved" and len(ds) == 35 and ds.root == cache.resolve()
    assert [it.question_id for it in ds][:2] == ["train-0", "train-1"] and ds.items[28].question_id == "test-0"
    assert len(load_dataset(saved, split="test")) == 7


def test_one_saved_split_and_a_lone_arrow_file_are_read(tmp_path):
    table = hub_table(_records("test"), RAD / "images")
    _save_to_disk(tmp_path / "one", table)
    assert detect_format(tmp_path / "one") == "hf"  # its dataset_info.json names image/question/answer: not PathVQA
    assert len(load_dataset(tmp_path / "one")) == 7
    arrow = tmp_path / "file" / "test.arrow"
    arrow.parent.mkdir()
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)  # the IPC file format (Feather v2), not a stream
    ds = load_dataset(arrow)
    assert len(ds) == 7 and ds[0].question_id == "test-0"


def test_an_imagefolder_with_metadata_reads_images_where_they_are(tmp_path, cache):
    root = tmp_path / "folder"
    for split in ("train", "test"):
        tiny_png(root / split / "scans" / f"{split}.png")
        write_jsonl(
            root / split / "metadata.jsonl",
            [
                {"file_name": f"scans/{split}.png", "question": "is this a ct?", "answer": "yes", "organ": "chest"},
                {"file_name": f"scans/{split}.png", "question": "which organ?", "answer": ["lung", "lungs"]},
            ],
        )
    (root / "test" / "metadata.csv").unlink(missing_ok=True)
    assert detect_format(root) == "hf"
    ds = load_dataset(root, split="test")
    assert ds.root == root.resolve() and not cache.exists()  # nothing copied
    first, second = ds
    assert first.images[0].path == (root / "test" / "scans" / "test.png").resolve()
    assert first.answer_type == "closed" and first.metadata == {"split": "test", "row": 0, "organ": "chest"}
    assert second.reference == "lung" and second.alternatives == ("lungs",) and second.answer_type == "open"


def test_an_imagefolder_csv_and_a_path_outside_the_folder(tmp_path):
    root = tmp_path / "folder"
    tiny_png(root / "a.png")
    tiny_png(tmp_path / "outside.png")
    (root / "metadata.csv").write_text(
        "file_name,question,answer\na.png,is there a mass?,no\n../outside.png,what is it?,a mass\nb.png,q?,a\n"
    )
    ds = load_dataset(root, format="hf")
    assert [it.question for it in ds] == ["is there a mass?"]
    assert [(i.kind, i.line) for i in ds.issues] == [("path", 3), ("missing_image", 4)]


def test_parquet_image_paths_stay_in_the_dataset_folder(tmp_path, cache):
    root = tmp_path / "paths"
    tiny_png(root / "images" / "x.png")
    root.joinpath("data").mkdir()
    table = pa.table(
        {
            "img_path": ["/etc/passwd", "images/x.png"],
            "query": ["which file?", "what is shown?"],
            "answer": ["passwd", "a scan"],
            "qid": [8, 0],
            "split": ["x", "y"],
        }
    )
    pq.write_table(table, root / "data" / "test.parquet")
    ds = load_dataset(root, columns="image=img_path,question=query")
    assert ds.root == root.resolve() and not cache.exists()
    assert [it.question_id for it in ds] == ["test-0"] and ds[0].images[0].path == (root / "images/x.png").resolve()
    assert ds[0].metadata == {"split": "test", "row": 1}
    assert ds.issues[0].kind == "path" and "outside the dataset root" in ds.issues[0].message


def test_image_lists_and_nameless_bytes_become_figures(tmp_path):
    png = tiny_png(tmp_path / "p.png").read_bytes()
    other = tiny_png(tmp_path / "q.png", value=9).read_bytes()
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "images": pa.array([[{"bytes": png, "path": None}, {"bytes": other, "path": None}]], pa.list_(image)),
            "question": ["are these the same?"],
            "answer": ["no"],
        }
    )
    (tmp_path / "d").mkdir()
    pq.write_table(table, tmp_path / "d" / "x.parquet")
    (item,) = load_dataset(tmp_path / "d")
    assert [f for f, _ in item.images] == ["image-1", "image-2"]
    assert [hashlib.sha256(p.read_bytes()).digest() for _, p in item.images] == [
        hashlib.sha256(png).digest(),
        hashlib.sha256(other).digest(),
    ]


def test_bytes_in_an_unwritable_cache_say_where_to_write(tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    monkeypatch.setenv("BOE_CACHE_DIR", str(blocked))
    with pytest.raises(InputError, match="set BOE_CACHE_DIR to a writable folder"):
        load_dataset(vqa_rad_hub_layout(tmp_path / "rad", RAD), split="test")


def test_without_pyarrow_the_error_names_the_extra(tmp_path, monkeypatch):
    data = vqa_rad_hub_layout(tmp_path / "rad", RAD)
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow raises ImportError
    assert detect_format(data) == "hf"  # detection needs no pyarrow
    with pytest.raises(MissingExtraError, match=r"pip install 'best-of-evidence\[hf\]'"):
        load_dataset(data, split="test")


def test_detection_names_the_keyword_in_python():
    with pytest.raises(InputError, match=r"cannot tell the dataset format of .*; pass format= one of: .*hf"):
        detect_format(Path(__file__).parent)


def test_the_shared_vqa_rad_subset_reads_the_same_through_parquet(shared_data, tmp_path):
    """The 60-image VQA-RAD subset as the Hub lays it out: the questions, answers and images of its JSON."""
    data = vqa_rad_hub_layout(tmp_path / "vqa-rad", shared_data / "vqa-rad")
    for split in ("train", "test"):
        hub, json_ds = load_dataset(data, split=split), load_dataset(shared_data / "vqa-rad", split=split)
        assert len(hub) == len(json_ds) > 100
        assert [(it.question, it.reference) for it in hub] == [(it.question, it.reference) for it in json_ds]
        assert [it.images[0].path.read_bytes() for it in hub] == [it.images[0].path.read_bytes() for it in json_ds]
        assert [it.images[0].figure for it in hub] == [it.images[0].figure for it in json_ds]


def test_batch_config_takes_the_mapping_as_text_or_as_a_mapping(tmp_path):
    from pydantic import ValidationError

    from boe.agent import make_config
    from boe.batch import BatchConfig

    agent = make_config(base_url="http://127.0.0.1:9/v1", model="m")
    base = {"dataset": str(tmp_path), "agent": agent, "db": "sqlite:///x.db", "run": "r"}
    text = BatchConfig(**base, columns="question=query, image=img")
    assert text.columns == {"question": "query", "image": "img"}
    assert BatchConfig(**base, columns={"answer": "label"}).columns == {"answer": "label"}
    assert BatchConfig(**base, columns="").columns is None
    with pytest.raises(ValidationError, match=r"unknown field\(s\) \['img'\]"):
        BatchConfig(**base, columns="img=image")


def test_a_root_given_for_a_dataset_of_image_bytes_is_refused(tmp_path):
    data = vqa_rad_hub_layout(tmp_path / "rad", RAD)
    with pytest.raises(ConfigError, match="are served from .*cache/images; leave root out"):
        load_dataset(data, split="test", root=data)


@pytest.mark.parametrize(
    ("files", "splits"),
    [
        pytest.param(
            ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"], {"train"}, id="shards"
        ),
        pytest.param(
            ["default/validation/0000.parquet", "default/test/0000.parquet"], {"validation", "test"}, id="refs"
        ),
        pytest.param(["dev.parquet", "testing.parquet"], {"validation", "test"}, id="words"),
        pytest.param(["part-a.parquet", "part-b.parquet"], {None}, id="no-split"),
    ],
)
def test_splits_come_from_file_and_folder_names(tmp_path, files, splits):
    table = hub_table(_records("test")[:2], RAD / "images")
    for name in files:
        (tmp_path / "d" / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / "d" / name)
    ds = load_dataset(tmp_path / "d")
    assert {it.metadata["split"] for it in ds} == splits and len(ds) == 2 * len(files)
    if len(splits) == 1:  # rows are numbered through the shards of a split, as the split's index
        assert [it.metadata["row"] for it in ds] == list(range(len(ds)))
    if "validation" in splits:
        assert len(load_dataset(tmp_path / "d", split="val")) == 2  # val, valid and dev name validation


def test_path_only_images_of_a_bytes_dataset_are_cached_from_inside_the_folder(tmp_path, cache):
    """`Dataset.to_parquet` of local images keeps {bytes: None, path}: found in the folder, then served cached."""
    root = tmp_path / "d"
    png = tiny_png(root / "images" / "x.png").read_bytes()
    tiny_png(tmp_path / "outside.png")
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = [{"bytes": None, "path": "images/x.png"}, {"bytes": None, "path": str(tmp_path / "outside.png")}]
    table = pa.table({"image": pa.array(images, image), "question": ["q1?", "q2?"], "answer": ["a", "b"]})
    pq.write_table(table, root / "test.parquet")
    ds = load_dataset(root)
    assert ds.root == cache.resolve() and [it.question for it in ds] == ["q1?"]
    assert ds[0].images[0].path.parent.parent == cache.resolve() and ds[0].images[0].path.read_bytes() == png
    assert ds.issues[0].kind == "path" and "outside the dataset folder" in ds.issues[0].message
