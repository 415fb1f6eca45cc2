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


def _install(site: Path, dist: str, module: str, code: str) -> None:
    """A module and the metadata pip writes for a distribution with one boe.plugins entry point."""
    (site / f"{module}.py").write_text(code, encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[boe.plugins]\n{module} = {module}:register\n", encoding="utf-8")


def test_a_plugin_is_credited_with_what_it_registered_and_nothing_else(tmp_path):
    """A plugin whose code is the first to import built-in modules that register on import (boe.datasets, a kind,
    a format) is credited with its own format only; `boe plugins` listed pmc-vqa as boe-chartqa's."""
    _install(
        tmp_path,
        "eager-plugin",
        "eager_plugin",
        "def register():\n"
        "    import boe.datasets._vqarad, boe.kinds.vlm_factor, boe.core.bayes\n"
        "    from boe.datasets import register_format\n"
        "    register_format('eager', sniff=lambda p: False)(lambda path, ctx: iter(()))\n",
    )
    res = boe("plugins", "--json", PYTHONPATH=str(tmp_path))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = [(noun, e) for noun, entries in data["registries"].items() for e in entries]
    assert {(noun, e["name"]) for noun, e in rows if e["source"] == "eager-plugin"} == {("formats", "eager")}
    assert all(e["source"] == "boe" for _, e in rows if e["target"].startswith("boe."))
    assert ("eager-plugin", None) in [(p["dist"], p["error"]) for p in data["plugins"]]
