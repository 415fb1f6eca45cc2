"""One declaration of the agent options: `ask`, `batch` and `demo` share it, `--config FILE` feeds it, help shows
every default. Run through the installed `boe` console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.text import Text

from boe.agent.configuration import AgentConfig
from boe.cli import app
from boe.cli.agent_options import OPTIONS, AgentOptions, flag

BOE = str(Path(sys.executable).with_name("boe"))
SCAN = Path(__file__).resolve().parents[2] / "boe" / "sim" / "data" / "demo" / "images" / "img-0-00000.png"


def boe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BOE_BASE_URL", "OPENAI_BASE_URL", "BOE_MODEL")}
    return subprocess.run([BOE, *args], capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "200"})


def _commands() -> dict[str, object]:
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_every_option_is_a_field_and_flags_are_distinct() -> None:
    assert set(OPTIONS) <= set(AgentConfig.model_fields)
    assert len({flag(f) for f in OPTIONS}) == len(OPTIONS)
    assert flag("grounded_view") == "--view" and flag("judge_base_url") == "--judge-base-url"


# a batch has no one at the terminal to approve purchases
@pytest.mark.parametrize(("command", "missing"), [("ask", set()), ("batch", {"--dataset", "--root", "--approve"})])
def test_ask_and_batch_take_the_same_agent_options(command: str, missing: set[str]) -> None:
    opts = {o for p in _commands()[command].params for o in p.opts}  # type: ignore[attr-defined]
    want = {flag(f) for f in OPTIONS} - missing
    assert want <= opts, want - opts
    assert "--config" in opts


def test_demo_takes_the_agent_options_but_the_endpoint() -> None:
    opts = {o for p in _commands()["demo"].params for o in p.opts}  # type: ignore[attr-defined]
    assert {"--k", "--budget", "--policy", "--judge-model", "--segmenter", "--view", "--costs", "--config"} <= opts
    assert not {"--base-url", "--model", "--judge-base-url"} & opts


def test_no_help_text_loses_words_to_rich_markup() -> None:
    bad = []

    def walk(cmd: object, path: str) -> None:
        texts = [("help", getattr(cmd, "help", None))]
        texts += [(str(p.opts), getattr(p, "help", None)) for p in getattr(cmd, "params", [])]
        for where, text in texts:
            if text and Text.from_markup(text).plain != text.replace("\\[", "["):
                bad.append((path, where, text))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "boe")
    assert not bad


@pytest.mark.parametrize("command", ["ask", "batch", "demo"])
def test_help_shows_every_agent_default(command: str) -> None:
    res = boe(command, "--help")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    bools = {f for f, info in AgentConfig.model_fields.items() if info.annotation is bool}  # a flag: on or off
    flags = [flag(f) for f in OPTIONS if f not in ("base_url", "model", *bools)]
    for name in flags:
        rows = [i for i, line in enumerate(lines) if f" {name} " in line]
        if not rows:
            continue  # not an option of this command (checked above)
        block = " ".join(lines[rows[0] : rows[0] + 4])
        assert "[default:" in block, (name, block)
    assert "Judge model ." not in res.stdout and "PydanticUndefined" not in res.stdout
    if command == "batch":
        assert "[default: full]" in res.stdout and "[default: 64]" in res.stdout


def test_config_file_with_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text('base_url = "http://127.0.0.1:9/v1"\nmodel = "from-file"\nk = 3\ngrounded_view = "mask"\n')
    opts = AgentOptions({"k": 5, "model": None}, str(cfg))
    built = opts.build()
    assert (built.k, built.model, built.grounded_view) == (5, "from-file", "mask")
    js = tmp_path / "agent.json"
    js.write_text(json.dumps({"base_url": "http://x/v1", "model": "m", "budget": 4}))
    assert AgentOptions({}, str(js), {"ledger": "full"}).build().ledger == "full"
    js.write_text(json.dumps({"base_url": "http://x/v1", "model": "m", "ledger": "online"}))
    assert AgentOptions({}, str(js), {"ledger": "full"}).build().ledger == "online"  # the file beats the default


def test_config_file_errors_are_usage_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nkk = 3\n')
    res = boe("ask", str(SCAN), "q?", "--config", str(bad))
    assert res.returncode == 2 and "kk: unknown field" in res.stderr and "Traceback" not in res.stderr
    bad.write_text('base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nk = 0\n')
    res = boe("ask", str(SCAN), "q?", "--config", str(bad))
    assert res.returncode == 2 and f"--config {bad}: k:" in " ".join(res.stderr.split())
    res = boe("ask", str(SCAN), "q?", "--config", str(tmp_path / "none.toml"))
    assert res.returncode == 2 and "no such file" in res.stderr
    res = boe("ask", str(SCAN), "q?", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--view", "x")
    assert res.returncode == 2 and "--view (grounded_view)" in res.stderr
    res = boe("ask", str(SCAN), "q?", "--model", "m")
    assert res.returncode == 2 and "Missing option '--base-url'" in res.stderr and "Usage: boe ask" in res.stderr


def test_config_file_drives_a_real_ask_against_the_simulator(tmp_path: Path) -> None:
    from boe.agent.demo import simulator

    with simulator() as url:
        cfg = tmp_path / "agent.toml"
        cfg.write_text(f'base_url = "{url}"\nmodel = "boe-sim"\nk = 4\nbudget = 4\npolicy = "whole"\n')
        res = boe("ask", str(SCAN), "What imaging modality is shown?", "--config", str(cfg), "--k", "3", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert len(out["candidates"]) == 3 and out["policy"] == "whole" and out["budget"] == 4


def test_the_readme_config_file_loads(tmp_path: Path) -> None:
    import re

    from boe.agent.settings import load_config

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert blocks, "the README lost its --config example"
    path = tmp_path / "agent.toml"
    path.write_text(blocks[0], encoding="utf-8")
    cfg = load_config(path)
    assert (cfg.k, cfg.budget, cfg.grounded_view) == (16, 8, "mask")
