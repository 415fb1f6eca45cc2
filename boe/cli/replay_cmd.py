"""`boe replay`: evaluate policies and budgets offline on stored ledgers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from boe.cli.common import (
    alert_console,
    err_console,
    out_console,
    parse_budgets,
    parse_list,
    print_json,
    progress_bar,
    registered,
)
from boe.core.policies import POLICIES

if TYPE_CHECKING:
    from boe.core.experiment import Experiment

__all__ = ["register"]


def _fmt_num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def _fmt_budget(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def replay_command(
    ledgers: list[Path] = typer.Argument(None, help="Ledger-v1 JSONL files.", show_default=False),
    policy: str = typer.Option(
        "bayes",
        "--policy",
        help=f"Comma-separated: {registered(POLICIES)}, or a plugin's.",
    ),
    budget: str = typer.Option("16", "--budget", help="Comma-separated budgets."),
    calibration: Optional[str] = typer.Option(
        None,
        "--calibration",
        help="crossfit[:K] (K-fold by question, held out; the default: crossfit:5, or run for an online agent run), "
        "fit (same ledger, in-sample: the paper's protocol), run (the run's own, with --db), or a FILE.json.",
        show_default=False,
    ),
    cheap_kappa: Optional[float] = typer.Option(
        None, "--cheap-kappa", help="kappa of the cheap prior.", show_default="0.55, or the calibration file's"
    ),
    eta: float = typer.Option(
        0.0, "--eta", help="Stop when the best value per cost is <= eta (an adaptive pool: see its --pool help)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of random-factor, cross-fit folds and the bootstrap."),
    transcripts_out: Optional[Path] = typer.Option(
        None, "--transcripts", help="Write one transcript line per question x policy x budget."
    ),
    save_calibration: Optional[Path] = typer.Option(
        None,
        "--save-calibration",
        help="Write the deployable calibration: the file replayed under, or the fit on every question.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as one JSON document on stdout."),
    compare: Optional[list[str]] = typer.Option(
        None, "--compare", help="A:B - paired 95% interval and McNemar p of policy A vs B (repeatable)."
    ),
    strict: bool = typer.Option(False, "--strict", help="A bad record is fatal."),
    resamples: int = typer.Option(2000, "--resamples", min=0, help="Bootstrap resamples for --compare."),
    db: Optional[str] = typer.Option(
        None, "--db", help="Replay a stored run instead of files (sqlite:///file.db, postgresql+psycopg://...)."
    ),
    run: Optional[str] = typer.Option(
        None, "--run", help="Run name in --db (may be left out when the store holds one run)."
    ),
    pool: str = typer.Option(
        "fixed",
        "--pool",
        help="fixed (every candidate), fixed:K (the first K), adaptive (sample and verify under one budget: draw "
        "candidates in ledger order or buy checks, whichever is worth more per unit cost; with --eta, stop when "
        "neither is worth more than eta, a check counting while the pick could be wrong with more than eta per "
        "unit of its cost) or greedy (draw a round whenever the policy stops).",
    ),
    pool_start: int = typer.Option(4, "--pool-start", min=1, help="Adaptive pool: candidates drawn first."),
    pool_round: int = typer.Option(2, "--pool-round", min=1, help="Adaptive pool: candidates drawn per round."),
    sample_cost: Optional[float] = typer.Option(
        None,
        "--sample-cost",
        help="Cost of one sample in the budget's units, for every candidate whatever its record says (to price "
        "samples against checks: a higher cost draws fewer and checks more).",
        show_default="the record's own, 0.25 for records that carry none (formats before 1.3)",
    ),
) -> None:
    """Replay ledgers under policies and budgets and report accuracy, rescues, costs and Sharp."""
    from boe.api import load_questions, replay
    from boe.cli.common import check_outputs
    from boe.errors import RecordError

    check_outputs(("--transcripts", transcripts_out), ("--save-calibration", save_calibration))
    policies, budgets, pairs = _checked_options(
        policy, budget, compare, cheap_kappa, eta, pool, pool_start, pool_round, sample_cost, db, ledgers
    )
    console = err_console()

    def on_error(err: RecordError) -> None:
        console.print(f"[yellow]skipped[/] {err.describe()}", highlight=False)

    show = console.is_terminal and not as_json
    with progress_bar(console, show) as prog:
        prog.add_task("loading", total=None)
        loaded = load_questions(ledgers or [], db=db, run=run, strict=strict, on_error=on_error)
        if not loaded.questions:
            alert_console().print("[bold red]error:[/] nothing could be replayed (no valid record)")
            raise typer.Exit(1)
        t_rep = prog.add_task("replaying", total=len(loaded.questions))
        result = replay(
            loaded,
            policies=policies,
            budgets=budgets,
            calibration=calibration,
            cheap_kappa=cheap_kappa,
            eta=eta,
            seed=seed,
            compare=pairs,
            resamples=resamples,
            progress=lambda n: prog.advance(t_rep, n),
            pool=pool,
            pool_start=pool_start,
            pool_round=pool_round,
            sample_cost=sample_cost,
        )

    if transcripts_out is not None:
        result.write_transcripts(transcripts_out)
    if save_calibration is not None:
        result.save_calibration(save_calibration)
    if as_json:
        print_json("replay", result.to_json())
    else:
        _print_tables(result.experiment, loaded.bad, result.calibration.label)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


#: Column legend of the terminal tables (they fit 80 columns; `--json` has every figure with its full name).
LEGEND = (
    "B budget; acc accuracy; rescue share of raw-majority failures fixed; corr/harm questions the policy made "
    "right/wrong vs raw; ΔAcc accuracy minus raw (percentage points); cost mean spent; Sharp mean drop in the "
    "candidates' binary score entropy (the paper's score proxy; > 0: evidence sharpened the scores); with "
    "--pool, samples (candidates drawn per question) and total (mean cost of samples and checks) replace Sharp"
)


def _checked_options(
    policy: str,
    budget: str,
    compare: list[str] | None,
    cheap_kappa: float | None,
    eta: float,
    pool: str,
    pool_start: int,
    pool_round: int,
    sample_cost: float | None,
    db: str | None,
    ledgers: list[Path] | None,
) -> tuple[list[str], list[float], list[tuple[str, str]]]:
    """The replay's policies, budgets and --compare pairs; a bad option is a `ConfigError` naming it."""
    from boe.core.policies import POLICIES, _load_plugins
    from boe.core.pool import parse_pool
    from boe.errors import ConfigError

    _load_plugins()
    policies = parse_list(policy)
    if not policies:
        raise ConfigError("--policy: give at least one policy")
    for p in policies:
        if p not in POLICIES:
            raise ConfigError(f"--policy: unknown policy {p!r}; known: {', '.join(sorted(POLICIES))}")
    budgets = parse_budgets(budget)
    if sample_cost is not None and not 0 <= sample_cost < float("inf"):
        raise ConfigError(f"--sample-cost must be a finite number >= 0, got {sample_cost}")
    spec = parse_pool(pool, start=pool_start, step=pool_round, sample_cost=0.0 if sample_cost is None else sample_cost)
    if not (-float("inf") < eta < float("inf")) or (spec.mode == "adaptive" and eta < 0):
        at_least = " >= 0 with --pool adaptive" if spec.mode == "adaptive" else ""
        raise ConfigError(f"--eta must be a finite number{at_least}, got {eta}")
    pairs = []
    for c in compare or []:
        a, sep, b = c.partition(":")
        if not sep or not a or not b:
            raise ConfigError(f"--compare expects A:B, got {c!r}")
        pairs.append((a, b))
    if cheap_kappa is not None and not 0 < cheap_kappa < 1:
        raise ConfigError(f"--cheap-kappa must lie in (0, 1), got {cheap_kappa}")
    if db is None and not ledgers:
        raise ConfigError("give at least one ledger file (or --db URL --run NAME)")
    if db is not None and ledgers:
        raise ConfigError("give ledger files or --db/--run, not both")
    return policies, budgets, pairs


