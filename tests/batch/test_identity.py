"""Worker identity: the first free slot on this machine, held until the process ends (even by kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from boe.batch.identity import acquire_identity
from boe.errors import ConfigError


def test_live_workers_get_distinct_slots_and_a_freed_slot_is_reused(locks) -> None:
    a = acquire_identity("sqlite:///x.db", "run")
    b = acquire_identity("sqlite:///x.db", "run")
    other_run = acquire_identity("sqlite:///x.db", "other")
    assert (a.slot, b.slot, other_run.slot) == ("1", "2", "1")
    assert a.worker_id.endswith("/1") and a.worker_id != b.worker_id and a.reclaim
    a.release()
    c = acquire_identity("sqlite:///x.db", "run")
    assert c.slot == "1"
    for ident in (b, c, other_run):
        ident.release()


def test_a_named_worker_is_unique_on_a_machine(locks) -> None:
    a = acquire_identity("sqlite:///x.db", "run", "gpu-box")
    with pytest.raises(ConfigError, match="already running"):
        acquire_identity("sqlite:///x.db", "run", "gpu-box")
    with pytest.raises(ConfigError, match="not a worker name"):
        acquire_identity("sqlite:///x.db", "run", "../evil")
    a.release()
    assert acquire_identity("sqlite:///x.db", "run", "gpu-box").worker_id.endswith("/gpu-box")


def test_a_killed_workers_slot_is_free_at_once(locks) -> None:
    code = (
        "import sys, time; from boe.batch.identity import acquire_identity\n"
        "i = acquire_identity('sqlite:///x.db', 'run'); print(i.slot, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BOE_WORKER_LOCKS": str(locks)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "1"
    assert acquire_identity("sqlite:///x.db", "run").slot == "2"  # slot 1 is the live child's
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.05)
    assert acquire_identity("sqlite:///x.db", "run").slot == "1"
