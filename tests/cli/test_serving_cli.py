"""`boe ask` / `boe batch` options for real servers, run as the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from boe.sim.server import SimOptions, serve_in_thread

BOE = Path(sys.executable).with_name("boe")
SCAN = sorted((Path(__file__).parents[2] / "boe" / "sim" / "data" / "demo" / "images").glob("*.png"))[0]
QWEN_LIKE = {"temperature": 0.1, "top_p": 0.001, "top_k": 1}


def boe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(BOE)] if BOE.exists() else [sys.executable, "-c", "from boe.cli import main; main()"]
    full = {**os.environ, **(env or {})}
    full.pop("BOE_BASE_URL", None)
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, env=full)


def _records(db: Path) -> list[dict]:
    from boe.db import Store

    st = Store(f"sqlite:///{db}")
    try:
        (run,) = st.list_runs()
        return [run.config, *st.iter_record_dicts(run)]
    finally:
        st.close()


def test_ask_reads_openai_base_url_and_records_the_sampling_sent(tmp_path):
    db = tmp_path / "runs.db"
    with serve_in_thread(options=SimOptions(generation_config=QWEN_LIKE)) as sim:
        res = boe(
            "ask",
            str(SCAN),
            "Which side is the lesion on?",
            "--model",
            "boe-sim-vlm",
            "--k",
            "16",
            "--budget",
            "0",
            "--db",
            str(db),
            "--extra-body",
            '{"chat_template_kwargs": {"x": 1}}',
            env={"OPENAI_BASE_URL": sim.base_url},
        )
    assert res.returncode == 0, res.stderr
    config, record = _records(db)
    agent = config["agent"]
    assert (agent["top_p"], agent["top_k"], agent["min_p"], agent["server"]) == (1.0, -1, 0.0, "auto")
    assert agent["extra_body"] == {"chat_template_kwargs": {"x": 1}}
    gen = next(c for c in record["model_calls"] if c["purpose"] == "generation")
    assert gen["sampling"] == {"server": "vllm", "temperature": 1.1, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    answers = {c["raw_text"] for c in record["candidates"]}
    assert len(answers) >= 3  # the generation config's top_k 1 did not collapse the pool


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--extra-body", "[1, 2]"], "--extra-body (extra_body): must be a JSON object"),
        (["--judge-extra-body", "{nope"], "--judge-extra-body (judge_extra_body): must be a JSON object"),
        (["--server", "tgi"], "server"),
        (["--top-p", "0"], "top_p"),
    ],
)
def test_bad_serving_options_are_clear_errors(args, message):
    res = boe("ask", str(SCAN), "q?", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", *args)
    assert res.returncode != 0 and message in " ".join(res.stderr.split()) and "Traceback" not in res.stderr


def test_batch_warns_when_pools_collapse(tmp_path):
    """A server kind that gets no top_k (openai) against a top_k 1 generation config: K copies of one answer."""
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "ds", 4, seed=3)
    with serve_in_thread(options=SimOptions(generation_config=QWEN_LIKE)) as sim:
        res = boe(
            "batch",
            str(data),
            "--base-url",
            sim.base_url,
            "--model",
            "boe-sim-vlm",
            "--db",
            str(tmp_path / "b.db"),
            "--run",
            "r",
            "--k",
            "8",
            "--ledger",
            "online",
            "--budget",
            "0",
            "--server",
            "openai",
            "--json",
            "--no-progress",
        )
    assert res.returncode == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert any("4 of 4 questions (100%) came back with fewer than two distinct answers" in n for n in notes), notes
    assert any("generation_config.json" in n and "server=openai" in n for n in notes)
