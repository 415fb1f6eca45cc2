"""Sampled pools (spec section 12): the engine against the literal reading, online equals offline, one budget."""

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
from boe.core.experiment import run_experiment
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record, parse_record_dict
from boe.core.literal import literal_calibration, literal_pool_replay, literal_prefix
from boe.core.loading import load_lines
from boe.core.policies import make_policy
from boe.core.pool import (
    AdaptivePool,
    Predictive,
    draw_values,
    fit_predictive,
    parse_pool,
    predictive_of,
    prefix_question,
)
from boe.core.replay import plan_calibration, replay, transcripts
from boe.core.session import Draw, Reveal, Session, SessionError, drawn
from boe.errors import ConfigError, RecordError
from boe.sim.ledgers import pool_ledger, pool_spec
from tests.core.strategies import ledgers

DETERMINISTIC = ["raw", "boe", "boe-factor", "whole", "label-guided"]
ONLINE = ["raw", "boe", "bayes", "whole", "bayes-lookahead"]


def sampled(rec: dict, cost: float) -> dict:
    """A record as format 1.3: candidate costs, only claims some candidate asserts, answer checks on their
    answer's first valid candidate, and (as the agent writes them) actions ordered by the first candidate that
    makes them available, so that a menu grows at its end as candidates are drawn."""
    out = copy.deepcopy(rec)
    asserted = {e["claim"] for e in out["edges"] if e["sign"] == 1}
    out["claims"] = [c for c in out["claims"] if c["id"] in asserted]
    out["edges"] = [e for e in out["edges"] if e["claim"] in asserted]
    first: dict[str, int] = {}
    for c in out["candidates"]:
        c["cost"] = cost
        if c["valid"] and c["answer"] is not None:
            first.setdefault(c["answer"].strip().lower(), c["index"])
    acts = []
    for a in out["actions"]:
        if a["claim"] is not None and a["claim"] not in asserted:
            continue
        if a["kind"] == "answer_response":
            a["candidate"] = first[out["candidates"][a["candidate"]]["answer"].strip().lower()]
        acts.append(a)
    first_assert = {}
    for e in sorted(out["edges"], key=lambda e: e["candidate"]):
        if e["sign"] == 1:
            first_assert.setdefault(e["claim"], e["candidate"])
    out["actions"] = sorted(acts, key=lambda a: first_assert[a["claim"]] if a["claim"] is not None else a["candidate"])
    out["format"] = "boe-ledger/1.3"
    return out


def _load(recs):
    return load_lines([json.dumps(r) for r in recs], "<test>", strict=True)


def _engine(recs, policies, budget, spec, cal, **opts):
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "file", file_calibration=Calibration.model_validate(cal))
    runs = replay(qs, groups.keys, policies, [budget], plan, pool=spec, policy_options=opts, workers=1)
    return {r.policy: transcripts(r, qs) for r in runs}


def _same(x, y):
    for key in ("selected", "actions", "samples", "draws"):
        assert x[key] == y[key], (key, x, y)
    assert x.get("skipped") == y.get("skipped"), (x, y)
    assert x["cost"] == y["cost"], (x, y)  # the spend rule is exact (spec section 12)
    assert np.allclose(x["scores"], y["scores"], rtol=0, atol=1e-12), (x, y)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ledgers(),
    st.sampled_from([0.5, 1, 2, 3.5, 4, 8, 16, 100]),
    st.sampled_from(["greedy", "fixed"]),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    st.booleans(),
    st.data(),
)
def test_engine_equals_literal_on_sampled_pools(recs, budget, mode, start, step, cost, as_13, data):
    """Every deterministic policy under a greedy pool (or a fixed pool of the first K) draws, buys and selects as
    the literal reading does, on 1.3 records and on older ones (with a default sample cost), skips included."""
    if as_13:
        recs = [sampled(r, cost) for r in recs]
    for r in recs:
        for a in r["actions"]:
            if data.draw(st.integers(0, 5)) == 0:
                a["skipped"] = "veto"
    cal = literal_calibration([parse_record(r) for r in recs])
    if mode == "greedy" and cost > budget:
        return  # a budget that cannot pay for the first sample: a usage error (tested below)
    spec = parse_pool("greedy" if mode == "greedy" else f"fixed:{start}", start=start, step=step, sample_cost=cost)
    got = _engine(recs, DETERMINISTIC, budget, spec, cal)
    for pol in DETERMINISTIC:
        for rec, x in zip(recs, got[pol], strict=True):
            y = literal_pool_replay(
                parse_record(rec),
                cal,
                pol,
                budget,
                start=start,
                step=step,
                sample_cost=cost,
                charge=mode == "greedy",
                greedy=mode == "greedy",
            )
            _same(x, y)


