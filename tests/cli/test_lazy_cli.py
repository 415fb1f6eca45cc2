"""`boe --help` and `boe --version` import no command module: neither the agent, openai nor numpy. Each command's
module loads when the command runs, and the help listed for it without loading is the command's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from boe import __version__
from boe.cli import COMMANDS, app

BOE = Path(sys.executable).with_name("boe")
# boe.core.registry (the hooks `import boe` installs) is plain Python; the core's numpy modules must not load
HEAVY = (
    "numpy",
    "openai",
    "boe.agent",
    "boe.core.ledger",
    "boe.api",
    "langgraph",
    "sqlalchemy",
    "cv2",
    "pydantic",
    "msgspec",
)


def _run(*argv: str) -> tuple[int, str, list[str]]:
    """Exit code and output of the CLI on ``argv``, and the heavy modules imported by then (a fresh process)."""
    code = (
        "import json, sys\n"
        "from boe.cli import run\n"
        f"code = run({list(argv)!r})\n"
        f"print(json.dumps([code, [m for m in {HEAVY!r} if m in sys.modules]]), file=sys.stderr)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    exit_code, heavy = json.loads(res.stderr.strip().splitlines()[-1])
    return exit_code, res.stdout, heavy


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ()], ids=["version", "help", "no-args"])
def test_version_and_help_import_no_command(argv: tuple[str, ...]) -> None:
    code, text, heavy = _run(*argv)
    assert heavy == []
    if argv == ("--version",):
        assert (code, text.strip()) == (0, f"boe {__version__}")
    else:
        assert all(f" {name} " in text for name in COMMANDS), text


def test_a_command_loads_only_its_own_module() -> None:
    code, text, heavy = _run("plugins", "--help")
    assert code == 0 and "--json" in text
    assert "boe.agent" not in heavy and "openai" not in heavy


def test_the_installed_script_prints_the_version() -> None:
    cmd = [str(BOE)] if BOE.exists() else [sys.executable, "-m", "boe"]
    res = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout.strip(), res.stderr) == (0, f"boe {__version__}", "")


def test_the_listed_help_is_each_commands_own_and_every_command_is_listed() -> None:
    group = typer.main.get_command(app)
    commands = dict(group.commands)  # type: ignore[attr-defined]  # loads every command module
    assert list(commands) == list(COMMANDS)
    for name, cmd in commands.items():
        assert (cmd.help or "").split("\n\n")[0].strip() == COMMANDS[name][1], name


def test_a_typo_still_gets_a_suggestion() -> None:
    res = subprocess.run(
        [sys.executable, "-c", "from boe.cli import main; main()", "replya"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "Did you mean 'replay'?" in res.stderr
