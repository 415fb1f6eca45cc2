"""Which questions a batch runs, and the --dry-run estimate of its calls and tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from boe.agent import make_config
from boe.batch import estimate, measure_records, select_items
from boe.datasets import Dataset, DatasetItem, ImageFile, load_dataset


def test_items_keep_file_order_up_to_the_limit_and_skip_what_cannot_run(tmp_path: Path) -> None:
    img = tmp_path / "a.png"
    img.write_bytes(b"x")
    items = (
        DatasetItem("q1", "d", "q?", "yes", "closed", images=(ImageFile("0", img),)),
        DatasetItem("q2", "d", "q?", "yes", "closed"),
        DatasetItem(
            "q3", "d", "q?", "yes", "closed", images=(ImageFile("0", tmp_path / "gone.png"),), missing_images=("0",)
        ),
        DatasetItem("q4", "d", "q?", "yes", "closed", images=(ImageFile("f1", img), ImageFile("f2", img))),
    )
    ds = Dataset("d", "x", tmp_path, items)
    ok, skipped = select_items(ds, "ns", None)
    assert [b.key for b in ok] == [("ns", "q1"), ("ns", "q4")]
    assert ok[0].image == str(img) and ok[1].image == [("f1", str(img)), ("f2", str(img))]
    assert [q for q, _ in skipped] == ["q2", "q3"] and "missing" in skipped[1][1]
    assert [b.item.question_id for b in select_items(ds, "ns", 1)[0]] == ["q1"]


def test_default_estimate_of_a_full_ledger(sim_data: Path) -> None:
    items, _ = select_items(load_dataset(sim_data), "boe-sim", None)
    cfg = make_config(base_url="http://x/v1", model="m", k=4, ledger="full")
    est = estimate(items, 4, cfg)
    assert est.questions == 24 and est.todo == 20
    # distinct answers per question: 1 + 0.3 log2 K = 1.6 at K = 4; short answers get no whole-response checks
    assert est.calls == pytest.approx(
        {"generation": 20, "factor_judge": 200, "grounded_factor_judge": 200, "answer_judge": 32}
    )
    assert est.upper_calls == 20 * (1 + 2 * 5 * 4 + 4) >= est.total_calls
    # 64-pixel scans: 3 x 3 patches of 28 pixels per image
    assert est.prompt_tokens == pytest.approx(20 * (229 + 9) + 200 * (159 + 9) + 200 * (159 + 4.5) + 32 * (214 + 9))
    assert est.completion_tokens == pytest.approx(20 * 80 * 4 + 432 * 40)
    paper = estimate(
        items,
        4,
        make_config(
            base_url="http://x/v1",
            model="m",
            k=4,
            ledger="full",
            kinds=("structured", "vlm_factor", "grounded_factor", "whole_response"),
        ),
    )
    assert paper.calls == {"generation": 20, "factor_judge": 200, "grounded_factor_judge": 200, "whole_judge": 80}
    assert "defaults" in est.basis and "9 from 24" in est.basis.replace("image tokens ", "")


def test_online_counts_at_most_what_the_budget_buys(sim_data: Path) -> None:
    items, _ = select_items(load_dataset(sim_data), "boe-sim", None)
    cfg = make_config(base_url="http://x/v1", model="m", k=16, ledger="online", budget=16)
    est = estimate(items, 0, cfg)
    judged = est.total_calls - est.calls["generation"]
    assert est.calls["generation"] == 24 and judged == pytest.approx(24 * 4)
    assert est.upper_calls == 24 * 5 and any("at most 4 judge calls" in n for n in est.notes)


def test_measured_means_drive_the_estimate() -> None:
    records = [
        {
            "ledger": "full",
            "model_calls": [
                {"purpose": "generation", "prompt_tokens": 500, "completion_tokens": 300},
                *[{"purpose": "factor_judge", "prompt_tokens": 100, "completion_tokens": 10}] * n,
            ],
        }
        for n in (2, 4)
    ]
    m = measure_records(records, "run 'old'")
    assert m is not None and m.questions == 2 and m.calls == {"generation": 1.0, "factor_judge": 3.0}
    cfg = make_config(base_url="http://x/v1", model="m", k=4, ledger="full")
    est = estimate([], 0, cfg, measured=m)
    assert est.todo == 0 and est.total_calls == 0
    items = [object()] * 10
    est = estimate(items, 0, cfg, measured=m)  # type: ignore[arg-type]
    assert est.calls == {"generation": 10.0, "factor_judge": 30.0}
    assert est.prompt_tokens == 10 * 500 + 30 * 100 and est.completion_tokens == 10 * 300 + 30 * 10
    assert est.basis.startswith("measured on run 'old' (2 stored questions")
    assert measure_records([], "x") is None


VQA_RAD = Path(__file__).resolve().parents[1] / "datasets" / "fixtures" / "vqa-rad"


def test_a_folder_with_several_splits_is_not_merged_silently() -> None:
    from boe.batch.plan import load_batch_dataset
    from boe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"2 splits: test \(7 questions\), train \(28 questions\).*--split test"):
        load_batch_dataset(str(VQA_RAD), None, None)
    test = load_batch_dataset(str(VQA_RAD), None, "test")
    assert {it.metadata["split"] for it in test.items} == {"test"} and len(test.items) == 7
    assert len(load_batch_dataset(str(VQA_RAD), None, "all").items) == 35
    with pytest.raises(ConfigError, match="unknown split 'dev'"):
        load_batch_dataset(str(VQA_RAD), None, "dev")


def test_a_dry_run_on_missing_images_says_why_as_the_run_does(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    data = tmp_path / "rad"
    data.mkdir()
    shutil.copy(VQA_RAD / "testset_subset.json", data)  # the records, none of their images
    args = [
        sys.executable,
        "-m",
        "boe",
        "batch",
        str(data),
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--db",
        str(tmp_path / "x.db"),
        "--run",
        "r",
    ]
    dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, timeout=120)
    real = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert dry.returncode == real.returncode == 2  # an input error found before any work: exit 2
    assert "no question of" in dry.stderr and "missing_image 8" in dry.stderr
    assert dry.stderr == real.stderr
