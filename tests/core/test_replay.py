"""The vectorised replay engine against a literal reading of the spec, and the invariants."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.calibration import Calibration
from boe.core.experiment import load_questions
from boe.core.ledger import parse_record, parse_record_dict
from boe.core.literal import literal_calibration, literal_replay
from boe.core.replay import plan_calibration, replay, transcripts
from boe.sim.ledgers import factor_code_ledger, pool_ledger
from tests.core.strategies import ledgers

DETERMINISTIC = ["raw", "boe", "boe-factor", "whole", "label-guided"]
DEPLOYABLE = ["raw", "boe", "boe-factor", "random-factor", "whole"]


def _questions(recs):
    return load_questions([parse_record_dict(r) for r in recs])


def _engine(recs, policies, budgets, cal=None, **opts):
    qs, groups = _questions(recs)
    if cal is None:
        plan = plan_calibration(qs, groups.keys, "fit")
    else:
        plan = plan_calibration(qs, groups.keys, "file", file_calibration=cal)
    runs = replay(qs, groups.keys, policies, budgets, plan, policy_options=opts, workers=1)
    return {(r.policy, r.budget): transcripts(r, qs) for r in runs}


def _same(x, y):
    assert x["selected"] == y["selected"], (x, y)
    assert x["actions"] == y["actions"], (x, y)
    assert math.isclose(x["cost"], y["cost"], abs_tol=1e-12)
    assert np.allclose(x["scores"], y["scores"], rtol=0, atol=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(), st.sampled_from([0, 1, 2, 3.5, 4, 8, 16, 100]), st.sampled_from([0.0, 0.0, 0.001, -0.01]))
def test_engine_equals_literal_spec(recs, budget, eta):
    """Every deterministic policy picks the same actions and candidate as the literal reading."""
    from boe.core.ledger import parse_record

    cal = literal_calibration([parse_record(r) for r in recs])
    got = _engine(recs, DETERMINISTIC, [budget], eta=eta)
    for pol in DETERMINISTIC:
        for rec, x in zip(recs, got[pol, float(budget)], strict=True):
            y = literal_replay(parse_record(rec), cal, pol, budget, eta=eta)
            _same(x, y)


@pytest.mark.parametrize(
    "recs",
    [
        pytest.param(list(pool_ledger(30, seed=11)), id="pool", marks=pytest.mark.slow),
        pytest.param(list(factor_code_ledger(30, m=4, seed=5, rho=0.8)), id="factor-code-noisy"),
        pytest.param(list(factor_code_ledger(10, m=6, seed=5)), id="factor-code-exact"),
    ],
)
def test_engine_equals_literal_on_generated_ledgers(recs):
    from boe.core.ledger import parse_record

    models = [parse_record(r) for r in recs]
    cal = literal_calibration(models)
    got = _engine(recs, DETERMINISTIC, [1, 4, 16, 24])
    for (pol, budget), lines in got.items():
        for rec, x in zip(models, lines, strict=True):
            _same(x, literal_replay(rec, cal, pol, budget))


@settings(max_examples=80, deadline=None)
@given(ledgers())
def test_budget_zero_is_raw_majority(recs):
    got = _engine(recs, DETERMINISTIC + ["random-factor"], [0])
    raw = got["raw", 0.0]
    for pol in DETERMINISTIC + ["random-factor"]:
        for x, y in zip(got[pol, 0.0], raw, strict=True):
            assert x["actions"] == [] and x["cost"] == 0
            assert x["selected"] == y["selected"]
    # raw selects a most frequent valid answer (lowest index among ties)
    for rec, x in zip(recs, raw, strict=True):
        keys = [
            c["answer"].strip().lower() if c["valid"] and c["answer"] is not None else None for c in rec["candidates"]
        ]
        counts = [keys.count(k) if k is not None else 0 for k in keys]
        assert x["selected"] == counts.index(max(counts))


@settings(max_examples=80, deadline=None)
@given(ledgers(), st.sampled_from([1, 3, 5.5, 9, 17]), st.integers(0, 5))
def test_budget_respected_and_no_action_twice(recs, budget, seed):
    got = _engine(recs, DETERMINISTIC + ["random-factor"], [budget], seed=seed)
    for lines in got.values():
        for rec, x in zip(recs, lines, strict=True):
            cost = {a["id"]: a["cost"] for a in rec["actions"]}
            assert len(set(x["actions"])) == len(x["actions"])
            assert sum(cost[a] for a in x["actions"]) <= budget + 1e-12
            assert math.isclose(x["cost"], sum(cost[a] for a in x["actions"]), abs_tol=1e-9)


def _scramble(recs, rng):
    out = copy.deepcopy(recs)
    for rec in out:
        rec["reference"] = "scrambled"
        for c in rec["candidates"]:
            c["utility"] = float(rng.integers(0, 2))
    return out


@settings(max_examples=60, deadline=None)
@given(ledgers(), st.integers(0, 10**6))
def test_deployable_policies_never_read_utilities(recs, seed):
    """With the calibration fixed, scrambling utilities and references changes no transcript."""
    qs, groups = _questions(recs)
    cal = plan_calibration(qs, groups.keys, "fit").calibrations[0]
    a = _engine(recs, DEPLOYABLE, [4, 16], cal=cal, seed=3)
    b = _engine(_scramble(recs, np.random.default_rng(seed)), DEPLOYABLE, [4, 16], cal=cal, seed=3)
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            x, y = dict(x), dict(y)
            x.pop("utility"), y.pop("utility")
            assert x == y


def _kappa_cal(recs, kappa):
    keys = {f"{r['dataset']}/{a['group']}" for r in recs for a in r["actions"]}
    p = {"confirm": 0.4, "reject": 0.35, "unresolved": 0.25}
    return Calibration(groups={k: {"kappa": kappa, "p": p} for k in keys})


@settings(max_examples=60, deadline=None)
@given(ledgers())
def test_kappa_half_changes_no_score(recs):
    got = _engine(recs, ["random-factor", "whole", "label-guided"], [16], cal=_kappa_cal(recs, 0.5))
    raw = _engine(recs, ["raw"], [16], cal=_kappa_cal(recs, 0.5))["raw", 16.0]
    for lines in got.values():
        for x, y in zip(lines, raw, strict=True):
            assert x["scores"] == y["scores"]
            assert x["selected"] == y["selected"]


@settings(max_examples=60, deadline=None)
@given(ledgers(), st.sampled_from([0.2, 0.35, 0.45]))
def test_kappa_below_half_reverses_direction(recs, kappa):
    """The same purchases under kappa and 1 - kappa move every logit by opposite amounts."""
    lo = _engine(recs, ["random-factor", "whole"], [16], cal=_kappa_cal(recs, kappa), seed=1)
    hi = _engine(recs, ["random-factor"], [16], cal=_kappa_cal(recs, 1 - kappa), seed=1)
    raw = _engine(recs, ["raw"], [0], cal=_kappa_cal(recs, kappa))["raw", 0.0]
    logit = lambda s: np.log(np.asarray(s) / (1 - np.asarray(s)))  # noqa: E731
    for x, y, r in zip(lo["random-factor", 16.0], hi["random-factor", 16.0], raw, strict=True):
        assert x["actions"] == y["actions"]  # random-factor ignores scores
        d_lo = logit(x["scores"]) - logit(r["scores"])
        d_hi = logit(y["scores"]) - logit(r["scores"])
        assert np.allclose(d_lo, -d_hi, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(ledgers())
def test_unresolved_outcomes_change_no_score(recs):
    unresolved = copy.deepcopy(recs)
    for rec in unresolved:
        for a in rec["actions"]:
            a["outcome"] = "unresolved"
    got = _engine(unresolved, ["random-factor", "whole"], [16], cal=_kappa_cal(recs, 0.8))
    raw = _engine(unresolved, ["raw"], [16], cal=_kappa_cal(recs, 0.8))["raw", 16.0]
    for lines in got.values():
        for x, y in zip(lines, raw, strict=True):
            assert x["scores"] == y["scores"]


def test_random_factor_is_seeded_and_uniform():
    recs = list(pool_ledger(40, seed=3))
    a = _engine(recs, ["random-factor"], [8], seed=1)["random-factor", 8.0]
    b = _engine(recs, ["random-factor"], [8], seed=1)["random-factor", 8.0]
    c = _engine(recs, ["random-factor"], [8], seed=2)["random-factor", 8.0]
    assert a == b and a != c
    kinds = {a_["id"]: a_["kind"] for r in recs for a_ in r["actions"]}
    assert all(kinds[x] != "whole_response" for t in a for x in t["actions"])
    # the first draw is uniform over the feasible factor actions
    rec = recs[0]
    feasible = [x["id"] for x in rec["actions"] if x["kind"] != "whole_response" and x["cost"] <= 8]
    firsts = [_engine([rec], ["random-factor"], [8], seed=s)["random-factor", 8.0][0]["actions"][0] for s in range(600)]
    freq = np.array([firsts.count(f) for f in feasible]) / len(firsts)
    assert set(firsts) <= set(feasible)
    assert np.abs(freq - 1 / len(feasible)).max() < 0.06


def test_parallel_replay_equals_serial(monkeypatch):
    import importlib

    replay_mod = importlib.import_module("boe.core.replay")

    recs = list(pool_ledger(150, seed=9))
    qs, groups = _questions(recs)
    plan = plan_calibration(qs, groups.keys, "crossfit:3")
    pols = ["boe", "random-factor", "label-guided", "whole"]
    serial = replay(qs, groups.keys, pols, [2, 16], plan, workers=1)
    monkeypatch.setattr(replay_mod, "BATCH_ELEMENTS", 40_000)
    par = replay(qs, groups.keys, pols, [2, 16], plan, workers=2)
    for a, b in zip(serial, par, strict=True):
        assert transcripts(a, qs) == transcripts(b, qs)


def test_batches_are_split_so_the_workers_share_the_work(monkeypatch):
    """With 2 processes no batch holds most questions (3,000 were split 2,941 + 59: one worker did nearly all),
    and the replay equals the serial one."""
    import importlib

    replay_mod = importlib.import_module("boe.core.replay")

    recs = list(pool_ledger(150, seed=9))
    qs, groups = _questions(recs)
    monkeypatch.setattr(replay_mod, "MIN_SPLIT_ELEMENTS", 1_000)
    rows = np.arange(len(qs))
    assert len(replay_mod._batches(qs, rows)) == 1  # one process: one batch, as before
    split = replay_mod._batches(qs, rows, parts=2)
    assert len(split) >= 4 and max(len(b) for b in split) <= len(qs) // 2
    assert sorted(np.concatenate(split).tolist()) == rows.tolist()
    plan = plan_calibration(qs, groups.keys, "crossfit:3")
    pols = ["boe", "boe-factor", "random-factor", "label-guided", "whole"]
    serial = replay(qs, groups.keys, pols, [2, 16], plan, workers=1)
    par = replay(qs, groups.keys, pols, [2, 16], plan, workers=2)
    for a, b in zip(serial, par, strict=True):
        assert transcripts(a, qs) == transcripts(b, qs)


# --- hand-computed golden cases -------------------------------------------------

W55 = math.log(0.55 / 0.45)


def _golden(actions, answers=("a", "a", "b"), utility=(0, 0, 1), edges=None):
    edges = (
        edges
        if edges is not None
        else [
            {"candidate": 0, "claim": "x", "sign": -1},
            {"candidate": 1, "claim": "x", "sign": -1},
            {"candidate": 2, "claim": "x", "sign": 1},
        ]
    )
    return {
        "format": "boe-ledger/1",
        "question_id": "g",
        "dataset": "d",
        "reference": "b",
        "candidates": [
            {"index": i, "answer": a, "valid": True, "utility": float(u)}
            for i, (a, u) in enumerate(zip(answers, utility, strict=True))
        ],
        "claims": [{"id": "x", "slot": "finding", "value": "mass"}],
        "edges": edges,
        "actions": actions,
    }


def test_golden_minority_rescued_by_a_confirmed_claim():
    # K = 3, answers a, a, b: n = (2, 2, 1), logit s(0) = wt(0.55) * (n - 1.5)
    rec = _golden([{"id": "v:x", "kind": "vlm_factor", "claim": "x", "cost": 4, "group": "vlm", "outcome": "confirm"}])
    cal = Calibration(groups={"d/vlm": {"kappa": 0.8, "p": {"confirm": 0.5, "reject": 0.3, "unresolved": 0.2}}})
    got = _engine([rec], ["raw", "boe"], [4], cal=cal)
    raw, boe = got["raw", 4.0][0], got["boe", 4.0][0]
    s0 = [1 / (1 + math.exp(-W55 * 0.5))] * 2 + [1 / (1 + math.exp(W55 * 0.5))]
    assert raw["selected"] == 0 and np.allclose(raw["scores"], s0)
    # confirm of x: candidates 0, 1 move by -log 4, candidate 2 by +log 4
    w = math.log(4)
    s1 = [1 / (1 + math.exp(-(W55 * 0.5 - w)))] * 2 + [1 / (1 + math.exp(-(-W55 * 0.5 + w)))]
    assert boe["actions"] == ["v:x"] and boe["selected"] == 2 and boe["cost"] == 4
    assert np.allclose(boe["scores"], s1)
    # plug-in EVSI by hand: 0.5 * s(up) + 0.3 * s(down) + 0.2 * s0max - s0max > 0
    s_now = s0[0]
    s_conf = 1 / (1 + math.exp(-(-W55 * 0.5 + w)))
    s_rej = 1 / (1 + math.exp(-(W55 * 0.5 + w)))
    assert 0.5 * s_conf + 0.3 * s_rej + 0.2 * s_now - s_now > 0


def test_golden_stop_when_value_is_negative():
    # a reject-heavy channel on the leaders' own claim: expected best score falls, boe buys nothing
    rec = _golden(
        [{"id": "v:x", "kind": "vlm_factor", "claim": "x", "cost": 1, "group": "vlm", "outcome": "reject"}],
        edges=[{"candidate": 0, "claim": "x", "sign": 1}, {"candidate": 1, "claim": "x", "sign": 1}],
    )
    p = {"confirm": 0.05, "reject": 0.6, "unresolved": 0.35}
    cal = Calibration(groups={"d/vlm": {"kappa": 0.6, "p": p}})
    s = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    w, lead = math.log(0.6 / 0.4), W55 * 0.5
    evsi = p["confirm"] * s(lead + w) + p["reject"] * s(max(lead - w, -lead)) + p["unresolved"] * s(lead) - s(lead)
    assert evsi < 0
    boe = _engine([rec], ["boe"], [4], cal=cal)["boe", 4.0][0]
    assert boe["actions"] == [] and boe["selected"] == 0
    # with the masses flipped the value is positive and the check is bought
    cal = Calibration(groups={"d/vlm": {"kappa": 0.6, "p": {"confirm": 0.6, "reject": 0.05, "unresolved": 0.35}}})
    boe = _engine([rec], ["boe"], [4], cal=cal)["boe", 4.0][0]
    assert boe["actions"] == ["v:x"] and boe["selected"] == 2


def test_golden_whole_checks_follow_the_current_leader():
    acts = [
        {"id": f"w:{i}", "kind": "whole_response", "candidate": i, "cost": 8, "group": "whole", "outcome": o}
        for i, o in ((2, "confirm"), (0, "reject"), (1, "reject"))
    ]
    rec = _golden(acts, edges=[])
    cal = Calibration(groups={"d/whole": {"kappa": 0.7, "p": {"confirm": 0.4, "reject": 0.4, "unresolved": 0.2}}})
    got = _engine([rec], ["whole"], [16], cal=cal)["whole", 16.0][0]
    # leader is candidate 0 (tie with 1, lowest index), rejected; then 1 leads, rejected; budget spent
    assert got["actions"] == ["w:0", "w:1"] and got["selected"] == 2 and got["cost"] == 16


def test_golden_label_guided_reads_revealed_outcomes():
    acts = [
        {"id": "s:x", "kind": "structured", "claim": "x", "cost": 1, "group": "s", "outcome": "unresolved"},
        {"id": "v:x", "kind": "vlm_factor", "claim": "x", "cost": 1, "group": "vlm", "outcome": "confirm"},
    ]
    rec = _golden(acts)
    cal = Calibration(
        groups={
            "d/s": {"kappa": 0.9, "p": {"confirm": 0.5, "reject": 0.5, "unresolved": 0.0}},
            "d/vlm": {"kappa": 0.9, "p": {"confirm": 0.5, "reject": 0.5, "unresolved": 0.0}},
        }
    )
    got = _engine([rec], ["label-guided", "boe"], [1], cal=cal)
    assert got["label-guided", 1.0][0]["actions"] == ["v:x"]  # the one that flips to the correct answer
    assert got["label-guided", 1.0][0]["selected"] == 2
    assert got["boe", 1.0][0]["actions"] == ["s:x"]  # same value and cost: first in file order


def test_transition_identity_holds():
    from boe.core.metrics import summarize

    recs = list(pool_ledger(200, seed=4))
    qs, groups = _questions(recs)
    plan = plan_calibration(qs, groups.keys, "fit")
    runs = replay(qs, groups.keys, ["raw", "boe", "whole", "random-factor"], [4, 16], plan, workers=1)
    raw = runs[0]
    rows = summarize(qs, runs, raw)
    acc_raw = {r.dataset: r.accuracy for r in rows if r.policy == "raw"}
    for r in rows:
        assert r.delta_acc == pytest.approx(r.accuracy - acc_raw[r.dataset], abs=1e-12)
        assert r.delta_acc == pytest.approx((r.corrections - r.harms) / r.n, abs=1e-12)
        if r.majority_wrong:
            assert r.rescue_rate == pytest.approx(r.corrections / r.majority_wrong)


def test_saturated_scores_follow_the_tie_rule():
    """Huge logits make many scores equal within 1e-12; the engine still matches the literal reading."""
    from boe.core.ledger import parse_record

    recs = list(pool_ledger(25, seed=12))
    models = [parse_record(r) for r in recs]
    lit = literal_calibration(models, cheap_kappa=0.9999)
    lit["groups"] = {k: dict(g, kappa=0.9995 if i % 2 else 0.0007) for i, (k, g) in enumerate(lit["groups"].items())}
    cal = Calibration.model_validate(lit)
    got = _engine(recs, DETERMINISTIC, [4, 16, 40], cal=cal)
    for (pol, budget), lines in got.items():
        for rec, x in zip(models, lines, strict=True):
            _same(x, literal_replay(rec, lit, pol, budget))


# --- revision 1.1: answer-level checks and the stop rule's tie tolerance --------------


def _majority_record(n_wrong=13, n_right=3, outcomes=("reject", "confirm")):
    """A wrong majority ("no", many candidates) and a right minority ("yes"), one answer check each."""
    answers = ["no"] * n_wrong + [" Yes"] * n_right
    k = len(answers)
    reps = (0, n_wrong)  # the first candidate of each answer
    return {
        "format": "boe-ledger/1.1",
        "question_id": "m",
        "dataset": "d",
        "reference": "yes",
        "candidates": [
            {"index": i, "answer": a, "valid": True, "utility": float(a.strip().lower() == "yes")}
            for i, a in enumerate(answers)
        ]
        + [{"index": k, "answer": "yes", "valid": False, "utility": 1.0}],
        "claims": [],
        "edges": [],
        "actions": [
            {"id": f"a:{i}", "kind": "answer_response", "candidate": r, "cost": 8, "group": "answer", "outcome": o}
            for i, (r, o) in enumerate(zip(reps, outcomes, strict=True))
        ]
        + [
            {"id": f"w:{i}", "kind": "whole_response", "candidate": i, "cost": 8, "group": "whole", "outcome": "reject"}
            for i in range(3)
        ],
    }


def test_truthful_answer_checks_overturn_a_wrong_majority_within_answers_times_cost():
    rec = _majority_record()
    p = {"confirm": 0.4, "reject": 0.4, "unresolved": 0.2}
    cal = Calibration(groups={"d/answer": {"kappa": 0.95, "p": p}, "d/whole": {"kappa": 0.95, "p": p}})
    got = _engine([rec], ["raw", "whole"], [16], cal=cal)
    assert got["raw", 16.0][0]["selected"] == 0
    # 2 distinct answers x cost 8: with the answer checks alone, both fit in 16 and the minority answer wins
    answers_only = dict(rec, actions=rec["actions"][:2])
    boe = _engine([answers_only], ["boe"], [16], cal=cal)["boe", 16.0][0]
    assert boe["actions"] == ["a:1", "a:0"] and boe["cost"] == 16
    assert boe["selected"] == 13 and boe["utility"] == 1.0
    # the whole policy treats an answer check as a response check on its representative
    whole = got["whole", 16.0][0]
    assert whole["actions"][0] == "a:0"  # leader 0: its answer check comes first in file order
    # one reject moves all 13 "no" candidates (the invalid "yes" and the others are untouched)
    w = math.log(0.95 / 0.05)
    lg0 = [W55 * (13 - 17 / 2)] * 13 + [W55 * (3 - 17 / 2)] * 3 + [W55 * (0 - 17 / 2)]
    after = _engine([rec], ["whole"], [8], cal=cal)["whole", 8.0][0]
    want = [1 / (1 + math.exp(-(x - w))) for x in lg0[:13]] + [1 / (1 + math.exp(-x)) for x in lg0[13:]]
    assert after["actions"] == ["a:0"] and np.allclose(after["scores"], want, atol=1e-12)
    models = [parse_record(rec)]
    lit = literal_calibration(models)
    for pol in DETERMINISTIC:
        for b in (8, 16, 24):
            _same(_engine([rec], [pol], [b])[pol, float(b)][0], literal_replay(models[0], lit, pol, b))


def test_v1_records_replay_the_same_under_format_1_1():
    recs = list(pool_ledger(40, seed=21))
    relabelled = copy.deepcopy(recs)
    for r in relabelled:
        r["format"] = "boe-ledger/1.1"
    a = _engine(recs, DETERMINISTIC + ["random-factor"], [4, 16])
    b = _engine(relabelled, DETERMINISTIC + ["random-factor"], [4, 16])
    assert a == b


def _stop_record():
    return _golden([{"id": "v:x", "kind": "vlm_factor", "claim": "x", "cost": 4, "group": "vlm", "outcome": "confirm"}])


def test_stop_rule_uses_the_tie_tolerance():
    """boe stops when the best value per cost is <= eta + 1e-12, in the engine and the literal reading."""
    from boe.core.policies import plugin_values
    from boe.core.state import bind_questions

    rec = _stop_record()
    cal = Calibration(groups={"d/vlm": {"kappa": 0.8, "p": {"confirm": 0.5, "reject": 0.3, "unresolved": 0.2}}})
    qs, groups = _questions([rec])
    state = bind_questions(qs, [0], [cal], None, groups.keys, budget=4)
    value = float(plugin_values(state)[0, 0]) / 4
    lit_cal = {"cheap_kappa": 0.55, "groups": {"d/vlm": cal.groups["d/vlm"].model_dump()}}
    assert value > 1e-3
    for eta, bought in ((value - 0.5e-12, False), (value - 1e-13, False), (value - 3e-12, True)):
        got = _engine([rec], ["boe"], [4], cal=cal, eta=eta)["boe", 4.0][0]
        lit = literal_replay(parse_record(rec), lit_cal, "boe", 4, eta=eta)
        assert (got["actions"] == ["v:x"]) is bought, eta - value
        assert got["actions"] == lit["actions"]


@settings(max_examples=60, deadline=None)
@given(ledgers(), st.sampled_from([8, 16]))
def test_answer_checks_move_whole_answers(recs, budget):
    """After any purchase, candidates sharing a valid normalised answer differ only by their own response checks."""
    got = _engine(recs, ["boe", "whole"], [budget])
    for lines in got.values():
        for rec, x in zip(recs, lines, strict=True):
            bought = {a["id"] for a in rec["actions"] if a["id"] in x["actions"]}
            touched = {a["candidate"] for a in rec["actions"] if a["id"] in bought and a["kind"] == "whole_response"}
            touched |= {e["candidate"] for e in rec["edges"]}
            by_key: dict[str, list[float]] = {}
            for c, s in zip(rec["candidates"], x["scores"], strict=True):
                if c["valid"] and c["answer"] is not None and c["index"] not in touched:
                    by_key.setdefault(c["answer"].strip().lower(), []).append(s)
            for scores in by_key.values():
                assert max(scores) - min(scores) <= 1e-12
