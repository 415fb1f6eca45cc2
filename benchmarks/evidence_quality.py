"""Does the evidence change the decision? Accuracy by policy x budget on `boe sim ledger` regimes, cross-fitted.

    python benchmarks/evidence_quality.py                         # the issue-18 regimes, 3000 questions, seed 7
    python benchmarks/evidence_quality.py --profiles echo,answers --n 1000 --budgets 8,16
    python benchmarks/evidence_quality.py --seed 11 --set echo=0.2 --set whole.acc=0.65   # other parameters

For each pool profile (`boe sim ledger --kind pool --profile P`, with the
``--set`` overrides) it generates a fresh ledger, calibrates by 5-fold
cross-fitting (plug-in kappa/p and the `bayes` observation model fitted
without each question's fold), replays every policy at every budget, and
prints per profile:

* accuracy ± binomial SE and mean cost per policy x budget, with raw majority
  and Oracle@K (a correct candidate in the pool);
* the share of the raw -> Oracle@K gap each policy closes, and its
  corrections / harms against raw;
* paired bootstrap 95% intervals (question-level resampling) of policy - raw
  and bayes - boe, with the exact McNemar p.

The label-guided policy reads utilities: a diagnostic, not deployable.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from boe.core.experiment import load_questions, run_experiment
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.metrics import compare
from boe.sim.ledgers import ChannelSpec, pool_ledger, pool_spec

REGIMES = "default,weak-judge,whole-strong,echo,answers,echo-answers"
CHANNELS = ("structured", "vlm", "grounded", "whole", "answer")


def _overrides(items: list[str]) -> dict[str, Any]:
    """``--set echo=0.2`` / ``--set whole.acc=0.65`` into pool-spec overrides."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        if "." in key:
            ch, _, fld = key.partition(".")
            if ch not in CHANNELS or fld not in ("acc", "unresolved", "cost"):
                raise SystemExit(f"--set {item}: expected <channel>.<acc|unresolved|cost>=x, channel in {CHANNELS}")
            out.setdefault("channels", {}).setdefault(ch, {})[fld] = float(value)
        elif key in ("echo", "slot_good", "slot_bad", "invalid", "empty_slot"):
            out[key] = float(value)
        elif key in ("k", "answers"):
            out[key] = int(value)
        elif key == "difficulty":
            a, b = value.split(",")
            out[key] = (float(a), float(b))
        else:
            raise SystemExit(f"--set {item}: unknown parameter {key!r}")
    return out


def _spec(profile: str, over: dict[str, Any]) -> Any:
    over = dict(over)
    channels = over.pop("channels", {})
    spec = pool_spec(profile, **over)
    for ch, fields in channels.items():
        base = getattr(spec, ch) or ChannelSpec(0.8, 0.05, 8)
        spec = replace(spec, **{ch: replace(base, **fields)})
    return spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000, help="questions per regime")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profiles", default=REGIMES)
    ap.add_argument("--policies", default="raw,boe,bayes,whole,label-guided")
    ap.add_argument("--budgets", default="8,16,24")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--set", action="append", default=[], help="pool parameter override (repeatable)")
    args = ap.parse_args()
    con = Console(width=160)
    policies = args.policies.split(",")
    if "raw" not in policies:
        policies.insert(0, "raw")
    budgets = [float(b) for b in args.budgets.split(",")]
    over = _overrides(args.set)
    deployable = [p for p in policies if p not in ("raw", "label-guided")]
    summary = Table(
        title=f"summary at each budget ({args.n} questions per regime, seed {args.seed}, "
        f"crossfit:{args.folds}{', ' + ' '.join(args.set) if args.set else ''})"
    )
    for col in (
        "regime",
        "C",
        "raw",
        "Oracle@K",
        "boe",
        "bayes",
        "bayes - boe [95% CI]",
        "best deployable",
        "label-guided",
    ):
        summary.add_column(col, justify="left" if col == "regime" else "right")
    for prof in args.profiles.split(","):
        t0 = time.perf_counter()
        recs = pool_ledger(args.n, seed=args.seed, spec=_spec(prof, over))
        qs, groups = load_questions([parse_record_dict(r) for r in recs], GroupIndex())
        exp = run_experiment(
            qs,
            groups.keys,
            policies,
            budgets,
            calibration=f"crossfit:{args.folds}",
            seed=args.seed,
            resamples=args.resamples,
        )
        secs = time.perf_counter() - t0
        by = {(r.policy, r.budget): r for r in exp.rows}
        raw_acc = by["raw", budgets[0]].accuracy
        oracle = exp.rows[0].oracle_at_k
        gap = oracle - raw_acc
        tab = Table(title=f"{prof}: N={len(qs)}, raw {raw_acc:.3f}, Oracle@K {oracle:.3f} ({secs:.0f} s)")
        for col in ("policy", "C", "accuracy ± SE", "mean cost", "gap closed", "corr / harm", "- raw [95% CI]"):
            tab.add_column(col, justify="left" if col == "policy" else "right")
        for pol in policies:
            for b in budgets:
                r = by[pol, b]
                se = math.sqrt(r.accuracy * (1 - r.accuracy) / r.n)
                c = compare(qs, exp.run(pol, b), exp.raw, args.resamples, args.seed)[0]
                tab.add_row(
                    pol,
                    f"{b:g}",
                    f"{r.accuracy:.3f} ± {se:.3f}",
                    f"{r.mean_cost:.1f}",
                    f"{100 * (r.accuracy - raw_acc) / gap:.0f}%" if gap > 0 else "-",
                    f"{r.corrections} / {r.harms}",
                    f"{100 * c.diff:+.1f} pp [{100 * c.ci95[0]:+.1f}, {100 * c.ci95[1]:+.1f}]",
                )
        con.print(tab)
        for b in budgets:
            cells = {p: by[p, b].accuracy for p in policies}
            best = max(deployable, key=lambda p: cells[p]) if deployable else "-"
            diff = "-"
            if "bayes" in cells and "boe" in cells:
                c = compare(qs, exp.run("bayes", b), exp.run("boe", b), args.resamples, args.seed)[0]
                diff = f"{100 * c.diff:+.1f} pp [{100 * c.ci95[0]:+.1f}, {100 * c.ci95[1]:+.1f}] p={c.mcnemar_p:.2g}"
            summary.add_row(
                prof,
                f"{b:g}",
                f"{raw_acc:.3f}",
                f"{oracle:.3f}",
                f"{cells.get('boe', math.nan):.3f}",
                f"{cells.get('bayes', math.nan):.3f}",
                diff,
                f"{best} {cells.get(best, math.nan):.3f}",
                f"{cells.get('label-guided', math.nan):.3f}",
            )
    con.print(summary)


if __name__ == "__main__":
    main()
