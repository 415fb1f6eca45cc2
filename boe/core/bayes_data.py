"""The training tables of a `bayes` fit: every labelled question's answers, claims, stances, checks and truths
in flat columns, built once over all questions (`fit_data`) and shared by every fold's fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.bayes_model import (
    B_,
    F64,
    I64,
    BayesModel,
    ClaimParams,
    PriorParams,
    _Channels,
    _outcome_index,
    stance_counts,
    standing_bin,
)
from boe.core.graph import N_FACTOR_CODES, Question


@dataclass
class _FitData:
    """Flat training tables of a list of questions (built once, reused by every cross-fit fold)."""

    # prior rows: one per (question, true hypothesis), weight 1 / #true answers
    pq: I64
    p_counts: F64  # (R, Dmax) answer counts, 0 padding
    p_k: F64  # (R,) candidates
    p_true: I64  # (R,) true answer index, -1 for none
    p_w: F64
    # latent rows under the true hypothesis: claims, then the verdicts on judged answers
    cq: I64
    c_counts: F64  # (Rc, 2, 3) stance counts of free claims
    c_aligned: B_  # no stance model: aligned claims and verdicts
    c_cls: I64  # aligned class 0-2 (see `stance_counts`); verdict of H's answer 3, of another answer 4
    c_w: F64
    # actions: latent row, group, outcome index, response check (whole or answer) or not, standing, kind
    f_row: I64
    f_group: I64
    f_out: I64
    f_whole: B_
    f_bin: I64
    f_kind: I64
    dataset: list[str]  # of each question
    labelled: B_  # of each question (`Question.labelled`, read per fold)
    stance: dict[int, _StanceParts | None] = field(default_factory=dict)  # `_stance_parts` by question, lazily
    truth: dict[int, tuple[list[int], float]] = field(default_factory=dict)  # `_true_answers` by labelled question
    # `_fit_claims` and `_fit_prior` by their training rows: the stance and check weights' inner folds are the same
    fits: dict[tuple[int, bytes], tuple[ClaimParams, _Channels]] = field(default_factory=dict)
    priors: dict[bytes, PriorParams] = field(default_factory=dict)
    # `Bayes.fit_extra`'s models by training rows, group keys and calibration: the policies of the family share them
    models: dict[tuple[bytes, tuple[str, ...], str], BayesModel] = field(default_factory=dict)


@dataclass(frozen=True)
class _StanceParts:
    """What the stance weight's score needs of one labelled question (`_stance_loglik`)."""

    n_ans: F64  # (d,) candidates per answer
    k: float
    free: F64  # (r, 6) stance counts of its free claims under each hypothesis, claim-major
    hyp: I64  # (r,) the hypothesis of each row: an answer, or d for `none`
    right: list[int]  # true answers (empty: `none`)
    weight: float


def _stance_parts(questions: Sequence[Question], data: _FitData, ids: Sequence[int]) -> list[_StanceParts]:
    """The `_StanceParts` of ``questions[ids]`` that have answers and claims (computed once per question)."""
    out = []
    for i in ids:
        if i not in data.stance:
            q = questions[i]
            valid = q.answer_id >= 0
            d = int(q.answer_id.max()) + 1 if valid.any() else 0
            claim_ids = np.unique(q.action_claim[q.is_factor])
            if not q.labelled or d == 0 or claim_ids.size == 0:
                data.stance[i] = None
                continue
            counts, aligned, _ = stance_counts(q.incidence[claim_ids][None], q.answer_id[None], d)
            data.stance[i] = _stance_part(q, counts[0], aligned[0], *_true_answers(q))
        got = data.stance[i]
        if got is not None:
            out.append(got)
    return out


def _stance_part(q: Question, counts: F64, aligned: B_, right: list[int], weight: float) -> _StanceParts:
    """The `_StanceParts` of a question from the stance counts and alignment of its claims (`stance_counts`)."""
    d = counts.shape[1] - 1
    free = counts[~aligned]  # (m_free, d + 1, 2, 3)
    return _StanceParts(
        n_ans=np.bincount(q.answer_id[q.answer_id >= 0], minlength=d).astype(np.float64),
        k=float(q.k),
        free=free.reshape(-1, 6),
        hyp=np.tile(np.arange(d + 1), free.shape[0]),
        right=right,
        weight=weight,
    )


