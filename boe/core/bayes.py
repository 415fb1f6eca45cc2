"""The `bayes` policy: a posterior over which answer is correct, under an explicit observation model.

Hypotheses. A question with D distinct valid answers has the hypotheses
``H = d`` ("answer d is the correct one", d < D) and ``H = none`` ("no
candidate is correct"). Under H the candidates holding H's answer are the
correct ones and every other candidate is wrong.

Prior, from the cheap context (answer counts n_d among K candidates)::

    P(none) = sigmoid(c0 + c1 * max_d n_d / K)
    P(d)    = (1 - P(none)) * softmax_d(b1 n_d + b2 log n_d)

with b1 + b2 / n > 0 on 1..K, so the prior's mode is the raw majority answer
and `bayes` at budget 0 is raw BoN. (b1, b2) is a conditional logit and
(c0, c1) a logistic regression, fitted by maximum likelihood of the truth.

Claims. Claim j has a latent truth T_j. A claim is *aligned* when it is a
function of the answer (every valid candidate takes a stance and candidates
sharing an answer share it, like "the answer is v"); then::

    P(T_j = 1 | H) = t_assert, t_deny or t_none     (H's candidates assert / deny it; H = none)

Any other claim is *free*: its truth has prior P(T_j = 1) = f and each valid
candidate's stance s in (assert, deny, silent) is drawn given the truth and
whether the candidate is correct under H::

    P(stances_j, T_j = t | H) = P(T_j = t) prod_i theta[correct_i(H), t, s_ij]

so P(T_j = t | H, stances) follows from Bayes' rule and P(stances_j | H) is
evidence about H. Stance evidence enters with a claim's first check, so the
cheap context stays the answer counts.

Verdicts. A whole-response judge may judge equal answers alike, so checks of
candidates sharing an answer are not independent. Each answer d has a latent
verdict V_d (the judge's view of that answer) with
``P(V_d = 1 | H) = v_right`` if H = d and ``v_wrong`` otherwise; a
whole-response check of a candidate holding d reads V_d. (v_right = 1,
v_wrong = 0 is a judge whose checks are independent given correctness.)

Channels. Every action reads one binary latent through the channel of its
calibration group: a factor action reads its claim's truth, a whole-response
action its answer's verdict: P(o | latent = t) = C_g(o | t) for o in
(confirm, reject, unresolved). Latents are independent given H, the actions
reading one latent independent given it.

Posterior and prediction are exact under this model. The state keeps, for every
latent j, ``rho_j(H) = P(latent_j = 1 | H, stances, history)``; the predictive
outcome probability is ``P(o | H, history) = rho_j(H) C(o | 1) + (1 - rho_j(H)) C(o | 0)``
and a revealed outcome multiplies the posterior of H by it.

Value. Selecting answer d is right with probability P(d | history), so
``V = max_d P(d | history)`` over real answers; the exact myopic value of
information of action e is

    EVSI(e) = sum_o max_d P(d | h') P(o | d, h') - max_d P(d | h')

where h' is the history plus the stances of e's claim (the value of the
outcome, not of looking at stances). The policy buys the feasible action of
largest EVSI / cost with the spec's tie rule, stops when that is <= eta or
nothing is feasible, and selects the lowest-index candidate holding the
posterior mode. With eta = 0, when no single check can change the selection,
it spends the remaining budget on the check carrying most information about
whether the current choice is right (``fallback="info"``; ``"stop"`` stops).
`bayes-lookahead` also values pairs of checks that only pay together.

All parameters are fitted on labelled ledgers (`fit_bayes_model`, EM over the
latent claim truths and verdicts) and stored in a calibration's ``extra["bayes"]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boe.core.calibration import Calibration
from boe.core.graph import Question
from boe.core.policies import IntArr, register_policy
from boe.core.scoring import first_max
from boe.core.state import EvidenceState
from boe.errors import CalibrationError, ConfigError

__all__ = [
    "BAYES_KEY",
    "Bayes",
    "BayesLookahead",
    "BayesModel",
    "ChannelTable",
    "ClaimParams",
    "PriorParams",
    "fit_bayes_model",
    "model_of",
    "prior_log",
    "stance_counts",
]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B_ = npt.NDArray[np.bool_]

#: Key of the observation model in `Calibration.extra`.
BAYES_KEY = "bayes"
MODEL_FORMAT: Literal["boe-bayes/1"] = "boe-bayes/1"
#: Probabilities are kept inside [EPS, 1 - EPS] so that no outcome is impossible.
EPS = 1e-9
#: Decision information (nats) below which a check counts as uninformative.
INFO_TOL = 1e-12
#: Pseudo-count added to every cell of a fitted table (Jeffreys).
SMOOTHING = 0.5
#: Ridge penalty of the none-mass logistic and the answer conditional logit.
RIDGE = 1e-3
#: Smallest slope of the prior's log-weight in the answer count (keeps the mode at the majority).
MIN_SLOPE = 1e-3


# --------------------------------------------------------------------------- model


class PriorParams(BaseModel):
    """Prior over hypotheses from answer counts (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    count_coef: float = 0.0
    log_count_coef: float = 1.0
    none_intercept: float = -3.0
    none_slope: float = 0.0
    questions: float = 0.0  # training questions (diagnostic)


Triple = tuple[float, float, float]


class ClaimParams(BaseModel):
    """How a claim's truth depends on the hypothesis: aligned rates and the free-claim stance model."""

    model_config = ConfigDict(extra="forbid")

    aligned_true: Triple = (1 - 1e-3, 1e-3, 1e-3)  # P(T = 1 | aligned): H asserts, H denies, H = none
    verdict: tuple[float, float] = (1 - 1e-3, 1e-3)  # P(V_d = 1): d is H's answer, d is not
    free_true: float = Field(default=0.5, gt=0.0, lt=1.0)  # P(T = 1) of a free claim
    # theta[c][t] = P(assert, deny, silent | candidate correct (c = 0) or wrong (c = 1), T = 1 (t = 0) or 0 (t = 1))
    stance: tuple[tuple[Triple, Triple], tuple[Triple, Triple]] = (
        ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3)),
        ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3)),
    )
    claims: float = 0.0  # training claims (diagnostic)


