"""`boe ask` / `boe demo` from the command line (subprocesses, like a user)."""

import subprocess
import sys

import pytest

BOE = [sys.executable, "-c", "from boe.cli import main; main()"]


def boe(*args):
    res = subprocess.run([*BOE, *args], capture_output=True, text=True, timeout=120)
    res.stderr = " ".join(res.stderr.split())  # rich wraps long lines
    return res


def test_help_does_not_import_the_heavy_libraries():
    code = (
        "import sys; from boe.cli import app; "
        "bad = [m for m in ('openai', 'langgraph', 'cv2', 'sqlalchemy', 'httpx2') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    res = boe("ask", "--help")
    assert res.returncode == 0 and "--base-url" in res.stdout and "--judge-model" in res.stdout


@pytest.mark.parametrize(
    ("setup", "extra", "message"),
    [
        pytest.param(lambda d: d / "missing.png", [], "image not found", id="missing"),
        pytest.param(lambda d: _write(d / "notes.png", b"plain text"), [], "is not an image", id="non-image"),
        pytest.param(
            lambda d: _write(d / "a.png", b"x"), ["--root", "ROOT"], "outside the dataset root", id="outside-root"
        ),
        pytest.param(lambda d: d, [], "not a regular file", id="directory"),
    ],
)
def test_bad_images_are_clear_errors_without_a_traceback(tmp_path, setup, extra, message):
    root = tmp_path / "root"
    root.mkdir()
    image = setup(tmp_path)
    extra = [str(root) if x == "ROOT" else x for x in extra]
    res = boe("ask", str(image), "what modality?", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", *extra)
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr


def test_bad_options_are_clear_errors(tmp_path, scan):
    res = boe("ask", str(scan), "which?", "--options", "A=CT,B", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert res.returncode == 2 and "LETTER=text" in res.stderr and "Traceback" not in res.stderr
    res = boe("ask", str(scan), "which?", "--policy", "oracle", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert res.returncode == 2 and "unknown policy" in res.stderr


def test_an_unreachable_endpoint_is_a_clear_error(scan):
    res = boe(
        "ask",
        str(scan),
        "what modality?",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--max-retries",
        "0",
        "--timeout",
        "2",
    )
    assert res.returncode == 1 and "connection failed" in res.stderr and "Traceback" not in res.stderr


def _write(path, data):
    path.write_bytes(data)
    return path
