"""Failed actions (checks that could not be run) are not on the menu: a ledger replays as if they were absent."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record, parse_record_dict
from boe.core.loading import load_lines
from boe.core.replay import plan_calibration, replay, transcripts
from boe.errors import RecordError
from tests.core.strategies import OUTCOMES, ledgers

POLICIES = ["raw", "boe", "boe-factor", "random-factor", "whole", "label-guided"]


@st.composite
def with_failed(draw: st.DrawFn) -> tuple[list[dict], list[dict]]:
    """(a ledger, the same ledger with failed actions inserted at random places)."""
    recs = draw(ledgers())
    noisy = copy.deepcopy(recs)
    for rec in noisy:
        claims = [c["id"] for c in rec["claims"]]
        k = len(rec["candidates"])
        for n in range(draw(st.integers(0, 4))):
            whole = not claims or draw(st.booleans())
            act = {
                "id": f"failed{n}",
                "kind": "whole_response" if whole else draw(st.sampled_from(["vlm_factor", "grounded_factor"])),
                "claim": None if whole else draw(st.sampled_from(claims)),
                "candidate": draw(st.integers(0, k - 1)) if whole else None,
                "cost": draw(st.sampled_from([0.5, 1, 4, 8])),
                "group": draw(st.sampled_from(["whole", "g1", "only-failed"])),
                "outcome": draw(st.sampled_from(OUTCOMES)),
                "failed": True,
                "error": "connection failed after 5 attempt(s)",
            }
            rec["actions"].insert(draw(st.integers(0, len(rec["actions"]))), act)
    return recs, noisy


def _load(recs: list[dict]) -> tuple[list[Question], GroupIndex]:
    return load_lines([json.dumps(r) for r in recs], "<test>", strict=True)


def _replay(recs: list[dict], budgets: list[float], seed: int) -> dict:
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit")
    runs = replay(qs, groups.keys, POLICIES, budgets, plan, policy_options={"seed": seed}, workers=1)
    return {(r.policy, r.budget): transcripts(r, qs) for r in runs}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_failed(), st.sampled_from([[0.0, 4.0], [1.0, 16.0], [2.5, 100.0]]), st.integers(0, 3))
def test_failed_actions_replay_as_if_absent(pair, budgets, seed):
    clean, noisy = pair
    assert _replay(noisy, budgets, seed) == _replay(clean, budgets, seed)
    # calibration: the same groups, the same fit
    (qa, ga), (qb, gb) = _load(clean), _load(noisy)
    assert ga.keys == gb.keys
    for mode in ("fit", "crossfit:2") if len(qa) >= 2 else ("fit",):
        pa = plan_calibration(qa, ga.keys, mode, seed=seed)
        pb = plan_calibration(qb, gb.keys, mode, seed=seed)
        assert pa.calibrations == pb.calibrations
    # the model path (the agent's planner) and the dict path agree
    for rec in noisy:
        g1, g2 = GroupIndex(), GroupIndex()
        a = Question.from_record(parse_record(rec), g1)
        b = Question.from_dict(parse_record_dict(rec), g2)
        assert a.action_ids == b.action_ids and not any(i.startswith("failed") for i in a.action_ids)
        assert np.array_equal(a.outcome, b.outcome) and g1.keys == g2.keys


def test_a_failed_action_keeps_the_record_rules():
    from boe.sim.ledgers import pool_ledger

    rec = next(iter(pool_ledger(1, seed=0)))
    rec["actions"].append(
        {
            "id": "x",
            "kind": "whole_response",
            "claim": None,
            "candidate": 99,
            "cost": 1,
            "group": "whole",
            "outcome": "unresolved",
            "failed": True,
        }
    )
    with pytest.raises(RecordError, match="candidate"):
        parse_record_dict(rec)