class ChannelTable(BaseModel):
    """P(confirm, reject, unresolved | claim true / false) of a factor group, or
    P(. | verdict on the judged answer positive / negative) of a whole-response group."""

    model_config = ConfigDict(extra="forbid")

    given_true: Triple
    given_false: Triple
    actions: float = 0.0  # training actions (diagnostic)


class BayesModel(BaseModel):
    """The fitted observation model of the `bayes` policy."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["boe-bayes/1"] = MODEL_FORMAT
    priors: dict[str, PriorParams] = Field(default_factory=dict)  # by dataset
    claims: dict[str, ClaimParams] = Field(default_factory=dict)  # by dataset
    factor_channels: dict[str, ChannelTable] = Field(default_factory=dict)  # by group key "dataset/group"
    whole_channels: dict[str, ChannelTable] = Field(default_factory=dict)


def model_of(cal: Calibration) -> BayesModel:
    """The observation model stored in a calibration (CalibrationError if missing or invalid)."""
    data = cal.extra.get(BAYES_KEY)
    if data is None:
        raise CalibrationError(f"calibration {cal.source or '(fitted)'} has no fitted `bayes` observation model")
    if isinstance(data, BayesModel):
        return data
    try:
        return BayesModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"calibration {cal.source}: extra.bayes.{where}: {err['msg']}") from exc


UNINFORMATIVE: tuple[Triple, Triple] = ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3))
DEFAULT_PRIOR = PriorParams()
#: Unseen dataset: aligned claims keep their meaning, free claims carry no stance evidence.
DEFAULT_CLAIMS = ClaimParams()


def _sigmoid(x: F64) -> F64:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _outcome_index(outcome: npt.NDArray[np.int8]) -> I64:
    """confirm 0, reject 1, unresolved 2 (from the +1 / -1 / 0 codes)."""
    o = outcome.astype(np.int64)
    return np.where(o == 1, 0, np.where(o == -1, 1, 2))


# --------------------------------------------------------------------------- shared structure


def stance_counts(stance: npt.NDArray[np.int8], answer_id: npt.NDArray[np.int32], d: int) -> tuple[F64, B_, I64]:
    """Stance counts of claims (Q, M, K stances) under every hypothesis (d answers, then `none`).

    Returns ``counts`` (Q, M, d + 1, 2, 3): valid candidates by (correct under H,
    wrong) x (assert, deny, silent); ``aligned`` (Q, M); and the aligned class
    (Q, M, d + 1): 0 when H's candidates assert the claim, 1 when they deny it,
    2 for `none`.
    """
    valid = answer_id >= 0
    onehot = (answer_id[:, :, None] == np.arange(d)[None, None, :]).astype(np.float64)  # (Q, K, d)
    n_ans = onehot.sum(axis=1)  # (Q, d)
    q, m = stance.shape[:2]
    counts = np.zeros((q, m, d + 1, 2, 3))
    for s, code in enumerate((1, -1, 0)):
        x = ((stance == code) & valid[:, None, :]).astype(np.float64)  # (Q, M, K)
        mine = x @ onehot  # (Q, M, d)
        total = x.sum(axis=2)[:, :, None]
        counts[:, :, :d, 0, s] = mine
        counts[:, :, :d, 1, s] = total - mine
        counts[:, :, d, 1, s] = total[:, :, 0]
    present = n_ans[:, None, :] > 0
    pos_h, neg_h = counts[:, :, :d, 0, 0], counts[:, :, :d, 0, 1]
    aligned: B_ = np.all(~present | (pos_h == n_ans[:, None, :]) | (neg_h == n_ans[:, None, :]), axis=2)
    aligned = aligned & np.any(valid, axis=1, keepdims=True)
    cls = np.full((q, m, d + 1), 2, dtype=np.int64)
    cls[:, :, :d] = np.where(pos_h > 0, 0, 1)
    return counts, aligned, cls


def prior_log(counts: F64, n_cand: F64, params: F64) -> tuple[F64, B_]:
    """log P(H) from answer counts (Q, D) and candidate counts (Q,), params (Q, 4); shape (Q, D + 1).

    Returns the log-prior (last column `none`, -inf for absent answers) and the
    mask of real hypotheses.
    """
    n, d = counts.shape
    real = np.zeros((n, d + 1), dtype=bool)
    real[:, :d] = counts > 0
    b1, b2, c0, c1 = (params[:, i : i + 1] for i in range(4))
    present = counts > 0
    logw = np.where(present, b1 * counts + b2 * np.log(np.where(present, counts, 1.0)), -np.inf)
    has = real.any(axis=1)
    top = np.where(has, logw.max(axis=1, initial=-np.inf), 0.0)
    lse = top + np.log(np.where(counts > 0, np.exp(logw - top[:, None]), 0.0).sum(axis=1) + (~has))
    share = np.where(has, counts.max(axis=1, initial=0.0) / np.maximum(n_cand, 1), 0.0)
    z = c0[:, 0] + c1[:, 0] * share
    out = np.full((n, d + 1), -np.inf)
    log_some = np.where(has, -np.logaddexp(0.0, z), 0.0)
    out[:, :d] = np.where(counts > 0, log_some[:, None] + logw - lse[:, None], -np.inf)
    out[:, d] = np.where(has, -np.logaddexp(0.0, -z), 0.0)
    return out, real


def _stance_matrix(log_theta: F64) -> F64:
    """log theta (..., c, t, s) as a (..., 6, 2) matrix: rows (c, s), columns t."""
    lead = log_theta.shape[:-3]
    out: F64 = np.swapaxes(log_theta, -1, -2).reshape(*lead, 6, 2)
    return out


def _claim_weights(counts: F64, aligned: B_, cls: I64, free_true: F64, stance_mat: F64, aligned_true: F64) -> F64:
    """log P(stances_j, T_j = t | H) (free claims) or log P(T_j = t | H) (aligned), shape (R, 2).

    ``counts`` (R, 6) stance counts in the order (correct, wrong) x (assert, deny,
    silent); ``stance_mat`` (6, 2) or (R, 6, 2) from `_stance_matrix`; the other
    parameters are scalars or per row.
    """
    if stance_mat.ndim == 2:
        free = counts @ stance_mat
    else:
        free = np.matmul(counts[:, None, :], stance_mat)[:, 0, :]
    free += np.stack([np.log(free_true), np.log1p(-free_true)], axis=-1)
    t = np.take_along_axis(aligned_true, cls[:, None], axis=1)[:, 0] if aligned_true.ndim == 2 else aligned_true[cls]
    al = np.stack([np.log(t), np.log1p(-t)], axis=-1)
    out: F64 = np.where(aligned[:, None], al, free)
    return out


# --------------------------------------------------------------------------- fitting data


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
    # actions: latent row, group, outcome index, whole-response or not
    f_row: I64
    f_group: I64
    f_out: I64
    f_whole: B_
    dataset: list[str]  # of each question


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


def _cat(parts: list[Any], dtype: Any, shape: tuple[int, ...] = ()) -> Any:
    if parts:
        return np.concatenate(parts).astype(dtype)
    return np.zeros((0, *shape), dtype=dtype)


class _LatentRows:
    """Accumulates the latent rows and their actions of `_FitData`."""

    def __init__(self) -> None:
        self.parts: dict[str, list[Any]] = {k: [] for k in ("cq", "cc", "ca", "ck", "cw", "fr", "fg", "fo", "fw")}
        self.n = 0

    def add(
        self, qi: int, weight: float, counts: F64, aligned: B_, cls: I64, local: Any, group: Any, out: I64, whole: bool
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
        self.n += size


def _fit_data(questions: Sequence[Question]) -> _FitData:
    prior: list[tuple[int, F64, float, int, float]] = []
    rows = _LatentRows()
    for qi, q in enumerate(questions):
        if not q.labelled:
            continue
        right, weight = _true_answers(q)
        hyps = right if right else [-1]
        valid = q.answer_id >= 0
        d = int(q.answer_id.max()) + 1 if valid.any() else 0
        n_ans = np.bincount(q.answer_id[valid], minlength=d).astype(np.float64)
        prior.extend((qi, n_ans, float(q.k), h, weight) for h in hyps)
        out = _outcome_index(q.outcome)
        fac = np.nonzero(q.is_factor)[0]
        whole = np.nonzero(~q.is_factor)[0]
        if fac.size:
            claims, local = np.unique(q.action_claim[fac], return_inverse=True)
            counts, aligned, cls = stance_counts(q.incidence[claims][None], q.answer_id[None], d)
        if whole.size:
            judged = q.answer_id[q.action_candidate[whole]]  # -1: an invalid response, never right
            answers, wlocal = np.unique(judged, return_inverse=True)
        for h in hyps:
            if fac.size:
                col = h if h >= 0 else d
                rows.add(
                    qi, weight, counts[0, :, col], aligned[0], cls[0, :, col], local, q.group[fac], out[fac], False
                )
            if whole.size:
                verdict_cls = np.where((answers == h) & (answers >= 0), 3, 4).astype(np.int64)
                no_stance = np.zeros((answers.size, 2, 3))
                rows.add(qi, weight, no_stance, np.ones(answers.size, bool), verdict_cls, wlocal, q.group[whole],
                         out[whole], True)
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
        dataset=[q.dataset for q in questions],
    )


# --------------------------------------------------------------------------- fitting


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
        f_true = f[np.arange(t.size), t]
        b0 = b.copy()
        for _ in range(50):
            z = np.where(present, f @ b, -np.inf)
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            mean = np.einsum("rd,rdf->rf", p, f)
            grad = (wt_[:, None] * (f_true - mean)).sum(axis=0) - RIDGE * (b - b0)
            cov = np.einsum("rd,rdf,rdg->rfg", p, f, f) - mean[:, :, None] * mean[:, None, :]
            hess = (wt_[:, None, None] * cov).sum(axis=0) + RIDGE * np.eye(2)
            step = np.linalg.solve(hess, grad)
            b = b + step
            if float(np.abs(step).max()) < 1e-10:
                break
        k_max = float(max(k.max(), 1.0))
        if min(b[0] + b[1], b[0] + b[1] / k_max) < MIN_SLOPE:  # keep the mode at the majority
            b = np.array([0.0, max(float(b[1]), MIN_SLOPE)]) if b[1] > 0 else np.array([MIN_SLOPE, 0.0])
    return PriorParams(
        count_coef=float(b[0]),
        log_count_coef=float(b[1]),
        none_intercept=float(beta[0]),
        none_slope=float(beta[1]),
        questions=float(w.sum()),
    )


def _normalise(counts: F64) -> F64:
    c = counts + SMOOTHING
    out: F64 = c / c.sum(axis=-1, keepdims=True)
    return out


def _triple(x: F64) -> Triple:
    return (float(x[0]), float(x[1]), float(x[2]))


def _mixture_weights(loglik: F64, cls: I64, w: F64, n_cls: int, steps: int = 60) -> F64:
    """Per class k, argmax_t sum_r w_r log(t L1_r + (1 - t) L0_r) + s log t + s log(1 - t) (s = SMOOTHING).

    The objective is concave in t, so its derivative is bisected on (0, 1).
    """
    a = np.exp(loglik - loglik.max(axis=1, keepdims=True))  # (R, 2)
    lo, hi = np.zeros(n_cls), np.ones(n_cls)
    for _ in range(steps):
        t = (lo + hi) / 2
        tr = t[cls]
        ratio = w * (a[:, 0] - a[:, 1]) / (tr * a[:, 0] + (1 - tr) * a[:, 1])
        grad = np.bincount(cls, weights=ratio, minlength=n_cls) + SMOOTHING / t - SMOOTHING / (1 - t)
        up = grad > 0
        lo = np.where(up, t, lo)
        hi = np.where(up, hi, t)
    out: F64 = (lo + hi) / 2
    return out


def _fit_claims(
    data: _FitData, claim_rows: B_, act_rows: B_, n_groups: int, iters: int = 500, tol: float = 1e-9
) -> tuple[ClaimParams, F64, F64, F64]:
    """EM over the latent claim truths and verdicts for the claim model and the channel of every group.

    Channels are indexed by group id, whole-response groups after the factor
    ones (id + n_groups). Returns the claim parameters and, per channel, the
    expected outcome counts given a positive and a negative latent, and the
    action count.
    """
    idx = np.nonzero(claim_rows)[0]
    remap = np.full(claim_rows.size, -1, dtype=np.int64)
    remap[idx] = np.arange(idx.size)
    arow = remap[data.f_row[act_rows]]
    groups, grp = np.unique(data.f_group[act_rows] + n_groups * data.f_whole[act_rows], return_inverse=True)
    g = groups.size
    # outcome counts of each claim by (group, outcome): the sufficient statistic of the channels
    x = np.zeros((idx.size, g * 3))
    np.add.at(x, (arow, grp * 3 + data.f_out[act_rows]), 1.0)
    w = data.c_w[idx]
    aligned = data.c_aligned[idx]
    fr, al = np.nonzero(~aligned)[0], np.nonzero(aligned)[0]
    counts_f, x_f, w_f = data.c_counts[idx][fr].reshape(-1, 6), x[fr], w[fr]
    cls_a, x_a, w_a = data.c_cls[idx][al], x[al], w[al]
    # start: assertions by correct candidates and confirmations go with truth
    c1 = np.tile([0.6, 0.2, 0.2], (g, 1))
    c0 = np.tile([0.2, 0.6, 0.2], (g, 1))
    theta = np.array([[[0.6, 0.2, 0.2], [0.2, 0.6, 0.2]], [[0.45, 0.35, 0.2], [0.35, 0.45, 0.2]]])
    free_true = 0.3
    al_true = np.array([0.9, 0.1, 0.1, 0.9, 0.1])  # aligned classes, then the verdicts
    prev = -math.inf
    m1 = m0 = np.zeros(g * 3)
    for _ in range(iters):
        logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)  # (3g, 2)
        a_f = counts_f @ _stance_matrix(np.log(theta)) + np.log([free_true, 1 - free_true]) + x_f @ logc
        a_a = np.stack([np.log(al_true[cls_a]), np.log1p(-al_true[cls_a])], axis=1) + x_a @ logc
        ll = float(w_f @ np.logaddexp(a_f[:, 0], a_f[:, 1]) + w_a @ np.logaddexp(a_a[:, 0], a_a[:, 1]))
        g_f = _sigmoid(a_f[:, 0] - a_f[:, 1])
        g_a = _sigmoid(a_a[:, 0] - a_a[:, 1])
        # M-step: every table in closed form from expected counts
        t_f, t_a = w_f * g_f, w_a * g_a
        m1 = t_f @ x_f + t_a @ x_a
        m0 = (w_f - t_f) @ x_f + (w_a - t_a) @ x_a
        c1, c0 = _normalise(m1.reshape(g, 3)), _normalise(m0.reshape(g, 3))
        free_true = (float(t_f.sum()) + SMOOTHING) / (float(w_f.sum()) + 2 * SMOOTHING)
        theta = _normalise(np.stack([t_f @ counts_f, (w_f - t_f) @ counts_f]).reshape(2, 2, 3).swapaxes(0, 1))
        # aligned truth rates: the exact maximiser of the observed likelihood given the new
        # channels (an ECME step; plain EM crawls towards these near-0/1 rates)
        logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)
        al_true = _mixture_weights(x_a @ logc, cls_a, w_a, 5)
        if ll - prev <= tol * max(1.0, abs(ll)):
            break
        prev = ll
    n1 = np.zeros((2 * n_groups, 3))
    n0 = np.zeros((2 * n_groups, 3))
    n1[groups] = m1.reshape(g, 3)
    n0[groups] = m0.reshape(g, 3)
    acts = np.zeros(2 * n_groups)
    acts[groups] = np.bincount(grp, weights=w[arow], minlength=g)
    params = ClaimParams(
        aligned_true=_triple(al_true),
        verdict=(float(al_true[3]), float(al_true[4])),
        free_true=free_true,
        stance=((_triple(theta[0, 0]), _triple(theta[0, 1])), (_triple(theta[1, 0]), _triple(theta[1, 1]))),
        claims=float(w.sum()),
    )
    return params, n1, n0, acts


def fit_bayes_model(
    questions: Sequence[Question],
    group_keys: Sequence[str],
    train: npt.NDArray[np.bool_] | None = None,
    *,
    _data: _FitData | None = None,
) -> BayesModel:
    """Fit the prior, claim model and channels on the labelled questions selected by ``train``.

    ``group_keys[g]`` names the group id g of the questions' actions ("dataset/group").
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
        frow = crow[data.f_row]
        if crow.any() and frow.any():
            claims, n1, n0, acts = _fit_claims(data, crow, frow, n_groups)
            model.claims[ds] = claims
            for g in np.nonzero(acts > 0)[0].tolist():
                t1, t0 = _triple(_normalise(n1[g])), _triple(_normalise(n0[g]))
                table = ChannelTable(given_true=t1, given_false=t0, actions=float(acts[g]))
                if g < n_groups:
                    model.factor_channels[group_keys[g]] = table
                else:
                    model.whole_channels[group_keys[g - n_groups]] = table
    return model


