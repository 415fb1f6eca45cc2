"""Which questions a batch runs, and the --dry-run estimate of its calls and tokens."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from boe.agent import make_config
from boe.batch import estimate, measure_records, select_items
from boe.datasets import Dataset, DatasetItem, ImageFile, load_dataset
from boe.prompts import figures_block, load_prompt, options_block


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


def _tokens(text: str) -> int:
    return sum(math.ceil(1.3 * len(line.split())) for line in text.split("\n"))


def _prompts_of(item: DatasetItem) -> list[tuple[str, str, dict[str, object]]]:
    """(purpose, template, values) of the calls a single-figure question makes."""
    fig = item.images[0].figure
    common = {"question": item.question, "figures_block": figures_block([fig])}
    claim = {**common, "figure": fig, "slot": "finding", "value": "mass"}
    reply = '{"answer": "example", "modality": "ct", "region": "head", "plane": "axial", "finding": "mass", '
    reply += '"attribute": "left"}'
    view = f"a crop of figure {fig} around the named part of the imaged body"
    return [
        (
            "generation",
            "generation",
            {**common, "figures_block": figures_block([fig], ask=True), "options_block": options_block(item.options)},
        ),
        ("factor_judge", "factor_judge", {**claim, "view_kind": "crop"}),
        (
            "grounded_factor_judge",
            "grounded_factor_judge",
            {**claim, "view_kind": "crop", "view_image": "2", "view_text": view},
        ),
        (
            "answer_judge",
            "answer_judge",
            {**common, "figure": fig, "candidate": reply, "options_block": options_block(item.options)},
        ),
    ]


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
    # each purpose's prompt rendered for the batch's questions (1.3 tokens a word, a line at a time, and 11 of the
    # chat template), plus its images: 64-pixel scans are 3 x 3 patches of 28 pixels; a grounded crop half of one
    text: dict[str, list[float]] = {}
    for it in items:
        for purpose, name, values in _prompts_of(it.item):
            r = load_prompt(name).render(**values)
            text.setdefault(purpose, []).append(_tokens(r.system) + _tokens(r.user) + 11)
        mean = {p: sum(v) / len(v) for p, v in text.items()}
    expected = 20 * (mean["generation"] + 9) + 200 * (mean["factor_judge"] + 9)
    expected += 200 * (mean["grounded_factor_judge"] + 9 + 4.5) + 32 * (mean["answer_judge"] + 9)
    assert est.prompt_tokens == pytest.approx(expected)
    # replies: a generation reply of the schema's examples (16 tokens) per candidate, a verdict of 20
    assert est.completion_tokens == pytest.approx(20 * 16 * 4 + 432 * 20)
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


def test_a_dry_run_predicts_the_tokens_the_run_records_within_15_percent(sim, tmp_path: Path) -> None:
    """`boe batch --dry-run` (no stored run to measure: prompts rendered for the batch's questions) against the
    tokens the simulator reported for every call of the same batch, as the store records them."""
    import json
    import subprocess
    import sys

    from boe.db import Store
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", 12, seed=11, size=96)
    db = tmp_path / "s.db"
    args = [sys.executable, "-m", "boe", "batch", str(data), "--base-url", sim.base_url, "--model", "boe-sim"]
    args += ["--judge-model", "boe-sim-judge", "--k", "16", "--ledger", "full", "--db", str(db), "--run", "r"]
    args += ["--json", "--no-progress"]
    dry = subprocess.run([*args, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    predicted = json.loads(dry.stdout)
    assert "prompts rendered" in predicted["basis"] and not db.exists()
    run = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    with Store(db) as store:
        calls = [c for rec in store.iter_record_dicts("r") for c in rec["model_calls"]]
    prompt = sum(int(c["prompt_tokens"]) for c in calls)
    completion = sum(int(c["completion_tokens"]) for c in calls)
    assert prompt > 0 and completion > 0
    assert abs(predicted["prompt_tokens"] / prompt - 1) <= 0.15, (predicted["prompt_tokens"], prompt)
    assert abs(predicted["completion_tokens"] / completion - 1) <= 0.15, (predicted["completion_tokens"], completion)