def test_fixed_k_of_every_candidate_is_the_fixed_pool():
    """``fixed:K`` with K the pool size replays exactly as the fixed pool (its transcript adds only the draws)."""
    recs = list(pool_ledger(40, seed=3, spec=pool_spec("answers", k=8)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=Bayes().fit_extra)
    for pol in ("boe", "whole", "bayes"):
        fixed = transcripts(replay(qs, groups.keys, [pol], [8.0], plan, workers=1)[0], qs)
        first = replay(qs, groups.keys, [pol], [8.0], plan, pool=parse_pool("fixed:8"), workers=1)[0]
        for x, y in zip(fixed, transcripts(first, qs), strict=True):
            assert y.pop("samples") == 8 and y.pop("draws") == [[0, 8]]
            assert x == y


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=4), st.sampled_from([1, 2, 4, 9.5, 16]), st.sampled_from(["greedy", "adaptive"]), st.data())
def test_budget_holds_and_candidates_are_drawn_in_order(recs, budget, mode, data):
    """No pool spends more than its budget; samples are drawn in order, at most K, and paid for."""
    cost = data.draw(st.sampled_from([0.25, 0.5, 1.0]))
    recs = [sampled(r, cost) for r in recs]
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(Bayes(), 1).fit_extra)
    spec = parse_pool(mode, start=data.draw(st.integers(1, 3)), step=data.draw(st.integers(1, 3)))
    for pol in ONLINE:
        run = replay(qs, groups.keys, [pol], [budget], plan, pool=spec, workers=1)[0]
        for r, (q, line) in enumerate(zip(qs, transcripts(run, qs), strict=True)):
            k = line["samples"]
            assert 1 <= k <= q.k
            assert line["cost"] <= budget
            assert [d[1] for d in line["draws"]] == sorted({d[1] for d in line["draws"]})
            ids = set(q.action_ids[a] for a in np.nonzero(q.need() <= k)[0])
            assert set(line["actions"]) <= ids  # bought only what the pool drawn made available
            checks = sum(float(q.cost[q.action_ids.index(a)]) for a in line["actions"])
            assert math.isclose(line["cost"], cost * k + checks, abs_tol=1e-9)
            assert run.samples_of(r, q) == k


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=3), st.sampled_from(ONLINE), st.sampled_from([2, 4, 16]), st.integers(1, 3), st.data())
def test_online_pool_that_grows_equals_the_replay_of_its_record(recs, policy, budget, step, data):
    """Online, a session holds only the candidates drawn so far and the menu they make (the record of the
    pool of k); on a draw it starts again on the larger record with the same events. Its decisions equal the
    adaptive replay of the full record, and of its own stored record."""
    recs = [sampled(r, 0.25) for r in recs]
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(Bayes(), 1).fit_extra)
    cal = plan.calibrations[0]
    mode = data.draw(st.sampled_from(["adaptive", "greedy"]))
    spec = parse_pool(mode, start=data.draw(st.integers(1, 3)), step=step)
    offline = transcripts(replay(qs, groups.keys, [policy], [budget], plan, pool=spec, workers=1)[0], qs)
    for rec, line in zip(recs, offline, strict=True):
        full = parse_record(rec)
        limit = len(full.candidates)
        k = min(spec.start, limit)
        events: list = []
        while True:
            prefix = literal_prefix(full, k)
            gi = GroupIndex()
            for key in groups.keys:  # the run's group ids, as one calibration serves every question
                gi.id(key)
            q = Question.from_record(prefix, gi)
            session = Session.from_events(q, cal, gi.keys, policy, budget, events[:], pool=spec, limit=limit)
            outcome = {a.id: a.outcome for a in prefix.actions}
            a = session.next_action()
            if a == -1:
                break
            if a >= 0:
                events.append(Reveal(a, outcome[prefix.actions[a].id]))
                continue
            k += drawn(a)  # sample the round, then go on from the same events on the larger record
            events.append(Draw(drawn(a)))
        got = session.transcript()
        for key in ("selected", "actions", "samples", "draws", "cost"):
            assert got[key] == line[key], (key, got, line)