def _print_tables(exp: Experiment, bad: list[str], calibration_label: str) -> None:
    from rich import box
    from rich.table import Table

    out = out_console()
    out.print(
        f"[bold]calibration:[/] {calibration_label}\n[bold]{len(exp.questions)}[/] questions"
        + (f"; {len(bad)} bad record(s) skipped" if bad else ""),
        highlight=False,
    )
    by_ds: dict[str, list[Any]] = {}
    for row in exp.rows:
        by_ds.setdefault(row.dataset, []).append(row)
    for ds, rows in by_ds.items():
        t = Table(
            title=f"{ds}: N={rows[0].n}, Oracle@K={rows[0].oracle_at_k:.3f}, MajorityWrong={rows[0].majority_wrong}",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            title_justify="left",
        )
        drawn = exp.settings.get("pool", "fixed") != "fixed"
        cols = ("policy", "B", "acc", "rescue", "corr", "harm", "ΔAcc pp", "cost")
        for col in (*cols, "samples", "total") if drawn else (*cols, "Sharp"):
            t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for r in rows:
            cells = [
                r.policy,
                _fmt_budget(r.budget),
                _fmt_num(r.accuracy),
                _fmt_num(r.rescue_rate),
                str(r.corrections),
                str(r.harms),
                f"{100 * r.delta_acc:+.2f}",
                _fmt_num(r.mean_cost, 2),
            ]
            t.add_row(*cells, *((f"{r.samples:.2f}", _fmt_num(r.total_cost, 2)) if drawn else (f"{r.sharp:+.3f}",)))
        out.print(t)
    out.print(f"[dim]{LEGEND}[/]", highlight=False)
    if exp.comparisons:
        t = Table(
            title=f"paired comparisons (bootstrap {exp.settings['resamples']}, seed {exp.settings['seed']}; "
            "exact McNemar)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            title_justify="left",
        )
        for col in ("A vs B", "B", "N", "A - B pp", "95% interval", "A/B only", "p"):
            t.add_column(col, justify="left" if col == "A vs B" else "right", no_wrap=True)
        for c in exp.comparisons:
            t.add_row(
                f"{c.a}:{c.b}" + ("" if len(by_ds) == 1 else f" {c.dataset}"),
                _fmt_budget(c.budget),
                str(c.n),
                f"{100 * c.diff:+.2f}",
                f"[{100 * c.ci95[0]:+.1f}, {100 * c.ci95[1]:+.1f}]",
                f"{c.a_only_correct}/{c.b_only_correct}",
                f"{c.mcnemar_p:.3g}",
            )
        out.print(t)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)
