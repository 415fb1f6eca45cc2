"""Without the sam extra (torch, torchvision and segment-anything made unimportable in a subprocess),
`boe` imports and runs with the OpenCV segmenter, and a SAM checkpoint gives a clear message naming the
extra to install, with no traceback."""

import json
import subprocess
import sys
from pathlib import Path

import boe

BLOCK = """
import importlib.abc, sys
class NoSam(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "segment_anything"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, NoSam())
"""


def run(code: str, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, timeout=240)
    res.stderr = " ".join(res.stderr.split())  # rich wraps long lines
    return res


def test_boe_imports_and_uses_the_opencv_segmenter():
    res = run(
        "import boe, boe.agent, boe.tools, boe.tools.segment, boe.tools.segment_sam\n"
        "from boe.tools.segment import make_segmenter\n"
        "try:\n    import torch\nexcept ImportError:\n    print('blocked')\n"
        "print(make_segmenter().describe()['name'])"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["blocked", "opencv"]


def test_a_checkpoint_without_the_extra_names_the_extra(tmp_path):
    scan = Path(boe.__file__).parent / "sim" / "data" / "demo" / "images" / "img-0-00000.png"
    ckpt = tmp_path / "x.pth"
    ckpt.write_bytes(b"not needed: the extra is checked first")
    res = run(
        "from boe.cli import main; main()",
        "ask",
        str(scan),
        "what modality?",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--sam-checkpoint",
        str(ckpt),
    )
    assert res.returncode == 2
    assert "pip install 'best-of-evidence[sam]'" in res.stderr and "torch" in res.stderr
    assert "Traceback" not in res.stderr
    res = run("from boe.tools.segment import make_segmenter; make_segmenter('sam', checkpoint=" + repr(str(ckpt)) + ")")
    assert res.returncode == 1 and "MissingExtraError" in res.stderr and "best-of-evidence[sam]" in res.stderr


def test_the_agent_runs_without_the_extra(tmp_path):
    res = run(
        "from boe.cli import main; main()",
        "demo",
        "--questions",
        "sim-0-00024",  # buys grounded checks under the shipped calibration (the DICOM question buys none now)
        "--no-same-model",
        "--db",
        str(tmp_path / "demo.db"),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    (result,) = json.loads(res.stdout)["results"]
    grounded = [e for e in result["evidence"] if e["kind"] == "grounded_factor"]
    assert result["answer"] is not None and grounded
    for e in grounded:
        assert e["view"]["segmentation"]["segmenter"].startswith("opencv:")
