"""The `boe` command line. Each subcommand's module is imported only when that command runs (or its own help
is asked for), so `boe --help` and `boe --version` import neither the agent, openai nor numpy."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from boe.cli.common import Interrupted
from boe.core.version import __version__
from boe.errors import BoeError
from boe.logs import redact_text

__all__ = ["COMMANDS", "EXIT_CODES", "app", "error_exit_code", "main", "run"]

#: Every command in `boe --help` order: its module (which defines `register(app)`) and its one-line help, shown
#: without importing the module (tests/cli/test_lazy_cli.py holds each line to the command's own docstring).
COMMANDS: dict[str, tuple[str, str]] = {
    "replay": (
        "boe.cli.replay_cmd",
        "Replay ledgers under policies and budgets and report accuracy, rescues, costs and Sharp.",
    ),
    "import": (
        "boe.cli.store_cmd",
        "Store the questions of ledger files in a run; bad records are reported by line and skipped.",
    ),
    "export": (
        "boe.cli.store_cmd",
        "Write a stored run as a ledger-v1 JSONL file, one question per line in the order they were stored.",
    ),
    "ask": (
        "boe.cli.agent_cmd",
        "Answer one image question: sample K candidates, buy evidence, select, print the evidence log.",
    ),
    "demo": (
        "boe.cli.agent_cmd",
        "Run the agent against the built-in simulator on a few shipped questions; store the run in ./boe-demo.db.",
    ),
    "costs": (
        "boe.cli.agent_cmd",
        "Measure a stored agent run: tokens and seconds per action kind, and the costs they give beside design.",
    ),
    "report": (
        "boe.cli.report_cmd",
        "Write one self-contained HTML report: figures, calibration, paired intervals, costs and every question's "
        "page.",
    ),
    "show": (
        "boe.cli.report_cmd",
        "Show one question: its image with the crops and masks used, candidates, signed graph, evidence log.",
    ),
    "batch": (
        "boe.cli.batch_cmd",
        "Answer every question of a dataset with the agent and store the run (resumable; many workers may share it).",
    ),
    "calibrate": (
        "boe.cli.calibrate_cmd",
        "Fit kappa and p per group (and the bayes model) on labelled runs: the file `boe ask --calibration` takes.",
    ),
    "plugins": (
        "boe.cli.plugins_cmd",
        "List what is registered (built-ins and plugins of the boe.plugins entry-point group) and from which package.",
    ),
    "sim": ("boe.cli.sim_cmd", "The built-in simulator: synthetic ledgers, synthetic scans, a simulated VLM endpoint."),
    "theory": (
        "boe.cli.theory_cmd",
        "The paper's theory, checked: exact curves and Monte-Carlo replays of the policies on generated ledgers.",
    ),
}


class _LazyCommands(MutableMapping[str, Any]):
    """The root group's commands: a command's module is imported when the command is first looked up."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded and name in COMMANDS:
            sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            importlib.import_module(COMMANDS[name][0]).register(sub)
            self._loaded.update(typer.main.get_group(sub).commands)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._loaded]))

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._loaded))

    def loaded(self, name: str) -> bool:
        return name in self._loaded


