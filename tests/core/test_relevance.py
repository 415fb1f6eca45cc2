"""Decision relevance: a check marked irrelevant never changes the selected answer, by exhaustive enumeration."""

from __future__ import annotations

import itertools
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.bayes import Bayes
from boe.core.loading import load_lines
from boe.core.policies import make_policy
from boe.core.relevance import knapsack_bound
from boe.core.replay import plan_calibration
from boe.core.session import Session
from boe.core.state import bind_questions
from boe.sim.ledgers import pool_ledger, pool_spec
from tests.core.strategies import records

OUTCOME_CODES = (1, -1, 0)


def _load(recs):
    return load_lines([json.dumps(r) for r in recs], "<test>", strict=True)


def _answer(state, policy) -> int:
    """The selected answer (-1: an invalid candidate) of a one-row state."""
    sel = int(policy.select(state)[0])
    return int(state.answer_id[0, sel]) if state.candidate[0, sel] else -1


def _after(state, policy, purchases) -> int:
    """The selected answer after buying ``purchases`` (action, outcome code) on a copy of ``state``."""
    st = state.keep(np.ones(1, dtype=bool))
    for a, o in purchases:
        rows, acts, outs = np.array([0]), np.array([a]), np.array([o], dtype=np.int8)
        st.reveal(rows, acts, outs)
        policy.observe(st, rows, acts, outs)
    return _answer(st, policy)


def _check_state(state, policy) -> int:
    """Enumerate every affordable set of feasible actions with every outcome; assert that no action the
    policy calls irrelevant is ever pivotal. Returns how many irrelevant actions were checked."""
    relevant = policy.relevant(state)[0]
    feasible = np.nonzero(state.feasible()[0])[0].tolist()
    irrelevant = [a for a in feasible if not relevant[a]]
    if not irrelevant:
        return 0
    remaining = float(state.budget[0] - state.spent[0])
    cost = state.cost[0]
    answers: dict[tuple[tuple[int, int], ...], int] = {}
    for size in range(len(feasible) + 1):
        for subset in itertools.combinations(feasible, size):
            if sum(cost[a] for a in subset) > remaining + 1e-12:
                continue
            for outs in itertools.product(OUTCOME_CODES, repeat=size):
                key = tuple(zip(subset, outs, strict=True))
                answers[key] = _after(state, policy, key)
    now = _answer(state, policy)
    for key, got in answers.items():
        for pos, (a, _) in enumerate(key):
            if a in irrelevant:
                without = key[:pos] + key[pos + 1 :]
                assert got == answers[without], (a, key, got, answers[without])
        if not any(relevant[feasible]):  # nothing relevant: no affordable set changes the answer
            assert got == now, (key, got, now)
    return len(irrelevant)


def _walk(recs, policy_name, budget, data) -> None:
    qs, groups = _load(recs)
    cal = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]
    state = bind_questions(qs, [0], [cal], None, groups.keys, budget, with_labels=True)
    outcomes = state.labels.outcome
    state.labels = None
    policy = make_policy(policy_name)
    policy.start(state)
    for _ in range(6):
        _check_state(state, policy)
        feasible = np.nonzero(state.feasible()[0])[0]
        if feasible.size == 0:
            break
        a = int(data.draw(st.sampled_from(feasible.tolist())))  # any purchase path, not only the policy's
        rows, acts, outs = np.array([0]), np.array([a]), outcomes[:1, [a]][0]
        state.reveal(rows, acts, outs)
        policy.observe(state, rows, acts, outs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    records(max_k=5, max_claims=3, max_actions=6),
    st.sampled_from(["boe", "whole", "bayes", "bayes-lookahead"]),
    st.sampled_from([1, 4, 8, 100]),
    st.data(),
)
def test_an_irrelevant_check_never_changes_the_answer(rec, policy, budget, data):
    """Whatever was bought so far: for every affordable set of feasible checks and every outcome, adding a
    check marked irrelevant leaves the selected answer as it was (and with nothing relevant, no set moves it)."""
    _walk([rec, {**rec, "question_id": "q-twin"}], policy, budget, data)


def test_irrelevance_is_found_on_generated_pools():
    """The bounds are not vacuous: on pool ledgers many feasible checks are irrelevant for both scores,
    and every check of a pool with one distinct valid answer is."""
    recs = list(pool_ledger(40, seed=3, spec=pool_spec("default", k=6)))
    qs, groups = _load(recs)
    cal = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]
    for name in ("boe", "bayes"):
        state = bind_questions(qs, np.arange(len(qs)), [cal], None, groups.keys, 16)
        policy = make_policy(name)
        policy.start(state)
        rel = policy.relevant(state)
        feas = state.feasible()
        assert rel.sum() < feas.sum()
        one = [i for i, q in enumerate(qs) if len({int(x) for x in q.answer_id if x >= 0}) == 1]
        if name == "bayes":
            assert not rel[one].any()


def test_a_unanimous_pool_costs_nothing_under_bayes():
    rec = next(iter(pool_ledger(1, seed=9, spec=pool_spec("default", k=8))))
    for c in rec["candidates"]:
        if c["valid"]:
            c["answer"] = "same"
    recs = [rec, *pool_ledger(30, seed=10, spec=pool_spec("default", k=8))]
    qs, groups = _load(recs)
    cal = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]
    from boe.core.ledger import parse_record

    session = Session.from_record(parse_record(rec), cal, "bayes", 16)
    assert session.next_action() == -1


@given(
    st.lists(st.tuples(st.floats(0, 5), st.sampled_from([0.5, 1, 2, 4, 8, np.inf])), min_size=0, max_size=7),
    st.floats(0, 20),
)
def test_knapsack_bound_is_an_upper_bound(items, capacity):
    values = np.array([v for v, _ in items], dtype=np.float64)
    costs = np.array([c for _, c in items], dtype=np.float64)
    got = float(knapsack_bound(values[None], costs[None], np.array([capacity]))[0])
    best = 0.0
    for size in range(len(items) + 1):
        for subset in itertools.combinations(range(len(items)), size):
            if sum(costs[list(subset)]) <= capacity:
                best = max(best, float(values[list(subset)].sum()))
    assert got >= best - 1e-9
