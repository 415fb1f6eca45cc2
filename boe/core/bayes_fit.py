"""Fitting the `bayes` observation model on labelled questions (`fit_bayes_model`): the prior, the claim
model and channels (`boe.core.bayes_em`) and the stance weight, cross-fitted. The check weight is fitted by
running the policy itself (`boe.core.bayes`, `_fit_check_weight`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import cache

import numpy as np
import numpy.typing as npt

from boe.core.bayes_data import _fit_data, _FitData, _ragged, _segments, _stance_parts, _StanceParts
from boe.core.bayes_em import _fit_claims, _triple
from boe.core.bayes_model import (
    B_,
    DEFAULT_PRIOR,
    EPS,
    F64,
    I64,
    MIN_SLOPE,
    N_STANDING,
    RIDGE,
    BayesModel,
    ChannelTable,
    ClaimParams,
    PriorParams,
    _sigmoid,
    _stance_matrix,
    prior_log,
)
from boe.core.calibration import Calibration, crossfit_folds
from boe.core.graph import Question
from boe.errors import CalibrationError


def _logistic(x: F64, target: F64, w: F64, beta: F64, steps: int = 50, tol: float = 1e-10) -> F64:
    """Logistic regression with a ridge on the non-intercept coefficients, by Newton's method."""
    pen = np.full(x.shape[1], RIDGE)
    pen[0] = 0.0
    beta = beta.copy()
    for _ in range(steps):
        p = _sigmoid(x @ beta)
        grad = x.T @ (w * (target - p)) - pen * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(pen) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta += step
        if float(np.abs(step).max()) < tol:
            break
    return beta


def _fit_prior(data: _FitData, rows: B_) -> PriorParams:
    """`_ml_prior` on the prior rows ``rows``, computed once per training set."""
    key = np.packbits(rows).tobytes()
    got = data.priors.get(key)
    if got is None:
        got = data.priors[key] = _ml_prior(data, rows)
    return got.model_copy()


def _ml_prior(data: _FitData, rows: B_) -> PriorParams:
    """The none-mass logistic and the answer conditional logit, by maximum likelihood of the truth."""
    counts, w, true, k = data.p_counts[rows], data.p_w[rows], data.p_true[rows], data.p_k[rows]
    has_real = counts.sum(axis=1) > 0
    share = np.where(has_real, counts.max(axis=1) / np.maximum(k, 1), 0.0)
    none = (true < 0).astype(np.float64)
    # none-mass: logistic in the top answer's share, with half a pseudo-question of each kind
    x = np.stack([np.ones(share.size), share], axis=1)[has_real]
    xm = np.array([[1.0, float(share[has_real].mean()) if has_real.any() else 0.5]])
    beta = _logistic(
        np.concatenate([x, xm, xm]),
        np.concatenate([none[has_real], [1.0, 0.0]]),
        np.concatenate([w[has_real], [0.5, 0.5]]),
        np.zeros(2),
    )
    # answers: conditional logit in (n_d, log n_d), ridge towards the proportional prior (0, 1)
    pick = has_real & (true >= 0)
    b = np.array([0.0, 1.0])
    if pick.any():
        c, t, wt_ = counts[pick], true[pick], w[pick]
        present = c > 0
        with np.errstate(divide="ignore"):
            f = np.stack([c, np.where(present, np.log(np.where(present, c, 1.0)), 0.0)], axis=2)  # (R, D, 2)
        k_max = float(max(k.max(), 1.0))
        b = _count_logit(f, present, t, wt_, k_max)
    return PriorParams(
        count_coef=float(b[0]),
        log_count_coef=float(b[1]),
        none_intercept=float(beta[0]),
        none_slope=float(beta[1]),
        questions=float(w.sum()),
    )