class _LazyGroup(TyperGroup):
    """The root `boe` group: its help lists every command from `COMMANDS` without importing any of them."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands()
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: TyperGroup's own reads every command

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        commands = self.commands
        assert isinstance(commands, _LazyCommands)
        if self._listing and cmd_name in COMMANDS and not commands.loaded(cmd_name):
            return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name][1])
        return commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="boe",
    cls=_LazyGroup,
    help="Best-of-Evidence: pick one of K sampled answers by buying evidence on the claims they share.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    epilog="Exit codes: 0 done; 1 the work ran but some of it failed (or an internal error); "
    "2 usage or configuration error; 130 interrupted; 143 terminated (SIGTERM; boe batch stops as on Ctrl-C).",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"boe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Log more on standard error: -v retries and fallbacks, -vv debug."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only results (stdout) and errors: no progress, no notes."),
) -> None:
    """Best-of-Evidence."""
    from boe.cli.common import set_quiet
    from boe.errors import ConfigError
    from boe.logs import configure_cli

    if verbose and quiet:
        raise ConfigError("-v and -q contradict each other; give one")
    configure_cli(verbose, quiet)
    set_quiet(quiet)


EXIT_CODES = (
    (0, "done"),
    (1, "the work ran but some of it failed, or an internal error (its traceback is in a log file)"),
    (2, "usage or configuration error (unknown option, missing argument, bad value, unreadable input)"),
    (130, "interrupted (Ctrl-C)"),
    (143, "terminated (SIGTERM): boe batch stops as on Ctrl-C, giving its questions back"),
)


def main() -> None:
    """Console entry point: no traceback for a user's mistake; exit codes as in `EXIT_CODES`."""
    # numpy is not imported yet: its OpenBLAS would start a thread per core, which between the many small
    # products of a fit or a replay spin-wait, burning CPU (about a third of a `bayes` fit's) for no speed-up
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(run(sys.argv[1:]))


def run(argv: list[str]) -> int:
    """Run the CLI on ``argv`` and return the exit code (0 done, 1 failed, 2 usage, 130 interrupted, 143 terminated)."""
    try:
        rv = app(args=argv, prog_name="boe", standalone_mode=False)  # click returns typer.Exit's code here
        code = rv if isinstance(rv, int) else 0
        if code == 130:  # typer turns KeyboardInterrupt into Exit(130)
            _error("interrupted")
        return code
    except Interrupted as exc:
        return exc.code
    except BoeError as exc:
        _error(str(exc))
        return error_exit_code(exc)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        # typer bundles its own click (typer._click): usage errors are recognised by their shape, never by import
        show = getattr(exc, "show", None)
        usage_code = getattr(exc, "exit_code", None)
        if callable(show) and isinstance(usage_code, int):
            show()
            if getattr(exc, "ctx", False) is None:  # raised before a command context existed: no usage line shown
                sys.stderr.write(f"Try '{_command_line(argv)} --help' for help.\n")
            return usage_code
        if isinstance(exc, OSError) and exc.errno in _DISK_FULL:  # the disk's state, not a bug: no crash log
            what = f" writing {exc.filename}" if exc.filename else ""
            _error(f"{exc.strerror or 'no space left on device'}{what}: free some space and run the command again")
            return 1
        log = _crash_log(exc)
        where = f"; the traceback is in {log}" if log else ""
        _error(f"internal error ({type(exc).__name__}: {_one_line(str(exc))}){where}")
        return 1


def error_exit_code(exc: BoeError) -> int:
    """2 for a usage or configuration error the user can fix before any work starts, else 1."""
    return int(getattr(exc, "exit_code", 1))


def _error(message: str) -> None:
    from rich.markup import escape

    from boe.cli.common import alert_console

    # escaped: messages hold brackets ("pip install 'best-of-evidence[sam]'") that rich would eat as markup
    alert_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _command_line(argv: list[str]) -> str:
    words = ["boe"]
    for word in argv:
        if word.startswith("-"):
            break
        words.append(word)
        if len(words) == 3:
            break
    return " ".join(words[:2]) if len(words) > 1 and words[1] != "sim" else " ".join(words)


def _one_line(text: str, n: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


_DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # no space left, quota exceeded, file-size limit


def _crash_log(exc: BaseException) -> str | None:
    """Write the traceback to a log file (user cache dir, else the temp dir); its path, or None."""
    import os
    import tempfile
    import time
    import traceback

    text = redact_text("".join(traceback.format_exception(exc)))
    header = redact_text(f"boe {__version__} {time.strftime('%Y-%m-%dT%H:%M:%S')} argv={sys.argv!r}\n")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (os.path.join(cache, "boe", "logs"), os.path.join(tempfile.gettempdir(), "boe-logs")):
        try:
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, name)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(header + text)
            return path
        except OSError:
            continue
    return None
