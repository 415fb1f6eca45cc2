"""The few-label learning curve: bayes calibrated on more labelled questions, scored on questions it never saw."""

from __future__ import annotations

import math

from boe.core.curve import learning_curve
from boe.core.experiment import load_questions
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.prior import prior_calibration
from boe.kinds import prior_channels
from boe.sim.ledgers import pool_ledger, pool_spec

PRIOR = prior_calibration(prior_channels())


def _questions(n, seed, groups):
    recs = pool_ledger(n, seed=seed, spec=pool_spec("weak-judge"))
    return load_questions([parse_record_dict(r) for r in recs], groups)[0]


def test_the_curve_has_the_prior_every_size_and_all_and_gains_over_raw():
    groups = GroupIndex()
    train, test = _questions(120, 1, groups), _questions(200, 2, groups)
    lc = learning_curve(train, groups.keys, PRIOR, test=test, sizes=(25, 50, 100), repeats=2, seed=3)
    assert [r.labels for r in lc.rows] == [0, 25, 50, 100, -1]
    assert [r.draws for r in lc.rows] == [1, 2, 2, 2, 1]
    assert len({r.raw for r in lc.rows}) == 1  # one test set: raw is the same everywhere
    full = lc.rows[-1]
    assert full.accuracy > full.raw and math.isclose(lc.share(full), 1.0)
    assert lc.share(lc.rows[2]) > 0.5  # fifty labels already give most of the gain


def test_without_a_test_set_each_draw_is_scored_on_the_questions_it_left_out():
    groups = GroupIndex()
    qs = _questions(60, 4, groups)
    lc = learning_curve(qs, groups.keys, PRIOR, sizes=(25, 50, 100), repeats=1)
    assert [r.labels for r in lc.rows] == [0, 25, 50, -1]  # 100 >= 60 questions: no such row