def _count_logit(f: F64, present: B_, t: I64, w: F64, k_max: float) -> F64:
    """Conditional logit of the true answer in features ``f`` (R, D, 2) = (n_d, log n_d), by Newton's
    method with a ridge towards (0, 1), constrained to a log-weight increasing in the count on 1..k_max.

    The slope b1 + b2 / n is monotone in n, so the constraint holds on 1..k_max when it holds at n = 1
    and n = k_max; if the free optimum breaks it, the optimum lies on one of these two lines.
    """
    f_true = f[np.arange(t.size), t]
    b0 = np.array([0.0, 1.0])

    def newton(origin: F64, basis: F64) -> tuple[F64, float]:
        """Maximise the penalised likelihood over b = origin + basis @ x."""
        x = np.zeros(basis.shape[1])
        ll = -math.inf
        for _ in range(60):
            b = origin + basis @ x
            z = np.where(present, f @ b, -np.inf)
            top = z.max(axis=1, keepdims=True)
            e = np.exp(z - top)
            tot = e.sum(axis=1, keepdims=True)
            p = e / tot
            ll = float((w * (f_true @ b - top[:, 0] - np.log(tot[:, 0]))).sum() - 0.5 * RIDGE * ((b - b0) ** 2).sum())
            mean = np.einsum("rd,rdf->rf", p, f)
            grad = (w[:, None] * (f_true - mean)).sum(axis=0) - RIDGE * (b - b0)
            cov = np.einsum("rd,rdf,rdg->rfg", p, f, f) - mean[:, :, None] * mean[:, None, :]
            hess = (w[:, None, None] * cov).sum(axis=0) + RIDGE * np.eye(2)
            step = np.linalg.solve(basis.T @ hess @ basis + 1e-12 * np.eye(basis.shape[1]), basis.T @ grad)
            x = x + step
            if float(np.abs(step).max()) < 1e-10:
                break
        return origin + basis @ x, ll

    def ok(b: F64) -> bool:
        return bool(min(b[0] + b[1], b[0] + b[1] / k_max) >= MIN_SLOPE - 1e-12)

    b, _ = newton(np.zeros(2), np.eye(2))
    if ok(b):
        return b
    best, best_ll = np.array([MIN_SLOPE, 0.0]), -math.inf
    for direction in (np.array([[-1.0], [1.0]]), np.array([[-1.0 / k_max], [1.0]])):
        cand, ll = newton(np.array([MIN_SLOPE, 0.0]), direction)
        if ok(cand) and ll > best_ll:
            best, best_ll = cand, ll
    return best


#: Candidate stance weights (`_fit_stance_weight`); ties go to the weight nearest 0.
STANCE_WEIGHTS = np.round(np.arange(-1.0, 1.501, 0.05), 2)


#: Inner folds of the stance weight's cross-fit (`_fit_stance_weight`).
STANCE_FOLDS = 3


def _fit_stance_weight(
    questions: Sequence[Question], data: _FitData, rows: B_, n_groups: int, claims: ClaimParams
) -> tuple[float, tuple[float, float]]:
    """The weight lambda of the pool's structure (the claims' stance evidence) in the prior, cross-fitted.

    The stance model treats the claims of a question as independent given H, but
    the stances of one candidate on related claims (the values of one slot) are
    not, so the summed evidence counts some of it more than once; and where the
    candidates' agreement does not predict the truth the model's differences are
    noise. The prior is P(H) P(stances | H)^lambda, a calibrated composite
    likelihood: lambda maximises sum_q log P(true H_q | all stances of q) over
    `STANCE_WEIGHTS`, each question scored under a prior and stance model fitted
    on the other `STANCE_FOLDS` - 1 folds of the training questions (held out:
    lambda is 0, or negative, where the structure does not carry over), and
    lambda stays 0 unless it beats 0 by a likelihood-ratio test at 5% (`LR_TEST`).
    With too few questions to split, ``claims`` is scored in-sample (and no overrule counts).

    Also returns the held-out (right, wrong) overrules at lambda: questions on which
    the stance evidence moved the prior's mode to an answer fewer candidates hold than
    the raw majority's, and that answer was right and the majority wrong, or the reverse.
    """
    idx = np.nonzero(rows)[0]
    labelled = idx[data.labelled[idx]].tolist()
    if len(labelled) < 2 * STANCE_FOLDS:
        prior = _fit_prior(data, rows[data.pq]) if rows[data.pq].any() else DEFAULT_PRIOR
        total, _ = _stance_loglik(_stance_parts(questions, data, labelled), prior, claims)
        return _significant(STANCE_WEIGHTS, total), (0.0, 0.0)
    folds = _inner_folds(questions, labelled)
    total = np.zeros(STANCE_WEIGHTS.size)
    overrules = np.zeros((STANCE_WEIGHTS.size, 2))
    for f in range(STANCE_FOLDS):
        train = np.zeros(rows.size, dtype=bool)
        train[[i for i, k in zip(labelled, folds, strict=True) if k != f]] = True
        crow = train[data.cq]
        if not (crow.any() and crow[data.f_row].any() and train[data.pq].any()):
            continue
        fold_claims, _ = _fit_claims(data, crow, n_groups)
        held = _stance_parts(questions, data, [i for i, k in zip(labelled, folds, strict=True) if k == f])
        ll, over = _stance_loglik(held, _fit_prior(data, train[data.pq]), fold_claims)
        total += ll
        overrules += over
    weight = _significant(STANCE_WEIGHTS, total)
    right, wrong = overrules[int(np.argmin(np.abs(STANCE_WEIGHTS - weight)))]
    return weight, (float(right), float(wrong))


