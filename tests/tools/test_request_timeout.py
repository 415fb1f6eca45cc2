"""`--timeout` bounds a whole model request (every attempt of it), not each socket read (issue 22).

A server that keeps the connection alive by sending 20 bytes every half
second makes every read succeed; the real `boe ask` must still give up once
``--timeout`` seconds have passed, with one `error:` line and exit 1.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from loopback import ChatServer

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))


@pytest.mark.parametrize("retries", ["0", "3"])
def test_a_dripping_server_is_cut_off_at_the_timeout(tmp_path: Path, retries: str) -> None:
    assert BOE is not None
    image = tmp_path / "scan.png"
    cv2.imwrite(str(image), np.full((32, 32, 3), 128, np.uint8))
    # 20,000 bytes at 40 a second: 500 s to send the whole body, so a client that waits for all of it (a timeout
    # per read) outlives the guard below and fails the test without a clock being asserted
    with ChatServer('{"answer": "CT"}', drip=(20, 0.5), pad_to=20_000) as server:
        res = subprocess.run(
            [BOE, "ask", str(image), "what modality?", "--base-url", server.base_url, "--model", "m"]
            + ["--timeout", "2", "--max-retries", retries, "--k", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert "timed out: no complete reply within --timeout 2 s" in res.stderr, res.stderr