def _keys_from_calibration(questions: Sequence[Question], train: B_, calibration: Calibration) -> list[str]:
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


# --------------------------------------------------------------------------- policy


def _row_tables(state: EvidenceState) -> dict[str, F64]:
    """Per-row prior and claim parameters and per-action channel tables of a state."""
    n = state.n
    n_cal = max(len(state.calibrations), 1)
    g = len(state.group_keys)
    models = [model_of(c) for c in state.calibrations] if state.calibrations else [BayesModel()]
    fc = np.empty((n_cal, g + 1, 2, 3))  # last group: padding
    wc = np.empty((n_cal, g + 1, 2, 3))
    fc[:] = np.array(UNINFORMATIVE)
    wc[:] = np.array(UNINFORMATIVE)
    for c, m in enumerate(models):
        for gi, key in enumerate(state.group_keys):
            t = m.factor_channels.get(key)
            if t is not None:
                fc[c, gi] = (t.given_true, t.given_false)
            t = m.whole_channels.get(key)
            if t is not None:
                wc[c, gi] = (t.given_true, t.given_false)
    cal = state.calibration.astype(np.intp) if state.calibrations else np.zeros(n, dtype=np.intp)
    grp = np.where(state.group >= 0, state.group, g)
    response = (state.whole | state.answer)[:, :, None, None]
    channel = np.where(response, wc[cal[:, None], grp], fc[cal[:, None], grp])  # (Q, A, 2, 3)
    prior = np.empty((n, 4))
    free_true = np.empty(n)
    theta = np.empty((n, 2, 2, 3))
    aligned_true = np.empty((n, 3))
    verdict = np.empty((n, 2))
    cache: dict[tuple[int, str], tuple[PriorParams, ClaimParams]] = {}
    for r in range(n):
        ck = (int(cal[r]), state.dataset[r])
        got = cache.get(ck)
        if got is None:
            m = models[ck[0]]
            got = cache[ck] = (m.priors.get(ck[1], DEFAULT_PRIOR), m.claims.get(ck[1], DEFAULT_CLAIMS))
        pp, cp = got
        prior[r] = (pp.count_coef, pp.log_count_coef, pp.none_intercept, pp.none_slope)
        free_true[r] = cp.free_true
        theta[r] = cp.stance
        aligned_true[r] = cp.aligned_true
        verdict[r] = cp.verdict
    return {
        "channel": np.clip(channel, EPS, 1.0),
        "prior": prior,
        "free_true": np.clip(free_true, EPS, 1 - EPS),
        "log_theta": np.log(np.clip(theta, EPS, 1.0)),
        "aligned_true": np.clip(aligned_true, EPS, 1 - EPS),
        "verdict": np.clip(verdict, EPS, 1 - EPS),
    }