def _inner_folds(questions: Sequence[Question], labelled: Sequence[int]) -> npt.NDArray[np.int32]:
    """The `STANCE_FOLDS` inner folds of one dataset's labelled training questions (both weights' cross-fits)."""
    if len(labelled) < STANCE_FOLDS:
        return np.arange(len(labelled), dtype=np.int32) % STANCE_FOLDS
    return crossfit_folds([f"{questions[i].dataset}\x00{questions[i].question_id}" for i in labelled], STANCE_FOLDS)


#: Half the 95% point of chi-square with one degree of freedom: a weight is kept only if its held-out
#: log likelihood beats weight 0 by more than a likelihood-ratio test at 5% would ask.
LR_TEST = 1.92


def _significant(grid: F64, score: F64) -> float:
    """The best weight of ``grid`` by ``score`` (a log likelihood), or 0 when it does not beat 0 significantly."""
    best = _nearest_zero_max(grid, score)
    zero = int(np.argmin(np.abs(grid)))
    return best if score.max() - score[zero] > LR_TEST else float(grid[zero])


#: One-sided level of the sign test that lets the pool's structure overrule the raw majority (`overrules_supported`).
OVERRULE_LEVEL = 0.05


def overrules_supported(right: float, wrong: float) -> bool:
    """Whether held-out overrules of the raw majority, ``right`` of them right and ``wrong`` wrong, show with
    one-sided 95% confidence (an exact sign test) that such overrules are right more often than not."""
    r = round(right)
    return r > 0 and _sign_test(r, r + round(wrong))


