"""The `bayes` policies: the paper's theory as properties, exactness against a literal model, invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.bayes import (
    BAYES_KEY,
    Bayes,
    BayesLookahead,
    BayesModel,
    ChannelTable,
    ClaimParams,
    PriorParams,
    model_of,
    overrules_supported,
)
from boe.core.bayes_em import _mixture_weights, _small_unique
from boe.core.calibration import Calibration, load_calibration, save_calibration
from boe.core.experiment import load_questions, run_experiment
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.policies import make_policy
from boe.core.pool import parse_pool
from boe.core.replay import plan_calibration, replay, transcripts
from boe.core.state import bind_questions
from boe.errors import ConfigError
from boe.sim.ledgers import factor_code_ledger, pool_ledger, pool_spec
from tests.core.strategies import ledgers
from tests.core.test_replay import _scramble

OUT = {1: 0, -1: 1, 0: 2}


def _questions(recs, groups=None):
    return load_questions([parse_record_dict(r) for r in recs], groups if groups is not None else GroupIndex())


def _fitted(recs) -> Calibration:
    """Plug-in and `bayes` calibration fitted on ``recs`` (a separate ledger from the replayed one)."""
    qs, groups = _questions(recs)
    return plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]


def _replay(recs, policies, budgets, cal, **opts):
    qs, groups = _questions(recs)
    plan = plan_calibration(qs, groups.keys, "file", file_calibration=cal)
    runs = replay(qs, groups.keys, policies, budgets, plan, policy_options=opts, workers=1)
    return qs, {(r.policy, r.budget): r for r in runs}


def _success(qs, run) -> float:
    return float(np.mean([qs[i].utility[run.selected[i]] for i in range(len(qs))]))


def _within_mc(p_hat: float, p: float, n: int, z: float = 4.0) -> bool:
    return abs(p_hat - p) <= z * math.sqrt(max(p * (1 - p), 1e-12) / n) + 1e-12


# --------------------------------------------------------------------------- the paper's theory


@pytest.mark.slow
def test_factor_code_full_menu_identifies_the_answer_with_log2_k_checks():
    """M = 6, K = 64, factor cost 4, whole cost 8, budget 24: six factor checks, always right."""
    cal = _fitted(list(factor_code_ledger(300, m=6, seed=101)))
    qs, runs = _replay(list(factor_code_ledger(200, m=6, seed=102)), ["bayes", "bayes-lookahead"], [24], cal)
    for pol in ("bayes", "bayes-lookahead"):
        run = runs[pol, 24.0]
        assert _success(qs, run) == 1.0
        for i, q in enumerate(qs):
            bought = run.actions_of(i)
            assert len(bought) == 6 and all(q.is_factor[bought])


@pytest.mark.slow
def test_factor_code_candidate_checks_succeed_with_q_plus_one_over_k():
    """Whole-response checks only: success (q + 1) / K for the paper's `whole` and for `bayes` (q = 3 checks)."""
    n, k = 1500, 64
    cal = _fitted(list(factor_code_ledger(300, m=6, seed=201)))
    recs = list(factor_code_ledger(n, m=6, seed=202, with_factors=False))
    qs, runs = _replay(recs, ["whole", "bayes"], [24], cal)
    p = min((3 + 1) / k, 1.0)
    for pol in ("whole", "bayes"):
        assert _within_mc(_success(qs, runs[pol, 24.0]), p, n), (pol, _success(qs, runs[pol, 24.0]))
    assert all(len(runs["bayes", 24.0].actions_of(i)) == 3 for i in range(n))


@pytest.mark.parametrize("rho", [0.6, 0.75, 0.9, 1.0])
def test_noisy_factor_model_success_is_rho_to_the_m(rho):
    """K = 16, M = 4, binary-symmetric factor checks: after the four checks `bayes` succeeds with rho^4."""
    n = 1500
    cal = _fitted(list(factor_code_ledger(600, m=4, seed=301, rho=rho, with_whole=False)))
    qs, runs = _replay(list(factor_code_ledger(n, m=4, seed=302, rho=rho, with_whole=False)), ["bayes"], [16], cal)
    run = runs["bayes", 16.0]
    assert all(run.n_actions == 4)
    assert _within_mc(_success(qs, run), rho**4, n), (rho, _success(qs, run))


# --------------------------------------------------------------------------- exactness


def _aligned(q, j):
    aid = q.answer_id
    valid = aid >= 0
    groups = {}
    for i in np.nonzero(valid)[0]:
        groups.setdefault(int(aid[i]), set()).add(int(q.incidence[j][i]))
    return bool(valid.any()) and all(len(g) == 1 and 0 not in g for g in groups.values())


