"""Decision relevance: a check marked irrelevant never changes the selected answer, by exhaustive enumeration."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.bayes import Bayes
from boe.core.loading import load_lines
from boe.core.policies import make_policy
from boe.core.relevance import POSTERIOR_FLOOR, TIE_LOG_POSTERIOR, knapsack_bound, posterior_relevance
from boe.core.replay import plan_calibration
from boe.core.session import Session
from boe.core.state import bind_questions
from boe.sim.ledgers import pool_ledger, pool_spec
from tests.core.strategies import records

OUTCOME_CODES = (1, -1, 0)


def _load(recs):
    return load_lines([json.dumps(r) for r in recs], "<test>", strict=True)


def _answers(state, policy) -> list[int]:
    """The selected answer (-1: an invalid candidate) of each row."""
    sel = policy.select(state)
    return [int(state.answer_id[r, s]) if state.candidate[r, s] else -1 for r, s in enumerate(sel.tolist())]


def _answer(state, policy) -> int:
    """The selected answer of a one-row state."""
    return _answers(state, policy)[0]


def _answers_after(state, policy, keys) -> list[int]:
    """The selected answer after buying each of ``keys`` (a tuple of (action, outcome code) purchases, bought in
    order) on a copy of ``state``: the keys of one size on one state of as many rows, row j buying key j."""
    out = [0] * len(keys)
    by_size: dict[int, list[int]] = {}
    for j, key in enumerate(keys):
        by_size.setdefault(len(key), []).append(j)
    for size, js in by_size.items():
        st = state.keep(np.zeros(len(js), dtype=np.intp))
        rows = np.arange(len(js))
        for pos in range(size):
            acts = np.array([keys[j][pos][0] for j in js], dtype=np.intp)
            outs = np.array([keys[j][pos][1] for j in js], dtype=np.int8)
            st.reveal(rows, acts, outs)
            policy.observe(st, rows, acts, outs)
        for j, answer in zip(js, _answers(st, policy), strict=True):
            out[j] = answer
    return out


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
    keys: list[tuple[tuple[int, int], ...]] = []
    for size in range(len(feasible) + 1):
        for subset in itertools.combinations(feasible, size):
            if sum(cost[a] for a in subset) > remaining + 1e-12:
                continue
            keys.extend(tuple(zip(subset, outs, strict=True)) for outs in itertools.product(OUTCOME_CODES, repeat=size))
    answers = dict(zip(keys, _answers_after(state, policy, keys), strict=True))
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


def _started_bayes():
    """A started `Bayes` on 40 pool questions at budget 16, its state (labels taken off) and their outcomes."""
    recs = list(pool_ledger(40, seed=5, spec=pool_spec("default", k=6)))
    qs, groups = _load(recs)
    cal = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]
    state = bind_questions(qs, np.arange(len(qs)), [cal], None, groups.keys, 16, with_labels=True)
    outcomes = state.labels.outcome
    state.labels = None
    policy = Bayes()
    policy.start(state)
    return state, outcomes, policy


def test_bayes_relevance_kept_between_steps_equals_the_bound_from_scratch():
    """`Bayes.relevant` keeps each latent's gain between steps, recomputed only where its rho, its checks or the
    row's selected answer changed: at every step of a run, on every row, on a subset of rows and after the rows
    are compacted, it equals `posterior_relevance` computed afresh from the state."""
    state, outcomes, policy = _started_bayes()

    def fresh(rows):
        ex = state.extra
        sel = policy.select(state)[rows]
        held = state.answer_id[rows][np.arange(rows.size), np.maximum(sel, 0)]
        has = (sel >= 0) & (held >= 0)
        now = np.where(has, held, 0).astype(np.intp)
        got = posterior_relevance(
            *(ex[k][rows] for k in ("bayes_lpost", "bayes_real", "bayes_rho", "bayes_claim", "bayes_c1", "bayes_c0")),
            state.feasible()[rows], state.cost[rows], (state.budget - state.spent)[rows], now,
        )  # fmt: skip
        return got & has[:, None]

    steps = bought = 0
    while True:
        every, some = np.arange(state.n), np.arange(0, state.n, 3)
        np.testing.assert_array_equal(policy.relevant(state, some), fresh(some))
        np.testing.assert_array_equal(policy.relevant(state), fresh(every))
        choice = policy.choose(state)
        go = np.nonzero(choice >= 0)[0]
        if go.size == 0:
            break
        outs = outcomes[go, choice[go]]
        state.reveal(go, choice[go], outs)
        policy.observe(state, go, choice[go], outs)
        steps, bought = steps + 1, bought + go.size
        if steps == 2:  # the replay compacts finished rows away
            keep = np.arange(state.n) % 4 != 1
            state, outcomes = state.keep(keep), outcomes[keep]
    assert steps >= 3 and bought >= 20


def test_bayes_observation_marks_its_latents_gain_stale():
    """An outcome moves its latent's rho: its kept gain is recomputed even where nothing else changed (the same
    checks left, here because the action is observed without being marked bought, the same selected answer)."""
    state, outcomes, policy = _started_bayes()
    policy.relevant(state)  # every needed gain computed and kept
    choice = policy.choose(state)
    go = np.nonzero(choice >= 0)[0]
    assert go.size >= 10
    policy.observe(state, go, choice[go], outcomes[go, choice[go]])
    policy.relevant(state)
    kept = state.extra["bayes_gain"].copy()
    state.extra["bayes_stale"][:] = True
    policy.relevant(state)
    np.testing.assert_array_equal(kept, state.extra["bayes_gain"])


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
    st.one_of(st.floats(0, 20), st.just(np.inf)),
)
def test_knapsack_bound_is_an_upper_bound(items, capacity):
    values = np.array([v for v, _ in items], dtype=np.float64)
    costs = np.array([c for _, c in items], dtype=np.float64)
    got = float(knapsack_bound(values[None], costs[None], np.array([capacity]))[0])
    best = 0.0
    for size in range(len(items) + 1):
        for subset in itertools.combinations(range(len(items)), size):
            if np.isfinite(costs[list(subset)]).all() and sum(costs[list(subset)]) <= capacity:
                best = max(best, float(values[list(subset)].sum()))
    assert got >= best - 1e-9
    if capacity == np.inf:  # an unbounded budget buys every available item (an inf cost is never available)
        assert got == pytest.approx(float(values[np.isfinite(costs)].sum()))


def _reference_posterior_relevance(lpost, real, rho, latent, c1, c0, feasible, cost, remaining, now):
    """`posterior_relevance` as first written: the knapsack bound on every row, the spread per action."""
    n, n_lat, _ = rho.shape
    q = np.arange(n)
    with np.errstate(divide="ignore"):
        lr = np.log(c1) - np.log(c0)
    act = feasible & np.any(lr != 0.0, axis=2)
    flat = (latent + q[:, None] * n_lat)[act]
    log_hi = np.bincount(flat, weights=lr.max(axis=2)[act], minlength=n * n_lat).reshape(n, n_lat, 1)
    log_lo = np.bincount(flat, weights=lr.min(axis=2)[act], minlength=n * n_lat).reshape(n, n_lat, 1)
    cheapest = np.full(n * n_lat, np.inf)
    np.minimum.at(cheapest, flat, cost[act])
    r_now = np.take_along_axis(rho, now[:, None, None], axis=2)

    def mix(log_r, log_p):
        return np.logaddexp(np.log(log_p) + log_r, np.log1p(-log_p))

    gain = np.maximum(mix(log_hi, rho) - mix(log_hi, r_now), mix(log_lo, rho) - mix(log_lo, r_now))
    bound = knapsack_bound(gain.transpose(0, 2, 1), cheapest.reshape(n, 1, n_lat), remaining[:, None])
    with np.errstate(over="ignore", invalid="ignore"):
        gap = lpost[q, now][:, None] - lpost
        rivals = np.where(np.arange(lpost.shape[1])[None, :] == now[:, None], 0.0, np.exp(bound - gap))
    floor = 1.0 / (1.0 + np.nan_to_num(rivals, nan=0.0).sum(axis=1)) >= POSTERIOR_FLOOR
    reach = real & ((bound >= gap - TIE_LOG_POSTERIOR) | ~floor[:, None])
    reach[q, now] = True
    several = reach.sum(axis=1) >= 2
    moved = reach | (~floor[:, None] & np.isfinite(lpost))
    rho_a = rho[q[:, None], latent]
    spread = np.where(moved[:, None, :], rho_a, -np.inf).max(axis=2) - np.where(moved[:, None, :], rho_a, np.inf).min(
        axis=2
    )
    return feasible & act & several[:, None] & (spread > 0)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 6), st.integers(2, 6), st.integers(1, 10))
def test_posterior_relevance_equals_the_plain_knapsack_on_every_row(seed, n, n_lat, h, a):
    """The loose bound that spares rows the knapsack changes no answer: random posteriors, latents and
    channels (some uninformative, some hypotheses absent, budgets from none to unbounded)."""
    rng = np.random.default_rng(seed)
    real = rng.random((n, h)) < 0.8
    real[:, 0] = True
    scale = rng.choice([0.01, 1.0, 10.0, 40.0])
    lpost = np.where(real, rng.normal(0, scale, (n, h)), -np.inf)
    lpost -= np.logaddexp.reduce(lpost, axis=1, keepdims=True)
    now = np.argmax(np.where(real, lpost, -np.inf), axis=1).astype(np.intp)
    rho = np.clip(rng.choice([0.5, 0.1, 0.9], (n, n_lat, h)) * rng.choice([1.0, 0.0], (n, n_lat, 1))
                  + rng.random((n, n_lat, h)) * rng.choice([0.0, 0.05, 1.0]), 1e-9, 1 - 1e-9)  # fmt: skip
    latent = rng.integers(0, n_lat, (n, a)).astype(np.intp)
    c1 = rng.dirichlet(np.ones(3), (n, a))
    c0 = np.where(rng.random((n, a, 1)) < 0.2, c1, rng.dirichlet(np.ones(3), (n, a)))  # some uninformative
    feasible = rng.random((n, a)) < 0.7
    cost = rng.choice([0.5, 1.0, 2.0, 5.0], (n, a))
    remaining = rng.choice([0.0, 0.5, 1.0, 3.0, 16.0, np.inf], n)
    args = (lpost, real, rho, latent, c1, c0, feasible, cost, remaining, now)
    np.testing.assert_array_equal(posterior_relevance(*args), _reference_posterior_relevance(*args))
