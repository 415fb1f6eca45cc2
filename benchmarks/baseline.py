"""The tree of an older commit, for benchmarks that time it beside this one in the same run."""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A working directory for a baseline's child process: ``python -c`` puts the working directory first on
#: sys.path, before PYTHONPATH, so run from a checkout its own ``boe`` would shadow the baseline's; this holds none.
NEUTRAL = tempfile.gettempdir()


def baseline_tree(ref: str, into: Path) -> Path:
    """The tree of git commit ``ref`` extracted into ``into``/tree (put it first on ``PYTHONPATH`` to import it)."""
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"
