"""`boe batch` over two servers, one killed mid-run: the batch completes, each server's share is in the summary.

Real processes throughout: two `boe sim serve` and the `boe batch` worker, all through the installed `boe`
script, over loopback ports chosen by the system. One simulator is killed (SIGKILL) once a few questions are
stored; its requests in flight fail, it is marked down, and every later request goes to the other."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from boe.db import Store

from .conftest import default_sigint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

BOE = str(Path(sys.executable).with_name("boe"))
N = 16


def _simulator(latency_ms: int) -> tuple[subprocess.Popen[bytes], str]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen(
        [BOE, "sim", "serve", "--port", str(port), "--latency-ms", str(latency_ms)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(400):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            assert proc.poll() is None, "the simulator exited"
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the simulator did not start")


def test_two_servers_one_killed_mid_run(tmp_path: Path) -> None:
    from boe.sim.dataset import generate_dataset

    data = generate_dataset(tmp_path / "data", N, seed=11, size=64)
    db = tmp_path / "r.db"
    sims = [_simulator(40), _simulator(40)]
    (keep, keep_url), (doomed, doomed_url) = sims
    try:
        args = [BOE, "batch", str(data), "--base-url", keep_url, "--base-url", doomed_url, "--model", "boe-sim"]
        args += ["--judge-model", "boe-sim-judge", "--db", f"sqlite:///{db}", "--run", "r", "--k", "4"]
        args += ["--concurrency", "8", "--no-progress", "--json"]
        env = {**os.environ, "BOE_WORKER_LOCKS": str(tmp_path / "locks")}
        batch = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint
        )
        deadline = time.monotonic() + 180
        while True:  # kill one server once a few questions are stored
            assert time.monotonic() < deadline and batch.poll() is None, batch.communicate()[1][-3000:]
            if db.exists():
                with Store(f"sqlite:///{db}") as store:
                    if any(r.name == "r" for r in store.list_runs()) and store.count_questions("r") >= 3:
                        break
            time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        out, err = batch.communicate(timeout=400)
    finally:
        for proc, _ in sims:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
    assert batch.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["complete"] and summary["stored"] == N and not summary["failed"], summary
    shares = {s["base_url"]: s for s in summary["servers"]}
    assert set(shares) == {keep_url, doomed_url}, summary["servers"]
    assert shares[doomed_url]["requests"] > 0 and shares[doomed_url]["down"] >= 1  # it served, then went away
    assert shares[keep_url]["requests"] > shares[doomed_url]["requests"] and shares[keep_url]["down"] == 0
    assert sum(s["requests"] for s in summary["servers"]) == summary["requests"]
    with Store(f"sqlite:///{db}") as store:
        records = list(store.iter_record_dicts("r"))
    assert len(records) == N
    for rec in records:  # no check stored a transport error: the other server answered it
        for act in rec["actions"]:
            assert "connection" not in (act.get("error") or "") and "attempt(s)" not in (act.get("error") or ""), act
