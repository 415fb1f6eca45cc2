"""Batch files end to end: `boe batch --write-requests` / `--read-replies` stage by stage, answered by an external
runner, store the ledgers of the same run done online, and an online run afterwards pays for nothing.

Everything is real: the installed `boe` script in subprocesses, the simulator over HTTP, and an external runner
(`batch_file_runner.py`, standard library only) that POSTs each request body to the simulator and writes
OpenAI's batch output format, with a failed line, an expired line and an unreadable line in its first results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.golden.make_golden import normalise

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUNNER = Path(__file__).with_name("batch_file_runner.py")


def boe(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True)
    if ok:
        assert done.returncode == 0, f"boe {' '.join(args[:2])} exited {done.returncode}: {done.stderr[-3000:]}"
    return done


def run_args(data: Path, base_url: str, db: Path, run: str, *extra: str) -> list[str]:
    return [
        "batch", str(data), "--base-url", base_url, "--model", "boe-sim-vlm", "--judge-model", "boe-sim-judge",
        "--server", "vllm", "--db", str(db), "--run", run, "--k", "4", "--ledger", "full", "--concurrency", "4",
        "--no-progress", "--json", *extra,
    ]  # fmt: skip


def ledger(db: Path, run: str, data: Path) -> list[dict[str, Any]]:
    out = db.with_suffix(f".{run}.jsonl")
    boe("export", "--db", str(db), "--run", run, "--out", str(out))
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return sorted((normalise(r, str(data)) for r in records), key=lambda r: r["question_id"])


def requests_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from boe.sim.dataset import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("files") / "data", 6, seed=7, size=64)


def test_a_run_by_batch_files_stores_the_online_ledgers_and_an_online_rerun_pays_nothing(tmp_path, data) -> None:
    from boe.sim import serve_in_thread

    with serve_in_thread() as sim:
        online = json.loads(boe(*run_args(data, sim.base_url, tmp_path / "online.db", "r")).stdout)
        assert online["complete"] and online["calls_paid"] > 0
        expected = ledger(tmp_path / "online.db", "r", data)

        db = tmp_path / "files.db"
        served = sim.stats()["requests"]
        stage, read, summaries, posted = 0, [], [], 0
        written: list[list[dict[str, Any]]] = []
        first_file: list[dict[str, Any]] = []
        while True:
            stage += 1
            assert stage <= 12, "the run did not finish in 12 stages"
            req = tmp_path / f"req{stage}.jsonl"
            args = run_args(data, sim.base_url, db, "r", *read, "--write-requests", str(req))
            summary = json.loads(boe(*args).stdout)
            summaries.append(summary)
            # a stage sends nothing itself: the simulator saw only the runner's requests
            assert sim.stats()["requests"] == served + posted
            if summary["complete"]:
                assert summary["files"]["written"] == [] and not req.exists()
                break
            assert summary["parked"] > 0 and summary["files"]["written"]
            lines, read = [], []
            for i, w in enumerate(summary["files"]["written"]):  # one file per model
                part = requests_of(Path(w["path"]))
                assert len(part) == w["requests"] and {x["body"]["model"] for x in part} == {w["model"]}
                res = tmp_path / f"res{stage}-{i}.jsonl"
                faults = ["--fail", "1", "--expire", "2", "--garble", "3"] if stage == 1 else []
                subprocess.run(
                    [sys.executable, str(RUNNER), w["path"], str(res), "--base-url", sim.base_url, *faults], check=True
                )
                posted += len(part) - (3 if faults else 0)
                lines += part
                read += ["--read-replies", str(res)]
            assert len(lines) == summary["files"]["requests"] == len({x["custom_id"] for x in lines})
            assert all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" for x in lines)
            if stage == 1:
                # generations only, in the generator's file (the judge has its own: two models, two files a stage)
                assert [w["path"] for w in summary["files"]["written"]] == [str(tmp_path / "req1-boe-sim-vlm.jsonl")]
                first_file = sorted(lines, key=lambda x: x["custom_id"])
            written.append(lines)

        # the first results' failed, expired and unreadable lines were reported and their requests written again
        second = summaries[1]["files"]
        assert second["read"]["stored"] == len(first_file) - 3
        assert [e["code"] for e in sorted(second["read"]["errors"], key=lambda e: e["code"])] == [
            "batch_expired",
            "server_error",
        ]
        assert second["read"]["expired"] == 1 and len(second["read"]["unreadable"]) == 1
        again = {x["custom_id"] for x in written[1]}
        assert {x["custom_id"] for x in first_file[:3]} <= again
        assert stage >= 3  # generation, then the checks (and claim extraction): staged

        assert ledger(db, "r", data) == expected  # the same ledgers as the same run online

        before = sim.stats()["requests"]
        rerun = json.loads(boe(*run_args(data, sim.base_url, db, "again")).stdout)
        assert rerun["complete"] and rerun["calls_paid"] == 0 and rerun["requests"] == 0
        assert sim.stats()["requests"] == before  # the online re-run of the same questions sent nothing
        assert ledger(db, "again", data) == expected


def test_batch_files_refuse_what_they_cannot_do(tmp_path, data) -> None:
    base = ["batch", str(data), "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--db", str(tmp_path / "x.db")]
    done = boe(*base, "--run", "r", "--write-requests", str(tmp_path / "q.jsonl"), ok=False)
    assert done.returncode == 2 and "--server vllm" in done.stderr and "Traceback" not in done.stderr
    done = boe(*base, "--run", "r", "--read-replies", str(tmp_path / "q.jsonl"), ok=False)
    assert done.returncode == 2 and "--read-replies needs --write-requests" in done.stderr
    req = tmp_path / "q.jsonl"
    req.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n')
    done = boe(
        *base, "--server", "vllm", "--run", "r", "--read-replies", str(req), "--write-requests", str(tmp_path / "n"),
        ok=False,
    )  # fmt: skip
    assert done.returncode == 2 and "is a request, not a result" in done.stderr and "Traceback" not in done.stderr


def test_the_readme_batch_files_block_runs_stage_by_stage_to_a_complete_run(tmp_path) -> None:
    """The README's batch-files block as written (the endpoint, model and DATA substituted; the stand-in runner in
    place of `vllm run-batch`), its last two lines repeated until the run is complete."""
    import os
    import shutil

    from boe.sim import serve_in_thread
    from tests.doc_blocks import doc_block, run_commands

    block = doc_block("batch-files")
    assert [c.split()[:2] for c in block.skipped()] == [["vllm", "run-batch"]]
    first, *rest = [c for c in block.commands() if c.startswith("boe ")]
    again = rest[-1]
    data = tmp_path / "vqa-rad"
    shutil.copytree(Path(__file__).parents[1] / "datasets" / "fixtures" / "vqa-rad", data)
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("BOE_BASE_URL", "BOE_MODEL", "OPENAI_API_KEY")}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", BOE_WORKER_LOCKS=str(tmp_path / "locks"))
    with serve_in_thread() as sim:
        setup = [f"export BOE_BASE_URL={sim.base_url} BOE_MODEL=boe-sim", f"DATA={data}"]
        runner = f"{sys.executable} {RUNNER} stage.jsonl results.jsonl --base-url {sim.base_url}"
        out = run_commands([*setup, first], cwd=tmp_path, env=env)[-1]
        for _ in range(8):
            if "the run is complete" in out:
                break
            assert "request(s) for" in out and "vllm run-batch -i stage.jsonl -o" in out, out
            out = run_commands([*setup, runner, again], cwd=tmp_path, env=env)[-1]
        assert "the run is complete" in out and "accuracy on 7 labelled questions" in out, out
        served = sim.stats()["requests"]
        online = run_commands(
            [*setup, first.replace(" --write-requests stage.jsonl", "") + " --json"], cwd=tmp_path, env=env
        )
        assert sim.stats()["requests"] == served  # the online run of the same questions sent nothing
        assert json.loads(online[-1])["calls_paid"] == 0


def test_an_unusable_reply_in_a_results_file_is_asked_again_with_a_fresh_seed_in_the_next_file(tmp_path, data) -> None:
    """A generation answered with prose only is re-asked as online (a fresh seed, never cached): the re-ask is the
    next file's request, marked ``~r1``, and the stored call records the re-ask and both seeds."""
    from boe.sim import serve_in_thread

    db = tmp_path / "files.db"
    with serve_in_thread() as sim:
        read: list[str] = []
        for stage in range(1, 10):
            args = run_args(
                data, sim.base_url, db, "r", "--limit", "1", *read, "--write-requests", str(tmp_path / "q.jsonl")
            )
            summary = json.loads(boe(*args).stdout)
            if summary["complete"]:
                break
            read = []
            for i, w in enumerate(summary["files"]["written"]):
                lines = requests_of(Path(w["path"]))
                if stage == 2:
                    assert [x["custom_id"].split("~")[1][:2] for x in lines] == ["r1"]  # only the re-ask
                    assert lines[0]["body"]["seed"] != 0 and lines[0]["body"]["n"] == 4
                res = tmp_path / f"r{stage}-{i}.jsonl"
                bad = ["--unusable", "1"] if stage == 1 else []
                runner = [sys.executable, str(RUNNER), w["path"], str(res), "--base-url", sim.base_url, *bad]
                subprocess.run(runner, check=True)
                read += ["--read-replies", str(res)]
        assert summary["complete"] and stage > 2
    (rec,) = ledger(db, "r", data)
    gen = next(c for c in rec["model_calls"] if c["purpose"] == "generation")
    assert gen["reasks"] == 1 and len(gen["seeds"]) == 2 and gen["seeds"][0] == 0 and gen["error"] is None
    assert all(c["valid"] for c in rec["candidates"])
