"""The real `boe` script: results on stdout, progress and logs on stderr, -v/-q, a schema on every --json document,
no API key in any log."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
import typer.main

from boe.cli import app
from boe.cli.common import JSON_SCHEMAS
from boe.sim.faults import FaultPlan
from boe.sim.ledgers import pool_ledger

pytestmark = pytest.mark.slow  # more than a few seconds in all (tests/conftest.py starts such files first)

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
KEY = "sk-boe-test-secret-0123456789abcdef"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "json-output.md"


def boe(*args: str, tmp: Path, env: dict[str, str] | None = None, timeout: float = 300) -> tuple[int, str, str]:
    """Run the `boe` script with stdout redirected to a file (as `boe ... > out`); (exit code, stdout, stderr)."""
    assert BOE is not None
    out, err = tmp / "stdout.txt", tmp / "stderr.txt"
    with out.open("w") as fo, err.open("w") as fe:
        rc = subprocess.run(
            [BOE, *args], stdout=fo, stderr=fe, env={**os.environ, **(env or {})}, timeout=timeout, cwd=tmp
        ).returncode
    return rc, out.read_text(), err.read_text()


def batch_args(data: Path, url: str, db: Path, run: str) -> list[str]:
    return [str(data), "--base-url", url, "--model", "boe-sim", "--db", str(db), "--run", run, "--k", "4"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from boe.sim.dataset import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("logs") / "data", 4, seed=5, size=64)


def serving(faults: FaultPlan | None = None) -> Iterator[str]:
    """The simulator's base URL while it serves (with ``faults``)."""
    from boe.sim import serve_in_thread

    handle = serve_in_thread(faults=faults)
    try:
        yield handle.base_url
    finally:
        handle.close()


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    yield from serving()


