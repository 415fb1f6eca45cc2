"""The complete example of docs/langgraph.md runs as written (against the built-in simulator)."""

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


def test_the_embedding_example_runs_and_vetoes_one_purchase(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    example = next(b for b in blocks if "asyncio.run(main())" in b)
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("generated") and any(line.startswith("purchase") for line in lines)
    vetoed = next(line.split()[1] for line in lines if line.startswith("veto"))
    assert lines[-1].startswith("selected") and f"['{vetoed}']" in lines[-1]