def _stance_evidence(q, cp, j, h):
    """P(stances_j | h) of a free claim, literally."""
    aid = q.answer_id
    s = q.incidence[j]
    ev = 0.0
    for t in (1, 0):
        w = cp.free_true if t == 1 else 1 - cp.free_true
        for i in np.nonzero(aid >= 0)[0]:
            w *= cp.stance[0 if aid[i] == h else 1][1 - t][{1: 0, -1: 1, 0: 2}[int(s[i])]]
        ev += w
    return ev


def _structure_weight(q, cp, prior, n):
    """lambda, or 0 where the structure alone would move the prior's mode to a minority answer without support."""
    d = n.size
    if d == 0 or overrules_supported(*cp.overrules):
        return cp.stance_weight
    free = [int(j) for j in np.unique(q.action_claim[q.is_factor]) if not _aligned(q, int(j))]
    with_structure = [
        math.log(prior[h]) + cp.stance_weight * sum(math.log(_stance_evidence(q, cp, j, h)) for j in free)
        for h in range(d)
    ]
    return 0.0 if n[int(np.argmax(with_structure))] < n.max() else cp.stance_weight


def _lik_claim(q, model, j, h, outcomes, lam):
    """sum_T P(stances_j, T | h) prod C(o | T) for a claim (aligned: P(T | h) instead), literally."""
    ds = q.dataset
    cp = model.claims.get(ds, ClaimParams())
    aid = q.answer_id
    valid = aid >= 0
    s = q.incidence[j]
    aligned = _aligned(q, j)
    total = 0.0
    for t in (1, 0):
        if aligned:
            tau = cp.aligned_true[2] if h < 0 else cp.aligned_true[0 if s[aid == h][0] == 1 else 1]
            w = tau if t == 1 else 1 - tau
        else:
            w = cp.free_true if t == 1 else 1 - cp.free_true
            for i in np.nonzero(valid)[0]:
                c = 0 if aid[i] == h else 1
                w *= cp.stance[c][1 - t][{1: 0, -1: 1, 0: 2}[int(s[i])]]
        for ch, o in outcomes:
            w *= (ch.given_true if t == 1 else ch.given_false)[o]
        total += w
    if not aligned:  # the stance evidence enters with weight lambda: P(stances | h)^lambda P(outcomes | h, stances)
        total *= _stance_evidence(q, cp, j, h) ** (lam - 1.0)
    return total


def _literal_standing(q, a):
    """The standing bin of the latent action ``a`` reads, from its definition (top x share of the pool)."""
    aid = q.answer_id
    valid = aid >= 0
    n_valid = max(int(valid.sum()), 1)
    if q.is_factor[a]:
        s = q.incidence[q.action_claim[a]][valid]
        n_a, top = int((s == 1).sum()), int((s == 1).sum()) > int((s == -1).sum())
    else:
        judged = int(aid[q.action_candidate[a]])
        counts = [int((aid == x).sum()) for x in range(int(aid.max()) + 1)] if valid.any() else [0]
        n_a = counts[judged] if judged >= 0 else 0
        top = judged >= 0 and n_a == max(counts)
    share = n_a / n_valid
    return 4 * int(top) + sum(share >= e for e in (0.2, 0.4, 0.6))


class _Cell:
    """A channel cell tempered by the check weight w: P(o | t) proportional to C(o | t)^w."""

    def __init__(self, table, b, w=1.0):
        self.given_true, self.given_false = (_temper(c, w) for c in table.at(b))


def _temper(c, w):
    if w == 1.0:
        return tuple(max(x, 1e-9) for x in c)
    p = [max(x, 1e-9) ** w for x in c]
    return tuple(x / sum(p) for x in p)


