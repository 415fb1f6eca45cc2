"""Output paths are checked before any work starts; the message names the option and the path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from boe.sim.ledgers import pool_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("out") / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in pool_ledger(20, seed=1)))
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None
    return subprocess.run([BOE, *args], capture_output=True, text=True, timeout=120)


def test_bad_outputs_are_refused_before_the_work(ledger: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (
            ("replay", str(ledger), "--transcripts", "/nonexistent/t.jsonl"),
            "--transcripts /nonexistent/t.jsonl: the folder /nonexistent does not exist",
        ),
        (("replay", str(ledger), "--save-calibration", str(tmp_path)), f"--save-calibration {tmp_path}: is a folder"),
        (("report", "--ledger", str(ledger), "--out", str(tmp_path)), f"--out {tmp_path}: is a folder"),
        (
            ("report", "--ledger", str(ledger), "--out", str(tmp_path / "r.html"), "--png", str(a_file)),
            f"--png {a_file}: is a file, not a folder",
        ),
        (
            ("report", "--ledger", str(ledger), "--out", str(tmp_path / "r.html"), "--png", str(a_file / "sub")),
            "is a file, not a folder",
        ),
        (
            ("export", "--db", str(tmp_path / "none.db"), "--run", "r", "--out", str(tmp_path / "no" / "x.jsonl")),
            "the folder",
        ),
        (("theory", "noisy", "--png", str(tmp_path / "no" / "f.png")), "--png"),
    ]
    for args, words in cases:
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert words in " ".join(res.stderr.split()), (args, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "r.html").exists()


def test_writable_outputs_still_work(ledger: Path, tmp_path: Path) -> None:
    tr = tmp_path / "tr.jsonl"
    res = run("replay", str(ledger), "--policy", "raw", "--budget", "4", "--transcripts", str(tr), "--json")
    assert res.returncode == 0, res.stderr
    assert len(tr.read_text().splitlines()) == 20


_ENDPOINT = ("--base-url", "http://127.0.0.1:9/v1", "--model", "m")  # never reached: the output is refused first
PROC = Path("/proc/version")  # a file that opens for writing (even for root) yet takes no bytes


@pytest.mark.skipif(not PROC.is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    ("args", "option"),
    [
        pytest.param(("replay", "{ledger}", "--budget", "4", "--transcripts", "{out}"), "--transcripts", id="replay"),
        pytest.param(("replay", "{ledger}", "--save-calibration", "{out}"), "--save-calibration", id="replay-cal"),
        pytest.param(("report", "--ledger", "{ledger}", "--out", "{out}"), "--out", id="report"),
        pytest.param(("report", "--ledger", "{ledger}", "--png", "{out}/figs"), "--png", id="report-png"),
        pytest.param(("show", "q", "--ledger", "{ledger}", "--html", "{out}"), "--html", id="show"),
        pytest.param(("calibrate", "{ledger}", "--out", "{out}"), "--out", id="calibrate"),
        pytest.param(("export", "--db", "{db}", "--run", "r", "--out", "{out}"), "--out", id="export"),
        pytest.param(("costs", "--db", "{db}", "--run", "r", "--out", "{out}"), "--out", id="costs"),
        pytest.param(("theory", "noisy", "--png", "{out}"), "--png", id="theory"),
        pytest.param(("sim", "dataset", "--n", "2", "--out", "{out}/data"), "--out", id="sim-dataset"),
        pytest.param(("sim", "calibrate", "--n", "2", "--out", "{out}"), "--out", id="sim-calibrate"),
        pytest.param(
            ("ask", "{image}", "q?", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--checkpoint", "{out}"),
            "--checkpoint",
            id="ask-checkpoint",
        ),
        pytest.param(
            ("ask", "{image}", "q?", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--db", "{out}"),
            "--db",
            id="ask-db",
        ),
        pytest.param(("batch", "{data}", *_ENDPOINT, "--db", "{out}", "--run", "r"), "--db", id="batch-db"),
        pytest.param(("demo", "--db", "{out}"), "--db", id="demo-db"),
        pytest.param(("import", "{ledger}", "--db", "{out}", "--run", "r"), "--db", id="import-db"),
    ],
)
def test_an_output_in_proc_is_a_usage_error(ledger: Path, tmp_path: Path, args: tuple[str, ...], option: str) -> None:
    """/proc/version (and a folder under it) passes a permission check as root; writing it fails with EIO."""
    image = Path(__file__).parents[2] / "boe" / "sim" / "data" / "demo" / "images" / "img-0-00000.png"
    data = image.parents[1]
    where = {"ledger": str(ledger), "db": str(tmp_path / "none.db"), "image": str(image), "data": str(data)}
    where["out"] = str(PROC)
    res = run(*(a.format(**where) for a in args))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} /proc/version"), res.stderr
    assert "cannot write" in lines[0] or "is a file" in lines[0], res.stderr


def test_a_device_output_is_written_in_place(ledger: Path) -> None:
    res = run("replay", str(ledger), "--policy", "raw", "--budget", "4", "--transcripts", "/dev/null")
    assert res.returncode == 0, res.stderr
    assert Path("/dev/null").is_char_device()
