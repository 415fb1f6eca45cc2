"""`_fit_data` (the `bayes` fit's training tables, built over all questions at once) against the question-by-question
build it replaced: the same tables, array by array (values, dtypes, shapes, row order), the same truths and stance
parts, on generated and simulated ledgers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.bayes_data import _fit_data as fit_data
from boe.core.bayes_data import _FitData, _stance_part, _stance_parts, _StanceParts, _true_answers
from boe.core.bayes_model import B_, F64, I64, _outcome_index, stance_counts, standing_bin
from boe.core.experiment import load_questions
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record_dict
from boe.core.packing import pack_questions, unpack_questions
from boe.sim.ledgers import factor_code_ledger, pool_ledger, pool_spec
from tests.core.strategies import ledgers

# --------------------------------------------------------------------------- the question-by-question build (reference)


def _cat(parts: list[Any], dtype: Any, shape: tuple[int, ...] = ()) -> Any:
    if parts:
        return np.concatenate(parts).astype(dtype)
    return np.zeros((0, *shape), dtype=dtype)


class _LatentRows:
    """Accumulates the latent rows and their actions of `_FitData`."""

    def __init__(self) -> None:
        keys = ("cq", "cc", "ca", "ck", "cw", "fr", "fg", "fo", "fw", "fb", "fk")
        self.parts: dict[str, list[Any]] = {k: [] for k in keys}
        self.n = 0

    def add(
        self,
        qi: int,
        weight: float,
        counts: F64,
        aligned: B_,
        cls: I64,
        local: Any,
        group: Any,
        out: I64,
        whole: bool,
        bins: I64,
        kinds: Any,
    ) -> None:
        p, size = self.parts, cls.size
        p["cq"].append(np.full(size, qi, dtype=np.int64))
        p["cc"].append(counts)
        p["ca"].append(aligned)
        p["ck"].append(cls)
        p["cw"].append(np.full(size, weight))
        p["fr"].append(self.n + np.asarray(local, dtype=np.int64))
        p["fg"].append(np.asarray(group, dtype=np.int64))
        p["fo"].append(out)
        p["fw"].append(np.full(out.size, whole))
        p["fb"].append(np.asarray(bins, dtype=np.int64))
        p["fk"].append(np.asarray(kinds, dtype=np.int64))
        self.n += size


def _literal_claim_stances(
    questions: Sequence[Question], ids: Sequence[int], chunk: int = 256
) -> dict[int, tuple[I64, F64, B_, I64]]:
    """Per question of ``ids``: the index of each factor action's claim among its distinct claims, and their
    `stance_counts` (counts, aligned, class; without the question axis).

    Many questions per `stance_counts` call, padded with invalid candidates, silent claims and absent answers
    (none of which counts: the counts are the same integer sums)."""
    out: dict[int, tuple[I64, F64, B_, I64]] = {}
    items = []
    for qi in ids:
        q = questions[qi]
        claims, local = np.unique(q.action_claim[q.is_factor], return_inverse=True)
        valid = q.answer_id >= 0
        items.append((qi, claims, local.reshape(-1).astype(np.int64), int(q.answer_id.max()) + 1 if valid.any() else 0))
    for start in range(0, len(items), chunk):
        part = items[start : start + chunk]
        m = max(c.size for _, c, _, _ in part)
        k = max(questions[qi].answer_id.size for qi, _, _, _ in part)
        d = max(dq for _, _, _, dq in part)
        stance = np.zeros((len(part), m, k), dtype=np.int8)
        aid = np.full((len(part), k), -1, dtype=np.int32)
        for i, (qi, claims, _, _) in enumerate(part):
            q = questions[qi]
            stance[i, : claims.size, : q.answer_id.size] = q.incidence[claims]
            aid[i, : q.answer_id.size] = q.answer_id
        counts, aligned, cls = stance_counts(stance, aid, d)
        for i, (qi, claims, local, dq) in enumerate(part):
            cols = np.r_[0:dq, d]  # the question's answers, then `none`
            out[qi] = (
                local,
                counts[i, : claims.size][:, cols],
                aligned[i, : claims.size],
                cls[i, : claims.size][:, cols],
            )
    return out


def _literal_fit_data(questions: Sequence[Question]) -> _FitData:
    prior: list[tuple[int, F64, float, int, float]] = []
    rows = _LatentRows()
    truth: dict[int, tuple[list[int], float]] = {}
    stance: dict[int, _StanceParts | None] = {}
    claim_stances = _literal_claim_stances(
        questions, [i for i, q in enumerate(questions) if q.labelled and q.is_factor.any()]
    )
    labelled = np.zeros(len(questions), dtype=bool)
    for qi, q in enumerate(questions):
        if not q.labelled:
            continue
        labelled[qi] = True
        right, weight = truth[qi] = _true_answers(q)
        hyps = right if right else [-1]
        valid = q.answer_id >= 0
        d = int(q.answer_id.max()) + 1 if valid.any() else 0
        n_ans = np.bincount(q.answer_id[valid], minlength=d).astype(np.float64)
        prior.extend((qi, n_ans, float(q.k), h, weight) for h in hyps)
        out = _outcome_index(q.outcome)
        fac = np.nonzero(q.is_factor)[0]
        whole = np.nonzero(~q.is_factor)[0]
        n_valid = float(valid.sum())
        if fac.size:
            local, counts, aligned, cls = claim_stances.pop(qi)
            # the same claims as `_stance_parts` reads
            stance[qi] = _stance_part(q, counts, aligned, right, weight) if d else None
            inc = q.incidence[q.action_claim[fac]][:, valid]
            n_a, n_d = (inc == 1).sum(axis=1), (inc == -1).sum(axis=1)
            fbins = standing_bin(n_a, n_a > n_d, n_valid)
        if whole.size:
            judged = q.answer_id[q.action_candidate[whole]]  # -1: an invalid response, never right
            answers, wlocal = np.unique(judged, return_inverse=True)
            held = np.where(judged >= 0, n_ans[np.maximum(judged, 0)] if d else 0.0, 0.0)
            wbins = standing_bin(held, (judged >= 0) & (held == (n_ans.max() if d else 0.0)), n_valid)
        for h in hyps:
            if fac.size:
                col = h if h >= 0 else d
                rows.add(
                    qi,
                    weight,
                    counts[:, col],
                    aligned,
                    cls[:, col],
                    local,
                    q.group[fac],
                    out[fac],
                    False,
                    fbins,
                    q.kind[fac],
                )
            if whole.size:
                verdict_cls = np.where((answers == h) & (answers >= 0), 3, 4).astype(np.int64)
                no_stance = np.zeros((answers.size, 2, 3))
                rows.add(
                    qi,
                    weight,
                    no_stance,
                    np.ones(answers.size, bool),
                    verdict_cls,
                    wlocal,
                    q.group[whole],
                    out[whole],
                    True,
                    wbins,
                    q.kind[whole],
                )
    dmax = max((r[1].size for r in prior), default=0)
    p_counts = np.zeros((len(prior), max(dmax, 1)))
    for i, r in enumerate(prior):
        p_counts[i, : r[1].size] = r[1]
    return _FitData(
        pq=np.array([r[0] for r in prior], dtype=np.int64),
        p_counts=p_counts,
        p_k=np.array([r[2] for r in prior]),
        p_true=np.array([r[3] for r in prior], dtype=np.int64),
        p_w=np.array([r[4] for r in prior]),
        cq=_cat(rows.parts["cq"], np.int64),
        c_counts=_cat(rows.parts["cc"], np.float64, (2, 3)),
        c_aligned=_cat(rows.parts["ca"], bool),
        c_cls=_cat(rows.parts["ck"], np.int64),
        c_w=_cat(rows.parts["cw"], np.float64),
        f_row=_cat(rows.parts["fr"], np.int64),
        f_group=_cat(rows.parts["fg"], np.int64),
        f_out=_cat(rows.parts["fo"], np.int64),
        f_whole=_cat(rows.parts["fw"], bool),
        f_bin=_cat(rows.parts["fb"], np.int64),
        f_kind=_cat(rows.parts["fk"], np.int64),
        dataset=[q.dataset for q in questions],
        labelled=labelled,
        truth=truth,
        stance=stance,
    )


# --------------------------------------------------------------------------- tests


def _questions(recs: list[dict[str, Any]]) -> list[Question]:
    qs, groups = load_questions([parse_record_dict(r) for r in recs], GroupIndex())
    return unpack_questions(pack_questions(qs, groups.keys), GroupIndex())  # views into shared columns, as loaded


def _assert_same(got: _FitData, want: _FitData) -> None:
    for f in dataclasses.fields(_FitData):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), f.name
        elif f.name == "stance":
            assert g.keys() == w.keys()
            for i, part in w.items():
                _assert_same_part(g[i], part)
        else:
            assert g == w, f.name
            if f.name == "truth":
                assert all(type(x) is int for r, _ in g.values() for x in r)
                assert all(type(x) is float for _, x in g.values())


def _assert_same_part(got: _StanceParts | None, want: _StanceParts | None) -> None:
    if want is None:
        assert got is None
        return
    assert got is not None
    for f in dataclasses.fields(_StanceParts):
        g, w = getattr(got, f.name), getattr(want, f.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), f.name
        else:
            assert g == w and type(g) is type(w), f.name


def _check(qs: Sequence[Question]) -> _FitData:
    got = fit_data(qs)
    _assert_same(got, _literal_fit_data(qs))
    # the stance parts built with the tables are what `_stance_parts` builds lazily, question by question
    lazy = dataclasses.replace(got, stance={})
    ids = list(range(len(qs)))
    assert len(_stance_parts(qs, lazy, ids)) == sum(p is not None for p in lazy.stance.values())
    for i, part in got.stance.items():
        _assert_same_part(part, lazy.stance[i])
    assert all(lazy.stance[i] is None for i in set(lazy.stance) - set(got.stance))
    return got


@st.composite
def _varied(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Generated ledgers, some candidates' utilities unknown (unlabelled questions) or at the 0.5 threshold."""
    recs = draw(ledgers(min_size=0, max_size=8))
    for rec in recs:
        for c in rec["candidates"]:
            c["utility"] = draw(st.sampled_from([c["utility"], c["utility"], c["utility"], 0.5, 0.49, None]))
    return recs