def test_a_format_1_3_record_needs_costs_asserted_claims_and_first_representatives():
    rec = sampled(next(iter(pool_ledger(1, seed=1, spec=pool_spec("answers", k=6)))), 0.25)
    parse_record(rec)
    parse_record_dict(json.dumps(rec))
    bad = copy.deepcopy(rec)
    del bad["candidates"][2]["cost"]
    with pytest.raises(RecordError, match=r"candidates\[2\]\.cost"):
        parse_record(bad)
    bad = copy.deepcopy(rec)
    bad["candidates"][0]["cost"] = -1
    with pytest.raises(RecordError, match=r"candidates\[0\]\.cost"):
        parse_record(bad)
    bad = copy.deepcopy(rec)
    cid = bad["claims"][0]["id"]
    bad["edges"] = [e for e in bad["edges"] if not (e["claim"] == cid and e["sign"] == 1)]
    with pytest.raises(RecordError, match=r"claims\[0\]"):
        parse_record(bad)
    bad = copy.deepcopy(rec)
    answer = next(a for a in bad["actions"] if a["kind"] == "answer_response")
    key = bad["candidates"][answer["candidate"]]["answer"]
    later = [c["index"] for c in bad["candidates"] if c["answer"] == key and c["index"] > answer["candidate"]]
    if later:
        answer["candidate"] = later[0]
        with pytest.raises(RecordError, match=r"actions\[\d+\]\.candidate"):
            parse_record(bad)
    old = copy.deepcopy(rec)
    old["format"] = "boe-ledger/1.1"  # the same record as 1.1: its candidates' cost is an unknown key
    qs_old, _ = _load([old])
    qs_new, _ = _load([rec])
    assert qs_old[0].sample_cost is None and qs_new[0].sample_cost is not None


def test_sessions_refuse_draws_that_do_not_follow():
    rec = parse_record(sampled(next(iter(pool_ledger(1, seed=2, spec=pool_spec("default", k=6)))), 0.25))
    cal = Calibration()
    session = Session.from_record(rec, cal, "raw", 4.0, pool=parse_pool("greedy", start=2, step=2))
    assert session.next_action() == -4  # raw stops at once: the greedy pool draws 2
    with pytest.raises(SessionError, match="proposed to draw 2"):
        session.draw(1)
    session.draw(2)
    assert session.samples == 4
    with pytest.raises(SessionError):
        Session.from_record(rec, cal, "raw", 0.1, pool=parse_pool("greedy"))  # cannot pay the first sample


def test_pool_names_are_checked():
    assert parse_pool("fixed").mode == "fixed" and parse_pool("fixed:4").size == 4
    assert parse_pool("adaptive", start=3, step=1).label == "adaptive:3,1"
    for bad in ("fixed:0", "fixed:x", "adaptive:2", "sometimes"):
        with pytest.raises(ConfigError):
            parse_pool(bad)
    with pytest.raises(ConfigError):
        parse_pool("adaptive", start=0)


def _crp(n_questions: int, k: int, conc: float, disc: float, inv: float, seed: int) -> list[Question]:
    """Pools whose candidates follow the urn exactly."""
    rng = np.random.default_rng(seed)
    recs = []
    for q in range(n_questions):
        answers: list[str | None] = []
        counts: dict[str, int] = {}
        n_inv = 0
        for _ in range(k):
            w = [c - disc for c in counts.values()] + [conc + disc * len(counts), n_inv + inv]
            j = int(rng.choice(len(w), p=np.array(w) / sum(w)))
            if j == len(w) - 1:
                answers.append(None)
                n_inv += 1
            elif j == len(w) - 2:
                a = f"a{len(counts)}"
                counts[a] = 1
                answers.append(a)
            else:
                a = list(counts)[j]
                counts[a] += 1
                answers.append(a)
        recs.append(
            {
                "format": "boe-ledger/1",
                "question_id": f"q{q}",
                "dataset": "d",
                "candidates": [{"index": i, "answer": a, "valid": a is not None} for i, a in enumerate(answers)],
            }
        )
    qs, _ = _load(recs)
    return qs


def test_the_predictive_is_fitted_by_maximum_likelihood():
    """On pools drawn from a known urn, the fitted urn is close to it (no labels needed)."""
    got = fit_predictive(_crp(600, 12, conc=2.0, disc=0.3, inv=0.5, seed=4)).predictive["d"]
    assert 1.2 < got.concentration < 3.2
    assert 0.15 <= got.discount <= 0.45
    assert 0.25 < got.invalid < 1.0