def _literal_joint(q, model, group_keys, history):
    """Unnormalised P(h, stances^lambda, outcomes) for every hypothesis (answers, then none)."""
    pp = model.priors.get(q.dataset, PriorParams())
    aid = q.answer_id
    d = int(aid.max()) + 1 if (aid >= 0).any() else 0
    n = np.array([float((aid == x).sum()) for x in range(d)])
    if d:
        z = pp.none_intercept + pp.none_slope * n.max() / q.k
        p_none = 1 / (1 + math.exp(-z))
        w = np.exp(pp.count_coef * n + pp.log_count_coef * np.log(n))
        prior = list((1 - p_none) * w / w.sum()) + [p_none]
    else:
        prior = [1.0]
    by_claim: dict[int, list] = {}
    by_answer: dict[int, list] = {}
    cw = model.claims.get(q.dataset, ClaimParams()).check_weight
    for a, o in history:
        key = group_keys[q.group[a]]
        b = _literal_standing(q, a)
        if q.is_factor[a]:
            by_claim.setdefault(int(q.action_claim[a]), []).append((_Cell(model.factor_channels[key], b, cw), OUT[o]))
        else:
            by_answer.setdefault(int(aid[q.action_candidate[a]]), []).append(
                (_Cell(model.whole_channels[key], b, cw), OUT[o])
            )
    for j in np.unique(q.action_claim[q.is_factor]):  # every claim's stances weigh in from the start
        by_claim.setdefault(int(j), [])
    cp = model.claims.get(q.dataset, ClaimParams())
    lam = _structure_weight(q, cp, prior, n if d else np.zeros(0))
    out = []
    for hi, ph in enumerate(prior):
        h = hi if hi < d else -1
        v = ph
        for j, outs in by_claim.items():
            v *= _lik_claim(q, model, j, h, outs, lam)
        for answer, outs in by_answer.items():  # the judge's latent verdict on each judged answer
            total = 0.0
            for t in (1, 0):
                pv = cp.verdict[0] if (answer >= 0 and answer == h) else cp.verdict[1]
                w = pv if t == 1 else 1 - pv
                for ch, o in outs:
                    w *= (ch.given_true if t == 1 else ch.given_false)[o]
                total += w
            v *= total
        out.append(v)
    return np.array(out), d


def _literal_evsi(q, model, group_keys, history, a):
    base, d = _literal_joint(q, model, group_keys, history)
    if d == 0:
        return 0.0
    gain = -base[:d].max()
    for o in (1, -1, 0):
        joint, _ = _literal_joint(q, model, group_keys, [*history, (a, o)])
        gain += joint[:d].max()
    return gain / base.sum()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(min_size=2, max_size=5), st.sampled_from([4, 9, 100]), st.sampled_from([None, 0.85, 0.4]))
def test_posterior_and_evsi_equal_a_literal_model(recs, budget, check_weight):
    """Every step: the vectorised posterior and EVSI equal brute-force sums under the fitted model
    (its fitted check weight, or one set to 0.85 / 0.4)."""
    qs, groups = _questions(recs)
    cal = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra).calibrations[0]
    if check_weight is not None:
        tempered = model_of(cal)
        for cp in tempered.claims.values():
            cp.check_weight = check_weight
        cal = cal.model_copy(update={"extra": {**cal.extra, "bayes": tempered.model_dump(mode="json")}})
    model = model_of(cal)
    pol = Bayes()
    state = bind_questions(qs, np.arange(len(qs)), [cal], None, groups.keys, budget, with_labels=True)
    outcomes = state.labels.outcome
    state.labels = None
    pol.start(state)
    for _ in range(40):
        post = pol.posterior(state)
        values = pol.values(state)
        for r, q in enumerate(qs):
            steps = state.steps[r]
            history = [(int(a), int(o)) for a, o in zip(state.log[r, :steps], state.revealed[r, :steps], strict=True)]
            joint, d = _literal_joint(q, model, groups.keys, history)
            expect = joint / joint.sum()
            got = np.concatenate([post[r, :d], post[r, -1:]])
            assert np.allclose(got, expect, rtol=1e-9, atol=1e-12)
            for a in range(q.n_actions):
                expect_value = _literal_evsi(q, model, groups.keys, history, a)
                assert math.isclose(values[r, a], expect_value, rel_tol=1e-7, abs_tol=1e-12)
        choice = pol.choose(state)
        choice = np.where(state.done, -1, choice)
        state.done |= choice < 0
        go = np.nonzero(choice >= 0)[0]
        if go.size == 0:
            break
        state.reveal(go, choice[go], outcomes[go, choice[go]])
        pol.observe(state, go, choice[go], outcomes[go, choice[go]])


# --------------------------------------------------------------------------- invariants


def _engine(recs, policies, budgets, cal=None, **opts):
    qs, groups = _questions(recs)
    if cal is None:
        plan = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra)
    else:
        plan = plan_calibration(qs, groups.keys, "file", file_calibration=cal)
    runs = replay(qs, groups.keys, policies, budgets, plan, policy_options=opts, workers=1)
    return {(r.policy, r.budget): transcripts(r, qs) for r in runs}


def _without_stances(cal: Calibration) -> Calibration:
    """The calibration with every stance weight set to 0: the prior is the answer counts' alone."""
    model = model_of(cal)
    for cp in model.claims.values():
        cp.stance_weight = 0.0
    return cal.model_copy(update={"extra": {**cal.extra, BAYES_KEY: model.model_dump(mode="json")}})


