"""`boe plugins`, through the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BOE = Path(sys.executable).with_name("boe")


def boe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BOE), *args], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200", **env}
    )


def test_plugins_lists_every_registry_with_its_source():
    res = boe("plugins", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    reg = data["registries"]
    names = {noun: [e["name"] for e in rows] for noun, rows in reg.items()}
    assert names["kinds"][:5] == ["structured", "vlm_factor", "grounded_factor", "whole_response", "answer_response"]
    assert set(names["tools"]) >= set(names["kinds"][:5])
    assert {"raw", "boe", "boe-factor", "random-factor", "whole", "bayes"} <= set(names["policies"])
    assert {"opencv", "sam"} <= set(names["segmenters"])
    assert {"vqa-rad", "boe-sim"} <= set(names["formats"])
    assert names["stores"] == ["sqlite", "postgresql"]
    builtin = [e for rows in reg.values() for e in rows if e["name"] in ("boe", "opencv", "sqlite", "vqa-rad")]
    assert builtin and all(e["source"] == "boe" for e in builtin)


def test_plugins_table_names_registry_name_and_source():
    res = boe("plugins", BOE_DISABLE_PLUGINS="all")
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if "grounded_factor" in line]
    assert any("kinds" in r and "boe.kinds.grounded_factor" in r for r in rows), res.stdout
    assert any("tools" in r and "GroundedFactorJudge" in r for r in rows), res.stdout