@register_policy("bayes")
class Bayes:
    """Exact posterior over the correct answer; greedy exact myopic EVSI per cost (see module docstring)."""

    name: ClassVar[str] = "bayes"
    deployable: ClassVar[bool] = True
    reads_labels: ClassVar[bool] = False
    OPTIONS: ClassVar[tuple[str, ...]] = ("eta", "fallback")

    def __init__(self, eta: float = 0.0, fallback: str = "info") -> None:
        if not math.isfinite(eta):
            raise ConfigError(f"eta must be finite, got {eta}")
        if fallback not in ("info", "stop"):
            raise ConfigError(f"fallback must be 'info' or 'stop', got {fallback!r}")
        self.eta = float(eta)
        self.fallback = fallback
        self._data: tuple[Sequence[Question], _FitData] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(eta={self.eta!r}, fallback={self.fallback!r})"

    # ---- calibration hooks (called by plan_calibration / run_experiment)

    def fit_extra(
        self,
        questions: Sequence[Question],
        train_mask: npt.NDArray[np.bool_],
        calibration: Calibration,
        group_keys: Sequence[str] | None = None,
    ) -> Calibration:
        """Fit the observation model on ``questions[train_mask]`` and attach it to a copy of ``calibration``.

        ``group_keys`` names the questions' group ids; without it they are read off
        ``calibration``, which `fit_groups` built from the same training questions.
        """
        train_mask = np.asarray(train_mask, dtype=bool)
        if group_keys is None:
            keys = _keys_from_calibration(questions, train_mask, calibration)
        else:
            keys = list(group_keys)
        if self._data is None or self._data[0] is not questions:
            self._data = (questions, _fit_data(questions))
        model = fit_bayes_model(questions, keys, train_mask, _data=self._data[1])
        return calibration.model_copy(update={"extra": {**calibration.extra, BAYES_KEY: model.model_dump(mode="json")}})

    def fit_extra_present(self, calibration: Calibration) -> bool:
        """Whether ``calibration`` carries a valid `bayes` observation model."""
        try:
            model_of(calibration)
        except CalibrationError:
            return False
        return True

    # ---- the policy protocol

    def start(self, state: EvidenceState) -> None:
        tabs = _row_tables(state)
        n, k = state.answer_id.shape
        d = int(state.answer_id.max()) + 1 if state.answer_id.size else 0
        n_ans = (state.answer_id[:, :, None] == np.arange(d)[None, None, :]).sum(axis=1).astype(np.float64)
        lpost, real = prior_log(n_ans, state.candidate.sum(axis=1).astype(np.float64), tabs["prior"])
        # claim stances, from the factor actions of the menu: (Q, M, K)
        m = max(int(state.claim.max(initial=-1)) + 1, 1)
        stance = np.zeros((n, m, k), dtype=np.int8)
        qi, ai = np.nonzero(state.factor)
        stance[qi, state.claim[qi, ai]] = state.alpha[qi, ai]
        counts, aligned, cls = stance_counts(stance, state.answer_id, d)
        h = d + 1
        rows = np.repeat(np.arange(n), m * h)
        weights = _claim_weights(
            counts.reshape(-1, 6),
            np.repeat(aligned.reshape(-1), h),
            cls.reshape(-1),
            tabs["free_true"][rows],
            _stance_matrix(tabs["log_theta"])[rows],
            tabs["aligned_true"][rows],
        ).reshape(n, m, h, 2)
        evidence = np.where(aligned[:, :, None], 0.0, np.logaddexp(weights[..., 0], weights[..., 1]))
        rho = _sigmoid(weights[..., 0] - weights[..., 1])
        # the verdicts on the answers (latents m .. m + d - 1) and on invalid responses (m + d)
        v = tabs["verdict"]
        right = np.arange(d + 1)[:, None] == np.arange(h)[None, :]  # (d + 1, H): answer a is H's
        right[d] = False
        rho_v = np.where(right[None], v[:, 0, None, None], v[:, 1, None, None])  # (Q, d + 1, H)
        target = np.take_along_axis(state.answer_id, np.maximum(state.target, 0), axis=1)
        latent = np.where(state.whole | state.answer, m + np.where(target >= 0, target, d), np.maximum(state.claim, 0))
        ch = tabs["channel"]
        state.extra.update(
            bayes_lpost=lpost,
            bayes_real=real,
            bayes_rho=np.clip(np.concatenate([rho, rho_v], axis=1), EPS, 1 - EPS),
            # log P(stances_j | H), added at the claim's first check
            bayes_stance=np.concatenate([evidence, np.zeros((n, d + 1, h))], axis=1),
            bayes_seen=np.zeros((n, m + d + 1), dtype=bool),
            bayes_c1=ch[:, :, 0, :].copy(),
            bayes_c0=ch[:, :, 1, :].copy(),
            bayes_claim=latent.astype(np.intp),  # the latent each action reads
        )

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        if rows.size == 0:
            return
        ex = state.extra
        o = _outcome_index(outcomes)
        j = ex["bayes_claim"][rows, actions]
        first = ~ex["bayes_seen"][rows, j]
        lp = ex["bayes_lpost"][rows] + np.where(first[:, None], ex["bayes_stance"][rows, j], 0.0)
        ex["bayes_seen"][rows, j] = True
        rho = ex["bayes_rho"][rows, j]
        c1 = ex["bayes_c1"][rows, actions, o][:, None]
        lik = rho * c1 + (1 - rho) * ex["bayes_c0"][rows, actions, o][:, None]
        ex["bayes_rho"][rows, j] = np.clip(rho * c1 / lik, EPS, 1 - EPS)
        ex["bayes_lpost"][rows] = _log_normalise(lp + np.log(lik))

    def choose(self, state: EvidenceState) -> IntArr:
        feasible = state.feasible()
        view = _View(state)
        value = view.evsi() / state.cost
        choice = first_max(value, feasible)
        rows = np.nonzero(choice >= 0)[0]
        stop = value[rows, choice[rows]] <= self.eta
        if self.fallback == "info" and self.eta == 0.0 and stop.any():
            # No single check can change the selection. With eta = 0 evidence is
            # free within the budget and never lowers the expected value of the
            # selection, so test the current choice with the most informative check.
            r = rows[stop]
            info = view.decision_info(r) / state.cost[r]
            choice[r] = first_max(info, feasible[r] & (info > INFO_TOL))
            return choice
        choice[rows[stop]] = -1
        return choice

    def posterior(self, state: EvidenceState) -> F64:
        """P(H | history), shape (Q, D + 1); the last column is `none`, absent answers are 0."""
        out: F64 = np.exp(state.extra["bayes_lpost"])
        return out

    def values(self, state: EvidenceState) -> F64:
        """Exact myopic EVSI of every action, shape (Q, A) (not divided by cost)."""
        return _View(state).evsi()

    def select(self, state: EvidenceState) -> IntArr:
        return first_max(self.final_scores(state), state.candidate)

    def final_scores(self, state: EvidenceState) -> F64:
        """Posterior probability that each candidate's answer is the correct one (invalid and padding 0)."""
        post = self.posterior(state)
        aid = state.answer_id
        s = np.take_along_axis(post, np.maximum(aid, 0), axis=1)
        return np.where((aid >= 0) & state.candidate, s, 0.0)