@settings(max_examples=80, deadline=None)
@given(ledgers())
def test_budget_zero_buys_nothing_and_without_stances_is_raw_majority(recs):
    """At budget 0 `bayes` selects its prior's mode; the answer-count part of the prior has the raw majority
    as its mode, so with the pool-structure (stance) weight at 0 it is raw BoN."""
    got = _engine(recs, ["raw", "bayes", "bayes-lookahead"], [0], cal=_without_stances(_fitted(recs)))
    for pol in ("bayes", "bayes-lookahead"):
        for x, y in zip(got[pol, 0.0], got["raw", 0.0], strict=True):
            assert x["actions"] == [] and x["selected"] == y["selected"]


def test_budget_zero_without_stances_is_raw_on_pool_ledgers():
    recs = list(pool_ledger(200, seed=5, spec=pool_spec("hard")))
    got = _engine(recs, ["raw", "bayes"], [0], cal=_without_stances(_fitted(recs)))
    assert [x["selected"] for x in got["bayes", 0.0]] == [x["selected"] for x in got["raw", 0.0]]


@settings(max_examples=80, deadline=None)
@given(ledgers(), st.sampled_from([1, 3, 5.5, 9, 17]), st.sampled_from([0.0, 0.001]))
def test_budget_respected_no_action_twice_scores_are_probabilities(recs, budget, eta):
    got = _engine(recs, ["bayes", "bayes-lookahead"], [budget], eta=eta)
    for lines in got.values():
        for rec, x in zip(recs, lines, strict=True):
            cost = {a["id"]: a["cost"] for a in rec["actions"]}
            assert len(set(x["actions"])) == len(x["actions"])
            assert sum(cost[a] for a in x["actions"]) <= budget + 1e-12
            s = np.array(x["scores"])
            assert np.all((s >= 0) & (s <= 1 + 1e-12))
            # the spec's tie rule: the first candidate within 1e-12 of the best score
            assert x["selected"] == int(np.argmax(s >= s.max() - 1e-12))


@settings(max_examples=40, deadline=None)
@given(ledgers(), st.integers(0, 10**6))
def test_never_reads_utilities(recs, seed):
    """With the calibration fixed, scrambling utilities and references changes no transcript."""
    cal = _fitted(recs)
    a = _engine(recs, ["bayes", "bayes-lookahead"], [4, 16], cal=cal)
    b = _engine(_scramble(recs, np.random.default_rng(seed)), ["bayes", "bayes-lookahead"], [4, 16], cal=cal)
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            x, y = dict(x), dict(y)
            x.pop("utility"), y.pop("utility")
            assert x == y


def test_eta_stops_and_fallback_spends():
    """eta above every value buys nothing; with eta = 0 `fallback="stop"` stops where `"info"` spends."""
    recs = list(pool_ledger(150, seed=21))
    cal = _fitted(list(pool_ledger(300, seed=22)))
    qs, runs = _replay(recs, ["bayes"], [16], cal, eta=1.0)
    assert runs["bayes", 16.0].n_actions.sum() == 0
    _, stop = _replay(recs, ["bayes"], [16], cal, fallback="stop")
    _, info = _replay(recs, ["bayes"], [16], cal, fallback="info")
    assert stop["bayes", 16.0].cost.mean() < info["bayes", 16.0].cost.mean()
    assert np.all(info["bayes", 16.0].cost >= stop["bayes", 16.0].cost)


# --------------------------------------------------------------------------- lookahead


def _pair_question():
    """Answer a (3 candidates) against b (2): one confirm of b is not enough, two are."""
    cands = [{"index": i, "answer": x, "valid": True, "utility": float(x == "b")} for i, x in enumerate("aaabb")]
    actions = [
        {
            "id": f"w:{i}",
            "kind": "whole_response",
            "claim": None,
            "candidate": i,
            "cost": 1,
            "group": "whole",
            "outcome": "confirm",
        }
        for i in (3, 4)
    ]
    rec = {
        "format": "boe-ledger/1",
        "question_id": "pair",
        "dataset": "toy",
        "task": {},
        "reference": "b",
        "candidates": cands,
        "claims": [],
        "edges": [],
        "actions": actions,
    }
    model = BayesModel(
        priors={"toy": PriorParams(count_coef=1.0, log_count_coef=0.0, none_intercept=-30.0)},
        whole_channels={"toy/whole": ChannelTable(given_true=(0.7, 0.3, 0.0), given_false=(0.3, 0.7, 0.0))},
    )
    cal = Calibration(extra={BAYES_KEY: model.model_dump(mode="json")})
    return [rec], cal


def test_lookahead_buys_a_pair_that_only_pays_together():
    recs, cal = _pair_question()
    qs, runs = _replay(recs, ["bayes", "bayes-lookahead"], [2], cal, fallback="stop")
    assert runs["bayes", 2.0].n_actions[0] == 0 and runs["bayes", 2.0].selected[0] == 0
    assert runs["bayes-lookahead", 2.0].n_actions[0] == 2
    assert qs[0].utility[runs["bayes-lookahead", 2.0].selected[0]] == 1.0
    # one check cannot pay: with budget 1 the pair is unaffordable
    _, one = _replay(recs, ["bayes-lookahead"], [1], cal, fallback="stop")
    assert one["bayes-lookahead", 1.0].n_actions[0] == 0