def _true_answers(q: Question) -> tuple[list[int], float]:
    """Answer ids whose candidates are correct on average (utility >= 0.5), and the weight of each."""
    valid = q.answer_id >= 0
    if not valid.any():
        return [], 1.0
    d = int(q.answer_id.max()) + 1
    u = np.bincount(q.answer_id[valid], weights=q.utility[valid], minlength=d)
    n = np.bincount(q.answer_id[valid], minlength=d)
    right = [int(x) for x in np.nonzero(u / np.maximum(n, 1) >= 0.5)[0]]
    return right, (1.0 / len(right) if right else 1.0)


def _ragged(starts: I64, lengths: I64) -> I64:
    """The concatenated ranges ``starts[i] .. starts[i] + lengths[i] - 1``."""
    ends = np.cumsum(lengths)
    out: I64 = np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64)
    out += np.repeat(starts - (ends - lengths), lengths)
    return out


def _offsets(lengths: I64) -> I64:
    """Where each segment of these lengths starts in their concatenation."""
    out: I64 = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def _segments(lengths: I64) -> I64:
    """The segment of each element of a concatenation of segments of these lengths."""
    out: I64 = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    return out


def _flat(questions: Sequence[Question], name: str, dtype: Any) -> Any:
    """One array of the questions, all concatenated (matrices flattened row by row)."""
    parts = [getattr(q, name).reshape(-1) for q in questions]
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


#: Stance index (assert 0, deny 1, silent 2; else -1) of an incidence sign, by its byte.
_STANCE = np.full(256, -1, dtype=np.int8)
_STANCE[[1, 255, 0]] = [0, 1, 2]


