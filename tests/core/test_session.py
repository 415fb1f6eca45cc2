"""The resumable policy session: step by step online equals the replay of the stored record, vetoes included."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.bayes import Bayes
from boe.core.calibration import Calibration
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record
from boe.core.literal import literal_calibration, literal_replay
from boe.core.loading import load_lines
from boe.core.replay import plan_calibration, replay, transcripts
from boe.core.session import Reveal, Session, SessionError, Skip
from tests.core.strategies import ledgers
from tests.core.test_replay import _same, _scramble

#: Every deployable policy (the session runs online, where no utility exists).
ONLINE = ["raw", "boe", "boe-factor", "random-factor", "whole", "bayes", "bayes-lookahead"]
DETERMINISTIC = ["raw", "boe", "boe-factor", "whole", "label-guided"]
BUDGETS = [0, 1, 2.5, 4, 8, 16, 100]


def _load(recs):
    return load_lines([json.dumps(r) for r in recs], "<test>", strict=True)


def _calibration(recs) -> Calibration:
    qs, groups = _load(recs)
    return plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]


def _offline(recs, policy, budget, cal, seed=0):
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "file", file_calibration=cal)
    run = replay(qs, groups.keys, [policy], [budget], plan, policy_options={"seed": seed}, workers=1)[0]
    return transcripts(run, qs)


def _drive(rec, cal, policy, budget, veto, seed=0):
    """Run a session on ``rec`` online: ``veto(action)`` decides each proposal; outcomes come from the record."""
    session = Session.from_record(parse_record(rec), cal, policy, budget, options={"seed": seed})
    outcome = {i: a["outcome"] for i, a in enumerate(a for a in rec["actions"] if not a.get("failed"))}
    vetoed = []
    while (a := session.next_action()) >= 0:
        if veto(a):
            session.skip(a, "veto")
            vetoed.append(a)
        else:
            session.reveal(a, outcome[a])
    return session, vetoed


def _stored(rec, vetoed):
    """The stored record of an online run: the vetoed actions carry ``skipped``."""
    out = copy.deepcopy(rec)
    ids = [a["id"] for a in out["actions"] if not a.get("failed")]
    for a in out["actions"]:
        if a["id"] in {ids[v] for v in vetoed}:
            a["skipped"] = "veto: a person said no"
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=3), st.sampled_from(ONLINE), st.sampled_from(BUDGETS), st.integers(0, 3), st.data())
def test_online_session_equals_the_replay_of_its_stored_record(recs, policy, budget, seed, data):
    """Drive the session proposal by proposal with random vetoes; the stored ledger replays to the same line."""
    cal = _calibration(recs)
    p_veto = data.draw(st.sampled_from([0.0, 0.3, 0.7]))
    stored, online, sessions = [], [], []
    for rec in recs:
        session, vetoed = _drive(rec, cal, policy, budget, lambda a: data.draw(st.floats(0, 1)) < p_veto, seed=seed)
        res = session.finish()
        assert res.spent <= budget + 1e-12 and len(set(res.actions)) == len(res.actions)
        assert set(res.actions).isdisjoint(res.skipped) and res.skipped == vetoed
        line = session.transcript()
        assert line["selected"] == res.selected and ("skipped" in line) == bool(vetoed)
        online.append(line)
        stored.append(_stored(rec, vetoed))
        sessions.append(session)
    assert _offline(stored, policy, budget, cal, seed) == online
    # a session rebuilt from its events (what a checkpoint keeps) is the same session
    for s, line in zip(sessions, online, strict=True):
        again = Session.from_events(s.question, cal, s.group_keys, policy, budget, s.events, options={"seed": seed})
        assert again.transcript() == line and again.steps == s.steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=3), st.sampled_from(ONLINE), st.sampled_from([1, 4, 8, 16]))
def test_online_relevance_skips_replay_exactly(recs, policy, budget):
    """Online, a proposal that no outcome of the affordable checks could turn into another answer is skipped
    (spec section 10); the stored record replays to the online line, and bayes never proposes one."""
    cal = _calibration(recs)
    for rec in recs:
        session = Session.from_record(parse_record(rec), cal, policy, budget)
        outcome = {i: a["outcome"] for i, a in enumerate(_menu(rec))}
        skipped = []
        while True:
            a, irrelevant = session.next_relevant()
            skipped += irrelevant
            if a < 0:
                break
            session.reveal(a, outcome[a])
        assert session.skipped() == skipped
        if policy.startswith("bayes"):
            assert not skipped
        assert _offline([_stored(rec, skipped)], policy, budget, cal) == [session.transcript()]


def _menu(rec):
    return [a for a in rec["actions"] if not a.get("failed")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(), st.sampled_from([0, 1, 3.5, 8, 100]), st.data())
def test_skipped_actions_replay_as_the_literal_reading(recs, budget, data):
    """Section 10 in the engine equals the literal reading for every deterministic policy."""
    for rec in recs:
        for a in rec["actions"]:
            if data.draw(st.integers(0, 3)) == 0:
                a["skipped"] = "veto"
    cal = literal_calibration([parse_record(r) for r in recs])
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit")
    runs = replay(qs, groups.keys, DETERMINISTIC, [budget], plan, workers=1)
    for run in runs:
        for rec, x in zip(recs, transcripts(run, qs), strict=True):
            y = literal_replay(parse_record(rec), cal, run.policy, budget)
            _same(x, y)
            assert x.get("skipped") == y.get("skipped")
            skipped = {a["id"] for a in rec["actions"] if "skipped" in a}
            assert set(x.get("skipped", [])) <= skipped and not skipped & set(x["actions"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=3), st.sampled_from(ONLINE))
def test_budget_zero_session_is_raw(recs, policy):
    cal = _calibration(recs)
    for rec in recs:
        session, _ = _drive(rec, cal, policy, 0, lambda a: False)
        raw = Session.from_record(parse_record(rec), cal, "raw", 0)
        if policy.startswith("bayes"):  # bayes selects by its posterior; it buys nothing at budget 0 all the same
            assert session.finish().actions == []
            continue
        assert session.finish() == raw.finish()
        assert session.finish().selected == session.raw_majority()[0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=3), st.sampled_from(ONLINE), st.integers(0, 10**6))
def test_sessions_never_read_utilities(recs, policy, seed):
    """With the calibration fixed, scrambled utilities and references change no online choice."""
    cal = _calibration(recs)
    other = _scramble(recs, np.random.default_rng(seed))
    for a, b in zip(recs, other, strict=True):
        x, _ = _drive(a, cal, policy, 8, lambda act: act % 3 == 1)
        y, _ = _drive(b, cal, policy, 8, lambda act: act % 3 == 1)
        assert x.events == y.events and x.finish() == y.finish()


def _pool_question(policy):
    """A pool question on which ``policy`` buys the most checks (bayes stops once none could change the answer)."""
    from boe.sim.ledgers import pool_ledger, pool_spec

    # slots that say nothing about correctness: the pool's structure settles nothing, the checks decide
    recs = list(pool_ledger(12, seed=3, spec=pool_spec("default", slot_good=0.5, slot_bad=0.5)))
    cal = _calibration(recs)
    rec = max(recs, key=lambda r: len(_drive(r, cal, policy, 16, lambda a: False)[0].events))
    return rec, cal


@pytest.mark.parametrize("policy", ["boe", "bayes-lookahead", "random-factor"])
def test_from_events_resumes_where_the_events_left_off(policy):
    rec, cal = _pool_question(policy)
    asked = iter(range(1000))
    full, vetoed = _drive(rec, cal, policy, 16, lambda a: next(asked) in (0, 2))
    events = full.events
    assert len(events) >= 3 and any(isinstance(e, Skip) for e in events), events
    g = GroupIndex()
    q = Question.from_record(parse_record(rec), g)
    for cut in range(len(events) + 1):
        s = Session.from_events(q, cal, g.keys, policy, 16, events[:cut])
        assert s.events == events[:cut]
        s.advance(events)
        assert s.transcript() == full.transcript() and s.steps == full.steps
    # advancing by extension applies only the new events (the policy state is continued, not rebuilt)
    s = Session.from_events(q, cal, g.keys, policy, 16, events[:2])
    state = s.state
    s.advance(events)
    assert s.state is state
    # events from another branch (a shorter or different history) replay from the start
    s.advance(events[:1])
    assert s.events == events[:1] and s.state is not state
    assert s.finish().spent == pytest.approx(sum(q.cost[e.action] for e in events[:1] if isinstance(e, Reveal)))


def test_events_that_do_not_follow_the_policy_are_refused():
    rec, cal = _pool_question("boe")
    s = Session.from_record(parse_record(rec), cal, "boe", 16)
    a = s.next_action()
    assert a >= 0
    other = next(i for i in range(s.question.n_actions) if i != a)
    with pytest.raises(SessionError, match="proposed action"):
        s.reveal(other, "confirm")
    with pytest.raises(SessionError, match="proposed action"):
        s.skip(other, "veto")
    with pytest.raises(SessionError, match="reason"):
        s.skip(a, "")
    with pytest.raises(SessionError, match="outcome"):
        s.reveal(a, "maybe")
    s.skip(a, "veto")
    assert s.next_action() != a
    stopped = s.stop("the user stopped")
    assert s.next_action() == -1 and s.finish().skipped == [a, *stopped]
    with pytest.raises(SessionError, match="stopped"):
        s.reveal(a, "confirm")
    with pytest.raises(SessionError, match="reads utilities"):
        Session.from_record(parse_record(rec), cal, "label-guided", 16)


def test_a_veto_differs_from_a_failed_check():
    """Why section 10 refuses an action when proposed instead of removing it from the start like a failed one.

    Removing an action from the start renumbers the menu (`random-factor` draws its priorities by
    position), and a menu without it can change choices made before the veto (`bayes-lookahead` values
    pairs that include it; the tie rule); the online run, which vetoed mid-way, bought differently.
    """
    from boe.sim.ledgers import pool_ledger

    recs = list(pool_ledger(20, seed=5))
    cal = _calibration(recs)
    differs = 0
    for rec in recs:
        asked = iter(range(1000))
        session, vetoed = _drive(rec, cal, "random-factor", 8, lambda a, asked=asked: next(asked) == 1)
        assert vetoed
        failed = copy.deepcopy(rec)
        ids = {_menu(rec)[v]["id"] for v in vetoed}
        for a in failed["actions"]:
            if a["id"] in ids:
                a["failed"] = True
        line = _offline([failed], "random-factor", 8, cal)[0]
        online = session.transcript()
        differs += line["actions"] != online["actions"]
        assert _offline([_stored(rec, vetoed)], "random-factor", 8, cal)[0] == online
    assert differs > 0


def test_v1_records_without_the_field_replay_unchanged_and_skip_is_validated():
    from boe.errors import RecordError

    base = {
        "format": "boe-ledger/1",
        "question_id": "q",
        "dataset": "d",
        "candidates": [{"index": 0, "answer": "a", "valid": True}, {"index": 1, "answer": "b", "valid": True}],
        "claims": [],
        "edges": [],
        "actions": [
            {"id": "w:0", "kind": "whole_response", "candidate": 0, "cost": 1, "group": "w", "outcome": "reject"},
            {"id": "w:1", "kind": "whole_response", "candidate": 1, "cost": 1, "group": "w", "outcome": "confirm"},
        ],
    }
    cal = Calibration(groups={"d/w": {"kappa": 0.8, "p": {"confirm": 0.5, "reject": 0.4, "unresolved": 0.1}}})
    plain = _offline([base], "whole", 4, cal)[0]
    assert "skipped" not in plain and plain["actions"] == ["w:0", "w:1"] and plain["selected"] == 1
    vetoed = copy.deepcopy(base)
    vetoed["actions"][0]["skipped"] = "veto"
    line = _offline([vetoed], "whole", 4, cal)[0]
    assert line["actions"] == ["w:1"] and line["skipped"] == ["w:0"] and math.isclose(line["cost"], 1)
    bad = copy.deepcopy(base)
    bad["actions"][0]["skipped"] = ""
    with pytest.raises(RecordError, match="skipped"):
        parse_record(bad)