@cache
def _sign_test(r: int, n: int) -> bool:
    """P(at least r right of n | a coin) <= `OVERRULE_LEVEL`, in exact arithmetic (the level is the float's
    exact value; 2^n overflows a float from n = 1024 on: thousands of overrules are a large ledger's)."""
    if 2 * r <= n:
        return False  # at least half right: a coin does that with probability >= 1/2
    tail, term = 0, math.comb(n, r)  # the probability times 2^n, one binomial coefficient from the last
    for i in range(r, n + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return bool(tail <= Fraction(OVERRULE_LEVEL) * 2**n)


def _stance_loglik(parts: Sequence[_StanceParts], prior: PriorParams, claims: ClaimParams) -> tuple[F64, F64]:
    """sum_q log P(true H_q | stances of q) for every weight of `STANCE_WEIGHTS`, and per weight the
    (right, wrong) overrules: questions whose prior mode is held by fewer candidates than the raw majority,
    right with the majority wrong, or wrong with the majority right. All questions at once, padded to the
    most answers (`none` last)."""
    n_w = STANCE_WEIGHTS.size
    if not parts:
        return np.zeros(n_w), np.zeros((n_w, 2))
    nq = len(parts)
    d = np.array([p.n_ans.size for p in parts], dtype=np.int64)
    dmax = int(d.max())
    h = dmax + 1
    at = _segments(d)
    n_ans = np.zeros((nq, dmax))
    n_ans[at, _ragged(np.zeros(nq, dtype=np.int64), d)] = np.concatenate([p.n_ans for p in parts])
    right = np.zeros((nq, h))  # weight of each true hypothesis
    true = [p.right if p.right else [dmax] for p in parts]
    n_true = np.array([len(t) for t in true], dtype=np.int64)
    right[_segments(n_true), np.concatenate(true)] = np.repeat([p.weight for p in parts], n_true)
    pri = np.array([[prior.count_coef, prior.log_count_coef, prior.none_intercept, prior.none_slope]])
    lp, real = prior_log(n_ans, np.array([p.k for p in parts]), np.repeat(pri, nq, axis=0))  # (Q, H)
    theta = _stance_matrix(np.log(np.clip(np.array(claims.stance), EPS, 1.0)))
    ft = min(max(claims.free_true, EPS), 1 - EPS)
    free = np.concatenate([p.free for p in parts]) @ theta + np.log([ft, 1 - ft])  # (R, 2)
    n_rows = np.array([p.hyp.size for p in parts], dtype=np.int64)
    hyp, d_row = np.concatenate([p.hyp for p in parts]), np.repeat(d, n_rows)
    seg = _segments(n_rows) * h + np.where(hyp == d_row, dmax, hyp)  # (question, hypothesis) of each row
    ev = np.bincount(seg, weights=np.logaddexp(free[:, 0], free[:, 1]), minlength=nq * h).reshape(nq, h)
    z = lp[None] + STANCE_WEIGHTS[:, None, None] * ev[None]  # (L, Q, H)
    # the max over the short last axis as a chain of elementwise maxima (the reduction's order, faster)
    top = z[:, :, 0].copy()
    for j in range(1, h):
        np.maximum(top, z[:, :, j], out=top)
    top = top[:, :, None]
    lse = top + np.log(np.exp(z - top).sum(axis=2, keepdims=True))
    total = (right * np.where(right > 0, z - lse, 0.0)).sum(axis=(1, 2))
    mode = np.argmax(np.where(real[None, :, :dmax], z[:, :, :dmax], -np.inf), axis=2)  # (L, Q)
    majority = (n_ans == n_ans.max(axis=1, keepdims=True)) & (n_ans > 0)
    is_right = right[:, :dmax] > 0
    q = np.arange(nq)[None]
    over = ~majority[q, mode]
    majority_right = (majority & is_right).any(axis=1)[None]
    overrules = np.stack(
        [
            (over & is_right[q, mode] & ~majority_right).sum(axis=1),
            (over & ~is_right[q, mode] & majority_right).sum(axis=1),
        ],
        axis=1,
    ).astype(np.float64)
    return total, overrules


def _nearest_zero_max(grid: F64, score: F64) -> float:
    """The grid value of the highest score, the one nearest 0 among ties (no evidence: no weight)."""
    best = score >= score.max() - 1e-9 * max(1.0, abs(float(score.max())))
    return float(grid[best][np.argmin(np.abs(grid[best]))])


def fit_bayes_model(
    questions: Sequence[Question],
    group_keys: Sequence[str],
    train: npt.NDArray[np.bool_] | None = None,
    *,
    stance_weights: Mapping[str, float] | None = None,
    overrules: Mapping[str, tuple[float, float]] | None = None,
    _data: _FitData | None = None,
) -> BayesModel:
    """Fit the prior, claim model and channels on the labelled questions selected by ``train``.

    ``group_keys[g]`` names the group id g of the questions' actions ("dataset/group"); ``stance_weights``
    (by dataset) are taken as given instead of cross-fitted, with their held-out ``overrules`` (by dataset).
    """
    data = _data if _data is not None else _fit_data(questions)
    n = len(questions)
    train = np.ones(n, dtype=bool) if train is None else np.asarray(train, dtype=bool)
    n_groups = max(len(group_keys), 1)
    ds_of_q = np.array(data.dataset, dtype=object)
    model = BayesModel()
    for ds in sorted({data.dataset[i] for i in np.nonzero(train)[0]}):
        in_ds = train & (ds_of_q == ds)
        prow = in_ds[data.pq]
        if prow.any():
            model.priors[ds] = _fit_prior(data, prow)
        crow = in_ds[data.cq]
        if crow.any() and crow[data.f_row].any():
            claims, ch = _fit_claims(data, crow, n_groups)
            if stance_weights is not None and ds in stance_weights:
                claims.stance_weight = float(stance_weights[ds])
                claims.overrules = (overrules or {}).get(ds, (0.0, 0.0))
            else:
                claims.stance_weight, claims.overrules = _fit_stance_weight(questions, data, in_ds, n_groups, claims)
            model.claims[ds] = claims
            for c, g in enumerate(ch.ids.tolist()):
                table = ChannelTable(
                    given_true=_triple(ch.given_true[c]),
                    given_false=_triple(ch.given_false[c]),
                    actions=float(ch.actions[c]),
                    standing=[
                        (_triple(ch.standing_true[c, b]), _triple(ch.standing_false[c, b])) for b in range(N_STANDING)
                    ],
                    standing_actions=[float(x) for x in ch.standing_actions[c]],
                    counts=(_triple(ch.counts_true[c]), _triple(ch.counts_false[c])),
                )
                if g < n_groups:
                    model.factor_channels[group_keys[g]] = table
                else:
                    model.whole_channels[group_keys[g - n_groups]] = table
    return model


def keys_from_calibration(questions: Sequence[Question], train: B_, calibration: Calibration) -> list[str]:
    """Group keys by global id, from a calibration that `fit_groups` fitted on ``questions[train]``.

    `fit_groups` lists, in id order, exactly the groups that have actions in its
    training questions; ids never seen in training get a placeholder key.
    """
    seen = sorted({int(g) for q, t in zip(questions, train, strict=True) if t for g in q.group})
    names = list(calibration.groups)
    if len(seen) != len(names):
        raise CalibrationError("cannot name the calibration groups of these questions; pass group_keys to fit_extra")
    n = max((int(q.group.max()) + 1 for q in questions if q.group.size), default=0)
    keys = [f"\x00unseen/{i}" for i in range(n)]
    for gid, name in zip(seen, names, strict=True):
        keys[gid] = name
    return keys
