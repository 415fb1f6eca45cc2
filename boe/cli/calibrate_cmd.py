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
    run: Optional[list[str]] = typer.Option(
        None,
        "--run",
        help="A labelled full-ledger run in --db (repeatable; may be left out when the store holds one run).",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="The calibration file to write."),
    cheap_kappa: Optional[float] = typer.Option(
        None, "--cheap-kappa", help="kappa of the cheap prior.", show_default="0.55"
    ),
    prior: bool = typer.Option(
        False, "--prior", help="Write the hand-set prior calibration (not fitted on data) instead."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was fitted as JSON."),
    curve: bool = typer.Option(
        False,
        "--curve",
        help="Also print the learning curve: bayes accuracy on held-out questions after calibrating on 25, 50, "
        "100, 200 and all labelled questions (repeated random subsets), and with the prior alone.",
    ),
    curve_repeats: int = typer.Option(3, "--curve-repeats", min=1, max=50, help="Random subsets per size."),
) -> None:
    """Fit kappa and p per group (and the bayes model) on labelled runs: the file `boe ask --calibration` takes."""
    from boe.core.calibration import describe_calibration, save_calibration
    from boe.core.prior import prior_calibration
    from boe.errors import ConfigError
    from boe.kinds import prior_channels

    if out is None:
        raise ConfigError("missing option --out FILE: where to write the calibration")
    from boe.cli.common import check_outputs

    check_outputs(("--out", out))
    if cheap_kappa is not None and not 0 < cheap_kappa < 1:
        raise ConfigError(f"--cheap-kappa must lie in (0, 1), got {cheap_kappa}")
    if prior:
        if ledgers or db or run:
            raise ConfigError("--prior fits nothing: give no runs or ledgers with it")
        cal = prior_calibration(prior_channels())
        save_calibration(cal, out)
        _print(cal, out, [], as_json)
        return
    from boe.api import fit_calibration, load_questions

    if not ledgers and not run and db is None:
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
    report = None
    if curve:
        from boe.core.curve import learning_curve

        report = learning_curve(
            questions, loaded.groups.keys, prior_calibration(prior_channels()), repeats=curve_repeats
        )
    _print(cal, out, warnings, as_json, report)
    err_console().print(f"wrote {describe_calibration(cal)}", highlight=False, soft_wrap=True)


def _print(cal: Any, out: Path, warnings: list[str], as_json: bool, curve: Any = None) -> None:
    from rich import box
    from rich.table import Table

    from boe.core.channels import calibration_warnings, kappa_status

    warnings = [*warnings, *calibration_warnings(cal)]
    channels = _bayes_channels(cal)
    if as_json:
        data = cal.model_dump(mode="json", exclude_none=True, exclude={"source"})
        data["file"] = str(out)
        data["warnings"] = warnings
        data["status"] = {
            "kappa": {k: kappa_status(g) for k, g in cal.groups.items()},
            "bayes": {k: {"words": w, "log_odds_ratio": d, "se": e, "checks": n} for k, n, d, e, w in channels},
        }
        if curve is not None:
            data["learning_curve"] = {"budget": curve.budget, "rows": [vars(r) for r in curve.rows]}
        print_json("calibrate", data)
        return
    con = out_console()
    t = Table(title=f"calibration {out}", box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for col in ("group", "κ", "p conf/rej/unres", "pairs +/-", "checks", "status"):
        t.add_column(col, justify="left" if col in ("group", "status") else "right")
    rows = [(key, g, g.pairs) for key, g in sorted(cal.groups.items())]
    rows += [(f"(default) {key}", g, None) for key, g in sorted(cal.defaults.items())]
    for key, g, pairs in rows:
        t.add_row(
            key,
            f"{g.kappa:.3f}",
            f"{g.p['confirm']:.2f}/{g.p['reject']:.2f}/{g.p['unresolved']:.2f}",
            "-" if pairs is None else f"{pairs.get('support', 0):.0f}/{pairs.get('contradict', 0):.0f}",
            "-" if pairs is None else f"{pairs.get('actions', 0):.0f}",
            ", ".join(kappa_status(g)) if pairs is not None else "prior",
        )
    con.print(t)
    con.print(
        "[dim]κ > 0.5: a confirmation raises the candidates making the claim; κ < 0.5: the channel is wrong more "
        "often than right and a confirmation lowers them (boe, the paper's controller, reverses it whatever the "
        "sample size); κ = 0.5: no weight. status: under-sampled (< 30 checks), weak (κ within its 95% interval "
        "of 0.5), reversed (κ < 0.5 with one-sided 95% support), reversal not supported (κ < 0.5 without it).[/]",
        highlight=False,
    )
    if channels:
        b = Table(
            title="bayes channels (the default controller's observation model)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            title_justify="left",
        )
        for col in ("group", "checks", "log odds ratio ± se", "status"):
            b.add_column(col, justify="left" if col in ("group", "status") else "right")
        for key, n, d, e, words in channels:
            b.add_row(key, f"{n:.0f}", f"{d:+.2f} ± {e:.2f}", ", ".join(words) or "ok")
        con.print(b)
        con.print(
            "[dim]log odds ratio: how much more often the channel confirms a true latent (and rejects a false one) "
            "than the other way round; 0 is no information. A verdict that points the wrong way is kept only with "
            "one-sided 95% support (reversed); without it bayes gives that verdict no information.[/]",
            highlight=False,
        )
    if curve is not None:
        _print_curve(curve, con)
    for w in warnings:
        err_console().print(f"[yellow]warning:[/] {w}", highlight=False)
    datasets = sorted(cal.datasets()) or ["DATASET"]
    con.print(
        f"use it: boe ask IMAGE QUESTION --dataset {datasets[0]} --calibration {out}\n"
        f"    or: boe batch DATA --ledger online --calibration {out} --db DB --run NAME",
        highlight=False,
        soft_wrap=True,
    )


def _bayes_channels(cal: Any) -> list[tuple[str, float, float, float, list[str]]]:
    """(group, checks, log odds ratio, its se, status words) of every fitted bayes channel."""
    from boe.core.bayes import BAYES_KEY, model_of
    from boe.core.channels import channel_status

    if BAYES_KEY not in cal.extra:
        return []
    model = model_of(cal)
    out = []
    for key, t in sorted({**model.factor_channels, **model.whole_channels}.items()):
        words, d, e = channel_status(t.given_true, t.given_false, t.counts)
        out.append((key, t.actions, d, e, words))
    return out


def _print_curve(curve: Any, con: Any) -> None:
    from rich import box
    from rich.table import Table

    t = Table(
        title=f"learning curve: bayes on held-out labelled questions (budget 0 and {curve.budget:g})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
    )
    for col in ("labels", "draws", "raw", "budget 0", f"budget {curve.budget:g}", "share of the full gain"):
        t.add_column(col, justify="right")
    for r in curve.rows:
        name = "prior" if r.labels == 0 else "all (crossfit)" if r.labels < 0 else str(r.labels)
        spread = f" ± {r.spread:.3f}" if r.draws > 1 else ""
        t.add_row(
            name,
            str(r.draws),
            f"{r.raw:.3f}",
            f"{r.budget0:.3f}",
            f"{r.accuracy:.3f}{spread}",
            f"{100 * curve.share(r):.0f}%",
        )
    con.print(t)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