# --------------------------------------------------------------------------- fitting and files


def test_fit_recovers_channel_and_stance_parameters():
    spec = pool_spec("default")
    recs = list(pool_ledger(1500, seed=31, spec=spec))
    model = model_of(_fitted(recs))
    ch = model.factor_channels["pool/structured/modality"]
    s = spec.structured
    assert abs(ch.given_true[0] - (1 - s.unresolved) * s.acc) < 0.03
    assert abs(ch.given_false[0] - (1 - s.unresolved) * (1 - s.acc)) < 0.03
    wh = model.whole_channels["pool/whole"]
    w = spec.whole
    assert abs(wh.given_true[0] - (1 - w.unresolved) * w.acc) < 0.03
    assert abs(wh.given_false[1] - (1 - w.unresolved) * w.acc) < 0.03
    cp = model.claims["pool"]
    # "the answer is v" claims are aligned: true exactly when the correct answer's candidates assert them
    assert cp.aligned_true[0] > 0.95 and cp.aligned_true[1] < 0.05
    # a correct candidate asserts the true value more often than a wrong one
    assert cp.stance[0][0][0] > cp.stance[1][0][0] > cp.stance[1][1][0]
    prior = model.priors["pool"]
    assert prior.count_coef + prior.log_count_coef > 0


def _bisected_mixture_weights(loglik, cls, w, n_cls, steps=42):
    """The plain 42-step bisection `_mixture_weights` must reproduce to the last bit."""
    a = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    lo, hi = np.zeros(n_cls), np.ones(n_cls)
    for _ in range(steps):
        t = (lo + hi) / 2
        tr = t[cls]
        ratio = w * (a[:, 0] - a[:, 1]) / (tr * a[:, 0] + (1 - tr) * a[:, 1])
        up = np.bincount(cls, weights=ratio, minlength=n_cls) + 0.5 / t - 0.5 / (1 - t) > 0
        lo, hi = np.where(up, t, lo), np.where(up, hi, t)
    return (lo + hi) / 2


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 400),
    scale=st.sampled_from([0.01, 1.0, 8.0, 40.0]),
    shift=st.floats(-6, 6),
    seed=st.integers(0, 2**31),
    warm=st.booleans(),
)
def test_mixture_weights_equal_plain_bisection_bit_for_bit(n, scale, shift, seed, warm):
    rng = np.random.default_rng(seed)
    cls = rng.integers(0, 5, n)
    loglik = rng.normal(0, scale, (n, 2)) + [shift, 0.0]
    w = rng.choice([1.0, 0.5, 1 / 3], n)
    start = rng.uniform(0, 1, 5) if warm else None
    got = _mixture_weights(loglik, cls, w, 5, start=start)
    assert np.array_equal(got, _bisected_mixture_weights(loglik, cls, w, 5))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=300))
def test_small_unique_equals_numpy_unique(values):
    x = np.array(values, dtype=np.int64)
    got, want = _small_unique(x), np.unique(x, return_inverse=True)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_crossfit_fits_one_model_per_fold_on_named_groups():
    recs = list(pool_ledger(100, seed=41))
    qs, groups = _questions(recs)
    plan = plan_calibration(qs, groups.keys, "crossfit:4", extra_fit=Bayes().fit_extra)
    models = [model_of(c) for c in plan.calibrations]
    assert len(models) == 4
    assert all(set(m.factor_channels) | set(m.whole_channels) == set(groups.keys) for m in models)
    assert len({m.factor_channels["pool/vlm"].given_true for m in models}) == 4


def test_crossfit_folds_fitted_in_forked_workers_equal_the_serial_fit():
    recs = list(pool_ledger(90, seed=43))
    qs, groups = _questions(recs)
    serial = plan_calibration(qs, groups.keys, "crossfit:4", extra_fit=Bayes().fit_extra, workers=1)
    forked = plan_calibration(qs, groups.keys, "crossfit:4", extra_fit=Bayes().fit_extra, workers=2)
    assert [c.source for c in forked.calibrations] == [f"crossfit:4/fold{f}" for f in range(4)]
    assert [c.model_dump() for c in forked.calibrations] == [c.model_dump() for c in serial.calibrations]


