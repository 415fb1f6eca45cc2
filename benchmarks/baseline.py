"""The tree of an older commit, for benchmarks that time it beside this one in the same run."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def baseline_tree(ref: str, into: Path) -> Path:
    """The tree of git commit ``ref`` extracted into ``into``/tree (put it first on ``PYTHONPATH`` to import it)."""
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"
