"""Accuracy of `bayes` against the paper's `boe` (and raw, whole) on every pool profile, cross-fitted.

    python benchmarks/bayes_quality.py                    # 3000 questions per profile, seed 2026
    python benchmarks/bayes_quality.py --n 1000 --profiles default,hard --budgets 8,16
    python benchmarks/bayes_quality.py --theory           # also the factor-code and noisy-model checks

For each profile of `boe sim ledger --kind pool` it generates a fresh ledger,
calibrates by 5-fold cross-fitting (each question replayed under plug-in and
`bayes` parameters fitted without its fold), replays the policies at every
budget, and prints accuracy with a binomial SE, mean cost, and the paired
difference bayes - boe with its bootstrap 95% interval and exact McNemar p.

``--theory`` adds the issue's judged checks on generated factor-code ledgers
(calibration fitted on a separate ledger): success of bayes / boe / whole at
budget 24 with M = 6 against (q + 1) / K, and bayes after the four checks of
the noisy model (K = 16) against rho^4.
"""

from __future__ import annotations

import argparse
import math
import time

from rich.console import Console
from rich.table import Table

from boe.core.experiment import load_questions, run_experiment
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.sim.ledgers import POOL_PROFILES, factor_code_ledger, pool_ledger, pool_spec


def pool_tables(args: argparse.Namespace, con: Console) -> None:
    policies = args.policies.split(",")
    budgets = [float(b) for b in args.budgets.split(",")]
    profiles = list(POOL_PROFILES) if args.profiles == "all" else args.profiles.split(",")
    summary = Table(title=f"bayes - boe at every budget ({args.n} questions per profile, seed {args.seed}, crossfit:5)")
    for col in ("profile", "budget", "boe", "bayes", "bayes - boe", "95% CI", "McNemar p"):
        summary.add_column(col, justify="left" if col == "profile" else "right")
    for prof in profiles:
        t0 = time.perf_counter()
        recs = pool_ledger(args.n, seed=args.seed, spec=pool_spec(prof))
        qs, groups = load_questions([parse_record_dict(r) for r in recs], GroupIndex())
        exp = run_experiment(
            qs,
            groups.keys,
            policies,
            budgets,
            calibration="crossfit:5",
            seed=args.seed,
            compare_pairs=[("bayes", "boe")],
            resamples=args.resamples,
        )
        secs = time.perf_counter() - t0
        tab = Table(title=f"{prof}: N={len(qs)}, Oracle@K={exp.rows[0].oracle_at_k:.3f} ({secs:.0f} s)")
        tab.add_column("policy")
        for b in budgets:
            tab.add_column(f"C={b:g}", justify="right")
        by = {(r.policy, r.budget): r for r in exp.rows}
        for pol in policies:
            cells = []
            for b in budgets:
                r = by[pol, b]
                se = math.sqrt(r.accuracy * (1 - r.accuracy) / r.n)
                cells.append(f"{r.accuracy:.3f}±{se:.3f} ({r.mean_cost:.1f})")
            tab.add_row(pol, *cells)
        con.print(tab)
        for c in exp.comparisons:
            summary.add_row(
                prof,
                f"{c.budget:g}",
                f"{c.accuracy_b:.3f}",
                f"{c.accuracy_a:.3f}",
                f"{100 * c.diff:+.1f} pp",
                f"[{100 * c.ci95[0]:+.1f}, {100 * c.ci95[1]:+.1f}] pp",
                f"{c.mcnemar_p:.2g}",
            )
    con.print("cells: accuracy ± binomial SE (mean cost)")
    con.print(summary)


def theory_tables(args: argparse.Namespace, con: Console) -> None:
    from boe.core.theory import candidate_success, fit_calibration, mode_success, replay_success

    n = args.theory_n
    cal = fit_calibration(factor_code_ledger(1000, m=6, seed=args.seed + 1), ["bayes"])
    mc = replay_success(cal, factor_code_ledger(n, m=6, seed=args.seed), ["bayes", "boe", "whole"], [24])
    tab = Table(title=f"factor-code, M = 6, K = 64, factor cost 4, whole cost 8, budget 24 ({n} questions)")
    for col in ("policy", "success ± SE", "factor checks", "candidate checks", "exact"):
        tab.add_column(col, justify="left" if col == "policy" else "right")
    exact = {"bayes": "1 (6 factor checks)", "whole": f"{candidate_success(3, 64):.4f} = (3+1)/64", "boe": "-"}
    for r in mc:
        tab.add_row(
            r.policy,
            f"{r.success:.4f} ± {r.se:.4f}",
            f"{r.factor_checks:.2f}",
            f"{r.checks - r.factor_checks:.2f}",
            exact[r.policy],
        )
    con.print(tab)
    tab = Table(title=f"noisy factor model, M = 4, K = 16, budget 16 = four factor checks ({n} questions per rho)")
    for col in ("rho", "rho^4", "bayes success ± SE", "z", "boe success ± SE"):
        tab.add_column(col, justify="right")
    for rho in (0.6, 0.75, 0.9, 1.0):

        def gen(count: int, seed: int, rho: float = rho):  # noqa: ANN202
            return factor_code_ledger(count, m=4, seed=seed, rho=rho, with_whole=False)

        cal = fit_calibration(gen(1000, args.seed + 1), ["bayes"])
        got = {r.policy: r for r in replay_success(cal, gen(n, args.seed), ["bayes", "boe"], [16])}
        p = mode_success(rho, 4)
        b = got["bayes"]
        z = (b.success - p) / math.sqrt(p * (1 - p) / n) if 0 < p < 1 else 0.0
        tab.add_row(
            f"{rho:g}",
            f"{p:.4f}",
            f"{b.success:.4f} ± {b.se:.4f}",
            f"{z:+.2f}",
            f"{got['boe'].success:.4f} ± {got['boe'].se:.4f}",
        )
    con.print(tab)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000, help="questions per profile")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--profiles", default="all")
    ap.add_argument("--policies", default="raw,boe,bayes,whole")
    ap.add_argument("--budgets", default="4,8,16,24")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--theory", action="store_true", help="also the factor-code and noisy-model checks")
    ap.add_argument("--theory-n", type=int, default=4000, help="questions of each theory replay")
    ap.add_argument("--no-pool", action="store_true", help="skip the pool profiles")
    args = ap.parse_args()
    con = Console(width=140)
    if args.theory:
        theory_tables(args, con)
    if not args.no_pool:
        pool_tables(args, con)


if __name__ == "__main__":
    main()
