"""A fittable policy of a plugin is fitted on each training fold with the names of the calibration groups."""

from __future__ import annotations

import numpy as np
import pytest

from boe.core.experiment import load_questions, run_experiment
from boe.core.policies import POLICIES, ScorePolicy, register_policy
from boe.sim.ledgers import pool_ledger

SEEN: list[tuple[list[str] | None, int]] = []


class CountingFit(ScorePolicy):
    """Buys nothing; records what each fit_extra call was given."""

    name = "counting-fit"

    def fit_extra(self, questions, train_mask, calibration, group_keys=None):
        SEEN.append((None if group_keys is None else list(group_keys), int(np.sum(train_mask))))
        return calibration.model_copy(update={"extra": {**calibration.extra, self.name: int(np.sum(train_mask))}})

    def fit_extra_present(self, calibration):
        return self.name in calibration.extra

    def choose(self, state):
        assert self.name in state.calibrations[state.calibration[0]].extra
        return np.full(state.n, -1, dtype=np.intp)


@pytest.fixture
def counting():
    register_policy("counting-fit")(CountingFit)
    SEEN.clear()
    yield
    POLICIES.pop("counting-fit")


@pytest.mark.parametrize(("mode", "fits"), [("fit", 1), ("crossfit:3", 3)])
def test_fit_extra_gets_the_group_keys_on_every_fold(counting, mode, fits):
    questions, groups = load_questions(pool_ledger(30, seed=4))
    run_experiment(questions, groups.keys, ["counting-fit"], [4.0], calibration=mode, resamples=10)
    assert len(SEEN) == fits
    for keys, n_train in SEEN:
        assert keys == groups.keys  # names for the questions' group ids, not None
        assert 0 < n_train <= 30
    if fits > 1:
        assert sum(n for _, n in SEEN) == 2 * 30  # each question trains the two folds it is not held out of


PREPARED: list[int] = []


class OneArgPrepare(CountingFit):
    """A plugin written to the first contract: ``prepare_fit(questions)``, one argument."""

    name = "one-arg-prepare"

    def prepare_fit(self, questions):
        PREPARED.append(len(questions))


@pytest.mark.parametrize("pool", [None, "adaptive"])
def test_a_plugins_one_argument_prepare_fit_is_still_called_beside_bayes(pool):
    from boe.core.pool import parse_pool

    register_policy("one-arg-prepare")(OneArgPrepare)
    PREPARED.clear()
    try:
        questions, groups = load_questions(pool_ledger(24, seed=4))
        spec = parse_pool(pool) if pool else None
        exp = run_experiment(
            questions,
            groups.keys,
            ["one-arg-prepare", "bayes"],
            [8.0],
            calibration="crossfit:2",
            resamples=0,
            pool=spec,
        )
    finally:
        POLICIES.pop("one-arg-prepare")
    assert PREPARED == [24]  # once, before the folds
    assert [r.policy for r in exp.runs] == ["one-arg-prepare", "bayes"]
