"""Numeric agent settings are bounded: an absurd value in a config file or on the command line is one error line
naming the setting and its range (exit 2) before any request; `--help` states each range."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
IMAGE = Path(__file__).parents[2] / "boe" / "sim" / "data" / "demo" / "images" / "img-0-00000.png"
ENDPOINT = ("--base-url", "http://127.0.0.1:9/v1", "--model", "m")  # never reached: the value is refused first


def boe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert BOE is not None, "the boe console script is not installed next to this interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOE_")}
    return subprocess.run([BOE, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        pytest.param("max_tokens", "99999999999999999999", "less than or equal to 1048576", id="max_tokens"),
        pytest.param("k", "100000", "less than or equal to 256", id="k"),
        pytest.param("budget", "1e300", "less than or equal to 1000000", id="budget"),
        pytest.param("budget", "inf", "finite number", id="budget-inf"),
        pytest.param("seed", "99999999999999999999", "less than or equal to 9223372036854775807", id="seed"),
        pytest.param("timeout", "1e300", "less than or equal to 86400", id="timeout"),
        pytest.param("top_k", "99999999999999999999", "less than or equal to 1048576", id="top_k"),
        pytest.param("max_pixels", "99999999999999999999", "less than or equal to 1073741824", id="max_pixels"),
        pytest.param("policy_seed", "-1", "greater than or equal to 0", id="policy_seed"),
    ],
)
def test_an_absurd_number_is_refused_from_a_file_and_a_flag(tmp_path: Path, field: str, value: str, words: str):
    toml_value = f'"{value}"' if value == "inf" else value  # TOML's own inf is a float too: either way refused
    (tmp_path / "agent.toml").write_text(f"{field} = {'inf' if value == 'inf' else toml_value}\n")
    line = one_error(boe("ask", str(IMAGE), "what?", *ENDPOINT, "--config", "agent.toml", cwd=tmp_path))
    assert line.startswith(f"error: --config agent.toml: {field}: ") and words in line, line
    flag = "--" + field.replace("_", "-")
    line = one_error(boe("ask", str(IMAGE), "what?", *ENDPOINT, flag, value))
    assert line.startswith(f"error: {flag} ({field}): ") and words in line, line


def test_batch_and_demo_refuse_the_same(tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text("max_tokens = 99999999999999999999\n")
    line = one_error(
        boe("batch", str(tmp_path), *ENDPOINT, "--config", "agent.toml", "--db", "x.db", "--run", "r", cwd=tmp_path)
    )
    assert "max_tokens" in line and "1048576" in line
    line = one_error(boe("demo", "--k", "100000", cwd=tmp_path))
    assert line.startswith("error: --k (k): ")
    assert not (tmp_path / "boe-demo.db").exists() and not (tmp_path / "x.db").exists()


def test_help_states_the_ranges() -> None:
    res = boe("ask", "--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.replace("│", " ").split())
    for flag, bounds in [
        ("--k", "1 to 256"),
        ("--max-tokens", "16 to 1,048,576"),
        ("--budget", "0 to 1,000,000"),
        ("--timeout", "above 0, at most 86,400"),
        ("--concurrency", "1 to 256"),
    ]:
        after = text.split(f"{flag} ", 1)[1]
        assert f"Range: {bounds}." in after.split(" --", 1)[0], (flag, after[:300])


def test_the_python_api_refuses_the_same() -> None:
    import boe as api
    from boe.errors import ConfigError

    with pytest.raises(ConfigError, match="max_tokens: Input should be less than or equal to 1048576"):
        api.load_config(base_url="http://127.0.0.1:9/v1", model="m", max_tokens=99999999999999999999)