def _log_normalise(lp: F64) -> F64:
    top = lp.max(axis=1, keepdims=True)
    out: F64 = lp - (top + np.log(np.exp(lp - top).sum(axis=1, keepdims=True)))
    return out


class _View:
    """The posterior of a state as each action sees it: with the stances of the claim it reads."""

    def __init__(self, state: EvidenceState) -> None:
        ex = state.extra
        self.state = state
        self.ex = ex
        real = ex["bayes_real"]
        lp = ex["bayes_lpost"]
        # per latent: P(H | history, stances of the claim), (Q, M, H)
        lpc = lp[:, None, :] + np.where(ex["bayes_seen"][:, :, None], 0.0, ex["bayes_stance"])
        lpc = lpc - lpc.max(axis=2, keepdims=True)
        pc = np.exp(lpc)
        pc /= pc.sum(axis=2, keepdims=True)
        self.post_claim = pc
        self.pr_claim = np.where(real[:, None, :], pc, 0.0)  # selectable mass: `none` and absent answers 0

    def evsi(self) -> F64:
        """sum_o max_d P(d) P(o | d) - P(d_now) sum_o P(o | d_now) per action, each outcome term >= 0 exactly.

        P(d) P(o | d) = P(d) rho_d (c1 - c0) + P(d) c0, with P from the view of the action's latent.
        """
        st, ex = self.state, self.ex
        c1, c0 = ex["bayes_c1"], ex["bayes_c0"]
        dc = c1 - c0
        claim = ex["bayes_claim"]
        q = np.arange(st.n)[:, None]
        now = np.argmax(self.pr_claim, axis=2)[q, claim]  # (Q, A)
        pr = self.pr_claim[q, claim]  # (Q, A, H)
        u = pr * ex["bayes_rho"][q, claim]
        p_now = np.take_along_axis(pr, now[:, :, None], axis=2)[:, :, 0]
        u_now = np.take_along_axis(u, now[:, :, None], axis=2)[:, :, 0]
        gain = np.zeros(st.cost.shape)
        buf = np.empty_like(u)
        for o in range(3):
            np.multiply(u, dc[:, :, o, None], out=buf)
            buf += pr * c0[:, :, o, None]
            gain += buf.max(axis=2) - (u_now * dc[:, :, o] + p_now * c0[:, :, o])
        return gain

    def decision_info(self, rows: IntArr) -> F64:
        """I(O_e; [H = current choice]) in nats for every action of ``rows``, shape (n, A)."""
        ex = self.ex
        claim = ex["bayes_claim"][rows]
        c1, c0 = ex["bayes_c1"][rows], ex["bayes_c0"][rows]
        pc, rho = self.post_claim[rows], ex["bayes_rho"][rows]  # (n, M, H)
        now = np.argmax(self.pr_claim[rows], axis=2)[:, :, None]  # (n, M, 1)
        i = np.arange(rows.size)[:, None]
        p_now = np.take_along_axis(pc, now, axis=2)[:, :, 0][i, claim][:, :, None]
        rho_now = np.take_along_axis(rho, now, axis=2)[:, :, 0][i, claim][:, :, None]
        p_true = (pc * rho).sum(axis=2)[i, claim][:, :, None]  # P(latent = 1 | view)
        p_o = p_true * c1 + (1 - p_true) * c0  # P(o)
        joint_now = p_now * (rho_now * c1 + (1 - rho_now) * c0)  # P(o, H = now)
        joint_rest = np.maximum(p_o - joint_now, 0.0)
        info = _xlogy(joint_now, joint_now / np.maximum(p_now * p_o, 1e-300))
        info += _xlogy(joint_rest, joint_rest / np.maximum((1 - p_now) * p_o, 1e-300))
        out: F64 = np.maximum(info.sum(axis=2), 0.0)
        return out


