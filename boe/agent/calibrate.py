"""Fit the shipped simulator calibration: a full ledger over fresh simulator questions, then `fit_groups`.

    python -m boe.agent.calibrate --n 400 --seed 101 --out boe/agent/data/sim-calibration.json

The judge is the simulator's independent judge `boe-sim-judge` (what `boe demo`
uses); ``--judge-model same`` fits the generator judging its own pool.

1. generate ``n`` simulator questions (seed ``seed``; the demo set and the
   accuracy benchmark use other seeds, so they are held out);
2. start the simulator on loopback and run the agent over real HTTP in
   *full-ledger* mode (every action of every menu is run once, under the
   neutral calibration, so the ledger does not depend on any earlier fit);
3. fit kappa_g and p_g per calibration group on that ledger exactly as
   ``boe replay --calibration fit --save-calibration`` does (spec section 4),
   plus the `bayes` policy's observation model, and write the file.

The same can be done by hand: ``boe ask --ledger full --calibration neutral
--db ...`` per question, then ``boe replay --db ... --run ...
--save-calibration FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from boe.core.calibration import Calibration, save_calibration

__all__ = ["fit_calibration", "main"]


def fit_calibration(
    records: list[Any],
    cheap_kappa: float | None = None,
    *,
    fitted_on: list[str] | None = None,
    command: str | None = None,
) -> Calibration:
    """kappa_g / p_g on the given full-ledger records, plus the bayes observation model when available."""
    from boe.core.experiment import load_questions

    questions, groups = load_questions(records)
    return fit_questions(questions, groups.keys, cheap_kappa, fitted_on=fitted_on, command=command)


def fit_questions(
    questions: list[Any],
    group_keys: list[str],
    cheap_kappa: float | None = None,
    *,
    fitted_on: list[str] | None = None,
    command: str | None = None,
) -> Calibration:
    """The deployable calibration of these questions: the plug-in fit on all of them (spec section 4), the bayes
    observation model (``extra.bayes``) when that policy is installed, and ``info`` saying what it covers."""
    from collections import Counter
    from datetime import UTC, datetime

    from boe.core.calibration import CalibrationInfo
    from boe.core.policies import POLICIES, FittablePolicy, make_policy
    from boe.core.replay import plan_calibration

    plan = plan_calibration(questions, group_keys, "fit", cheap_kappa=cheap_kappa)
    cal = plan.calibrations[0]
    if "bayes" in POLICIES:
        pol = make_policy("bayes")
        if isinstance(pol, FittablePolicy):
            cal = pol.fit_extra(questions, np.ones(len(questions), dtype=bool), cal, group_keys)
    cal.info = CalibrationInfo(
        method="fit",
        how="plug-in kappa and p on every question (spec section 4), and the bayes observation model",
        datasets=dict(sorted(Counter(q.dataset for q in questions).items())),
        questions=len(questions),
        groups=len(cal.groups),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        fitted_on=list(fitted_on or []),
        command=command,
    )
    return cal


async def _ledger(
    n: int, seed: int, db: str, workdir: Path, run_name: str, *, dicom: bool = False, judge: str | None = None
) -> list[Any]:
    """The full ledger of ``n`` fresh questions (reused when ``db`` already holds the run)."""
    from boe.agent.configuration import make_config
    from boe.agent.demo import run_questions, simulator
    from boe.db import Store
    from boe.errors import StoreError
    from boe.sim.dataset import generate_dataset, load_sim_dataset

    with Store(db) as store:
        try:
            if store.count_questions(run_name) == n:
                return list(store.iter_records(run_name, strict=True))
        except StoreError:
            pass
    data = generate_dataset(workdir / run_name, n, seed=seed, dicom=dicom)
    questions = load_sim_dataset(data)
    with simulator() as base_url:
        cfg = make_config(
            base_url=base_url,
            model="boe-sim",
            judge_model=judge,
            dataset="boe-sim-dicom" if dicom else "boe-sim",
            ledger="full",
            calibration="neutral",
            root=str(data),
        )
        await run_questions(cfg, questions, db=db, run_name=run_name, dicom=dicom)
    with Store(db) as store:
        return list(store.iter_records(run_name, strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit the simulator calibration on a fresh full ledger.")
    ap.add_argument("--n", type=int, default=400, help="simulator questions [400]")
    ap.add_argument("--seed", type=int, default=101, help="dataset seed [101]")
    ap.add_argument("--out", type=Path, required=True, help="calibration file to write")
    ap.add_argument("--dicom-n", type=int, default=0, help="also DICOM questions (dataset boe-sim-dicom) [0]")
    ap.add_argument("--db", default=None, help="keep the full ledger in this store (default: a temporary file)")
    ap.add_argument("--judge-model", default="boe-sim-judge", help="the judge: boe-sim-judge, or same [boe-sim-judge]")
    args = ap.parse_args(argv)
    judge = None if args.judge_model == "same" else args.judge_model
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'ledger.db'}"
        run_name = f"calibration-ledger-n{args.n}-seed{args.seed}-{args.judge_model}"
        records = asyncio.run(_ledger(args.n, args.seed, db, Path(tmp), run_name, judge=judge))
        if args.dicom_n:
            seed = args.seed + 1
            run_name = f"calibration-ledger-dicom-n{args.dicom_n}-seed{seed}-{args.judge_model}"
            records += asyncio.run(_ledger(args.dicom_n, seed, db, Path(tmp), run_name, dicom=True, judge=judge))
    cmd = (
        f"python -m boe.agent.calibrate --n {args.n} --seed {args.seed} --dicom-n {args.dicom_n}"
        f" --judge-model {args.judge_model} --out {args.out}"
    )
    cal = fit_calibration(records, fitted_on=[f"{args.n} + {args.dicom_n} simulator questions"], command=cmd)
    save_calibration(cal, args.out)
    print(f"fitted {len(cal.groups)} groups on {len(records)} questions -> {args.out}")
    for key, g in sorted(cal.groups.items()):
        print(f"  {key:40s} kappa {g.kappa:.3f}  p {g.p['confirm']:.2f}/{g.p['reject']:.2f}/{g.p['unresolved']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
