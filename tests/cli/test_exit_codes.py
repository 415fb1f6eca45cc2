"""The installed `boe` script: usage errors, failures, internal errors, Ctrl-C and SIGTERM get their exit codes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))


def boe(*args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    assert BOE is not None, "the boe console script is not installed next to this interpreter"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BOE_")}
    full_env.update(env or {})
    return subprocess.run([BOE, *args], capture_output=True, text=True, env=full_env, timeout=120, **kw)  # type: ignore[call-overload]


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert "ModuleNotFoundError" not in res.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("replay", "x.jsonl", "--no-such-flag"), "No such option: --no-such-flag"),
        (("nosuch",), "No such command 'nosuch'"),
        (("ask",), "Missing argument"),
        (("batch",), "Missing argument 'dataset'"),
        (("ask", __file__, "what is it?", "--model", "m"), "Missing option '--base-url'"),  # an existing file
        (("replay", "x.jsonl", "--budget"), "requires an argument"),
        (("sim", "ledger", "--kind", "pool", "--n", "abc"), "Invalid value for '--n'"),
    ],
)
def test_usage_errors_print_usage_and_exit_2(args: tuple[str, ...], words: str) -> None:
    res = boe(*args)
    no_traceback(res)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr
    assert "Usage: boe" in res.stderr or "Try 'boe replay --help' for help." in res.stderr


def test_configuration_errors_exit_2(tmp_path: Path) -> None:
    res = boe("replay", str(tmp_path / "missing.jsonl"))
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.startswith("error: cannot open ledger") and "missing.jsonl" in res.stderr
    # a wrong image path is named before the endpoint is asked for (the user fixes both in one go)
    res = boe("ask", str(tmp_path / "missing.png"), "what is it?", "--image", __file__)
    no_traceback(res)
    assert res.returncode == 2
    assert res.stderr.startswith("error: image not found") and "missing.png" in res.stderr, res.stderr
    res = boe("sim", "ledger", "--kind", "nope")
    assert res.returncode == 2 and "--kind must be" in res.stderr
    no_traceback(res)


def test_an_unreadable_dicom_is_one_error_line_without_the_readers_warnings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.dcm"
    bad.write_bytes(b"\0" * 128 + b"DICM" + b"\x02\x00garbage")  # pydicom warns twice, then cannot decode it
    args = ("ask", str(bad), "what is it?", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    res = boe(*args)
    no_traceback(res)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "bad.dcm" in res.stderr, res.stderr
    assert "Warning" not in res.stderr and "pydicom" not in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    res = boe("-vv", *args)  # what pydicom said is there for who asks
    assert res.returncode == 2 and "Expected explicit VR" in res.stderr, res.stderr


def test_help_documents_exit_codes() -> None:
    res = boe("--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    assert "Exit codes" in text and "130 interrupted" in text and "143 terminated (SIGTERM" in text


def test_internal_error_prints_one_line_and_a_log(tmp_path: Path) -> None:
    # a module the replay command imports lazily fails to import: an internal error, not the user's
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class Boom:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'boe.core.loading':\n"
        "            raise RuntimeError('injected fault for the test')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Boom())\n"
    )
    ledger = tmp_path / "l.jsonl"
    ledger.write_text("")
    env = {"PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = boe("replay", str(ledger), env=env)
    no_traceback(res)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "internal error" in lines[0] and "injected fault for the test" in lines[0]
    log = Path(lines[0].rsplit("the traceback is in ", 1)[1].strip())
    assert log.is_file() and log.is_relative_to(tmp_path / "cache")
    text = log.read_text()
    assert "Traceback" in text and "RuntimeError: injected fault for the test" in text


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_signal_exits_130_or_143(tmp_path: Path, signum: int, code: int, word: str) -> None:
    """SIGINT or SIGTERM during a batch whose model replies take 30 s: 130 or 143, the resume command, no traceback."""
    from boe.db import Store
    from boe.sim import serve_in_thread
    from boe.sim.dataset import generate_dataset
    from boe.sim.faults import FaultPlan

    data = generate_dataset(tmp_path / "data", 2, seed=1, size=64)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOE_")}
    env["BOE_WORKER_LOCKS"] = str(tmp_path / "locks")
    with serve_in_thread(faults=FaultPlan(latency_ms=30_000)) as sim:
        assert BOE is not None
        proc = subprocess.Popen(
            [
                BOE,
                "batch",
                str(data),
                "--base-url",
                sim.base_url,
                "--model",
                "boe-sim",
                "--db",
                str(tmp_path / "r.db"),
                "--run",
                "r",
                "--k",
                "2",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background shell may ignore it
        )
        deadline = time.monotonic() + 60
        while sim.stats().get("requests", 0) == 0 and time.monotonic() < deadline:  # the batch is waiting on a reply
            time.sleep(0.1)
        t0 = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        stopped = time.monotonic() - t0
    assert proc.returncode == code, err
    assert stopped < 20  # the 30 s reply was not waited for
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert word in err and lines[-1].strip().startswith("boe batch "), err  # how to resume, said once
    assert "error: interrupted" not in err
    with Store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        assert store.work_counts("r")["claimed"] == 0  # given back, not left leased


def test_crash_log_never_holds_credentials(tmp_path: Path, monkeypatch) -> None:
    """A store URL's password or a key-like word on the command line or in the error stays out of the log."""
    from boe.cli import _crash_log

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("sys.argv", ["boe", "batch", "--db", "postgresql+psycopg://bob:hunter2@db/boe"])
    try:
        raise RuntimeError("could not reach postgresql+psycopg://bob:hunter2@db/boe with sk-abcdefghijklmnop")
    except RuntimeError as exc:
        log = _crash_log(exc)
    assert log is not None
    text = Path(log).read_text()
    assert "hunter2" not in text and "bob" not in text and "sk-abcdefghijklmnop" not in text
    assert "postgresql+psycopg://***@db/boe" in text


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (every write to it fails: no space)")
def test_a_full_disk_is_one_error_line_and_exit_1() -> None:
    """Output to a device with no space left (ENOSPC from the kernel): one `error:` line, exit 1, no crash log."""
    with open("/dev/full", "w") as full:
        res = subprocess.run(
            [str(BOE), "sim", "ledger", "--kind", "pool", "--n", "2000"], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert "Traceback" not in res.stderr
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: No space left on device"), res.stderr
    assert "internal error" not in res.stderr and "crash" not in res.stderr
