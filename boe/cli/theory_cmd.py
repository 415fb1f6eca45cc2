"""`boe theory ...`: the paper's finite theory as tables and figures, exact values next to policy replays."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from boe.cli.common import out_console, parse_budgets, parse_list, print_json

if TYPE_CHECKING:
    from boe.core.theory import MonteCarlo

__all__ = ["register", "theory_app"]

theory_app = typer.Typer(
    help="The paper's theory, checked: exact curves and Monte-Carlo replays of the policies on generated ledgers.",
    no_args_is_help=True,
)

_POLICY_HELP = "Comma-separated policies to replay (any registered policy)."


def _check_policies(policies: list[str]) -> None:
    from boe.core.policies import POLICIES, _load_plugins
    from boe.errors import ConfigError

    _load_plugins()
    for p in policies:
        if p not in POLICIES:
            raise ConfigError(f"--policy: unknown policy {p!r}; known: {', '.join(sorted(POLICIES))}")


def _cell(mc: MonteCarlo) -> str:
    return f"{mc.success:.3f} ± {mc.se:.3f}"


def _table(title: str, caption: str | None = None) -> Any:
    """A compact terminal table (no vertical rules), titled on the left."""
    from rich import box
    from rich.table import Table

    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        from boe.errors import MissingExtraError

        raise MissingExtraError("agent", "matplotlib", "--png") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@theory_app.command("factor-code")
def factor_code_command(
    m: int = typer.Option(6, "--m", min=1, max=12, help="Binary factors; K = 2^m candidates."),
    n: int = typer.Option(2000, "--n", min=1, help="Replayed questions."),
    train: int = typer.Option(1000, "--train", min=1, help="Questions of the separate calibration ledger."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replayed ledger (the calibration ledger uses seed + 1)."),
    factor_cost: float = typer.Option(4, "--factor-cost", min=0.001),
    whole_cost: float = typer.Option(8, "--whole-cost", min=0.001),
    budget: str = typer.Option("0,4,8,12,16,20,24,48,96,192,384,480,504", "--budget", help="Comma-separated budgets."),
    policy: str = typer.Option("bayes,boe,whole", "--policy", help=_POLICY_HELP),
    png: Path | None = typer.Option(None, "--png", help="Draw exact curves and replays to this PNG."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> None:
    """Factor-code separation: log2 K factor checks identify the answer; q candidate checks give (q + 1) / K."""
    from boe.cli.common import check_outputs
    from boe.core.theory import (
        candidate_queries_needed,
        candidate_success,
        factor_success,
        fit_calibration,
        replay_success,
    )
    from boe.sim.ledgers import factor_code_ledger

    check_outputs(("--png", png))
    policies = parse_list(policy)
    _check_policies(policies)
    budgets = parse_budgets(budget)
    k = 2**m

    def ledger(count: int, s: int) -> Any:
        return factor_code_ledger(count, m=m, seed=s, factor_cost=factor_cost, whole_cost=whole_cost)

    cal = fit_calibration(ledger(train, seed + 1), policies)
    mc = replay_success(cal, ledger(n, seed), policies, budgets)
    by = {(r.policy, r.budget): r for r in mc}
    rows: list[dict[str, Any]] = []
    for b in budgets:
        qf, qc = int(b // factor_cost), int(b // whole_cost)
        rows.append(
            {
                "budget": b,
                "factor_checks": qf,
                "exact_factor": factor_success(qf, k),
                "candidate_checks": qc,
                "exact_candidate": candidate_success(qc, k),
                "replays": {p: by[p, float(b)].as_dict() for p in policies},
            }
        )
    summary = {
        "model": "factor-code",
        "m": m,
        "k": k,
        "n": n,
        "train": train,
        "seed": seed,
        "factor_cost": factor_cost,
        "whole_cost": whole_cost,
        "factor_checks_to_identify": m,
        "candidate_checks_for_95pct": candidate_queries_needed(0.05, k),
        "rows": rows,
    }
    if as_json:
        print_json("theory.factor-code", summary)
    else:
        # two tables, not one: the exact columns beside the replays would not fit 80 columns
        exact = _table(f"factor-code model: M={m}, K={k}: exact curves")
        for col in ("budget", "q factor", "exact factor", "q cand.", "exact cand."):
            exact.add_column(col, justify="right")
        t = _table(
            f"replays of {n} questions, calibration fitted on {train} others",
            "success ± binomial SE; checks bought per question (mean)",
        )  # one row per policy: a column pair per policy would not fit 80 columns
        for col in ("budget", "policy", "success", "factor checks", "cand. checks"):
            t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for row in rows:
            exact.add_row(
                f"{row['budget']:g}",
                str(row["factor_checks"]),
                f"{row['exact_factor']:.4f}",
                str(row["candidate_checks"]),
                f"{row['exact_candidate']:.4f}",
            )
            for i, p in enumerate(policies):
                r = by[p, float(row["budget"])]
                t.add_row(
                    f"{row['budget']:g}" if i == 0 else "",
                    p,
                    _cell(r),
                    f"{r.factor_checks:.1f}",
                    f"{r.checks - r.factor_checks:.1f}",
                    end_section=i == len(policies) - 1,
                )
        out = out_console()
        out.print(exact)
        out.print(t)
        out.print(
            f"exact factor checks identify the answer after log2 K = {m}; candidate checks need "
            f"ceil(0.95 K) - 1 = {candidate_queries_needed(0.05, k)} for 95% success"
        )
    if png is not None:
        _draw_factor_code(png, k, factor_cost, whole_cost, budgets, policies, by)
        if not as_json:
            out_console().print(f"figure written to {png}")


def _draw_factor_code(
    path: Path,
    k: int,
    factor_cost: float,
    whole_cost: float,
    budgets: list[float],
    policies: list[str],
    by: dict[tuple[str, float], MonteCarlo],
) -> None:
    import numpy as np

    from boe.core.theory import candidate_success, factor_success

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    grid = np.linspace(0, max(budgets), 2000)
    ax.plot(
        grid,
        [factor_success(int(c // factor_cost), k) for c in grid],
        color="tab:blue",
        lw=2,
        label=f"exact: factor checks, min(2^q/K, 1), cost {factor_cost:g}",
    )
    ax.plot(
        grid,
        [candidate_success(int(c // whole_cost), k) for c in grid],
        color="tab:orange",
        lw=2,
        label=f"exact: candidate checks, min((q+1)/K, 1), cost {whole_cost:g}",
    )
    markers = "osD^v<>"
    for i, p in enumerate(policies):
        xs = np.array(budgets) * (1 + 0.04 * (i - (len(policies) - 1) / 2))  # side by side where they coincide
        ys = np.array([by[p, float(b)].success for b in budgets])
        es = np.array([2 * by[p, float(b)].se for b in budgets])
        ax.errorbar(xs, ys, yerr=es, fmt=markers[i % len(markers)], ms=5, capsize=2, label=f"replay: {p} (±2 SE)")
    ax.axhline(0.95, color="grey", lw=0.8, ls=":")
    ax.set_xscale("symlog", linthresh=32)
    ax.set_xlabel("budget C")
    ax.set_ylabel("P(selected candidate is correct)")
    ax.set_title(f"Factor-code model, K = {k}")
    ax.set_ylim(-0.02, 1.05)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


@theory_app.command("noisy")
def noisy_command(
    m: int = typer.Option(4, "--m", min=1, max=12, help="Binary factors; K = 2^m candidates."),
    rho: str = typer.Option("0.5,0.6,0.75,0.9,1.0", "--rho", help="Comma-separated channel accuracies in [0.5, 1]."),
    n: int = typer.Option(2000, "--n", min=1, help="Replayed questions per rho."),
    train: int = typer.Option(1000, "--train", min=1, help="Questions of the separate calibration ledger per rho."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replayed ledgers (calibration ledgers use seed + 1)."),
    factor_cost: float = typer.Option(4, "--factor-cost", min=0.001),
    policy: str = typer.Option("bayes,boe", "--policy", help=_POLICY_HELP),
    png: Path | None = typer.Option(None, "--png", help="Draw exact curves and replays to this PNG."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> None:
    """Noisy factor model: gain rho^M - 1/K of M binary-symmetric checks against the ceiling sqrt(Lambda / 2)."""
    from boe.cli.common import check_outputs
    from boe.core.theory import (
        bsc_information_bits,
        bsc_information_nats,
        fit_calibration,
        information_ceiling,
        mode_gain,
        mode_success,
        replay_success,
    )
    from boe.errors import ConfigError
    from boe.sim.ledgers import factor_code_ledger

    check_outputs(("--png", png))
    policies = parse_list(policy)
    _check_policies(policies)
    try:
        rhos = [float(x) for x in parse_list(rho)]
    except ValueError:
        raise ConfigError(f"--rho expects numbers, got {rho!r}") from None
    if not rhos or any(not 0.5 <= r <= 1.0 for r in rhos):
        raise ConfigError("--rho: accuracies must lie in [0.5, 1]")
    k = 2**m
    budget = m * factor_cost
    rows: list[dict[str, Any]] = []
    for r in rhos:

        def ledger(count: int, s: int, r: float = r) -> Any:
            return factor_code_ledger(count, m=m, seed=s, rho=r, factor_cost=factor_cost, with_whole=False)

        cal = fit_calibration(ledger(train, seed + 1), policies)
        mc = {x.policy: x for x in replay_success(cal, ledger(n, seed), policies, [budget])}
        info = bsc_information_nats(r, m)
        rows.append(
            {
                "rho": r,
                "exact_success": mode_success(r, m),
                "exact_gain": mode_gain(r, m),
                "information_bits": bsc_information_bits(r, m),
                "information_nats": info,
                "ceiling": information_ceiling(info),
                "replays": {p: {**mc[p].as_dict(), "gain": mc[p].success - 1 / k} for p in policies},
            }
        )
    summary = {
        "model": "noisy-factor",
        "m": m,
        "k": k,
        "budget": budget,
        "n": n,
        "train": train,
        "seed": seed,
        "rows": rows,
    }
    if as_json:
        print_json("theory.noisy", summary)
    else:
        exact = _table(f"noisy factor model: M={m}, K={k}, budget {budget:g} ({m} checks): exact")
        for col in ("rho", "exact rho^M", "gain rho^M-1/K", "I (bits)", "Lambda (nats)", "ceiling sqrt(L/2)"):
            exact.add_column(col, justify="right")
        t = _table(f"replays: {n} questions per rho", "success ± binomial SE; gain: success - 1/K")
        for col in ("rho", "policy", "success", "gain"):
            t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
        for row in rows:
            exact.add_row(
                f"{row['rho']:g}",
                f"{row['exact_success']:.4f}",
                f"{row['exact_gain']:.4f}",
                f"{row['information_bits']:.3f}",
                f"{row['information_nats']:.3f}",
                f"{row['ceiling']:.4f}",
            )
            for i, p in enumerate(policies):
                rep = row["replays"][p]
                t.add_row(
                    f"{row['rho']:g}" if i == 0 else "",
                    p,
                    f"{rep['success']:.4f} ± {rep['se']:.4f}",
                    f"{rep['gain']:+.4f}",
                    end_section=i == len(policies) - 1,
                )
        out_console().print(exact)
        out_console().print(t)
    if png is not None:
        _draw_noisy(png, m, policies, rows)
        if not as_json:
            out_console().print(f"figure written to {png}")


def _draw_noisy(path: Path, m: int, policies: list[str], rows: list[dict[str, Any]]) -> None:
    import numpy as np

    from boe.core.theory import bsc_information_nats, information_ceiling, mode_gain

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    grid = np.linspace(0.5, 1.0, 400)
    ax.plot(grid, [mode_gain(r, m) for r in grid], color="tab:blue", lw=2, label=f"exact gain rho^{m} - 1/{2**m}")
    ax.plot(
        grid,
        [information_ceiling(bsc_information_nats(r, m)) for r in grid],
        color="tab:red",
        lw=2,
        ls="--",
        label="ceiling sqrt(Lambda/2), Lambda = ln2 M[1 - H_b(rho)]",
    )
    markers = "osD^v<>"
    for i, p in enumerate(policies):
        xs = np.array([row["rho"] for row in rows]) + 0.006 * (i - (len(policies) - 1) / 2)
        ys = np.array([row["replays"][p]["gain"] for row in rows])
        es = np.array([2 * row["replays"][p]["se"] for row in rows])
        ax.errorbar(xs, ys, yerr=es, fmt=markers[i % len(markers)], ms=5, capsize=2, label=f"replay: {p} (±2 SE)")
    ax.set_xlabel("channel accuracy rho")
    ax.set_ylabel("gain over the uniform prior")
    ax.set_title(f"Noisy factor model, M = {m}, K = {2**m}")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    app.add_typer(theory_app, name="theory")