def test_folds_fitted_here_and_in_workers_after_a_prepare_equal_the_serial_fit():
    qs, groups = _questions(list(pool_ledger(90, seed=43)))
    serial = plan_calibration(qs, groups.keys, "crossfit:4", extra_fit=Bayes().fit_extra, workers=1)
    pol = Bayes()
    forked = plan_calibration(
        qs, groups.keys, "crossfit:4", extra_fit=pol.fit_extra, workers=2, prepare=pol.prepare_fit
    )
    assert [c.model_dump() for c in forked.calibrations] == [c.model_dump() for c in serial.calibrations]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_folds_replayed_where_they_were_fitted_equal_a_replay_after_the_fit(monkeypatch, workers):
    monkeypatch.setenv("BOE_WORKERS", workers)
    qs, groups = _questions(list(pool_ledger(60, seed=47)))
    exp = run_experiment(qs, groups.keys, ["bayes", "boe"], [4, 16], calibration="crossfit:3", resamples=10)
    assert exp.plan.replayed == []  # handed to the replay, not kept
    again = replay(qs, groups.keys, ["bayes", "boe"], [4, 16], exp.plan, workers=1)
    assert [transcripts(r, qs) for r in exp.runs] == [transcripts(r, qs) for r in again]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_progress_counts_each_folds_rows_as_its_fit_arrives_and_every_row_once(monkeypatch, workers):
    monkeypatch.setenv("BOE_WORKERS", workers)
    qs, groups = _questions(list(pool_ledger(60, seed=47)))
    calls: list[int | str] = []
    import boe.core.experiment as experiment

    def marked(*args, **kwargs):  # the replay after the fits: anything counted later was not counted by a fit
        calls.append("replay")
        return replay(*args, **kwargs)

    monkeypatch.setattr(experiment, "replay", marked)
    exp = run_experiment(qs, groups.keys, ["bayes"], [4], calibration="crossfit:3", resamples=10, progress=calls.append)
    assert exp.plan.of_question is not None
    counted = [c for c in calls if c != "replay"]
    assert calls.index("replay") == len(counted)  # each fold counted as its fit arrived, the replays count none
    assert sorted(counted) == sorted(np.bincount(exp.plan.of_question, minlength=3).tolist())
    plain: list[int] = []  # no fitted extra: the folds are fitted first, the replay counts its batches
    run_experiment(qs, groups.keys, ["boe"], [4], calibration="crossfit:3", resamples=10, progress=plain.append)
    assert sum(plain) == len(qs)


def test_the_check_weight_folds_reuse_the_stance_weight_fits(monkeypatch):
    import boe.core.bayes_em as bayes_em

    calls = []
    em = bayes_em._em_claims
    monkeypatch.setattr(bayes_em, "_em_claims", lambda *a, **k: calls.append(1) or em(*a, **k))
    qs, groups = _questions(list(pool_ledger(60, seed=46)))
    plan_calibration(qs, groups.keys, "crossfit:3", extra_fit=Bayes().fit_extra, workers=1)
    # per outer fold: its own model and the 3 inner folds' (shared by the stance and the check weight)
    assert len(calls) == 3 * (1 + 3)


def test_calibration_file_round_trip_and_refusal(tmp_path):
    recs = list(pool_ledger(80, seed=51))
    cal = _fitted(recs)
    save_calibration(cal, tmp_path / "cal.json")
    back = load_calibration(tmp_path / "cal.json")
    assert model_of(back) == model_of(cal)
    qs, groups = _questions(recs)
    a = run_experiment(qs, groups.keys, ["bayes"], [8], calibration=back)
    b = run_experiment(qs, groups.keys, ["bayes"], [8], calibration=cal)
    assert np.array_equal(a.runs[0].selected, b.runs[0].selected)
    bare = plan_calibration(qs, groups.keys, "fit").calibrations[0]
    with pytest.raises(ConfigError, match="bayes"):
        run_experiment(qs, groups.keys, ["bayes", "boe"], [8], calibration=bare)


def test_unseen_dataset_falls_back_to_raw_and_uninformative_channels():
    cal = _fitted(list(pool_ledger(80, seed=61)))
    recs = list(pool_ledger(60, seed=62, spec=pool_spec("hard")))  # dataset "pool-hard" is not in the calibration
    got = _engine(recs, ["raw", "bayes"], [16], cal=cal)
    assert [x["selected"] for x in got["bayes", 16.0]] == [x["selected"] for x in got["raw", 16.0]]


def test_options_are_validated():
    with pytest.raises(ConfigError):
        make_policy("bayes", eta=math.inf)
    with pytest.raises(ConfigError):
        make_policy("bayes", fallback="maybe")
    with pytest.raises(ConfigError):
        BayesLookahead(shortlist=1)
    assert isinstance(make_policy("bayes-lookahead", shortlist=4, seed=3), BayesLookahead)


# --------------------------------------------------------------------------- issue 18: correlated channels


