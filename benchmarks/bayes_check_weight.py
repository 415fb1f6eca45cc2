"""Cost and result of fitting the `bayes` check weight (issue 18, step E), on `boe sim ledger` pool regimes.

    python benchmarks/bayes_check_weight.py               # default, echo, echo-answers; 3000 questions
    python benchmarks/bayes_check_weight.py --profiles answers --n 1000

For each profile it generates a pool ledger, then fits the `bayes` observation
model by 5-fold cross-fitting twice: without the check-weight pass (every
weight 1, the model before step E) and with it. It prints the CPU time of both
fits, their ratio, and the weight fitted on each fold.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any
from unittest import mock

from replay_speed import cpu
from rich.console import Console
from rich.table import Table

from boe.core import bayes
from boe.core.experiment import load_questions
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.replay import plan_calibration
from boe.sim.ledgers import pool_ledger, pool_spec


def _skip(*args: Any) -> None:
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profiles", default="default,echo,echo-answers")
    args = ap.parse_args()
    table = Table(title=f"bayes check-weight fit, crossfit:5, {args.n} questions per regime")
    for col in ("regime", "fit CPU s, w = 1", "fit CPU s, w fitted", "ratio", "w per fold"):
        table.add_column(col, justify="left" if col in ("regime", "w per fold") else "right")
    for profile in args.profiles.split(","):
        recs = [parse_record_dict(r) for r in pool_ledger(args.n, seed=args.seed, spec=pool_spec(profile))]
        questions, groups = load_questions(recs, GroupIndex())
        times: list[float] = []
        weights: list[float] = []
        for with_w in (False, True):
            # without the pass every weight keeps its default 1 (the model before step E)
            with contextlib.nullcontext() if with_w else mock.patch.object(bayes, "_fit_check_weight", _skip):
                c0 = cpu()
                plan = plan_calibration(questions, groups.keys, "crossfit:5", extra_fit=bayes.Bayes().fit_extra)
                times.append(cpu() - c0)
            if with_w:
                weights = [c.check_weight for cal in plan.calibrations for c in bayes.model_of(cal).claims.values()]
        table.add_row(
            profile,
            f"{times[0]:.1f}",
            f"{times[1]:.1f}",
            f"{times[1] / times[0]:.2f}x",
            " ".join(f"{w:g}" for w in weights),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
