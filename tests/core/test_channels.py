"""Channel tables reverse a verdict only with confidence, and calibrations say which channels to distrust."""

from __future__ import annotations

import numpy as np
import pytest

from boe.core.bayes import Bayes, model_of
from boe.core.calibration import Calibration, GroupCalibration
from boe.core.channels import calibration_warnings, channel_status, kappa_status, monotone_tables
from boe.core.experiment import load_questions
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.replay import plan_calibration
from boe.sim.ledgers import ChannelSpec, pool_ledger, pool_spec


def test_an_unsupported_reversal_is_pooled_and_a_supported_one_kept():
    # a confirm slightly more frequent on a false latent, from 20 checks each: no confidence, no information
    few1, few0 = np.array([9.0, 9.0, 2.0]), np.array([11.0, 7.0, 2.0])
    t1, t0, pooled = monotone_tables(few1, few0)
    assert pooled.tolist() == [True, True]
    assert np.allclose(t1, t0) and np.isclose(t1.sum(), 1.0)
    # the same rates from 2000 checks each: the data support the reversal, it is kept
    t1, t0, pooled = monotone_tables(few1 * 100, few0 * 100)
    assert not pooled.any() and t1[0] < t0[0] and t1[1] > t0[1]
    # a channel pointing the right way is never touched
    good1, good0 = np.array([12.0, 3.0, 5.0]), np.array([3.0, 12.0, 5.0])
    t1, t0, pooled = monotone_tables(good1, good0)
    assert not pooled.any() and np.allclose(t1, good1 / 20) and np.allclose(t0, good0 / 20)


def test_pooling_one_verdict_keeps_the_others_proportions():
    n1, n0 = np.array([10.0, 30.0, 60.0]), np.array([12.0, 60.0, 28.0])  # confirm weakly reversed, reject fine
    t1, t0, pooled = monotone_tables(n1, n0)
    assert pooled.tolist() == [True, False]
    assert np.isclose(t1[0], t0[0]) and np.isclose(t1[0], 22 / 200)
    assert np.isclose(t1[1] / t1[2], 30 / 60) and np.isclose(t0[1] / t0[2], 60 / 28)


def _fit(spec, n=300, seed=3):
    recs = list(pool_ledger(n, seed=seed, spec=spec))
    qs, groups = load_questions([parse_record_dict(r) for r in recs], GroupIndex())
    return plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]


@pytest.mark.parametrize("acc", [0.45, 0.2])
def test_a_bayes_channel_reverses_only_what_the_data_support(acc):
    """A vlm judge worse than a coin: slightly worse (0.45, on 5 questions) gives no information; clearly worse
    (0.2) is fitted as reversed and said to be."""
    spec = pool_spec("default", vlm=ChannelSpec(acc, 0.15, 4))
    model = model_of(_fit(spec, n=5 if acc > 0.4 else 400))
    t = model.factor_channels["pool/vlm"]
    words, log_dor, se = channel_status(t.given_true, t.given_false, t.counts)
    if acc > 0.4:
        assert t.given_true[0] >= t.given_false[0] - 1e-9 and "reversed" not in words
    else:
        assert t.given_true[0] < t.given_false[0] and "reversed" in words and log_dor + 1.96 * se < 0


def test_kappa_words_and_calibration_warnings():
    few = GroupCalibration(kappa=0.4, p={"confirm": 0.5}, pairs={"support": 40, "contradict": 30, "actions": 12})
    many = GroupCalibration(kappa=0.4, p={"confirm": 0.5}, pairs={"support": 4000, "contradict": 3000, "actions": 900})
    weak = GroupCalibration(kappa=0.52, p={"confirm": 0.5}, pairs={"support": 400, "contradict": 300, "actions": 90})
    assert kappa_status(few) == ["under-sampled", "reversal not supported"]
    assert kappa_status(many) == ["reversed"]
    assert kappa_status(weak) == ["weak"]
    cal = Calibration(groups={"d/vlm/a": few, "d/grounded/b": many, "d/whole": weak})
    text = " ".join(calibration_warnings(cal))
    assert "d/grounded/b" in text and "without confidence" in text and "under-sampled" in text