def test_standing_channels_learn_an_echoing_judge_and_pool_when_there_is_none():
    """With an echoing judge a false top claim is confirmed far more often than a false minority claim;
    without one, empirical-Bayes pooling keeps every standing cell at its group's table."""
    from boe.core.bayes_model import N_SHARE

    echo = model_of(_fitted(list(pool_ledger(800, seed=71, spec=pool_spec("echo")))))
    ch = echo.factor_channels["pool-echo/vlm"]
    top = [ch.standing[b][1][0] for b in range(N_SHARE, 2 * N_SHARE) if ch.standing_actions[b] > 200]
    low = [ch.standing[b][1][0] for b in range(N_SHARE) if ch.standing_actions[b] > 200]
    assert top and low and min(top) > max(low) + 0.05
    plain = model_of(_fitted(list(pool_ledger(800, seed=71))))
    ch = plain.factor_channels["pool/vlm"]
    for b, (t1, t0) in enumerate(ch.standing):
        assert np.allclose(t1, ch.given_true, atol=0.03) and np.allclose(t0, ch.given_false, atol=0.03), b


def test_prior_is_fitted_under_its_constraint_and_stays_raw_at_budget_zero():
    """Questions of any difficulty (Beta(1, 1)): the count logit hits its monotonicity bound; the prior
    is neither flat nor decreasing, and `bayes` at budget 0 is raw BoN."""
    spec = pool_spec("default", difficulty=(1.0, 1.0))
    recs = list(pool_ledger(600, seed=81, spec=spec))
    cal = _fitted(recs)
    p = model_of(cal).priors["pool"]
    assert p.count_coef + p.log_count_coef >= 1e-3 - 1e-9 and p.count_coef + p.log_count_coef / 16 >= 1e-3 - 1e-9
    assert p.count_coef > 0.1  # the old fallback was a flat prior (0.001, 0)
    got = _engine(recs, ["raw", "bayes"], [0], cal=_without_stances(cal))
    assert [x["selected"] for x in got["bayes", 0.0]] == [x["selected"] for x in got["raw", 0.0]]
    # the prior is calibrated in-sample: the top answer's mean probability is its frequency of being right
    qs, runs = _replay(recs, ["bayes"], [0], _without_stances(cal))
    conf = np.mean([runs["bayes", 0.0].scores[i, runs["bayes", 0.0].selected[i]] for i in range(len(qs))])
    assert abs(conf - _success(qs, runs["bayes", 0.0])) < 0.05


def test_stance_weight_discounts_redundant_claims():
    cp = model_of(_fitted(list(pool_ledger(600, seed=91)))).claims["pool"]
    assert 0.0 < cp.stance_weight < 1.0  # the values of one slot are one choice, not independent claims


def test_the_overrule_sign_test_is_exact_at_any_count():
    """The one-sided sign test behind `overrules_supported`, exact at every count: 2^n as a float overflowed
    from 1,024 held-out overrules on (a 3,000-question `misread-coherent` ledger has more) and the replay died."""
    # n = 20: P(at least 15 right | a coin) = 21,700 / 2^20 = 0.0207, P(at least 14) = 60,460 / 2^20 = 0.0577
    assert overrules_supported(15, 5) and not overrules_supported(14, 6)
    assert overrules_supported(14.6, 5.4) and not overrules_supported(0.4, 0)  # counts are rounded
    # past a float's range: z = 2.0 and 1.3 (n = 2,000), 3.7 and 1.5 (n = 3,000), 2.0 (n = 9,800)
    assert overrules_supported(1045, 955) and not overrules_supported(1030, 970)
    assert overrules_supported(1600, 1400) and not overrules_supported(1540, 1460)
    assert overrules_supported(5000, 4800) and not overrules_supported(0, 3000)


def test_check_weight_tempers_checks_that_repeat_one_reading():
    """The fitted check weight: every check recorded three times (one judge reading counted thrice, the
    extreme of correlated checks) is tempered well below the weight of the same ledger with each check once;
    old calibration files without the field read as untempered."""

    def repeated(rec, n):
        acts = [{**a, "id": f"{a['id']}#{i}"} for a in rec["actions"] for i in range(n)]
        return {**rec, "actions": acts}

    recs = list(pool_ledger(400, seed=91, spec=pool_spec("weak-judge")))
    weights = {}
    for n in (1, 3):
        cal = _fitted([repeated(r, n) for r in recs])
        (cp,) = model_of(cal).claims.values()
        weights[n] = cp.check_weight
    assert weights[3] <= weights[1] - 0.2
    assert ClaimParams.model_validate({"stance_weight": 0.5}).check_weight == 1.0