def _xlogy(x: F64, y: F64) -> F64:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = np.where(x > 0, x * np.log(np.where(x > 0, y, 1.0)), 0.0)
    return out


@register_policy("bayes-lookahead")
class BayesLookahead(Bayes):
    """`bayes` that also values pairs of checks bought one after the other.

    Each step it takes the ``shortlist`` feasible actions carrying most
    information about the current choice per cost, computes the exact value of
    every affordable pair of them (both outcomes, the claims' stances, shared
    claims handled jointly) and compares the best pair's value per total cost
    with the best single action's. When a pair wins it buys the pair's more
    informative member first and decides again after seeing its outcome.
    """

    name: ClassVar[str] = "bayes-lookahead"
    OPTIONS: ClassVar[tuple[str, ...]] = ("eta", "fallback", "shortlist")

    def __init__(self, eta: float = 0.0, fallback: str = "info", shortlist: int = 6) -> None:
        super().__init__(eta=eta, fallback=fallback)
        if shortlist < 2:
            raise ConfigError(f"shortlist must be at least 2, got {shortlist}")
        self.shortlist = int(shortlist)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(eta={self.eta!r}, fallback={self.fallback!r}, shortlist={self.shortlist!r})"

    def choose(self, state: EvidenceState) -> IntArr:
        feasible = state.feasible()
        view = _View(state)
        single = view.evsi() / state.cost
        choice = first_max(single, feasible)
        live = np.nonzero(choice >= 0)[0]
        if live.size == 0:
            return choice
        best_single = single[live, choice[live]]
        info = view.decision_info(live) / state.cost[live]
        pair_value, first = _pair_values(state, live, feasible[live], info, self.shortlist)
        use_pair = (pair_value > best_single) & (pair_value > self.eta)
        choice[live[use_pair]] = first[use_pair]
        stop = ~use_pair & (best_single <= self.eta)
        if self.fallback == "info" and self.eta == 0.0:
            alt = first_max(info, feasible[live] & (info > INFO_TOL))
            choice[live[stop]] = alt[stop]
        else:
            choice[live[stop]] = -1
        return choice