def _prior(counts, k):
    from boe.core.bayes import prior_log

    return prior_log(counts, k, np.tile([0.0, 1.0, -3.0, 0.0], (counts.shape[0], 1)))[0]


def test_a_draw_that_cannot_change_the_answer_is_worth_nothing():
    """Four of four on one answer: one more sample cannot move the choice; a split pool's draw can."""
    pred = np.array([[Predictive().concentration, 0.0, Predictive().invalid]])
    for counts, worth in (([4.0, 0.0], False), ([2.0, 2.0], True), ([3.0, 1.0], True)):
        c = np.array([counts])
        k = np.array([sum(counts)])
        lpost = _prior(c, k)
        v1 = draw_values(lpost, _prior, c, k, np.zeros(1), pred, 1, np.array([0]))
        v4 = draw_values(lpost, _prior, c, k, np.zeros(1), pred, 4, np.array([0]))
        assert (v1[0] > 1e-9) == (counts == [2.0, 2.0])  # one sample changes a tie only
        assert (v4[0] > 1e-9) == worth
        assert 0 <= v1[0] <= v4[0] + 1e-12 <= 1


def test_adaptive_replay_of_a_simulated_ledger_beats_a_fixed_pool_of_the_same_cost():
    """A smoke test of the value rule on a fixed seed: at a budget covering samples and checks, the adaptive pool
    is at least as accurate as the fixed pool of its mean samples with what the budget leaves for checks (the
    same total per question), and it spends at most its budget."""
    recs = list(pool_ledger(200, seed=21, spec=pool_spec("default", sample_cost=0.25)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(make_policy("bayes"), 2).fit_extra)
    run = replay(qs, groups.keys, ["bayes"], [8.0], plan, pool=parse_pool("adaptive"), workers=1)[0]
    samples = int(round(float(np.mean([run.samples_of(r, q) for r, q in enumerate(qs)]))))
    left = 8.0 - 0.25 * samples
    fixed = replay(qs, groups.keys, ["bayes"], [left], plan, pool=parse_pool(f"fixed:{samples}"), workers=1)[0]
    acc = [float(np.mean([q.utility[x.selected[r]] for r, q in enumerate(qs)])) for x in (run, fixed)]
    assert float(run.cost.max()) <= 8.0
    assert acc[0] >= acc[1]


def test_the_pool_of_the_first_k_as_a_question_of_its_own_replays_as_fixed_k():
    """`prefix_question` is the pool of the first k (spec section 12): a fixed replay of it is the fixed:k replay."""
    recs = list(pool_ledger(40, seed=5, spec=pool_spec("default", sample_cost=0.25)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit")
    for k in (1, 3, 8, 16):
        sub = [prefix_question(q, k) for q in qs]
        assert [s.k for s in sub] == [min(k, q.k) for q in qs]
        fixed = replay(qs, groups.keys, ["boe", "whole"], [6.0], plan, pool=parse_pool(f"fixed:{k}"), workers=1)
        own = replay(sub, groups.keys, ["boe", "whole"], [6.0], plan, workers=1)
        for a, b in zip(fixed, own, strict=True):
            for r, (q, s) in enumerate(zip(qs, sub, strict=True)):
                assert a.selected[r] == b.selected[r]
                assert a.cost[r] == b.cost[r]
                assert [q.action_ids[i] for i in a.actions_of(r)] == [s.action_ids[i] for i in b.actions_of(r)]
                assert np.allclose(a.scores_of(r, s.k), b.scores_of(r, s.k), rtol=0, atol=1e-12)


def test_a_fixed_k_replays_metrics_read_its_own_pool():
    """Oracle@K, MajorityWrong, corrections and harms of ``fixed:K`` are those of the pool of the first K (raw BoN
    on the same K is the baseline), as for the questions cut to their first K; an adaptive pool's are of every
    candidate, the fixed pool it stands in for."""
    recs = list(pool_ledger(60, seed=5, spec=pool_spec("default", sample_cost=0.25)))
    qs, groups = _load(recs)
    cal = plan_calibration(qs, groups.keys, "fit").calibrations[0]
    fields = ("accuracy", "oracle_at_k", "majority_wrong", "corrections", "harms", "delta_acc")

    def metrics(questions, pool, policies=("boe",), calibration=cal):
        exp = run_experiment(
            questions, groups.keys, list(policies), [6.0], calibration=calibration, pool=pool, resamples=10
        )
        return [{f: getattr(r, f) for f in fields} for r in exp.rows]

    cut = metrics([prefix_question(q, 3) for q in qs], parse_pool("fixed"))
    assert metrics(qs, parse_pool("fixed:3")) == cut
    assert metrics(qs, parse_pool("fixed:3"), ("boe", "raw"))[0] == cut[0]  # the baseline whether raw is asked or not
    assert cut[0]["oracle_at_k"] < metrics(qs, parse_pool("fixed"))[0]["oracle_at_k"]
    whole = metrics(qs, parse_pool("fixed"), ("raw",))[0]
    adaptive = metrics(qs, parse_pool("adaptive"), ("bayes",), "fit")[0]
    assert (adaptive["oracle_at_k"], adaptive["majority_wrong"]) == (whole["oracle_at_k"], whole["majority_wrong"])


def test_the_posterior_of_a_pool_of_k_is_fitted_on_pools_of_k():
    """The adaptive pool's `bayes` model is fitted per pool size on the training pools' prefixes: on 4 samples
    and nothing else bought it is at least raw majority voting on those 4 (a model fitted on whole pools of 16
    only, applied to 4, fell to 0.47 against raw's 0.64 on the default regime)."""
    recs = list(pool_ledger(300, seed=26, spec=pool_spec("default", sample_cost=0.25)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(Bayes(), 2).fit_extra)
    pm = plan.calibrations[0].extra["pool"]
    assert pm["sizes"] == [4, 6, 8, 10, 12, 14, 16]
    assert {f"pool#k{k}" for k in pm["sizes"]} <= set(pm["bayes"]["priors"])
    adaptive = replay(qs, groups.keys, ["bayes"], [1.0], plan, pool=parse_pool("adaptive"), workers=1)[0]
    raw = replay(qs, groups.keys, ["raw"], [0.0], plan, pool=parse_pool("fixed:4"), workers=1)[0]
    assert all(adaptive.samples_of(r, q) == 4 for r, q in enumerate(qs))
    acc = [float(np.mean([q.utility[x.selected[r]] for r, q in enumerate(qs)])) for x in (adaptive, raw)]
    assert acc[0] >= acc[1]


def test_the_gain_of_a_draw_is_measured_on_the_training_pools():
    """The calibrated value of drawing on (`GainTable`): per pool size and confidence bin, what the larger pools
    of the training questions added to the chance of a right pick; nothing backwards, and on the default regime
    drawing from 4 to 16 pays more where the posterior of the 4 is least sure."""
    recs = list(pool_ledger(200, seed=26, spec=pool_spec("default", sample_cost=0.25)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(Bayes(), 2).fit_extra)
    table = (predictive_of(plan.calibrations[0]).gain or {})["pool"]
    g = np.asarray(table.gain)
    assert table.sizes == [4, 6, 8, 10, 12, 14, 16]
    assert g.shape == (7, len(table.edges) - 1, 7)
    assert table.questions == 200
    for i in range(7):
        assert np.all(g[i, :, : i + 1] == 0)
    assert np.all(np.abs(g) <= 1)
    assert g[0, :, -1].mean() > 0
    assert g[0, 0, -1] > g[0, -1, -1]


def test_a_price_keeps_checking_an_unsure_pick_and_stops_a_sure_one():
    """At a price eta, the adaptive pool keeps its controller's check while the pick could be wrong with more than
    eta per unit cost of that check -- the most checking on could gain -- even where that check alone cannot change
    the answer (myopic EVSI 0): on the misread regime it buys more checks than a pool whose controller stops at
    the price by EVSI alone (the rule before), and picks better; at price 0 nothing changes."""
    recs = list(pool_ledger(80, seed=21, spec=pool_spec("misread", sample_cost=0.25)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(make_policy("bayes"), 2).fit_extra)
    spec = parse_pool("adaptive")
    eta, budget = 0.005, 24.0

    def run(policy, **opts):
        return replay(qs, groups.keys, [policy], [budget], plan, pool=spec, policy_options=opts, workers=1)[0]

    def accuracy(r):
        return float(np.mean([q.utility[r.selected[i]] for i, q in enumerate(qs)]))

    priced = run("bayes", eta=eta)
    myopic = run(AdaptivePool(Bayes(eta=eta), spec.step, eta=eta, start=spec.start))
    checks = [r.cost - r.sample_cost for r in (priced, myopic)]
    assert float(priced.cost.max()) <= budget
    assert float(checks[0].mean()) > 2 * float(checks[1].mean())
    assert accuracy(priced) > accuracy(myopic)
    free = run("bayes", eta=0.0)
    same = run(AdaptivePool(Bayes(), spec.step, eta=0.0, start=spec.start))
    assert transcripts(free, qs) == transcripts(same, qs)


def test_a_price_tests_an_agreeing_pick_where_only_a_draw_can_change_it():
    """Where the candidates drawn agree no check can change the pick, and the controller proposes none; only a
    draw can. At a price the adaptive pool then tests the pick with the check most informative about it, on the
    terms of any check (while the pick could be wrong with more than eta per unit cost), and only while a draw
    is still possible: on `easy` at a sample price of 4 it tests agreeing pools a pool without the test never
    checks, within the budget, and picks no worse; at price 0 nothing changes."""
    recs = list(pool_ledger(300, seed=21, spec=pool_spec("easy", sample_cost=4.0)))
    qs, groups = _load(recs)
    plan = plan_calibration(qs, groups.keys, "fit", extra_fit=AdaptivePool(make_policy("bayes"), 1, start=3).fit_extra)
    spec = parse_pool("adaptive", start=3, step=1)
    budget = 150.0

    class Untested(AdaptivePool):
        def _test_pick(self, state, rows, wrong):
            return np.full(rows.size, -1, dtype=np.intp)

    def run(cls, eta):
        return replay(qs, groups.keys, [cls(Bayes(), 1, eta=eta, start=3)], [budget], plan, pool=spec, workers=1)[0]

    def tests_of_agreeing_pools(x):
        out = []
        for r, q in enumerate(qs):
            acts = x.actions_of(r).tolist()
            for j in range(len(acts)):
                k = max(after for before, after in x.draws[r] if before <= j)
                aid = q.answer_id[:k]
                if (aid >= 0).all() and len(set(aid.tolist())) == 1:
                    out.append((r, q, k, float(q.cost[acts[:j]].sum())))
        return out

    def accuracy(x):
        return float(np.mean([q.utility[x.selected[i]] for i, q in enumerate(qs)]))

    tested, untested = run(AdaptivePool, 0.004), run(Untested, 0.004)
    assert float(tested.cost.max()) <= budget and float(untested.cost.max()) <= budget
    found = tests_of_agreeing_pools(tested)
    assert len({r for r, *_ in found}) >= 20
    assert tests_of_agreeing_pools(untested) == []
    for _, q, k, checks in found:  # a draw was still possible: a candidate left and the budget for it
        assert k < q.k and 4.0 * (k + 1) + checks <= budget
    assert accuracy(tested) >= accuracy(untested)
    assert transcripts(run(AdaptivePool, 0.0), qs) == transcripts(run(Untested, 0.0), qs)


def test_a_replay_prices_samples_against_checks(tmp_path):
    """`boe replay --sample-cost C` (``sample_cost=C``) makes every candidate cost C whatever its record says: an
    adaptive pool pays C per sample drawn, draws fewer at a dearer price and checks more with what it saves; a
    fixed pool buys exactly the same checks (its samples are not paid from the budget)."""
    from boe.api import replay as replay_files
    from tests.conftest import write_ledger

    path = write_ledger(tmp_path / "easy.jsonl", pool_ledger(80, seed=26, spec=pool_spec("easy", sample_cost=0.25)))
    opts = {"policies": "bayes", "budgets": 60.0, "calibration": "fit", "eta": 0.002}
    own, dear = (replay_files(path, pool="adaptive", sample_cost=c, **opts).experiment.runs[0] for c in (None, 2.0))
    for run, cost in ((own, 0.25), (dear, 2.0)):
        assert run.samples is not None and run.sample_cost is not None
        assert np.allclose(run.sample_cost, cost * run.samples)
        assert float(run.cost.max()) <= 60.0
    assert dear.samples.mean() < own.samples.mean()
    assert (dear.cost - dear.sample_cost).mean() > (own.cost - own.sample_cost).mean()
    fixed = [replay_files(path, pool="fixed", sample_cost=c, **opts) for c in (None, 2.0)]
    assert list(fixed[0].transcripts()) == list(fixed[1].transcripts())