@given(_varied(), _varied())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_tables_equal_the_question_by_question_build_on_generated_ledgers(first, second):
    _check(_questions(first + [{**r, "question_id": f"b{i}"} for i, r in enumerate(second)]))


def test_tables_equal_the_question_by_question_build_on_simulated_ledgers():
    regimes = (
        "default",
        "weak-judge",
        "misread",
        "misread-coherent",
        "flat-weak-judge",
        "answers",
        "echo-answers",
        "hard",
    )
    recs = [r for name in regimes for r in pool_ledger(30, seed=26, spec=pool_spec(name))]
    recs += list(factor_code_ledger(10, seed=45))
    unlabelled = [{**r, "question_id": f"u{i}", "candidates": [{**c, "utility": None} for c in r["candidates"]]}
                  for i, r in enumerate(recs[::17])]  # fmt: skip
    data = _check(_questions(recs + unlabelled))
    assert data.labelled.sum() == len(recs) and data.f_whole.any() and not data.f_whole.all()
    assert (data.p_true >= 0).any() and (data.p_true < 0).any() and data.c_aligned.any() and not data.c_aligned.all()


def test_tables_of_no_question_and_of_unlabelled_questions_only():
    data = _check([])
    assert data.p_counts.shape == (0, 1) and data.c_counts.shape == (0, 2, 3) and data.f_row.shape == (0,)
    recs = [{**r, "candidates": [{**c, "utility": None} for c in r["candidates"]]} for r in pool_ledger(3, seed=1)]
    data = _check(_questions(recs))
    assert not data.labelled.any() and data.pq.size == 0 and not data.truth and not data.stance


def test_literal_claim_stances_equal_one_question_at_a_time():
    qs = _questions([*pool_ledger(30, seed=44), *factor_code_ledger(10, seed=45)])
    ids = [i for i, q in enumerate(qs) if q.is_factor.any()]
    got = _literal_claim_stances(qs, ids, chunk=7)  # chunks mixing shapes, answer counts and ledgers
    assert sorted(got) == ids
    for i in ids:
        q = qs[i]
        claims, local = np.unique(q.action_claim[q.is_factor], return_inverse=True)
        d = int(q.answer_id.max()) + 1 if (q.answer_id >= 0).any() else 0
        want = stance_counts(q.incidence[claims][None], q.answer_id[None], d)
        assert np.array_equal(got[i][0], local.reshape(-1))
        for g, w in zip(got[i][1:], want, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w[0])
