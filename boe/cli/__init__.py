"""The `boe` command line. Subcommands live in their own modules and import heavy
libraries only inside the command that needs them, so `boe --help` stays fast."""

from __future__ import annotations

import importlib
import sys

import typer

from boe import __version__
from boe.errors import BoeError

__all__ = ["app", "main"]

app = typer.Typer(
    name="boe",
    help="Best-of-Evidence: pick one of K sampled answers by buying evidence on the claims they share.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each module defines `register(app)`.
COMMAND_MODULES = (
    "boe.cli.replay_cmd",
    "boe.cli.sim_cmd",
    "boe.cli.theory_cmd",
    "boe.cli.store_cmd",
    "boe.cli.agent_cmd",
    "boe.cli.report_cmd",
    "boe.cli.batch_cmd",
    "boe.cli.calibrate_cmd",
)

for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"boe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Best-of-Evidence."""


def main() -> None:
    """Console entry point: user errors are printed without a traceback."""
    try:
        rv = app(standalone_mode=False)  # click returns the exit code of typer.Exit here
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except BoeError as exc:
        from rich.markup import escape

        from boe.cli.common import err_console

        # escaped: messages hold brackets ("pip install 'best-of-evidence[sam]'") that rich would eat as markup
        err_console().print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
