"""The complete examples of docs/extending run as they are written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "extending"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.stem)
def test_the_page_example_runs(page, tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert blocks, f"{page} has no python example"
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.parametrize("index", ["README.md", "docs/extending/plugins.md"])
def test_every_page_is_linked(index):
    text = (ROOT / index).read_text(encoding="utf-8")
    base = (ROOT / index).parent
    linked = {(base / m).resolve() for m in re.findall(r"\]\(([^)#]+\.md)\)", text)}
    pages = {p.resolve() for p in DOCS.glob("*.md")} - {(ROOT / index).resolve()}
    assert pages <= linked, f"{index} does not link {sorted(p.name for p in pages - linked)}"
