"""`boe report` reads images only under the image root, and holds --max-size (or says why it cannot)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from boe.sim.ledgers import pool_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))


def report(*args: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None
    return subprocess.run([BOE, "report", *args], capture_output=True, text=True, timeout=300)


def write(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_images_outside_the_image_root_are_refused_with_a_note(tmp_path: Path) -> None:
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    cv2.imwrite(str(here / "ok.png"), np.full((32, 32, 3), 200, np.uint8))
    secret = tmp_path / "x.png"  # exists, two levels up
    cv2.imwrite(str(secret), np.zeros((32, 32, 3), np.uint8))
    recs = list(pool_ledger(3, seed=2))
    for rec, image in zip(recs, ["/etc/passwd", "../../x.png", "ok.png"], strict=True):
        rec["task"]["image"] = image
    ledger = write(here / "l.jsonl", recs)
    for extra in ([], ["--image-root", str(here)]):
        out = tmp_path / "r.html"
        res = report("--ledger", str(ledger), "--out", str(out), *extra)
        assert res.returncode == 0, res.stderr
        text = " ".join(res.stderr.split())
        assert "2 image path(s) were not read because they lie outside the image root" in text
        assert "'/etc/passwd' not read" in text
        html = out.read_text()
        assert "root:x:0:0" not in html and html.count("data:image/webp") == 1


def test_max_size_holds_by_leaving_question_pages_out(tmp_path: Path) -> None:
    # 800 questions: about 1.9 MB of report with every page, so 1 MB keeps some pages and leaves the rest out
    ledger = write(tmp_path / "l.jsonl", pool_ledger(800, seed=4))
    out = tmp_path / "r.html"
    res = report("--ledger", str(ledger), "--out", str(out), "--max-size", "1")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size <= 1 * 2**20
    note = re.search(
        r"(\d+) of 800 question pages were left out to keep the report under --max-size", " ".join(res.stderr.split())
    )
    assert note is not None and 0 < int(note.group(1)) < 800, res.stderr


def test_one_huge_record_is_clipped_not_copied(tmp_path: Path) -> None:
    recs = list(pool_ledger(3, seed=1))
    recs[0]["task"]["question"] = "x" * 3_000_000
    recs[0]["candidates"][0]["answer"] = "y" * 2_000_000
    ledger = write(tmp_path / "l.jsonl", recs)
    out = tmp_path / "r.html"
    res = report("--ledger", str(ledger), "--out", str(out), "--max-size", "1")
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size <= 2**20
    assert "clipped: 3,000,000 characters" in out.read_text()


@pytest.mark.parametrize("size", ["0.01"])
def test_a_max_size_too_small_for_the_summary_says_so(tmp_path: Path, size: str) -> None:
    ledger = write(tmp_path / "l.jsonl", pool_ledger(20, seed=1))
    res = report("--ledger", str(ledger), "--out", str(tmp_path / "r.html"), "--max-size", size)
    assert res.returncode == 0, res.stderr
    assert "over --max-size" in " ".join(res.stderr.split())