def _stance_tallies(
    uq: I64, row: I64, k: I64, m: I64, aid: I64, incidence: npt.NDArray[np.int8], ud: I64
) -> tuple[F64, F64]:
    """Valid candidates by stance on each claim (row ``row`` of question ``uq``'s incidence), shape (U, 3), and by
    answer and stance (the ``ud`` answers of each claim's question, claim after claim), shape (sum ud, 3).

    ``k``, ``m``: candidates and claims of each question; ``aid``, ``incidence``: their answer ids and incidence
    matrices (flattened), all concatenated. A few thousand claims at a time: the per-candidate arrays stay small.
    """
    total, mine = np.zeros((uq.size, 3)), np.zeros((int(ud.sum()), 3))
    c_off, i_off = _offsets(k), _offsets(m * k)
    step = max(1, 65536 // max(int(k.max(initial=1)), 1))
    at = 0
    for u0 in range(0, uq.size, step):
        q = uq[u0 : u0 + step]
        kk, dd = k[q], ud[u0 : u0 + step]
        ea = aid[_ragged(c_off[q], kk)]
        s = _STANCE[incidence[_ragged(i_off[q] + row[u0 : u0 + step] * kk, kk)].view(np.uint8)]
        keep = (ea >= 0) & (s >= 0)
        eu, s, ea = _segments(kk)[keep], s[keep], ea[keep]
        total[u0 : u0 + q.size] = np.bincount(eu * 3 + s, minlength=3 * q.size).reshape(-1, 3)
        n = int(dd.sum())
        mine[at : at + n] = np.bincount((_offsets(dd)[eu] + ea) * 3 + s, minlength=3 * n).reshape(-1, 3)
        at += n
    return total, mine


@dataclass(frozen=True)
class _Answers:
    """The distinct valid answers of some questions, all in one column (`_fit_data`)."""

    k: I64  # candidates of each question
    aid: I64  # answer of each candidate, all questions' candidates concatenated
    d: I64  # answers of each question
    first: I64  # where each question's answers start in the column
    n: F64  # candidates holding each answer
    top: F64  # candidates holding each question's most held answer (0 without answers)
    n_valid: F64  # valid candidates of each question
    right: I64  # the true answers (held by candidates correct on average, utility >= 0.5), in order

    @classmethod
    def of(cls, qs: Sequence[Question], k: I64) -> _Answers:
        aid = _flat(qs, "answer_id", np.int64)
        cq = _segments(k)
        valid = aid >= 0
        d = np.zeros(k.size, dtype=np.int64)
        np.maximum.at(d, cq, aid + 1)
        first = _offsets(d)
        at = (first[cq] + aid)[valid]
        held = np.bincount(at, minlength=int(d.sum()))
        utility = np.bincount(at, weights=_flat(qs, "utility", np.float64)[valid], minlength=held.size)
        n = held.astype(np.float64)
        top = np.zeros(k.size)
        np.maximum.at(top, _segments(d), n)
        n_valid = np.bincount(cq[valid], minlength=k.size).astype(np.float64)
        return cls(k, aid, d, first, n, top, n_valid, np.nonzero(utility / np.maximum(held, 1) >= 0.5)[0])


@dataclass(frozen=True)
class _ClaimsRead:
    """The distinct claims the factor actions of each question read, with their valid candidates' stances."""

    q: I64  # the question of each, by question and then claim index (as np.unique per question)
    of_action: I64  # the claim each factor action reads
    total: F64  # (U, 3) valid candidates asserting, denying, silent
    mine: F64  # (sum of d, 3) valid candidates by answer of the claim's question and stance
    mine_first: I64  # (U,) each claim's first row of `mine`
    d: I64  # (U,) answers of each claim's question
    aligned: B_  # (U,) aligned claims (`stance_counts`)

    @classmethod
    def of(cls, qs: Sequence[Question], ans: _Answers, fq: I64, claim: I64) -> _ClaimsRead:
        m = np.array([q.incidence.shape[0] for q in qs], dtype=np.int64)
        span = int(m.max(initial=0)) + 1
        key, of_action = np.unique(fq * span + claim, return_inverse=True)
        uq = key // span
        ud = ans.d[uq]
        total, mine = _stance_tallies(uq, key - uq * span, ans.k, m, ans.aid, _flat(qs, "incidence", np.int8), ud)
        au = _segments(ud)
        held = ans.n[_ragged(ans.first[uq], ud)]
        ok = (held <= 0) | (mine[:, 0] == held) | (mine[:, 1] == held)
        aligned = (np.bincount(au[~ok], minlength=uq.size) == 0) & (ans.n_valid[uq] > 0)
        return cls(uq, of_action.reshape(-1), total, mine, _offsets(ud), ud, aligned)

    def counts(self, u: I64, col: I64) -> tuple[F64, I64]:
        """`stance_counts` of claims ``u`` under hypotheses ``col`` (an answer of the claim's question, or
        `none` at its number of answers): counts (n, 2, 3) and aligned class (n,)."""
        answer = col < self.d[u]
        out = np.empty((u.size, 2, 3))  # filled in place: these are the largest arrays of the build
        if self.mine.size:
            np.take(self.mine, np.where(answer, self.mine_first[u] + col, 0), axis=0, out=out[:, 0])
        out[~answer, 0] = 0.0
        np.take(self.total, u, axis=0, out=out[:, 1])
        out[:, 1] -= out[:, 0]
        cls: I64 = np.where(answer, np.where(out[:, 0, 0] > 0, 0, 1), 2)
        return out, cls


def _judged(ans: _Answers, wq: I64, candidate: I64) -> tuple[I64, I64, I64, I64]:
    """The distinct answers the response checks (of questions ``wq``, judging ``candidate``) of each question
    judge (-1: an invalid response, never right), in order: their questions, the answers, the answer each check
    judges (its index among all), and each check's standing."""
    judged = ans.aid[_offsets(ans.k)[wq] + candidate]
    span = int(ans.d.max(initial=0)) + 2
    key, of_action = np.unique(wq * span + judged + 1, return_inverse=True)
    jq = key // span
    held = np.append(ans.n, 0.0)[np.where(judged >= 0, ans.first[wq] + judged, ans.n.size)]
    bins = standing_bin(held, (judged >= 0) & (held == ans.top[wq]), ans.n_valid[wq])
    return jq, key - jq * span - 1, of_action.reshape(-1), bins


def _fit_data(questions: Sequence[Question]) -> _FitData:
    """The training tables of ``questions`` (`_FitData`), built over all of them at once.

    Per labelled question and each hypothesis H of its truth (its true answers, else `none`) in turn: a prior
    row; the latent rows of the distinct claims its factor actions read (their stance counts under H), then of
    the distinct answers its response checks judge (H's or another's verdict); and one row per action, factor
    actions first, naming its latent row. The questions' arrays are concatenated and reduced by question
    (integer sums by segment), so the tables equal a question-by-question build exactly.
    """
    n = len(questions)
    k_all = np.array([q.utility.size for q in questions], dtype=np.int64)
    unknown = ~np.isfinite(_flat(questions, "utility", np.float64))
    labelled: B_ = np.bincount(_segments(k_all)[unknown], minlength=n) == 0
    lab = np.nonzero(labelled)[0].astype(np.int64)
    qs = [questions[i] for i in lab.tolist()]
    ans = _Answers.of(qs, k_all[lab])
    nq, d = len(qs), ans.d
    # the hypotheses: (question, true answer, or -1 for `none`); one prior row each
    right_q = _segments(d)[ans.right]
    n_right = np.bincount(right_q, minlength=nq)
    weight = np.where(n_right > 0, 1.0 / np.maximum(n_right, 1), 1.0)
    hq = _segments(np.maximum(n_right, 1))
    h = np.full(hq.size, -1, dtype=np.int64)
    h[n_right[hq] > 0] = ans.right - ans.first[right_q]
    p_counts = np.zeros((hq.size, max(int(d.max(initial=0)), 1)))
    at = _ragged(ans.first[hq], d[hq])
    p_counts[_segments(d[hq]), at - np.repeat(ans.first[hq], d[hq])] = ans.n[at]
    # each question's latents (the claims it reads, then the answers it judges) and actions (factor ones first)
    n_act = np.array([q.kind.size for q in qs], dtype=np.int64)
    kind = _flat(qs, "kind", np.int64)
    fac = kind < N_FACTOR_CODES
    fq, wq = _segments(n_act)[fac], _segments(n_act)[~fac]
    claims = _ClaimsRead.of(qs, ans, fq, _flat(qs, "action_claim", np.int64)[fac])
    truth, stance = _truths(lab, ans, n_right, weight, claims, np.bincount(fq, minlength=nq))
    jq, answers, judges, w_bins = _judged(ans, wq, _flat(qs, "action_candidate", np.int64)[~fac])
    n_claims, n_judged = np.bincount(claims.q, minlength=nq), np.bincount(jq, minlength=nq)
    n_lat = n_claims + n_judged
    t_off = _offsets(n_lat)
    t_claim = t_off[claims.q] + np.arange(claims.q.size) - _offsets(n_claims)[claims.q]
    t_answer = t_off[jq] + n_claims[jq] + np.arange(jq.size) - _offsets(n_judged)[jq]
    t_fac = np.zeros(int(n_lat.sum()), dtype=bool)
    t_fac[t_claim] = True
    t_src = np.zeros(t_fac.size, dtype=np.int64)  # the claim, or the judged answer
    t_src[t_claim], t_src[t_answer] = np.arange(claims.q.size), answers
    t_aligned = np.ones(t_fac.size, dtype=bool)
    t_aligned[t_claim] = claims.aligned
    n_a, n_d = claims.total[claims.of_action, 0], claims.total[claims.of_action, 1]
    latent = [claims.of_action - _offsets(n_claims)[fq], n_claims[wq] + judges - _offsets(n_judged)[wq]]
    bins = [standing_bin(n_a, n_a > n_d, ans.n_valid[fq]), w_bins]
    act_off = _offsets(n_act)
    a_src, a_latent, a_bin = _factor_first(fac, act_off, fq, wq, latent, bins)
    # every hypothesis: its question's latent rows and action rows
    lat = _ragged(t_off[hq], n_lat[hq])
    lh = _segments(n_lat[hq])
    lat_fac = t_fac[lat]
    src = t_src[lat]
    c_counts = np.zeros((lat.size, 2, 3))
    c_cls = np.where((src == h[lh]) & (src >= 0), 3, 4)
    c_counts[lat_fac], c_cls[lat_fac] = claims.counts(src[lat_fac], np.where(h >= 0, h, d[hq])[lh][lat_fac])
    act = _ragged(act_off[hq], n_act[hq])
    act_src = a_src[act]
    data = _FitData(
        pq=lab[hq],
        p_counts=p_counts,
        p_k=ans.k[hq].astype(np.float64),
        p_true=h,
        p_w=weight[hq],
        cq=lab[hq][lh],
        c_counts=c_counts,
        c_aligned=t_aligned[lat],
        c_cls=c_cls.astype(np.int64),
        c_w=weight[hq][lh],
        f_row=_offsets(n_lat[hq])[_segments(n_act[hq])] + a_latent[act],
        f_group=_flat(qs, "group", np.int64)[act_src],
        f_out=_outcome_index(_flat(qs, "outcome", np.int8)[act_src]),
        f_whole=~fac[act_src],
        f_bin=a_bin[act],
        f_kind=kind[act_src],
        dataset=[q.dataset for q in questions],
        labelled=labelled,
        truth=truth,
        stance=stance,
    )
    return data


def _factor_first(fac: B_, act_off: I64, fq: I64, wq: I64, latent: list[I64], bins: list[I64]) -> tuple[I64, I64, I64]:
    """Each question's actions with its factor actions first (``fq``, ``wq``: the question of each factor and
    each response check, in order): the action at each place, and its ``latent`` and ``bins`` (given as
    [factor actions', response checks'])."""
    n_fac = np.bincount(fq, minlength=act_off.size)
    n_resp = np.bincount(wq, minlength=act_off.size)
    pos = np.concatenate(
        [
            act_off[fq] + np.arange(fq.size) - _offsets(n_fac)[fq],
            act_off[wq] + n_fac[wq] + np.arange(wq.size) - _offsets(n_resp)[wq],
        ]
    )
    src, lat, b = (np.empty(fac.size, dtype=np.int64) for _ in range(3))
    src[pos] = np.concatenate([np.nonzero(fac)[0], np.nonzero(~fac)[0]])
    lat[pos] = np.concatenate(latent)
    b[pos] = np.concatenate(bins)
    return src, lat, b


def _truths(
    lab: I64, ans: _Answers, n_right: I64, weight: F64, claims: _ClaimsRead, n_fac: I64
) -> tuple[dict[int, tuple[list[int], float]], dict[int, _StanceParts | None]]:
    """The truth (`_true_answers`) of each labelled question ``lab``, and the stance parts (`_stance_parts`) of
    those with factor actions."""
    truth: dict[int, tuple[list[int], float]] = {}
    stance: dict[int, _StanceParts | None] = {}
    free = np.nonzero(~claims.aligned)[0]
    hyps = ans.d[claims.q[free]] + 1
    u = np.repeat(free, hyps)
    hyp = _ragged(np.zeros(free.size, dtype=np.int64), hyps)
    counts, _ = claims.counts(u, hyp)
    free_at = [0, *np.cumsum(np.bincount(claims.q[u], minlength=lab.size)).tolist()]
    counts6 = counts.reshape(-1, 6)
    ans_at = [*ans.first.tolist(), ans.n.size]
    right_at = [0, *np.cumsum(n_right).tolist()]
    rights = (ans.right - ans.first[_segments(ans.d)[ans.right]]).tolist()
    for j, (qi, w, n_fac_j) in enumerate(zip(lab.tolist(), weight.tolist(), n_fac.tolist(), strict=True)):
        right = rights[right_at[j] : right_at[j + 1]]
        truth[qi] = (right, w)
        if n_fac_j:
            f0, f1 = free_at[j], free_at[j + 1]
            n_ans = ans.n[ans_at[j] : ans_at[j + 1]]
            k = float(ans.k[j])
            stance[qi] = _StanceParts(n_ans, k, counts6[f0:f1], hyp[f0:f1], right, w) if n_ans.size else None
    return truth, stance
