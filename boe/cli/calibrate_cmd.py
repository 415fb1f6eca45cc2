"""`boe calibrate`: fit a deployable calibration on labelled full-ledger runs or ledger files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from boe.cli.common import err_console, out_console, print_json

__all__ = ["register"]


def calibrate_command(
    ledgers: list[Path] = typer.Argument(None, help="Ledger-v1 JSONL files (full ledgers).", show_default=False),
    db: Optional[str] = typer.Option(None, "--db", help="Store URL or path holding the runs."),
    run: Optional[list[str]] = typer.Option(None, "--run", help="A labelled full-ledger run in --db (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", help="The calibration file to write."),
    cheap_kappa: Optional[float] = typer.Option(None, "--cheap-kappa", help="kappa of the cheap prior [0.55]."),
    prior: bool = typer.Option(
        False, "--prior", help="Write the hand-set prior calibration (not fitted on data) instead."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was fitted as JSON."),
) -> None:
    """Fit kappa and p per group (and the bayes model) on labelled runs: the file `boe ask --calibration` takes."""
    from boe.core.calibration import describe_calibration, prior_calibration, save_calibration
    from boe.errors import ConfigError

    if out is None:
        raise ConfigError("--out FILE: where to write the calibration")
    from boe.cli.common import check_outputs

    check_outputs(("--out", out))
    if cheap_kappa is not None and not 0 < cheap_kappa < 1:
        raise ConfigError(f"--cheap-kappa must lie in (0, 1), got {cheap_kappa}")
    if prior:
        if ledgers or db or run:
            raise ConfigError("--prior fits nothing: give no runs or ledgers with it")
        from boe.kinds import prior_channels

        cal = prior_calibration(prior_channels())
        save_calibration(cal, out)
        _print(cal, out, [], as_json)
        return
    from boe.api import fit_calibration, load_questions

    if not ledgers and not run:
        raise ConfigError("give labelled full-ledger runs (--db DB --run NAME) or ledger files to fit on")
    loaded = load_questions(ledgers or [], db=db, run=run or None)
    command = "boe calibrate " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else None
    cal = fit_calibration(loaded, cheap_kappa=cheap_kappa, command=command)
    save_calibration(cal, out)
    cal.source = str(out)
    questions = loaded.questions
    labelled = sum(1 for q in questions if q.labelled)
    warnings = []
    if labelled < len(questions):
        warnings.append(f"{len(questions) - labelled} question(s) without a reference add nothing to kappa")
    if labelled < 100:
        warnings.append(
            f"only {labelled} labelled question(s): kappa of rare groups rests on few pairs (see 'pairs' in the file)"
        )
    _print(cal, out, warnings, as_json)
    err_console().print(f"wrote {describe_calibration(cal)}", highlight=False, soft_wrap=True)


def _print(cal: Any, out: Path, warnings: list[str], as_json: bool) -> None:
    from rich import box
    from rich.table import Table

    if as_json:
        data = cal.model_dump(mode="json", exclude_none=True, exclude={"source"})
        data["file"] = str(out)
        data["warnings"] = warnings
        print_json("calibrate", data)
        return
    con = out_console()
    t = Table(title=f"calibration {out}", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for col in ("group", "κ", "p conf/rej/unres", "pairs +/-"):
        t.add_column(col, justify="left" if col == "group" else "right")
    rows = [(key, g, g.pairs) for key, g in sorted(cal.groups.items())]
    rows += [(f"(default) {key}", g, None) for key, g in sorted(cal.defaults.items())]
    for key, g, pairs in rows:
        t.add_row(
            key,
            f"{g.kappa:.3f}",
            f"{g.p['confirm']:.2f}/{g.p['reject']:.2f}/{g.p['unresolved']:.2f}",
            "-" if pairs is None else f"{pairs.get('support', 0):.0f}/{pairs.get('contradict', 0):.0f}",
        )
    con.print(t)
    con.print(
        "[dim]κ > 0.5: a confirmation raises the candidates making the claim; κ < 0.5: the channel is wrong more "
        "often than right and a confirmation lowers them; κ = 0.5: no weight.[/]",
        highlight=False,
    )
    for w in warnings:
        err_console().print(f"[yellow]warning:[/] {w}", highlight=False)
    datasets = sorted(cal.datasets()) or ["DATASET"]
    con.print(
        f"use it: boe ask IMAGE QUESTION --dataset {datasets[0]} --calibration {out}\n"
        f"    or: boe batch DATA --ledger online --calibration {out} --db DB --run NAME",
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
