"""`boe import` and `boe export`: ledger JSONL in and out of the store."""

from __future__ import annotations

from pathlib import Path

import typer

from boe.cli.common import alert_console, err_console, out_console, print_json

__all__ = ["register"]

_DB_HELP = "Store URL: sqlite:///file.db (or a path) or postgresql+psycopg://user@host/db."


def import_command(
    ledgers: list[Path] = typer.Argument(..., help="Ledger-v1 JSONL files.", show_default=False),
    db: str = typer.Option(..., "--db", help=_DB_HELP),
    run: str = typer.Option(..., "--run", help="Run to import into (created if needed)."),
    replace: bool = typer.Option(
        False, "--replace", help="Replace questions the run already holds (default: keep them)."
    ),
    parallel: bool | None = typer.Option(
        None,
        "--parallel/--no-parallel",
        help="Parse in a helper process (default: when the input exceeds 16 MB).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Store the questions of ledger files in a run; bad records are reported by line and skipped."""
    from rich.markup import escape
    from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from boe.cli.common import check_store
    from boe.db import Store, import_ledger
    from boe.errors import RecordError

    check_store("--db", db)
    console = err_console()

    def on_error(err: RecordError) -> None:
        console.print(f"[yellow]skipped[/] {escape(err.describe())}", highlight=False, soft_wrap=True)

    with (
        Store(db) as store,
        Progress(
            SpinnerColumn(),
            TextColumn("importing"),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        ) as prog,
    ):
        task = prog.add_task("import", total=None)
        report = import_ledger(
            store,
            ledgers,
            run,
            on_error=on_error,
            replace=replace,
            parallel=parallel,
            progress=lambda n: prog.advance(task, n),
        )
        total = store.count_questions(run)
    if as_json:
        counts = {"run": run, "stored": report.stored, "already_there": report.skipped, "bad": report.bad}
        print_json("import", {**counts, "run_holds": total, "seconds": report.seconds}, indent=None)
    (console if as_json else out_console()).print(
        f"run {run!r}: stored {report.stored} question(s), {report.skipped} already there, "
        f"{report.bad} bad record(s); the run holds {total} "
        f"({report.seconds:.1f} s, writer {report.cpu_seconds:.1f} s CPU)",
        highlight=False,
        soft_wrap=True,
    )
    if report.bad and not report.stored and not report.skipped:
        alert_console().print(f"[bold red]error:[/] no question could be stored: all {report.bad} record(s) were bad")
        raise typer.Exit(1)


def export_command(
    db: str = typer.Option(..., "--db", help=_DB_HELP),
    run: str = typer.Option(..., "--run", help="Run to export."),
    out: str = typer.Option(..., "--out", help="Ledger JSONL to write ('-' for standard output)."),
) -> None:
    """Write a stored run as a ledger-v1 JSONL file, one question per line in the order they were stored."""
    import sys

    from boe.cli.common import check_outputs
    from boe.db import Store, export_ledger

    check_outputs(("--out", out))
    with Store(db, create=False) as store:
        store.get_run(run)  # a clear error before any file is written
        n = export_ledger(store, run, sys.stdout if out == "-" else Path(out))
    (err_console() if out == "-" else out_console()).print(  # "-": standard output holds the ledger
        f"exported {n} question(s) of run {run!r}" + ("" if out == "-" else f" to {out}"),
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
    app.command("export")(export_command)
