"""Calibration: the spec's kappa_g and p_g, cross-fitting by question, calibration files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from boe.core.calibration import Calibration, crossfit_folds, load_calibration, save_calibration
from boe.core.experiment import load_questions
from boe.core.ledger import parse_record, parse_record_dict
from boe.core.literal import literal_calibration
from boe.core.replay import plan_calibration
from boe.errors import CalibrationError
from boe.sim.ledgers import pool_ledger


def _rec(qid, outcome, utilities, signs, group="vlm"):
    k = len(utilities)
    return (
        {
            "format": "boe-ledger/1",
            "question_id": qid,
            "dataset": "d",
            "candidates": [
                {"index": i, "answer": str(i), "valid": True, "utility": u} for i, u in enumerate(utilities)
            ],
            "claims": [{"id": "x"}],
            "edges": [{"candidate": i, "claim": "x", "sign": s} for i, s in enumerate(signs) if s],
            "actions": [{"id": "a", "kind": "vlm_factor", "claim": "x", "cost": 4, "group": group, "outcome": outcome}],
        }
        if k
        else None
    )


def _fit(recs, mode="fit", seed=0):
    qs, groups = load_questions([parse_record_dict(r) for r in recs])
    return plan_calibration(qs, groups.keys, mode, seed=seed), qs


def test_kappa_by_hand():
    recs = [
        # confirm: +1 pairs are the asserting candidates (U 1, 0), -1 pairs the denier (U 0)
        _rec("q1", "confirm", [1.0, 0.0, 0.0], [1, 1, -1]),
        # reject: alpha = -B: the denier becomes +1 (U 1), the asserter -1 (U 0)
        _rec("q2", "reject", [0.0, 1.0, 0.0], [1, -1, 0]),
        _rec("q3", "unresolved", [1.0, 1.0, 1.0], [1, -1, 1]),
    ]
    plan, _ = _fit(recs)
    g = plan.calibrations[0].group("d/vlm")
    # +1 pairs: U = 1, 0, 1 -> 2/3; -1 pairs: U = 0, 0 -> 0
    assert g.kappa == pytest.approx(0.5 + 0.5 * (2 / 3 - 0))
    assert g.p == {"confirm": 1 / 3, "reject": 1 / 3, "unresolved": 1 / 3}
    assert plan.calibrations[0].group("d/absent").kappa == 0.5
    assert plan.calibrations[0].group("d/absent").p == pytest.approx(
        {o: 1 / 3 for o in ("confirm", "reject", "unresolved")}
    )


def test_kappa_defaults_and_clipping():
    only_pos = [_rec("q", "confirm", [1.0, 1.0], [1, 1])]
    assert _fit(only_pos)[0].calibrations[0].group("d/vlm").kappa == 0.5  # no -1 pairs
    perfect = [_rec("q", "confirm", [1.0, 0.0], [1, -1])]
    assert _fit(perfect)[0].calibrations[0].group("d/vlm").kappa == 0.999
    inverse = [_rec("q", "confirm", [0.0, 1.0], [1, -1])]
    assert _fit(inverse)[0].calibrations[0].group("d/vlm").kappa == 0.001


def test_fit_matches_literal_reading():
    recs = list(pool_ledger(80, seed=1))
    plan, _ = _fit(recs)
    lit = literal_calibration([parse_record(r) for r in recs])
    for key, g in lit["groups"].items():
        mine = plan.calibrations[0].group(key)
        assert mine.kappa == g["kappa"]
        assert mine.p == g["p"]


def test_crossfit_folds_balanced_deterministic_order_free():
    keys = [f"q{i}" for i in range(103)]
    f1 = crossfit_folds(keys, 5, seed=0)
    f2 = crossfit_folds(list(reversed(keys)), 5, seed=0)[::-1]
    assert (f1 == f2).all()
    assert np.bincount(f1).tolist() in ([21, 21, 21, 20, 20],) or sorted(np.bincount(f1)) == [20, 20, 21, 21, 21]
    assert not (crossfit_folds(keys, 5, seed=1) == f1).all()
    with pytest.raises(CalibrationError):
        crossfit_folds(keys[:3], 5)


def test_crossfit_holds_out_each_questions_own_fold():
    """A question's calibration does not depend on the outcomes of its own fold."""
    recs = list(pool_ledger(60, seed=2))
    plan, qs = _fit(recs, "crossfit:4", seed=3)
    assert plan.folds == 4 and len(plan.calibrations) == 4
    target = 0
    fold = plan.of_question[target]
    flipped = [dict(r) for r in recs]
    for i, _q in enumerate(qs):
        if plan.of_question[i] == fold:
            flipped[i] = json.loads(json.dumps(recs[i]))
            for a in flipped[i]["actions"]:
                a["outcome"] = "confirm"
    plan2, _ = _fit(flipped, "crossfit:4", seed=3)
    assert plan2.calibrations[fold].groups == plan.calibrations[fold].groups
    other = (fold + 1) % 4
    assert plan2.calibrations[other].groups != plan.calibrations[other].groups