@pytest.fixture(scope="module")
def stored(data: Path, sim_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full-ledger run `r` of the four questions, stored by `boe batch`."""
    tmp = tmp_path_factory.mktemp("stored")
    db = tmp / "runs.db"
    rc, _, err = boe("batch", *batch_args(data, sim_url, db, "r"), tmp=tmp)
    assert rc == 0, err
    return db


def test_batch_summary_goes_to_stdout_and_progress_to_stderr(data: Path, sim_url: str, tmp_path: Path) -> None:
    rc, out, err = boe("batch", *batch_args(data, sim_url, tmp_path / "a.db", "a"), "--progress", tmp=tmp_path)
    assert rc == 0, err
    assert "stored 4 this session" in out and "run queue: 4 done, complete" in out
    assert "boe replay --db" in out  # the next commands are part of the result
    assert "4/4" in err and "stored 4" not in err  # the bar, not the summary


def test_quiet_silences_progress_and_notes(data: Path, sim_url: str, tmp_path: Path) -> None:
    rc, out, err = boe("-q", "batch", *batch_args(data, sim_url, tmp_path / "q.db", "q"), "--progress", tmp=tmp_path)
    assert rc == 0, err
    assert "stored 4 this session" in out
    assert err == ""


def test_quiet_still_shows_errors(tmp_path: Path) -> None:
    rc, out, err = boe("-q", "replay", str(tmp_path / "missing.jsonl"), tmp=tmp_path)
    assert rc == 2 and out == ""
    assert err.startswith("error:") and "missing.jsonl" in err


def test_verbose_and_quiet_together_are_refused(tmp_path: Path) -> None:
    rc, _, err = boe("-v", "-q", "plugins", tmp=tmp_path)
    assert rc == 2 and "error: -v and -q" in err


@pytest.fixture
def failing_sim() -> Iterator[str]:
    """The simulator answering one chat request in three with HTTP 500."""
    yield from serving(FaultPlan(rate_500=0.3, seed=4))


RETRY = re.compile(r"^boe\.client: info: http://127\.0\.0\.1:\d+/v1 \(boe-sim\): retrying after attempt \d: HTTP 500")


def test_verbose_shows_retries_and_no_key_reaches_a_log(data: Path, failing_sim: str, tmp_path: Path) -> None:
    env = {"BOE_API_KEY": KEY}
    fast = tmp_path / "fast.toml"
    fast.write_text("backoff = 0.02\n")  # what is logged does not depend on how long a retry waits
    # one call in three fails: with 12 retries a call fails for good once in 0.3^13 ~ 1.6e-7 calls (with the
    # default 4 retries, 0.3^5 = 1/412, a run of some 150 calls failed a question now and then)
    retry = ("--max-retries", "12", "--config", str(fast))
    args = (*batch_args(data, failing_sim, tmp_path / "v.db", "v"), *retry, "--json")
    rc, out, err = boe("-vv", "batch", *args, tmp=tmp_path, env=env)
    assert rc == 0, err
    retries = [line for line in err.splitlines() if RETRY.match(line)]
    assert retries, err[-2000:]
    assert json.loads(out)["schema"] == "boe.batch/1"  # stdout holds the JSON document alone
    assert KEY not in out and KEY not in err
    # by default (warnings) a retry that succeeds says nothing
    args = (*batch_args(data, failing_sim, tmp_path / "d.db", "d"), *retry)
    rc, out, err = boe("batch", *args, tmp=tmp_path, env=env)
    assert rc == 0, err
    assert not any(RETRY.match(line) for line in err.splitlines())


def test_log_records_are_redacted() -> None:
    from boe.logs import configure_cli, mask_secret

    stream = StringIO()
    log = logging.getLogger("boe")
    before = (list(log.handlers), log.level, log.propagate)
    os.environ["BOE_API_KEY"] = "change-me-please"
    try:
        configure_cli(1, stream=stream)
        mask_secret("given-as-an-argument")
        logging.getLogger("boe.test").warning(
            "sent %s to http://user:pw@host/v1 with Bearer %s and %s, then %s",
            "change-me-please",
            "abc.def",
            KEY,
            "given-as-an-argument",
        )
    finally:
        del os.environ["BOE_API_KEY"]
        log.handlers[:], log.level, log.propagate = before
    text = stream.getvalue()
    assert text == "boe.test: warning: sent *** to http://***@host/v1 with Bearer *** and ***, then ***\n", text
    for secret in ("change-me-please", "pw@", "abc.def", KEY, "given-as-an-argument"):
        assert secret not in text


def test_library_use_adds_a_null_handler_and_leaves_the_root_logger_alone() -> None:
    code = (
        "import logging, boe, boe.api, boe.tools.client, boe.batch.runner\n"
        "h = logging.getLogger('boe').handlers\n"
        "assert any(isinstance(x, logging.NullHandler) for x in h), h\n"
        "assert not logging.getLogger().handlers, logging.getLogger().handlers\n"
        "assert logging.getLogger().level == logging.WARNING\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.stdout == "ok\n", res.stderr


# -- every --json document carries its schema ------------------------------------------------------------------


def json_commands() -> list[str]:
    """Every command of the `boe` app that has a --json option ('theory noisy' for a subcommand)."""
    found: list[str] = []

    def walk(cmd: object, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        elif any("--json" in p.opts for p in getattr(cmd, "params", [])):
            found.append(" ".join(path))

    walk(typer.main.get_command(app), [])
    return sorted(found)


def _case_args(command: str, ctx: dict[str, str]) -> list[str]:
    """Arguments that make ``command`` do real work (a new --json command must be added here)."""
    cases = {
        "ask": ["ask", ctx["image"], "what imaging modality was used?", "--base-url", ctx["url"], "--model", "boe-sim",
                "--k", "4", "--dataset", "boe-sim"],
        "batch": ["batch", *batch_args(Path(ctx["data"]), ctx["url"], Path(ctx["tmp"]) / "b.db", "b")],
        "batch.dry-run": ["batch", *batch_args(Path(ctx["data"]), ctx["url"], Path(ctx["tmp"]) / "b.db", "b"),
                          "--dry-run"],
        "calibrate": ["calibrate", "--db", ctx["db"], "--run", "r", "--out", str(Path(ctx["tmp"]) / "cal.json")],
        "costs": ["costs", "--db", ctx["db"], "--run", "r"],
        "demo": ["demo", "--db", str(Path(ctx["tmp"]) / "demo.db"), "--questions", "sim-0-00012", "--k", "4",
                 "--no-same-model"],
        "import": ["import", ctx["ledger"], "--db", str(Path(ctx["tmp"]) / "i.db"), "--run", "i"],
        "plugins": ["plugins"],
        "replay": ["replay", ctx["ledger"], "--policy", "raw,boe", "--budget", "4", "--resamples", "0"],
        "report": ["report", "--ledger", ctx["ledger"], "--out", str(Path(ctx["tmp"]) / "r.html"), "--resamples", "0"],
        "show": ["show", ctx["question"], "--db", ctx["db"], "--run", "r"],
        "theory factor-code": ["theory", "factor-code", "--m", "2", "--n", "40", "--budget", "0,4"],
        "theory noisy": ["theory", "noisy", "--m", "2", "--n", "40", "--train", "40", "--rho", "0.7"],
    }  # fmt: skip
    return cases[command]


def _schema_name(command: str) -> str:
    return command.replace(" ", ".")


CASES = [*json_commands(), "batch.dry-run"]


def test_every_json_command_has_a_case_a_schema_and_a_line_in_the_docs() -> None:
    names = {_schema_name(c) for c in CASES}
    assert names == set(JSON_SCHEMAS), names ^ set(JSON_SCHEMAS)
    documented = dict(re.findall(r"^\| `boe\.([a-z.-]+)/(\d+)` \|", DOCS.read_text(), re.M))
    assert documented == {n: str(v) for n, v in JSON_SCHEMAS.items()}


@pytest.mark.parametrize("command", CASES)
def test_json_output_carries_its_schema(command: str, data: Path, sim_url: str, stored: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "pool.jsonl"
    ledger.write_text("".join(json.dumps(r) + "\n" for r in pool_ledger(20, seed=1)))
    questions = [json.loads(line) for line in (data / "questions.jsonl").read_text().splitlines()]
    ctx = {
        "data": str(data),
        "url": sim_url,
        "db": str(stored),
        "tmp": str(tmp_path),
        "ledger": str(ledger),
        "image": str(data / questions[0]["images"][0]),
        "question": questions[0]["id"],
    }
    rc, out, err = boe(*_case_args(command, ctx), "--json", tmp=tmp_path)
    assert rc == 0, err[-3000:]
    doc = json.loads(out)  # standard output holds the one JSON document and nothing else
    name = _schema_name(command)
    assert doc["schema"] == f"boe.{name}/{JSON_SCHEMAS[name]}"
    assert next(iter(doc)) == "schema"