def test_explain_reports_every_purchase():
    recs = list(pool_ledger(40, seed=95, spec=pool_spec("echo-answers")))
    cal = _fitted(list(pool_ledger(400, seed=96, spec=pool_spec("echo-answers"))))
    qs, groups = _questions(recs)
    pol = Bayes()
    state = bind_questions(qs, np.arange(len(qs)), [cal], None, groups.keys, 16, with_labels=True)
    outcomes = state.labels.outcome
    state.labels = None
    pol.start(state)
    while True:
        choice = pol.choose(state)
        go = np.nonzero(choice >= 0)[0]
        if go.size == 0:
            break
        state.reveal(go, choice[go], outcomes[go, choice[go]])
        pol.observe(state, go, choice[go], outcomes[go, choice[go]])
    post = pol.posterior(state)
    kinds = set()
    for r in range(len(qs)):
        why = pol.explain(state, r)
        assert [w["action"] for w in why] == state.log[r, : state.steps[r]].tolist()
        for w in why:
            assert math.isclose(w["weight"], math.log(w["p_true"] / w["p_false"]))
            assert w["check_weight"] == model_of(cal).claims[qs[r].dataset].check_weight
            assert 0 <= w["lead_before"] <= 1 and 0 <= w["lead_after"] <= 1
            kinds.add(w["latent"])
        if why:
            d = int(qs[r].answer_id.max()) + 1
            assert math.isclose(why[-1]["lead_after"], post[r, :d].max(), rel_tol=1e-9)
    assert kinds == {"claim", "answer"}


def test_truthful_answer_checks_overturn_wrong_majorities_in_bayes():
    """A near-truthful answer judge: bayes rescues most wrong majorities that hold a correct candidate."""
    spec = pool_spec("answers", answer=pool_spec("answers").answer.__class__(0.98, 0.0, 8))
    cal = _fitted(list(pool_ledger(500, seed=97, spec=spec)))
    recs = list(pool_ledger(400, seed=98, spec=spec))
    qs, runs = _replay(recs, ["raw", "bayes"], [16], cal)
    raw, bayes = runs["raw", 16.0], runs["bayes", 16.0]
    fixable = [i for i in range(len(qs)) if qs[i].utility[raw.selected[i]] == 0 and qs[i].utility.max() == 1]
    rescued = sum(qs[i].utility[bayes.selected[i]] == 1 for i in fixable)
    # three in four: the fitted check weight (0.85 here) tempers the answer channel too; it rescues 74 of
    # 94 where the untempered model rescued 77, with fewer harms (accuracy 0.930 against 0.9275)
    assert fixable and rescued >= 0.75 * len(fixable)
    assert _success(qs, bayes) > _success(qs, raw) + 0.1


@pytest.mark.parametrize("pool", [None, "adaptive"])
def test_bayes_and_lookahead_in_one_replay_fit_each_fold_once_and_replay_as_apart(monkeypatch, pool):
    import boe.core.bayes as bayes

    monkeypatch.setenv("BOE_WORKERS", "1")  # the fits counted in this process
    calls = []
    fit = bayes.fit_bayes_model
    monkeypatch.setattr(bayes, "fit_bayes_model", lambda *a, **k: calls.append(1) or fit(*a, **k))
    qs, groups = _questions(list(pool_ledger(30, seed=48)))
    spec = parse_pool(pool) if pool else None
    both = run_experiment(
        qs, groups.keys, ["bayes", "bayes-lookahead"], [8], calibration="crossfit:2", resamples=0, pool=spec
    )
    fits = [len(calls)]
    apart = []
    for p in ("bayes", "bayes-lookahead"):
        apart += run_experiment(qs, groups.keys, [p], [8], calibration="crossfit:2", resamples=0, pool=spec).runs
        fits.append(len(calls) - sum(fits))
    assert fits[0] == fits[1] == fits[2] > 0, fits  # both policies together fit what either fits alone
    assert [transcripts(r, qs) for r in both.runs] == [transcripts(r, qs) for r in apart]


def test_a_deployable_calibration_of_both_bayes_policies_fits_the_model_once(monkeypatch):
    import boe.core.bayes as bayes
    from boe.core.experiment import fit_deployable_calibration

    calls = []
    fit = bayes.fit_bayes_model
    monkeypatch.setattr(bayes, "fit_bayes_model", lambda *a, **k: calls.append(1) or fit(*a, **k))
    qs, groups = _questions(list(pool_ledger(30, seed=49)))
    one = fit_deployable_calibration(qs, groups.keys, policies=["bayes"])
    alone = len(calls)
    both = fit_deployable_calibration(qs, groups.keys, policies=["bayes", "bayes-lookahead"])
    assert len(calls) == 2 * alone > 0
    assert both.extra == one.extra