def _pair_values(state: EvidenceState, rows: IntArr, feasible: B_, info: F64, n_short: int) -> tuple[F64, IntArr]:
    """Best pair value per total cost among the shortlisted actions of ``rows``, and the action to buy first."""
    ex = state.extra
    n = rows.size
    a_max = feasible.shape[1]
    n_short = min(n_short, a_max)
    if n_short < 2:
        return np.full(n, -np.inf), np.full(n, -1, dtype=np.intp)
    key = np.where(feasible, info, -np.inf)
    short = np.argsort(-key, axis=1, kind="stable")[:, :n_short]  # (n, N)
    ok = np.take_along_axis(feasible, short, axis=1)
    r = rows[:, None]
    claim = ex["bayes_claim"][r, short]
    cost = state.cost[r, short]
    c1, c0 = ex["bayes_c1"][r, short], ex["bayes_c0"][r, short]  # (n, N, 3)
    rho = ex["bayes_rho"][r, claim]  # (n, N, H)
    lik = rho[..., None] * c1[:, :, None, :] + (1 - rho[..., None]) * c0[:, :, None, :]  # (n, N, H, 3)
    unseen = ~ex["bayes_seen"][r, claim]
    stance = np.where(unseen[..., None], ex["bayes_stance"][r, claim], 0.0)  # (n, N, H)
    ia, ib = np.triu_indices(n_short, k=1)
    same = claim[:, ia] == claim[:, ib]  # two reads of one latent, (n, P)
    joint = lik[:, ia, :, :, None] * lik[:, ib, :, None, :]  # (n, P, H, 3, 3)
    rho_a = rho[:, ia][..., None, None]
    shared = rho_a * c1[:, ia, None, :, None] * c1[:, ib, None, None, :]
    shared = shared + (1 - rho_a) * c0[:, ia, None, :, None] * c0[:, ib, None, None, :]
    joint = np.where(same[:, :, None, None, None], shared, joint)
    lp = ex["bayes_lpost"][rows][:, None, :] + stance[:, ia] + np.where(same[..., None], 0.0, stance[:, ib])
    lp = lp - lp.max(axis=2, keepdims=True)
    post = np.exp(lp)
    post /= post.sum(axis=2, keepdims=True)
    pr = np.where(ex["bayes_real"][rows][:, None, :], post, 0.0)  # (n, P, H)
    now = np.argmax(pr, axis=2)
    mass = pr[..., None, None] * joint
    cur = np.take_along_axis(mass, now[:, :, None, None, None], axis=2)[:, :, 0]
    value = (mass.max(axis=2) - cur).sum(axis=(2, 3))  # (n, P)
    total = cost[:, ia] + cost[:, ib]
    remaining = (state.budget - state.spent)[rows][:, None]
    allowed = ok[:, ia] & ok[:, ib] & (total <= remaining)
    density = np.where(allowed, value / total, -np.inf)
    best = first_max(density, allowed)
    has = best >= 0
    bi = np.maximum(best, 0)
    pick_a = short[np.arange(n), ia[bi]]
    pick_b = short[np.arange(n), ib[bi]]
    info_a = info[np.arange(n), pick_a]
    info_b = info[np.arange(n), pick_b]
    first = np.where((info_b > info_a) | ((info_b == info_a) & (pick_b < pick_a)), pick_b, pick_a)
    out = np.where(has, density[np.arange(n), bi], -np.inf)
    return out, np.where(has, first, -1)
