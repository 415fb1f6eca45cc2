"""The few-label learning curve: accuracy of the default controller against the labelled questions it was fitted on.

A user has some labelled questions of their own. `learning_curve` fits the
deployable calibration (plug-in kappa and p, and the `bayes` observation model,
as `boe calibrate` does) on random subsets of 25, 50, 100, 200 and all of them,
and scores `bayes` at budget 0 and at a budget on questions the fit never saw:
a separate test set when one is given, else the labelled questions outside each
subset (and, for "all", a 5-fold cross-fit). The first row is the hand-set prior
calibration (no labels). Each size is drawn ``repeats`` times; a row gives the
mean accuracy and its spread over the draws, and the share of the full
calibration's gain over the raw majority that it reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from boe.core.calibration import Calibration
from boe.core.graph import Question

__all__ = ["CurveRow", "LearningCurve", "learning_curve"]

SIZES = (25, 50, 100, 200)


@dataclass(frozen=True)
class CurveRow:
    """Accuracy after calibrating on ``labels`` questions (0: the prior; -1: all of them)."""

    labels: int
    draws: int
    budget0: float  # bayes at budget 0 (the prior over candidates alone)
    accuracy: float  # bayes at the curve's budget
    spread: float  # standard deviation of ``accuracy`` over the draws
    raw: float  # the raw majority on the same test questions


@dataclass(frozen=True)
class LearningCurve:
    budget: float
    rows: list[CurveRow]

    def share(self, row: CurveRow) -> float:
        """The share of the full calibration's gain over raw that ``row`` reaches (nan without a gain)."""
        full = self.rows[-1]
        gain = full.accuracy - full.raw
        return (row.accuracy - row.raw) / gain if gain > 0 else float("nan")


def _fit(questions: Sequence[Question], keys: list[str]) -> Calibration:
    from boe.core.bayes import Bayes
    from boe.core.replay import plan_calibration

    cal = plan_calibration(questions, keys, "fit").calibrations[0]
    return Bayes().fit_extra(questions, np.ones(len(questions), dtype=bool), cal, keys)


def _score(questions: list[Question], keys: list[str], cal: Calibration | str, budget: float) -> tuple[float, ...]:
    """(raw, bayes at 0, bayes at ``budget``) accuracy on ``questions``."""
    from boe.core.experiment import run_experiment

    exp = run_experiment(questions, keys, ["raw", "bayes"], [0.0, budget], calibration=cal, resamples=1)
    by = {(r.policy, r.budget): r.accuracy for r in exp.rows}
    return by["raw", 0.0], by["bayes", 0.0], by["bayes", budget]


def learning_curve(
    questions: Sequence[Question],
    group_keys: Sequence[str],
    prior: Calibration,
    *,
    test: Sequence[Question] | None = None,
    sizes: Sequence[int] = SIZES,
    repeats: int = 3,
    budget: float = 16.0,
    seed: int = 0,
) -> LearningCurve:
    """Accuracy of `bayes` by the number of labelled questions of ``questions`` it was calibrated on (see above);
    ``prior`` is the hand-set calibration of the first row (`boe.core.prior.prior_calibration`)."""
    keys = list(group_keys)
    labelled = [q for q in questions if q.labelled]
    rng = np.random.default_rng(seed)
    held = [q for q in test if q.labelled] if test is not None else None
    rows: list[CurveRow] = []

    def row(labels: int, results: list[tuple[float, ...]]) -> CurveRow:
        r = np.array(results)
        return CurveRow(labels, len(results), float(r[:, 1].mean()), float(r[:, 2].mean()), float(r[:, 2].std()),
                        float(r[:, 0].mean()))  # fmt: skip

    rows.append(row(0, [_score(held if held is not None else labelled, keys, prior, budget)]))
    for size in sizes:
        if size >= len(labelled) or (held is None and len(labelled) - size < 5):
            continue
        results = []
        for _ in range(repeats):
            pick = np.zeros(len(labelled), dtype=bool)
            pick[rng.choice(len(labelled), size=size, replace=False)] = True
            train = [q for q, p in zip(labelled, pick, strict=True) if p]
            scored = held if held is not None else [q for q, p in zip(labelled, pick, strict=True) if not p]
            results.append(_score(scored, keys, _fit(train, keys), budget))
        rows.append(row(size, results))
    if held is not None:
        rows.append(row(-1, [_score(held, keys, _fit(labelled, keys), budget)]))
    else:
        rows.append(row(-1, [_score(labelled, keys, f"crossfit:{min(5, len(labelled))}", budget)]))
    return LearningCurve(budget, rows)
