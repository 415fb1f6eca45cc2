"""The Python API (`boe.api`): the functions the commands wrap give what the commands give."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import boe
from boe.errors import ConfigError, StoreNotFoundError
from boe.sim.ledgers import pool_ledger

BOE = str(Path(sys.executable).with_name("boe"))


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pool") / "pool.jsonl"
    assert boe.write_ledger(pool_ledger(120, seed=3), path) == 120
    return path


def test_replay_equals_the_command(pool: Path, tmp_path: Path) -> None:
    res = subprocess.run(
        [BOE, "replay", str(pool), "--policy", "raw,boe,bayes", "--budget", "4,16", "--json", "--transcripts",
         str(tmp_path / "cli.jsonl"), "--save-calibration", str(tmp_path / "cli-cal.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = boe.replay(pool, policies=["raw", "boe", "bayes"], budgets=[4, 16])
    cli = json.loads(res.stdout)
    mine = result.to_json()
    assert mine["results"] == cli["results"] and mine["calibration"] == cli["calibration"]
    assert mine["settings"] == cli["settings"]
    result.write_transcripts(tmp_path / "api.jsonl")
    assert (tmp_path / "api.jsonl").read_text() == (tmp_path / "cli.jsonl").read_text()
    assert [r["policy"] for r in result.to_records()] == [r["policy"] for r in cli["results"]]
    saved = result.save_calibration(tmp_path / "api-cal.json")
    cli_cal = json.loads((tmp_path / "cli-cal.json").read_text())
    api_cal = json.loads((tmp_path / "api-cal.json").read_text())
    for doc in (cli_cal, api_cal):
        doc["info"].pop("created")
    assert cli_cal == api_cal and saved.info is not None and saved.info.questions == 120


def test_one_deployable_fit_for_replay_and_calibrate(pool: Path, tmp_path: Path) -> None:
    """`boe calibrate` and `boe replay --save-calibration` after a cross-fit write the same fit."""
    res = subprocess.run(
        [BOE, "calibrate", str(pool), "--out", str(tmp_path / "calibrate.json")], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    result = boe.replay(pool, policies=["bayes"], budgets=[4], calibration="crossfit:3")
    replayed = result.save_calibration(tmp_path / "replay.json")
    a = json.loads((tmp_path / "calibrate.json").read_text())
    b = json.loads((tmp_path / "replay.json").read_text())
    assert a["groups"] == b["groups"] and a["extra"] == b["extra"] and a["cheap_kappa"] == b["cheap_kappa"]
    assert a["info"]["how"] == b["info"]["how"] and "bayes" in a["info"]["how"]
    fitted = boe.fit_calibration(pool)
    assert fitted.model_dump()["groups"] == replayed.model_dump()["groups"]
    # a replay under the file it was given keeps that file's fit
    again = boe.replay(pool, policies="bayes", budgets=4, calibration=str(tmp_path / "replay.json"))
    assert again.deployable_calibration().groups == replayed.groups


def test_ledgers_round_trip(pool: Path, tmp_path: Path) -> None:
    records = boe.read_ledger(pool)
    assert len(records) == 120
    assert boe.write_ledger(records[:10], tmp_path / "ten.jsonl") == 10
    assert [r.question_id for r in boe.read_ledger(tmp_path / "ten.jsonl")] == [r.question_id for r in records[:10]]
    loaded = boe.load_questions(tmp_path / "ten.jsonl")
    assert len(loaded.questions) == 10 and not loaded.online and loaded.sources == [str(tmp_path / "ten.jsonl")]


def test_bad_requests_are_config_errors(pool: Path) -> None:
    with pytest.raises(ConfigError, match="unknown policy 'best'"):
        boe.replay(pool, policies="best")
    with pytest.raises(StoreNotFoundError, match="no store at"):
        boe.load_questions(db="x.db")  # no --run: the store's one run, but there is no store
    with pytest.raises(ConfigError, match="give ledger files"):
        boe.load_questions()
    with pytest.raises(ConfigError, match="cheap_kappa"):
        boe.replay(pool, cheap_kappa=1.5)


def test_to_pandas_names_what_is_missing(pool: Path) -> None:
    result = boe.replay(pool, policies="raw", budgets=0)
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pip install pandas"):
            result.to_pandas()
    else:
        df = result.to_pandas()
        assert list(df["policy"]) == ["raw"] and len(df) == len(result.to_records())


def test_load_config_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nk = 4\n')
    cfg = boe.load_config(path, budget=2)
    assert (cfg.k, cfg.budget, cfg.model) == (4, 2, "m")
    with pytest.raises(ConfigError, match=r"agent.toml and the options given"):
        boe.load_config(path, k=0)


def test_every_extension_point_registers_through_the_api() -> None:
    from boe.registry import registries

    for name in ("register_kind", "register_policy", "register_tool", "register_format", "register_segmenter",
                 "register_store_backend"):  # fmt: skip
        assert callable(getattr(boe, name)), name
    from importlib import import_module

    for module in ("boe.db.backends", "boe.kinds", "boe.tools.protocol", "boe.tools.segment", "boe.datasets"):
        import_module(module)  # each makes its registry on import
    assert {"policies", "kinds", "tools", "segmenters", "formats", "stores"} <= set(registries())

    @boe.register_segmenter("api-test-everything")
    def whole_image(**_: object) -> object:
        return object()

    from boe.tools.segment import SEGMENTERS

    try:
        assert "api-test-everything" in SEGMENTERS
        with pytest.raises(ConfigError, match="api-test-everything"):  # another segmenter under a taken name
            boe.register_segmenter("api-test-everything")(lambda **_: object())
    finally:  # registries are process-wide: other tests on this worker list the known segmenters
        SEGMENTERS.pop("api-test-everything")
