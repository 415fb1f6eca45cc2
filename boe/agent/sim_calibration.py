"""Fit the shipped simulator calibration: a full ledger over fresh simulator questions, then the deployable fit.

    boe sim calibrate --n 400 --seed 101 --dicom-n 200 --judge-model boe-sim-judge \
        --out boe/agent/data/sim-calibration.json

The judge is the simulator's independent judge `boe-sim-judge` (what `boe demo`
uses); ``--judge-model same`` fits the generator judging its own pool.

1. generate ``n`` simulator questions (seed ``seed``; the demo set and the
   accuracy benchmark use other seeds, so they are held out), and ``dicom_n``
   DICOM ones (seed ``seed + 1``);
2. start the simulator on loopback and run the agent over real HTTP in
   *full-ledger* mode (every action of every menu is run once, under the
   neutral calibration, so the ledger does not depend on any earlier fit);
3. fit kappa_g and p_g per calibration group on that ledger exactly as
   ``boe calibrate`` and ``boe replay --save-calibration`` do
   (`boe.calibrations.fit_calibration`, spec section 4), plus the `bayes`
   policy's observation model.

The same can be done by hand: ``boe ask --ledger full --calibration neutral
--db ...`` per question, then ``boe calibrate --db ... --run ... --out FILE``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from boe.core.calibration import Calibration

__all__ = ["simulator_calibration"]


def simulator_calibration(
    n: int = 400,
    seed: int = 101,
    *,
    dicom_n: int = 0,
    judge_model: str = "boe-sim-judge",
    db: str | None = None,
    command: str | None = None,
) -> Calibration:
    """The calibration of the agent on ``n`` (+ ``dicom_n`` DICOM) fresh simulator questions; ``db`` keeps the
    full ledger (and reuses a complete one)."""
    from boe.calibrations import fit_calibration
    from boe.core.experiment import load_questions

    judge = None if judge_model == "same" else judge_model
    with tempfile.TemporaryDirectory() as tmp:
        url = db or f"sqlite:///{Path(tmp) / 'ledger.db'}"
        run_name = f"calibration-ledger-n{n}-seed{seed}-{judge_model}"
        records = asyncio.run(_ledger(n, seed, url, Path(tmp), run_name, judge=judge))
        if dicom_n:
            run_name = f"calibration-ledger-dicom-n{dicom_n}-seed{seed + 1}-{judge_model}"
            records += asyncio.run(_ledger(dicom_n, seed + 1, url, Path(tmp), run_name, dicom=True, judge=judge))
    questions, groups = load_questions(records)
    return fit_calibration(questions, groups.keys, fitted_on=[f"{n} + {dicom_n} simulator questions"], command=command)


async def _ledger(
    n: int, seed: int, db: str, workdir: Path, run_name: str, *, dicom: bool = False, judge: str | None = None
) -> list[Any]:
    """The full ledger of ``n`` fresh questions (reused when ``db`` already holds the run)."""
    from boe.agent.demo import run_questions, simulator
    from boe.agent.settings import make_config
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
