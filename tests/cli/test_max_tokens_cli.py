"""`--max-tokens`, the option a context-length refusal tells the user to lower, exists and reaches the request."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from boe.sim.server import SimOptions, serve_in_thread

BOE = Path(sys.executable).with_name("boe")
SCAN = sorted((Path(__file__).parents[2] / "boe" / "sim" / "data" / "demo" / "images").glob("*.png"))[0]


def boe(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(BOE)] if BOE.exists() else [sys.executable, "-c", "from boe.cli import main; main()"]
    env = {k: v for k, v in os.environ.items() if k not in ("BOE_BASE_URL", "OPENAI_BASE_URL")}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, env=env)


def test_the_option_a_context_length_refusal_names_fixes_it():
    with serve_in_thread(options=SimOptions(max_model_len=1000)) as sim:
        common = (
            "ask",
            str(SCAN),
            "What is shown?",
            "--model",
            "boe-sim-vlm",
            "--base-url",
            sim.base_url,
            "--budget",
            "0",
        )
        refused = boe(*common)
        fixed = boe(*common, "--max-tokens", "200")
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 1 and "maximum context length" in message and "--max-tokens" in message, message
    assert fixed.returncode == 0, fixed.stderr