def test_calibration_file_round_trip(tmp_path):
    plan, _ = _fit(list(pool_ledger(30, seed=4)))
    cal = plan.calibrations[0].model_copy(update={"extra": {"bayes": {"alpha": [1.5, 2.0]}}})
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    back = load_calibration(path)
    assert back.groups == cal.groups and back.extra == cal.extra and back.cheap_kappa == cal.cheap_kappa
    spec_style = {
        "cheap_kappa": 0.55,
        "groups": {"vqa-med/vlm": {"kappa": 0.539, "p": {"confirm": 0.5, "reject": 0.3, "unresolved": 0.2}}},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec_style))
    assert load_calibration(tmp_path / "spec.json").group("vqa-med/vlm").kappa == 0.539


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{", "not valid JSON", id="json"),
        pytest.param('{"groups": {"d/g": {"kappa": 1.5, "p": {}}}}', "groups.d/g.kappa", id="kappa-range"),
        pytest.param('{"groups": {"d/g": {"kappa": 0.6, "p": {"maybe": 1}}}}', "unknown outcomes", id="outcome"),
        pytest.param('{"format": "boe-calibration/9"}', "unknown calibration format", id="version"),
    ],
)
def test_bad_calibration_files(tmp_path, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=message):
        load_calibration(path)
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")


def test_calibration_default_is_neutral():
    cal = Calibration()
    kappa, p = cal.arrays(["x/y"])
    assert kappa.tolist() == [0.5] and np.allclose(p, 1 / 3)


def test_prior_defaults_stand_in_only_where_the_calibration_has_nothing():
    from boe.core.calibration import GroupCalibration
    from boe.core.prior import prior_calibration, with_prior
    from boe.kinds import prior_channels

    channels = prior_channels()  # each kind's declared prior
    own = GroupCalibration(kappa=0.7, p={"confirm": 0.5, "reject": 0.5, "unresolved": 0.0})
    cal = Calibration(groups={"rad/vlm/modality": own})
    assert cal.covers("rad") and not cal.covers("med")
    assert cal.group("med/vlm/modality").kappa == 0.5  # spec section 4: an unseen group is neutral
    covered, whole = with_prior(cal, "rad", channels)
    assert not whole and covered.group("rad/vlm/modality") is own
    assert covered.group("rad/vlm/region").kappa == 0.5  # only the record channel gets a prior on covered data
    assert covered.group("rad/record/answer:modality").kappa == 0.85
    assert covered.group("rad/record/region").kappa == 0.55
    other, whole = with_prior(cal, "med", channels)
    assert whole and "prior" in str(other.source)
    assert other.group("med/vlm/answer:plane").kappa == 0.53 and other.group("med/whole").kappa == 0.64
    assert other.group("med/structured/modality").p["unresolved"] == 1.0  # never worth buying
    assert other.group("med/answer").kappa == 0.64  # an answer check: a response-level judgement, as whole's
    # a channel of a kind the ledger format does not name (a plugin's, a later built-in) stands in on covered data
    plugged, whole = with_prior(cal, "rad", {**channels, "chart": (0.6, (0.5, 0.4, 0.1))}, new=["chart"])
    assert not whole and plugged.group("rad/chart/answer:value").kappa == 0.6
    assert plugged.group("rad/vlm/region").kappa == 0.5
    prior = prior_calibration(channels)
    assert prior.is_prior and not prior.groups and prior.group("x/grounded/finding").kappa == 0.53


def test_calibration_files_keep_what_they_cover(tmp_path):
    from boe.core.calibration import CalibrationInfo, describe_calibration
    from boe.core.prior import prior_calibration
    from boe.kinds import prior_channels

    cal = Calibration(info=CalibrationInfo(method="fit", datasets={"rad": 7}, questions=7, groups=0))
    save_calibration(cal, tmp_path / "c.json")
    back = load_calibration(tmp_path / "c.json")
    assert back.info == cal.info and back.covers("rad")
    assert "fit on 7 labelled questions: rad 7" in describe_calibration(back)
    save_calibration(prior_calibration(prior_channels()), tmp_path / "p.json")
    p = load_calibration(tmp_path / "p.json")
    assert p.is_prior and p.group("d/record/answer:plane").kappa == 0.85


def test_answer_check_kappa_pairs_span_every_affected_candidate():
    """An answer check's pairs are all valid candidates with the representative's normalised answer."""
    cands = [("no", 0.0), ("No ", 0.0), ("no", 0.0), ("yes", 1.0), ("no", 1.0)]
    rec = {
        "format": "boe-ledger/1.1",
        "question_id": "q",
        "dataset": "d",
        "candidates": [{"index": i, "answer": a, "valid": i != 4, "utility": u} for i, (a, u) in enumerate(cands)],
        "actions": [
            {"id": "a", "kind": "answer_response", "candidate": 1, "cost": 8, "group": "answer", "outcome": "reject"},
            {"id": "b", "kind": "answer_response", "candidate": 3, "cost": 8, "group": "answer", "outcome": "confirm"},
        ],
    }
    plan, _ = _fit([rec])
    g = plan.calibrations[0].group("d/answer")
    # reject of "no": -1 pairs are candidates 0, 1, 2 (U 0; 4 is invalid); confirm of "yes": +1 pair U 1
    assert g.pairs == {"support": 1.0, "contradict": 3.0, "actions": 2.0}
    assert g.kappa == 0.999
    lit = literal_calibration([parse_record(rec)])
    assert lit["groups"]["d/answer"]["kappa"] == g.kappa and lit["groups"]["d/answer"]["p"] == g.p
