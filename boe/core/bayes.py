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
(c0, c1) a logistic regression, fitted by maximum likelihood of the truth;
the conditional logit is maximised under its constraint (on the active
boundary when the free optimum breaks it).

Claims. Claim j has a latent truth T_j. A claim is *aligned* when it is a
function of the answer (every valid candidate takes a stance and candidates
sharing an answer share it, like "the answer is v"); then::

    P(T_j = 1 | H) = t_assert, t_deny or t_none     (H's candidates assert / deny it; H = none)

Any other claim is *free*: its truth has prior P(T_j = 1) = f and each valid
candidate's stance s in (assert, deny, silent) is drawn given the truth and
whether the candidate is correct under H::

    P(stances_j, T_j = t | H) = P(T_j = t) prod_i theta[correct_i(H), t, s_ij]

so P(T_j = t | H, stances) follows from Bayes' rule and P(stances_j | H) is
evidence about H: the pool's own structure, known before any check. Claims
are not independent given H (one candidate's stances on the values of one
slot are a single choice), so the stance evidence enters the prior as
P(stances_j | H)^lambda, lambda fitted to predict the true answer (a
calibrated composite likelihood, cross-fitted; 0 where it does not help).
The structure alone may move the prior's mode off the raw majority only where
held-out data show such overrules right more often than wrong (a one-sided
sign test at 5%, `overrules_supported`); on any other question that would be
such an overrule it is left out, so before a check `bayes` selects the raw
majority unless the data say the structure beats it.

Verdicts. A whole-response judge may judge equal answers alike, so checks of
candidates sharing an answer are not independent. Each answer d has a latent
verdict V_d (the judge's view of that answer) with
``P(V_d = 1 | H) = v_right`` if H = d and ``v_wrong`` otherwise; a
whole-response check of a candidate holding d reads V_d, and so does an
answer-level check of d (ledger format 1.1): a direct observation of the
hypothesis H = d through its own channel. (v_right = 1,
v_wrong = 0 is a judge whose checks are independent given correctness.)

Channels. Every action reads one binary latent through the channel of its
calibration group: a factor action reads its claim's truth, a whole-response
or answer-level action (format 1.1) its answer's verdict:
P(o | latent = t, s) = C_g(o | t, s) for o in (confirm, reject, unresolved),
where s is the latent's *standing* in the pool: whether it is on top (a claim
asserted by more valid candidates than deny it; an answer held by the most
candidates) and the share of valid candidates asserting it, binned at
`STANDING_EDGES`. The standing is known before any check, so conditioning on
it is legitimate; it lets the model learn a judge that tends to confirm what
most candidates say (a confirm of a top claim is then weak evidence, a
confirm of a minority claim strong). Latents are independent given H, the
actions reading one latent independent given it.

Partial pooling. C_g(. | t, s) is the posterior mean of a Dirichlet centred
on the group's table C_g(. | t), and the group's table the posterior mean of
a Dirichlet centred on its parent -- all groups of the same action kind in
the dataset. Each parent's pseudo-count is chosen by empirical Bayes (the
Dirichlet-multinomial evidence of its children, on `TAU_GRID`): where the
standings (or the groups of a kind) behave alike the pseudo-count is large
and the children share one table; where they differ -- an echoing judge --
it is small and each speaks for itself.

Check weight. Checks are not independent given their latents either (a
model judge has one reading of an image behind all its checks), so summed
outcome evidence overstates what several weak checks say together. Every
channel table is tempered: P(o | t, s) is replaced by C(o | t, s)^w normalised
over o, with 0 < w <= 1 fitted per dataset (`_fit_check_weight`: the w of
`CHECK_WEIGHTS` under which the policy itself, run at `CHECK_WEIGHT_BUDGET` on
the training questions, gives the true answer the highest log posterior).
The tempered table is a proper channel, so everything below stays exact
under it; w = 1 is the untempered model.

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
latent claim truths and verdicts, the shrinkage inside every M-step) and
stored in a calibration's ``extra["bayes"]``. `Bayes.explain` gives, for
every purchase, the latent read, its standing, the likelihood of the outcome
under a true and a false latent, and the selected answer's posterior before
and after (what the evidence log prints).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boe.core.calibration import Calibration, Priors, crossfit_folds, default_names
from boe.core.graph import N_FACTOR_CODES, Question
from boe.core.monotone import monotone_tables
from boe.core.policies import IntArr, Policy, register_policy
from boe.core.relevance import action_ratios, latent_checks, latent_gain, relevance_of_gain, selected_terms
from boe.core.scoring import first_max
from boe.core.state import EvidenceState, bind_questions
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
    "keys_from_calibration",
    "model_of",
    "prior_model",
    "with_prior_model",
    "overrules_supported",
    "prior_log",
    "prior_setup",
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
#: Share-of-pool bin edges of a latent's standing; standings are (not top, top) x these bins.
STANDING_EDGES: tuple[float, ...] = (0.2, 0.4, 0.6)
N_SHARE = len(STANDING_EDGES) + 1
N_STANDING = 2 * N_SHARE
#: Pseudo-count of every parent table in the first EM phase.
TAU_START = 20.0
#: Candidate pseudo-counts of a parent table (partial pooling; chosen by empirical Bayes per parent).
TAU_GRID = np.array([2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 1e5, 1e6])
#: Action kinds (the parents of the groups): codes of `boe.core.graph.KIND_CODES`.
N_KINDS = 5


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
    # weight of the stance evidence log P(stances_j | H) in the prior (a calibrated composite likelihood, see
    # `_fit_stance_weight`): 0 ignores the pool's structure, below 0 reads it against its face
    stance_weight: float = Field(default=1.0, ge=-5.0, le=5.0)
    # held-out (right, wrong) questions on which the stance evidence at this weight moved the prior's mode off the
    # raw majority; it may do so only where these support it at 5% (`overrules_supported`), default: never
    overrules: tuple[float, float] = (0.0, 0.0)
    # tempering w of every channel table, P(o | t, s)^w normalised over o (see `_fit_check_weight`); 1 = untempered
    check_weight: float = Field(default=1.0, gt=0.0, le=1.0)


class ChannelTable(BaseModel):
    """P(confirm, reject, unresolved | claim true / false) of a factor group, or
    P(. | verdict on the judged answer positive / negative) of a response group;
    optionally per standing of the latent in the pool (`standing_bin` order)."""

    model_config = ConfigDict(extra="forbid")

    given_true: Triple
    given_false: Triple
    actions: float = 0.0  # training actions (diagnostic)
    standing: list[tuple[Triple, Triple]] | None = None  # (given_true, given_false) per standing bin
    standing_actions: list[float] | None = None  # training actions per standing bin (diagnostic)
    # expected outcome counts of the training checks on a true and on a false latent (the table's sample size)
    counts: tuple[Triple, Triple] | None = None

    def at(self, standing: int) -> tuple[Triple, Triple]:
        """(given_true, given_false) for a latent of this standing (the group table without standings)."""
        if self.standing is None or not 0 <= standing < len(self.standing):
            return self.given_true, self.given_false
        return self.standing[standing]


class BayesModel(BaseModel):
    """The fitted observation model of the `bayes` policy."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["boe-bayes/1"] = MODEL_FORMAT
    priors: dict[str, PriorParams] = Field(default_factory=dict)  # by dataset
    claims: dict[str, ClaimParams] = Field(default_factory=dict)  # by dataset
    factor_channels: dict[str, ChannelTable] = Field(default_factory=dict)  # by group key "dataset/group"
    whole_channels: dict[str, ChannelTable] = Field(default_factory=dict)
    # dataset-free channel tables for groups the model has none of ("channel/slot", "channel/answer" or
    # "channel", as calibration defaults): the hand-set prior (`prior_model`)
    defaults: dict[str, ChannelTable] = Field(default_factory=dict)

    def table(self, key: str, response: bool) -> ChannelTable | None:
        """The channel table of a group key: fitted for it, else its dataset-free default, else None."""
        found = (self.whole_channels if response else self.factor_channels).get(key)
        if found is None:
            found = next((self.defaults[n] for n in default_names(key) if n in self.defaults), None)
        return found


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


#: Models `_read_model` validated, by the identity of the stored data (kept alive here, so the id is not reused).
_READ: dict[int, tuple[Any, BayesModel]] = {}


def _read_model(cal: Calibration) -> BayesModel:
    """`model_of`, validated once per stored model and shared: for the policy's start, which only reads it (an
    online run starts it once a question, on the same calibration; a validation takes about 0.5 ms)."""
    data = cal.extra.get(BAYES_KEY)
    hit = _READ.get(id(data))
    if hit is not None and hit[0] is data:
        return hit[1]
    model = model_of(cal)
    if len(_READ) >= 16:  # (a fit makes a calibration per fold)
        _READ.clear()
    _READ[id(data)] = (data, model)
    return model


UNINFORMATIVE: tuple[Triple, Triple] = ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 3, 1 / 3))
DEFAULT_PRIOR = PriorParams()
#: Unseen dataset: aligned claims keep their meaning, free claims carry no stance evidence.
DEFAULT_CLAIMS = ClaimParams(stance_weight=0.0)


def prior_table(kappa: float, masses: Triple) -> ChannelTable:
    """A channel of accuracy ``kappa`` on resolved verdicts with the outcome masses' unresolved rate."""
    u = masses[2]
    r = 1.0 - u
    return ChannelTable(given_true=(kappa * r, (1 - kappa) * r, u), given_false=((1 - kappa) * r, kappa * r, u))


def prior_model(channels: Priors) -> BayesModel:
    """The hand-set prior observation model: a table per channel of the kinds' priors (not fitted on data)."""
    return BayesModel(defaults={ch: prior_table(k, p) for ch, (k, p) in channels.items()})


def with_prior_model(extra: Mapping[str, Any], channels: Priors) -> dict[str, Any]:
    """``extra`` whose `bayes` model has the prior tables of ``channels`` where it has no default of its own."""
    data = extra.get(BAYES_KEY)
    try:
        model = BayesModel() if data is None else BayesModel.model_validate(data)
    except ValidationError:
        return dict(extra)  # reported when the policy reads it
    add = {k: v for k, v in prior_model(channels).defaults.items() if k not in model.defaults}
    if not add:
        return dict(extra)
    model = model.model_copy(update={"defaults": {**add, **model.defaults}})
    return {**extra, BAYES_KEY: model.model_dump(mode="json")}


def standing_bin(n_assert: npt.ArrayLike, top: npt.ArrayLike, n_valid: npt.ArrayLike) -> I64:
    """Standing of latents: ``N_SHARE * top + bin(n_assert / n_valid)`` (see the module docstring)."""
    share = np.asarray(n_assert, dtype=np.float64) / np.maximum(np.asarray(n_valid, dtype=np.float64), 1.0)
    b = np.zeros(share.shape, dtype=np.int64)
    for edge in STANDING_EDGES:
        b += share >= edge - 1e-12
    out: I64 = N_SHARE * np.asarray(top, dtype=np.int64) + b
    return out


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


def _claim_weights(
    counts: F64, aligned: B_, cls: I64, model: I64, free_true: F64, stance_mat: F64, aligned_true: F64
) -> F64:
    """log P(stances_j, T_j = t | H) (free claims) or log P(T_j = t | H) (aligned), shape (R, 2).

    ``counts`` (R, 6) stance counts in the order (correct, wrong) x (assert, deny,
    silent); row r reads claim model ``model[r]``: ``free_true`` (U,), ``stance_mat``
    (U, 6, 2) from `_stance_matrix` and ``aligned_true`` (U, 3).
    """
    free = np.empty((counts.shape[0], 2))
    for u in np.unique(model).tolist():
        sel = np.nonzero(model == u)[0]
        # one row at a time (a stacked matmul, the model's matrix broadcast): a product of the rows'
        # 2-d block would be summed in another order
        free[sel] = np.matmul(counts[sel][:, None, :], np.broadcast_to(stance_mat[u], (sel.size, 6, 2)))[:, 0, :]
    free += np.stack([np.log(free_true), np.log1p(-free_true)], axis=-1)[model]
    t = aligned_true[model, cls]
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


def _normalise(counts: F64) -> F64:
    c = counts + SMOOTHING
    out: F64 = c / c.sum(axis=-1, keepdims=True)
    return out


def _triple(x: F64) -> Triple:
    return (float(x[0]), float(x[1]), float(x[2]))


def _mixture_weights(loglik: F64, cls: I64, w: F64, n_cls: int, start: F64 | None = None, steps: int = 42) -> F64:
    """Per class k, argmax_t sum_r w_r log(t L1_r + (1 - t) L0_r) + s log t + s log(1 - t) (s = SMOOTHING).

    The objective is concave in t, so its derivative is bisected on (0, 1), to 2^-42 (far below any tolerance).
    The bisection's steps follow from the root, found first by safeguarded Newton: only midpoints within
    `BISECT_NEAR` of it evaluate the derivative, so the result is the plain bisection's to the last bit
    (``start``, a guess of the root, only speeds Newton up).
    """
    # the rows' max as one elementwise maximum: the same numbers, without numpy's slow reduction over an axis of 2
    a = np.exp(loglik - np.maximum(loglik[:, 0], loglik[:, 1])[:, None])  # (R, 2)
    a1, a0 = a[:, 0].copy(), a[:, 1].copy()
    wd = w * (a1 - a0)
    # every evaluation writes into the same row buffers (the same operations, without a fresh array each)
    tr, den, ratio = np.empty(cls.size), np.empty(cls.size), np.empty(cls.size)

    def terms(t: F64) -> tuple[F64, F64]:
        """The derivative at ``t``, and every row's mixture density t L1 + (1 - t) L0 (scaled; valid until
        the next call)."""
        t.take(cls, out=tr)
        np.multiply(tr, a1, out=den)
        np.subtract(1, tr, out=tr)
        np.multiply(tr, a0, out=tr)
        np.add(den, tr, out=den)  # t L1 + (1 - t) L0
        np.divide(wd, den, out=ratio)
        out = np.bincount(cls, weights=ratio, minlength=n_cls).astype(np.float64, copy=False)
        return out + SMOOTHING / t - SMOOTHING / (1 - t), den

    def grad(t: F64) -> F64:
        return terms(t)[0]

    root = _derivative_root(terms, wd, a0, a1, cls, np.full(n_cls, 0.5) if start is None else start)
    lo, hi = np.zeros(n_cls), np.ones(n_cls)
    for _ in range(steps):
        t = (lo + hi) / 2
        up = t < root
        near = np.abs(t - root) <= BISECT_NEAR
        if near.any():
            up = np.where(near, grad(t) > 0, up)
        lo = np.where(up, t, lo)
        hi = np.where(up, hi, t)
    out: F64 = (lo + hi) / 2
    return out


#: Midpoints of `_mixture_weights`'s bisection this close to the Newton root evaluate the derivative's sign
#: (far above the root's rounding error, so every other step's sign is known).
BISECT_NEAR = 1e-11


def _derivative_root(terms: Callable[[F64], tuple[F64, F64]], wd: F64, a0: F64, a1: F64, cls: I64, start: F64) -> F64:
    """The root in (0, 1) of each class's decreasing derivative (``terms``: it and the rows' mixture densities),
    by Newton's method from ``start`` kept in a bracket."""
    n_cls = start.size
    lo, hi = np.zeros(n_cls), np.ones(n_cls)
    t = np.clip(start, 1e-12, 1 - 1e-12)
    curvature = wd * (a1 - a0)
    buf = np.empty(cls.size)
    for _ in range(100):
        g, den = terms(t)
        np.multiply(den, den, out=buf)
        np.divide(curvature, buf, out=buf)
        slope = -np.bincount(cls, weights=buf, minlength=n_cls).astype(np.float64, copy=False)
        slope -= SMOOTHING / (t * t) + SMOOTHING / ((1 - t) * (1 - t))
        step = g / slope
        if float(np.abs(step).max()) < 1e-14:
            break
        lo = np.where(g > 0, t, lo)
        hi = np.where(g > 0, hi, t)
        t = t - step
        t = np.where((t >= lo) & (t <= hi) & (t > 0) & (t < 1), t, (lo + hi) / 2)
    return t


def gammaln(x: npt.ArrayLike) -> F64:
    """log Gamma(x) for x > 0, elementwise (recurrence up to 8, then Stirling's series; error < 1e-12)."""
    y = np.array(x, dtype=np.float64)
    shift = np.zeros_like(y)
    for _ in range(8):
        low = y < 8.0
        if not low.any():
            break
        shift += np.where(low, np.log(np.where(low, y, 1.0)), 0.0)
        y = np.where(low, y + 1.0, y)
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))
    out: F64 = (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series - shift
    return out


def _evidence(m: F64, parent: F64, owner: I64, n_owner: int) -> F64:
    """log Dirichlet-multinomial evidence of the children's counts ``m`` (n, 3) around their parent
    tables (n, 3), summed per owner, for every pseudo-count of `TAU_GRID`: shape (T, n_owner)."""
    tau = TAU_GRID[:, None, None]
    a = tau * np.clip(parent, 1e-6, None)[None]  # (T, n, 3)
    ev = (
        gammaln(tau[:, :, 0])
        - gammaln(tau[:, :, 0] + m.sum(axis=1)[None])
        + (gammaln(a + m[None]) - gammaln(a)).sum(axis=2)
    )  # (T, n)
    out = np.zeros((TAU_GRID.size, n_owner))
    for t in range(TAU_GRID.size):
        out[t] = np.bincount(owner, weights=ev[t], minlength=n_owner)
    return out


def _tables(
    m1: F64, m0: F64, chan_of_cell: I64, par_of_chan: I64, n_chan: int, tau_g: F64, tau_s: F64
) -> tuple[F64, F64, F64, F64]:
    """Outcome tables of standing cells and of their channels, given a true and a false latent, from the
    expected cell counts ``m1``, ``m0`` (cells, 3).

    Partial pooling: kind -> group -> standing cell, each level the posterior mean of a Dirichlet around
    its parent with ``tau_g`` (per kind) and ``tau_s`` (per channel) pseudo-actions, at most as many as the
    parent has checks; at every level a verdict that points the wrong way without confidence is pooled
    across the latent (`boe.core.monotone.monotone_tables`).
    """
    mc1, mp1 = _parents(m1, chan_of_cell, par_of_chan, n_chan)
    mc0, mp0 = _parents(m0, chan_of_cell, par_of_chan, n_chan)
    k1, k0, _ = monotone_tables(mp1 + SMOOTHING, mp0 + SMOOTHING)
    n_kind = (mp1 + mp0).sum(axis=1)
    tg = np.minimum(tau_g[par_of_chan], n_kind[par_of_chan])[:, None]
    g1, g0, _ = monotone_tables(mc1 + tg * k1[par_of_chan] + 1e-12, mc0 + tg * k0[par_of_chan] + 1e-12)
    n_chan_data = (mc1 + mc0).sum(axis=1)
    ts = np.minimum(tau_s[chan_of_cell], n_chan_data[chan_of_cell])[:, None]
    c1, c0, _ = monotone_tables(m1 + ts * g1[chan_of_cell] + 1e-12, m0 + ts * g0[chan_of_cell] + 1e-12)
    return c1, c0, g1, g0


def _parents(m: F64, chan_of_cell: I64, par_of_chan: I64, n_chan: int) -> tuple[F64, F64]:
    """Channel counts (channels, 3) and kind counts (kinds, 3) of cell counts ``m``."""
    mc = np.zeros((n_chan, 3))
    np.add.at(mc, chan_of_cell, m)
    mp = np.zeros((N_KINDS, 3))
    np.add.at(mp, par_of_chan, mc)
    return mc, mp


def _pooling(ms: list[F64], chan_of_cell: I64, par_of_chan: I64, n_chan: int) -> tuple[F64, F64]:
    """Empirical-Bayes pseudo-counts per kind (for its groups) and per channel (for its standing cells)
    from the expected cell counts of both latent values (``ms``)."""
    ev_g = np.zeros((TAU_GRID.size, N_KINDS))
    ev_s = np.zeros((TAU_GRID.size, n_chan))
    for m in ms:
        mc, mp = _parents(m, chan_of_cell, par_of_chan, n_chan)
        ev_g += _evidence(mc, _normalise(mp)[par_of_chan], par_of_chan, N_KINDS)
        ev_s += _evidence(m, _normalise(mc)[chan_of_cell], chan_of_cell, n_chan)
    return TAU_GRID[np.argmax(ev_g, axis=0)], TAU_GRID[np.argmax(ev_s, axis=0)]


@dataclass
class _Channels:
    """Fitted channels of one dataset: ids (group id, + n_groups for response checks), tables, counts."""

    ids: I64
    given_true: F64  # (C, 3)
    given_false: F64
    actions: F64  # (C,)
    standing_true: F64  # (C, N_STANDING, 3)
    standing_false: F64
    standing_actions: F64  # (C, N_STANDING)
    counts_true: F64  # (C, 3) expected outcome counts of the training checks on a true latent
    counts_false: F64


@dataclass(frozen=True)
class _Counts:
    """A sparse (rows, cols) count matrix, one unit entry per (row, col) pair (repeats add up)."""

    row: I64
    col: I64
    n_rows: int
    n_cols: int

    def dot(self, y: F64) -> F64:
        """``X @ y`` for y of shape (n_cols, 2)."""
        cols = [np.bincount(self.row, weights=y[:, j].take(self.col), minlength=self.n_rows) for j in range(y.shape[1])]
        return np.stack(cols, axis=1).astype(np.float64, copy=False)

    def rdot(self, t: F64) -> F64:
        """``t @ X`` for t of shape (n_rows,)."""
        return np.bincount(self.col, weights=t.take(self.row), minlength=self.n_cols).astype(np.float64, copy=False)


def _fit_claims(data: _FitData, claim_rows: B_, n_groups: int) -> tuple[ClaimParams, _Channels]:
    """`_em_claims` on the latent rows ``claim_rows`` (and their actions), computed once per training set."""
    key = (n_groups, np.packbits(claim_rows).tobytes())
    got = data.fits.get(key)
    if got is None:
        got = data.fits[key] = _em_claims(data, claim_rows, claim_rows[data.f_row], n_groups)
    return got[0].model_copy(), got[1]


def _small_unique(x: I64) -> tuple[I64, I64]:
    """``np.unique(x, return_inverse=True)`` of small non-negative integers, by counting instead of sorting."""
    present = np.bincount(x) > 0
    values = np.nonzero(present)[0]
    inverse = (np.cumsum(present) - 1).take(x)
    return values, inverse


def _em_claims(
    data: _FitData, claim_rows: B_, act_rows: B_, n_groups: int, iters: int = 500, tol: float = 1e-9
) -> tuple[ClaimParams, _Channels]:
    """EM over the latent claim truths and verdicts for the claim model and every channel.

    Channels are indexed by group id, response-check groups after the factor
    ones (id + n_groups), and split by the standing of the latent they read;
    the M-step pools cells towards their channel and channels towards their
    kind (`_tables`).
    """
    idx = np.nonzero(claim_rows)[0]
    remap = np.full(claim_rows.size, -1, dtype=np.int64)
    remap[idx] = np.arange(idx.size)
    arow = remap[data.f_row[act_rows]]
    chan_act = data.f_group[act_rows] + n_groups * data.f_whole[act_rows]
    cells, cidx = _small_unique(chan_act * N_STANDING + data.f_bin[act_rows])
    nc = cells.size
    chans, chan_of_cell = np.unique(cells // N_STANDING, return_inverse=True)
    n_chan = chans.size
    kind = np.clip(data.f_kind[act_rows], 0, N_KINDS - 1)
    tally = np.bincount(chan_of_cell[cidx] * N_KINDS + kind, minlength=n_chan * N_KINDS).reshape(n_chan, N_KINDS)
    par_of_chan = tally.argmax(axis=1)
    # outcome counts of each latent by (cell, outcome), the sufficient statistic of the channels: a sparse
    # latent x (cell, outcome) matrix, one entry per action, for the free and the aligned latents
    w = data.c_w[idx]
    aligned = data.c_aligned[idx]
    fr, al = np.nonzero(~aligned)[0], np.nonzero(aligned)[0]
    pos = np.empty(idx.size, dtype=np.int64)
    pos[fr], pos[al] = np.arange(fr.size), np.arange(al.size)
    col, on_al = cidx * 3 + data.f_out[act_rows], aligned[arow]
    x_f = _Counts(pos[arow[~on_al]], col[~on_al], fr.size, nc * 3)
    x_a = _Counts(pos[arow[on_al]], col[on_al], al.size, nc * 3)
    counts_f, w_f = data.c_counts[idx][fr].reshape(-1, 6), w[fr]
    cls_a, w_a = data.c_cls[idx][al], w[al]
    # start: assertions by correct candidates and confirmations go with truth
    c1 = np.tile([0.6, 0.2, 0.2], (nc, 1))
    c0 = np.tile([0.2, 0.6, 0.2], (nc, 1))
    theta = np.array([[[0.6, 0.2, 0.2], [0.2, 0.6, 0.2]], [[0.45, 0.35, 0.2], [0.35, 0.45, 0.2]]])
    free_true = 0.3
    al_true = np.array([0.9, 0.1, 0.1, 0.9, 0.1])  # aligned classes, then the verdicts
    m1 = m0 = np.zeros(nc * 3)
    g1 = g0 = np.zeros((n_chan, 3))
    # two phases: EM with moderate pooling, then the pooling chosen by empirical Bayes on its
    # expected counts, then EM again from there (pseudo-counts fixed within a phase, so each converges)
    tau_g = np.full(N_KINDS, TAU_START)
    tau_s = np.full(n_chan, TAU_START)
    logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)  # (3 nc, 2)
    read_a = x_a.dot(logc)  # what the aligned latents' checks say under the current channels
    for phase in range(2):
        if phase:
            tau_g, tau_s = _pooling([m1.reshape(nc, 3), m0.reshape(nc, 3)], chan_of_cell, par_of_chan, n_chan)
        prev = -math.inf
        for _ in range(iters):
            a_f = counts_f @ _stance_matrix(np.log(theta)) + np.log([free_true, 1 - free_true]) + x_f.dot(logc)
            a_a = np.stack([np.log(al_true[cls_a]), np.log1p(-al_true[cls_a])], axis=1) + read_a
            ll = float(w_f @ np.logaddexp(a_f[:, 0], a_f[:, 1]) + w_a @ np.logaddexp(a_a[:, 0], a_a[:, 1]))
            g_f = _sigmoid(a_f[:, 0] - a_f[:, 1])
            g_a = _sigmoid(a_a[:, 0] - a_a[:, 1])
            # M-step: every table in closed form from expected counts
            t_f, t_a = w_f * g_f, w_a * g_a
            m1 = x_f.rdot(t_f) + x_a.rdot(t_a)
            m0 = x_f.rdot(w_f - t_f) + x_a.rdot(w_a - t_a)
            c1, c0, g1, g0 = _tables(
                m1.reshape(nc, 3), m0.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan, tau_g, tau_s
            )
            free_true = (float(t_f.sum()) + SMOOTHING) / (float(w_f.sum()) + 2 * SMOOTHING)
            theta = _normalise(np.stack([t_f @ counts_f, (w_f - t_f) @ counts_f]).reshape(2, 2, 3).swapaxes(0, 1))
            # aligned truth rates: the exact maximiser of the observed likelihood given the new
            # channels (an ECME step; plain EM crawls towards these near-0/1 rates)
            logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)
            read_a = x_a.dot(logc)
            al_true = _mixture_weights(read_a, cls_a, w_a, 5, start=al_true)
            if ll - prev <= tol * max(1.0, abs(ll)):
                break
            prev = ll
    acts_cell = np.bincount(cidx, weights=w[arow], minlength=nc)
    st1 = np.repeat(g1[:, None, :], N_STANDING, axis=1)
    st0 = np.repeat(g0[:, None, :], N_STANDING, axis=1)
    st_n = np.zeros((n_chan, N_STANDING))
    bins = cells % N_STANDING
    st1[chan_of_cell, bins] = c1
    st0[chan_of_cell, bins] = c0
    st_n[chan_of_cell, bins] = acts_cell
    params = ClaimParams(
        aligned_true=_triple(al_true),
        verdict=(float(al_true[3]), float(al_true[4])),
        free_true=free_true,
        stance=((_triple(theta[0, 0]), _triple(theta[0, 1])), (_triple(theta[1, 0]), _triple(theta[1, 1]))),
        claims=float(w.sum()),
    )
    mc1, _ = _parents(m1.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan)
    mc0, _ = _parents(m0.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan)
    return params, _Channels(chans, g1, g0, st_n.sum(axis=1), st1, st0, st_n, mc1, mc0)


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
    r, n = round(right), round(right) + round(wrong)
    if r == 0:
        return False
    tail = sum(math.comb(n, i) for i in range(r, n + 1))  # P(at least r right of n | a coin), times 2^n
    return bool(tail <= OVERRULE_LEVEL * 2**n)


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


#: Candidate check weights (`_fit_check_weight`), largest first (ties keep the larger weight).
CHECK_WEIGHTS: tuple[float, ...] = (1.0, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2)
#: Budget at which the check weight is fitted (the policy is run on the training questions at it).
CHECK_WEIGHT_BUDGET = 16.0
#: At most this many training questions (evenly spaced) fit the check weight: one number needs few (on five
#: 1,000-question regimes 300 kept crossfit:5 accuracy at budgets 4 and 16 within one question of 1,000's).
CHECK_WEIGHT_QUESTIONS = 300


def _fit_check_weight(
    questions: Sequence[Question],
    train: B_,
    calibration: Calibration,
    group_keys: Sequence[str],
    model: BayesModel,
    data: _FitData | None = None,
) -> None:
    """Set each dataset's ``check_weight`` in ``model``: the weight that best predicts the true answer, cross-fitted.

    The training questions are split into the stance weight's `STANCE_FOLDS`
    folds (`_inner_folds`, per dataset, so its fold models serve here too); at most
    `CHECK_WEIGHT_QUESTIONS` of them (evenly spaced) are scored: each fold's are run
    at `CHECK_WEIGHT_BUDGET` under a model fitted on the other folds (its stance
    weights as ``model``'s), once per weight of `CHECK_WEIGHTS`, all in one
    vectorised state, and the weight maximising sum_q log P(true H_q | the checks it
    bought) is kept (a calibrated composite likelihood, like the stance weight).
    Held out, because channels fitted on a question are surer of its checks than of a new one's.
    """
    labelled = data.labelled if data is not None else np.array([q.labelled for q in questions], dtype=bool)
    rows = np.array(
        [
            i
            for i in np.nonzero(train & labelled)[0].tolist()
            if questions[i].n_actions and questions[i].dataset in model.claims
        ],
        dtype=np.intp,
    )
    if rows.size == 0:
        return
    if rows.size > CHECK_WEIGHT_QUESTIONS:
        rows = rows[np.linspace(0, rows.size - 1, CHECK_WEIGHT_QUESTIONS).round().astype(np.intp)]
    datasets = sorted(model.claims)
    score = np.zeros((len(datasets), len(CHECK_WEIGHTS)))
    if rows.size < 2 * STANCE_FOLDS:
        _check_weight_scores(questions, rows, calibration, group_keys, model, datasets, score, data)
    else:
        data = data if data is not None else _fit_data(questions)
        lam = {ds: cp.stance_weight for ds, cp in model.claims.items()}
        over = {ds: cp.overrules for ds, cp in model.claims.items()}
        fold = np.full(len(questions), -1, dtype=np.int32)
        ds_of_q = np.array(data.dataset, dtype=object)
        for ds in datasets:
            members = np.nonzero(train & labelled & (ds_of_q == ds))[0]
            fold[members] = _inner_folds(questions, members.tolist())
        for f in range(STANCE_FOLDS):
            fold_model = fit_bayes_model(
                questions, group_keys, train & (fold != f), _data=data, stance_weights=lam, overrules=over
            )
            held = np.array(
                [i for i in rows[fold[rows] == f] if questions[i].dataset in fold_model.claims], dtype=np.intp
            )
            if held.size:
                _check_weight_scores(questions, held, calibration, group_keys, fold_model, datasets, score, data)
    for k, ds in enumerate(datasets):
        model.claims[ds].check_weight = float(CHECK_WEIGHTS[int(np.argmax(score[k]))])


def _check_weight_scores(
    questions: Sequence[Question],
    rows: IntArr,
    calibration: Calibration,
    group_keys: Sequence[str],
    model: BayesModel,
    datasets: list[str],
    score: F64,
    data: _FitData | None = None,
) -> None:
    """Add to ``score`` (datasets x `CHECK_WEIGHTS`) sum_q log P(true H_q) after the policy's checks at
    `CHECK_WEIGHT_BUDGET` on ``rows``, under ``model`` tempered by each weight."""
    from boe.core.loop import run_policy, skipped_mask

    n_w = len(CHECK_WEIGHTS)
    cals = []
    for w in CHECK_WEIGHTS:
        # the channel tables are shared (never changed); only the claim parameters take the weight
        claims = {ds: cp.model_copy(update={"check_weight": w}) for ds, cp in model.claims.items()}
        m = model.model_copy(update={"claims": claims})
        cals.append(calibration.model_copy(update={"extra": {**calibration.extra, BAYES_KEY: m}}))
    all_rows = np.tile(rows, n_w)
    # the questions bound once, then repeated under each weight (the calibrations differ only in the model)
    once = bind_questions(
        list(questions), rows, cals, None, list(group_keys), budget=CHECK_WEIGHT_BUDGET, with_labels=True
    )
    once.partition = np.empty((3, 0, 0, rows.size))  # the score policies' claim masks: `bayes` reads none
    base = once.keep(np.tile(np.arange(rows.size), n_w))
    del once
    base.calibration = np.repeat(np.arange(n_w), rows.size).astype(np.int32)
    assert base.labels is not None
    outcomes = base.labels.outcome
    state = base.fresh(CHECK_WEIGHT_BUDGET)
    state.labels = None
    pol = Bayes()

    known = data.truth if data is not None else {}
    truth = {i: known[i] if i in known else _true_answers(questions[i]) for i in np.unique(rows).tolist()}
    ds_of = {int(i): datasets.index(questions[int(i)].dataset) for i in np.unique(rows)}

    def sink(st: EvidenceState, _: Policy) -> None:
        post = pol.posterior(st)
        none = post.shape[1] - 1
        for i, qi in enumerate(st.rows.tolist()):
            right, weight = truth[qi]
            p = post[i]
            tot = float(p.sum())
            ll = sum(math.log(max(float(p[h]) / tot, 1e-12)) for h in (right if right else [none]))
            score[ds_of[qi], int(st.calibration[i])] += weight * ll

    run_policy(state, cast(Policy, pol), outcomes, sink, skipped_mask(questions, all_rows, outcomes.shape))


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


# --------------------------------------------------------------------------- policy


def _row_tables(state: EvidenceState) -> dict[str, F64]:
    """Per-row prior and claim parameters and per-action channel tables of a state."""
    n = state.n
    n_cal = max(len(state.calibrations), 1)
    g = len(state.group_keys)
    models = [_read_model(c) for c in state.calibrations] if state.calibrations else [BayesModel()]
    fc = np.empty((n_cal, g + 1, N_STANDING, 2, 3))  # last group: padding
    wc = np.empty((n_cal, g + 1, N_STANDING, 2, 3))
    fc[:] = np.array(UNINFORMATIVE)
    wc[:] = np.array(UNINFORMATIVE)
    for c, m in enumerate(models):
        for gi, key in enumerate(state.group_keys):
            for tab, reads_answer in ((fc, False), (wc, True)):
                t = m.table(key, reads_answer)
                if t is not None:
                    tab[c, gi] = [t.at(b) for b in range(N_STANDING)]
    cal = state.calibration.astype(np.intp) if state.calibrations else np.zeros(n, dtype=np.intp)
    grp = np.where(state.group >= 0, state.group, g)
    # the prior and claim parameters of each (calibration, dataset) pair, then per row
    codes: dict[tuple[int, str], int] = {}
    pair = np.array(
        [codes.setdefault((int(c), ds), len(codes)) for c, ds in zip(cal, state.dataset, strict=True)], dtype=np.intp
    )
    params = [(models[c].priors.get(ds, DEFAULT_PRIOR), models[c].claims.get(ds, DEFAULT_CLAIMS)) for c, ds in codes]
    prior = np.array([(pp.count_coef, pp.log_count_coef, pp.none_intercept, pp.none_slope) for pp, _ in params])
    prior = prior.reshape(-1, 4)[pair]
    free_true = np.array([cp.free_true for _, cp in params])[pair]
    theta = np.array([cp.stance for _, cp in params]).reshape(-1, 2, 2, 3)[pair]
    aligned_true = np.array([cp.aligned_true for _, cp in params]).reshape(-1, 3)[pair]
    verdict = np.array([cp.verdict for _, cp in params]).reshape(-1, 2)[pair]
    stance_weight = np.array([cp.stance_weight for _, cp in params])[pair]
    may_overrule = np.array([overrules_supported(*cp.overrules) for _, cp in params], dtype=bool)[pair]
    pair_weight = np.array([cp.check_weight for _, cp in params])
    check_weight = pair_weight[pair]
    # the channel tables of each pair, tempered by its check weight, then read per action
    pair_cal = np.array([c for c, _ in codes], dtype=np.intp)
    tab = np.clip(np.stack([fc, wc], axis=1)[pair_cal], EPS, 1.0)  # (pairs, factor / response, G + 1, S, 2, 3)
    if (pair_weight != 1.0).any():
        cw = pair_weight[:, None, None, None, None, None]
        tempered = tab**cw
        tempered /= tempered.sum(axis=5, keepdims=True)
        tab = np.where(cw != 1.0, tempered, tab)
    standing = action_standing(state)
    # each action's table, as one flat index (Q, A) into the (pairs, factor / response, G + 1, S) tables
    at = ((pair[:, None] * 2 + (state.whole | state.answer)) * (g + 1) + grp) * N_STANDING + standing
    hi, lo, informative = action_ratios(tab[..., 0, :], tab[..., 1, :])  # per table, then read per action
    c = tab.reshape(-1, 2, 3)[at]  # (Q, A, 2, 3)
    return {
        "standing": standing.astype(np.float64),
        "c1": np.ascontiguousarray(c[:, :, 0]),  # (Q, A, 3): P(o | latent true), P(o | latent false)
        "c0": np.ascontiguousarray(c[:, :, 1]),
        "lr_hi": hi.reshape(-1)[at],  # (Q, A): the largest and smallest log c1 - log c0 over outcomes, some not 0
        "lr_lo": lo.reshape(-1)[at],
        "informative": informative.reshape(-1)[at],
        "prior": prior,
        "free_true": np.clip(free_true, EPS, 1 - EPS),
        "log_theta": np.log(np.clip(theta, EPS, 1.0)),
        "aligned_true": np.clip(aligned_true, EPS, 1 - EPS),
        "verdict": np.clip(verdict, EPS, 1 - EPS),
        "stance_weight": stance_weight,
        "may_overrule": may_overrule,
        "check_weight": check_weight,
    }


def prior_setup(state: EvidenceState) -> tuple[F64, F64, F64]:
    """The cheap context of the prior of every row: answer counts (Q, D), candidates (Q,) and the prior's
    parameters (Q, 4) from the row's calibration and dataset (`DEFAULT_PRIOR` where it has no model)."""
    d = int(state.answer_id.max()) + 1 if state.answer_id.size else 0
    n_ans = (state.answer_id[:, :, None] == np.arange(d)[None, None, :]).sum(axis=1).astype(np.float64)
    models: list[BayesModel] = []
    for c in state.calibrations:
        try:
            models.append(_read_model(c))
        except CalibrationError:
            models.append(BayesModel())
    models = models or [BayesModel()]
    cal = state.calibration if state.calibrations else np.zeros(state.n, dtype=np.intp)
    found: dict[tuple[int, str], tuple[float, float, float, float]] = {}
    params = np.empty((state.n, 4))
    for r in range(state.n):
        key = (int(cal[r]), state.dataset[r])
        got = found.get(key)
        if got is None:
            pp = models[key[0]].priors.get(key[1], DEFAULT_PRIOR)
            got = found[key] = (pp.count_coef, pp.log_count_coef, pp.none_intercept, pp.none_slope)
        params[r] = got
    return n_ans, state.candidate.sum(axis=1).astype(np.float64), params


def action_standing(state: EvidenceState) -> I64:
    """Standing (`standing_bin`) of the latent each action of a state reads, shape (Q, A)."""
    _, first, again = np.unique(state.rows, return_index=True, return_inverse=True)  # a question bound repeatedly
    resp = state.whole | state.answer
    out = _standing(state.answer_id[first], state.alpha[first], resp[first], state.target[first])
    return out[again.reshape(-1)]


def _standing(aid: npt.NDArray[np.int32], al: npt.NDArray[np.int8], resp: B_, target: npt.NDArray[np.int32]) -> I64:
    valid = aid >= 0
    n_valid = valid.sum(axis=1)[:, None]
    # valid candidates asserting / denying each action's claim (counts: exact; einsum, not short bool sums)
    v8 = valid.view(np.uint8)
    n_a = np.einsum("qak,qk->qa", (al == 1).view(np.uint8), v8, dtype=np.int64)
    top = n_a > np.einsum("qak,qk->qa", (al == -1).view(np.uint8), v8, dtype=np.int64)
    if resp.any():
        d = int(aid.max()) + 1 if aid.size else 0
        n_ans = (aid[:, :, None] == np.arange(max(d, 1))[None, None, :]).sum(axis=1)  # (Q, D)
        judged = np.take_along_axis(aid, np.maximum(target, 0), axis=1)
        held = np.where(judged >= 0, np.take_along_axis(n_ans, np.maximum(judged, 0), axis=1), 0)
        n_a = np.where(resp, held, n_a)
        top = np.where(resp, (judged >= 0) & (held == n_ans.max(axis=1)[:, None]), top)
    return standing_bin(n_a, top, n_valid)


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
            keys = keys_from_calibration(questions, train_mask, calibration)
        else:
            keys = list(group_keys)
        self.prepare_fit(questions)
        assert self._data is not None
        model = fit_bayes_model(questions, keys, train_mask, _data=self._data[1])
        _fit_check_weight(questions, train_mask, calibration, keys, model, self._data[1])
        return calibration.model_copy(update={"extra": {**calibration.extra, BAYES_KEY: model.model_dump(mode="json")}})

    def prepare_fit(self, questions: Sequence[Question]) -> None:
        """Build the training tables that every `fit_extra` on ``questions`` shares, unless built already."""
        if self._data is None or self._data[0] is not questions:
            self._data = (questions, _fit_data(questions))

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
        menu_claim = np.zeros((n, m), dtype=bool)  # claims with a factor action (the rest are padding)
        menu_claim[qi, state.claim[qi, ai]] = True
        # a question bound several times under one claim model (once per check weight) has its claims weighed once
        claim_model = np.concatenate(
            [tabs["free_true"][:, None], tabs["log_theta"].reshape(n, -1), tabs["aligned_true"]], axis=1
        )
        _, rep, model_id = np.unique(claim_model, axis=0, return_index=True, return_inverse=True)
        model_id = model_id.reshape(-1).astype(np.int64)
        key = state.rows.astype(np.int64) * (int(model_id.max(initial=0)) + 1) + model_id
        _, first, again = np.unique(key, return_index=True, return_inverse=True)
        counts, aligned, cls = stance_counts(stance[first], state.answer_id[first], d)
        h = d + 1
        weights = _claim_weights(
            counts.reshape(-1, 6),
            np.repeat(aligned.reshape(-1), h),
            cls.reshape(-1),
            np.repeat(model_id[first], m * h),
            tabs["free_true"][rep],
            _stance_matrix(tabs["log_theta"][rep]),
            tabs["aligned_true"][rep],
        ).reshape(first.size, m, h, 2)
        free = menu_claim[first] & ~aligned
        evidence = np.where(free[:, :, None], np.logaddexp(weights[..., 0], weights[..., 1]), 0.0)
        # the pool's own structure, at no cost: every claim's stances weigh in from the start, tempered by
        # the fitted stance weight (0 where the agreement of candidates does not predict the truth) ...
        structure = tabs["stance_weight"][:, None] * evidence.sum(axis=1)[again.reshape(-1)]
        # ... but on a question where it alone would move the mode off the raw majority, only if held-out
        # overrules of the dataset were right more often than not with confidence (else it is left out there)
        mode = np.argmax(np.where(real[:, :d], lpost[:, :d] + structure[:, :d], -np.inf), axis=1) if d else 0
        held = n_ans[np.arange(n), mode] if d else np.zeros(n)
        overrule = (tabs["may_overrule"] == 0) & (held < n_ans.max(axis=1, initial=0.0))
        lpost = _log_normalise(lpost + np.where(overrule[:, None], 0.0, structure))
        rho = _sigmoid(weights[..., 0] - weights[..., 1])[again.reshape(-1)]
        # the verdicts on the answers (latents m .. m + d - 1) and on invalid responses (m + d)
        v = tabs["verdict"]
        right = np.arange(d + 1)[:, None] == np.arange(h)[None, :]  # (d + 1, H): answer a is H's
        right[d] = False
        rho_v = np.where(right[None], v[:, 0, None, None], v[:, 1, None, None])  # (Q, d + 1, H)
        target = np.take_along_axis(state.answer_id, np.maximum(state.target, 0), axis=1)
        latent = np.where(state.whole | state.answer, m + np.where(target >= 0, target, d), np.maximum(state.claim, 0))
        rho_all = np.clip(np.concatenate([rho, rho_v], axis=1), EPS, 1 - EPS)
        state.extra.update(
            bayes_lpost=lpost,
            bayes_real=real,
            bayes_rho=rho_all,
            bayes_c1=tabs["c1"],
            bayes_c0=tabs["c0"],
            bayes_claim=latent.astype(np.intp),  # the latent each action reads
            bayes_reads_answer=latent >= m,
            bayes_standing=tabs["standing"],
            bayes_check_weight=tabs["check_weight"],
            # per bought action: P(o | latent true), P(o | latent false), P(leading answer) before and after
            bayes_why=np.zeros((n, state.cost.shape[1], 4)),
            # `relevant`'s: each action's log ratio range and informativeness, and each latent's `latent_gain`
            # with the (log_hi, log_lo) and selected hypothesis it was computed at, stale when its rho moved
            bayes_lr_hi=tabs["lr_hi"],
            bayes_lr_lo=tabs["lr_lo"],
            bayes_informative=tabs["informative"],
            bayes_gain=np.zeros(rho_all.shape).transpose(0, 2, 1).copy(),  # (Q, H, L)
            bayes_gain_at=np.full((*rho_all.shape[:2], 2), np.nan),
            bayes_gain_now=np.full(n, -1, dtype=np.intp),
            bayes_stale=np.ones(rho_all.shape[:2], dtype=bool),
        )

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        if rows.size == 0:
            return
        ex = state.extra
        o = _outcome_index(outcomes)
        j = ex["bayes_claim"][rows, actions]
        lp = ex["bayes_lpost"][rows]
        rho = ex["bayes_rho"][rows, j]
        c1 = ex["bayes_c1"][rows, actions, o][:, None]
        c0 = ex["bayes_c0"][rows, actions, o][:, None]
        lik = rho * c1 + (1 - rho) * c0
        ex["bayes_rho"][rows, j] = np.clip(rho * c1 / lik, EPS, 1 - EPS)
        ex["bayes_stale"][rows, j] = True
        real = ex["bayes_real"][rows]
        before = np.where(real, np.exp(ex["bayes_lpost"][rows]), 0.0).max(axis=1)
        ex["bayes_lpost"][rows] = _log_normalise(lp + np.log(lik))
        after = np.where(real, np.exp(ex["bayes_lpost"][rows]), 0.0).max(axis=1)
        ex["bayes_why"][rows, actions] = np.stack([c1[:, 0], c0[:, 0], before, after], axis=1)

    def explain(self, state: EvidenceState, row: int) -> list[dict[str, Any]]:
        """Why each purchase of ``row`` moved the decision: one dict per bought action, in order.

        Keys: ``action`` (menu index), ``latent`` ("claim" or "answer"), ``top`` and
        ``share`` (the latent's standing in the pool: on top or not, and the share
        bin's lower edge), ``p_true`` / ``p_false`` (P(outcome | latent true / false)
        under the fitted channel, tempered by the check weight), ``weight`` (their log
        ratio, nats), ``check_weight`` (the fitted tempering w), ``lead_before`` /
        ``lead_after`` (posterior of the leading answer before and after).
        """
        ex = state.extra
        out: list[dict[str, Any]] = []
        for step in range(int(state.steps[row])):
            a = int(state.log[row, step])
            c1, c0, before, after = (float(x) for x in ex["bayes_why"][row, a])
            b = int(ex["bayes_standing"][row, a])
            out.append(
                {
                    "action": a,
                    "latent": "answer" if bool(ex["bayes_reads_answer"][row, a]) else "claim",
                    "top": b >= N_SHARE,
                    "share": (0.0, *STANDING_EDGES)[b % N_SHARE],
                    "p_true": c1,
                    "p_false": c0,
                    "weight": math.log(c1 / c0),
                    "check_weight": float(ex["bayes_check_weight"][row]),
                    "lead_before": before,
                    "lead_after": after,
                }
            )
        return out

    def relevant(self, state: EvidenceState, rows: IntArr | None = None) -> B_:
        """(Q, A), or (len(rows), A) for ``rows``: feasible actions whose purchase could change the selected
        answer (`boe.core.relevance`)."""
        ex = state.extra
        r = slice(None) if rows is None else rows
        sel = self._select(state, r)
        aid = state.answer_id[r]
        held = aid[np.arange(aid.shape[0]), np.maximum(sel, 0)]
        has = (sel >= 0) & (held >= 0)
        now: IntArr = np.where(has, held, 0).astype(np.intp)
        rho, latent = ex["bayes_rho"][r], ex["bayes_claim"][r]
        act = state.feasible()[r] & ex["bayes_informative"][r]
        remaining = (state.budget - state.spent)[r]
        log_hi, log_lo, cheapest = latent_checks(
            ex["bayes_lr_hi"][r], ex["bayes_lr_lo"][r], act, latent, state.cost[r], rho.shape[1]
        )
        gain = self._gain(ex, rows, rho, log_hi, log_lo, cheapest <= remaining[:, None], now)
        out = relevance_of_gain(gain, cheapest, ex["bayes_lpost"][r], ex["bayes_real"][r], rho, latent, act,
                                remaining, now)  # fmt: skip
        out &= has[:, None]
        return out

    @staticmethod
    def _gain(
        ex: dict[str, Any], rows: IntArr | None, rho: F64, log_hi: F64, log_lo: F64, need: B_, now: IntArr
    ) -> F64:
        """`latent_gain` (Q, H, L) of ``rows``' latents, exact where ``need`` (Q, L): recomputed only for the
        latents whose rho, (log_hi, log_lo) or row's selected hypothesis changed since the last step."""
        r = slice(None) if rows is None else rows
        moved = np.nonzero(ex["bayes_gain_now"][r] != now)[0]  # a new selected hypothesis: the whole row
        ex["bayes_stale"][moved if rows is None else rows[moved]] = True
        ex["bayes_gain_now"][r] = now
        gain: F64 = ex["bayes_gain"][r]
        at = ex["bayes_gain_at"][r]
        stale = ex["bayes_stale"][r] | (at[:, :, 0] != log_hi) | (at[:, :, 1] != log_lo)
        i, j = np.nonzero(stale & need)
        if i.size:
            hi, lo = log_hi[i, j][:, None], log_lo[i, j][:, None]
            sel = selected_terms(hi, lo, rho[i, j, now[i]][:, None])
            gain[i, :, j] = latent_gain(hi, lo, rho[i, j], sel)  # (P, H)
            hi, lo = hi[:, 0], lo[:, 0]
            g = i if rows is None else rows[i]
            if rows is not None:
                ex["bayes_gain"][g, :, j] = gain[i, :, j]
            ex["bayes_gain_at"][g, j] = np.stack([hi, lo], axis=1)
            ex["bayes_stale"][g, j] = False
        return gain

    def _live(self, state: EvidenceState) -> tuple[IntArr, B_]:
        """The rows still running that have a relevant action, and those actions (rows' order)."""
        live = np.nonzero(~state.done)[0]
        feasible = self.relevant(state, None if live.size == state.n else live)
        has = feasible.any(axis=1)
        return live[has], feasible[has]

    def choose(self, state: EvidenceState) -> IntArr:
        # a check that cannot change the answer is never bought: only rows with a relevant check are valued
        choice = np.full(state.n, -1, dtype=np.intp)
        rows, feasible = self._live(state)
        if rows.size:
            choice[rows] = self._pick(_View(state, rows), feasible)
        return choice

    def _pick(self, view: _View, feasible: B_) -> IntArr:
        """The action (or -1) of each row of ``view``, all with some ``feasible`` (relevant) action."""
        value = view.evsi(feasible) / view.cost
        pick = first_max(value, feasible)
        stop = value[np.arange(view.n), pick] <= self.eta
        if self.fallback == "info" and self.eta == 0.0 and stop.any():
            # No single check can change the selection. With eta = 0 evidence is
            # free within the budget and never lowers the expected value of the
            # selection, so test the current choice with the most informative check.
            r = np.nonzero(stop)[0]
            info = view.decision_info(r) / view.cost[r]
            pick[r] = first_max(info, feasible[r] & (info > INFO_TOL))
        else:
            pick[stop] = -1
        return pick

    def posterior(self, state: EvidenceState, rows: IntArr | slice = slice(None)) -> F64:
        """P(H | history) of ``rows`` (all by default), shape (Q, D + 1); the last column is `none`, absent
        answers are 0."""
        out: F64 = np.exp(state.extra["bayes_lpost"][rows])
        return out

    def values(self, state: EvidenceState) -> F64:
        """Exact myopic EVSI of every action, shape (Q, A) (not divided by cost)."""
        return _View(state).evsi()

    def select(self, state: EvidenceState) -> IntArr:
        """The lowest-index candidate holding the posterior mode (an invalid candidate only when none is valid)."""
        return self._select(state, slice(None))

    def _select(self, state: EvidenceState, rows: IntArr | slice) -> IntArr:
        aid, cand = state.answer_id[rows], state.candidate[rows]
        valid = cand & (aid >= 0)
        allowed = np.where(valid.any(axis=1, keepdims=True), valid, cand)
        return first_max(_candidate_scores(self.posterior(state, rows), aid, cand), allowed)

    def final_scores(self, state: EvidenceState) -> F64:
        """Posterior probability that each candidate's answer is the correct one (invalid and padding 0)."""
        return _candidate_scores(self.posterior(state), state.answer_id, state.candidate)


def _candidate_scores(post: F64, aid: npt.NDArray[np.int32], cand: B_) -> F64:
    s = np.take_along_axis(post, np.maximum(aid, 0), axis=1)
    out: F64 = np.where((aid >= 0) & cand, s, 0.0)
    return out


def _log_normalise(lp: F64) -> F64:
    top = lp.max(axis=1, keepdims=True)
    out: F64 = lp - (top + np.log(np.exp(lp - top).sum(axis=1, keepdims=True)))
    return out


class _View:
    """The posterior of a state's ``rows`` (all by default), and the latent each action reads with its current
    P(latent | H)."""

    def __init__(self, state: EvidenceState, rows: IntArr | None = None) -> None:
        ex = state.extra
        self.state = state
        self.rows = np.arange(state.n) if rows is None else rows
        r = slice(None) if rows is None else rows
        self.n = self.rows.size
        self.cost = state.cost[r]
        self.c1, self.c0 = ex["bayes_c1"][r], ex["bayes_c0"][r]
        self.rho, self.claim = ex["bayes_rho"][r], ex["bayes_claim"][r]
        self.post: F64 = np.exp(ex["bayes_lpost"][r])  # (Q, H)
        self.pr: F64 = np.where(ex["bayes_real"][r], self.post, 0.0)  # selectable mass: `none` and absent answers 0
        self.now = np.argmax(self.pr, axis=1)  # (Q,) the current choice

    def evsi(self, where: B_ | None = None) -> F64:
        """sum_o max_d P(d) P(o | d) - P(d_now) sum_o P(o | d_now) per action, each outcome term >= 0 exactly;
        only where ``where`` (n, A) is true (0 elsewhere) when it is given.

        P(d) P(o | d) = P(d) rho_d (c1 - c0) + P(d) c0.
        """
        i, a = np.nonzero(np.ones(self.cost.shape, dtype=bool) if where is None else where)
        c1, c0 = self.c1[i, a], self.c0[i, a]  # (P, 3) for the P actions valued
        dc = c1 - c0
        j = self.claim[i, a]
        # hypotheses first, (H, P): the max over them is a few elementwise maxima, not P short reductions
        rho = self.rho.transpose(2, 0, 1)[:, i, j]
        pr = self.pr.T[:, i]
        u = pr * rho
        now = self.now[i]
        p_now = self.pr[i, now]
        u_now = self.rho[i, j, now] * p_now
        gain = np.zeros(i.size)
        buf, term, top = np.empty_like(u), np.empty_like(u), np.empty(i.size)
        for o in range(3):
            np.multiply(u, dc[:, o], out=buf)
            buf += np.multiply(pr, c0[:, o], out=term)
            np.copyto(top, buf[0])
            for h in range(1, buf.shape[0]):
                np.maximum(top, buf[h], out=top)
            gain += top - (u_now * dc[:, o] + p_now * c0[:, o])
        out: F64 = np.zeros(self.cost.shape)
        out[i, a] = gain
        return out

    def decision_info(self, rows: IntArr) -> F64:
        """I(O_e; [H = current choice]) in nats for every action of ``rows``, shape (n, A)."""
        claim = self.claim[rows]
        c1, c0 = self.c1[rows], self.c0[rows]
        pc, rho = self.post[rows], self.rho[rows]  # (n, H), (n, L, H)
        now = self.now[rows]
        i = np.arange(rows.size)[:, None]
        p_now = pc[i[:, 0], now][:, None, None]  # (n, 1, 1)
        rho_now = np.take_along_axis(rho, now[:, None, None], axis=2)[:, :, 0][i, claim][:, :, None]  # (n, A, 1)
        p_true = (pc[:, None, :] * rho).sum(axis=2)[i, claim][:, :, None]  # P(latent = 1)
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

    def _pick(self, view: _View, feasible: B_) -> IntArr:
        single = view.evsi(feasible) / view.cost
        pick = first_max(single, feasible)
        best_single = single[np.arange(view.n), pick]
        info = view.decision_info(np.arange(view.n)) / view.cost
        pair_value, first = _pair_values(view.state, view.rows, feasible, info, self.shortlist)
        use_pair = (pair_value > best_single) & (pair_value > self.eta)
        pick[use_pair] = first[use_pair]
        stop = ~use_pair & (best_single <= self.eta)
        if self.fallback == "info" and self.eta == 0.0:
            alt = first_max(info, feasible & (info > INFO_TOL))
            pick[stop] = alt[stop]
        else:
            pick[stop] = -1
        return pick


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
    ia, ib = np.triu_indices(n_short, k=1)
    same = claim[:, ia] == claim[:, ib]  # two reads of one latent, (n, P)
    joint = lik[:, ia, :, :, None] * lik[:, ib, :, None, :]  # (n, P, H, 3, 3)
    rho_a = rho[:, ia][..., None, None]
    shared = rho_a * c1[:, ia, None, :, None] * c1[:, ib, None, None, :]
    shared = shared + (1 - rho_a) * c0[:, ia, None, :, None] * c0[:, ib, None, None, :]
    joint = np.where(same[:, :, None, None, None], shared, joint)
    pr = np.where(ex["bayes_real"][rows], np.exp(ex["bayes_lpost"][rows]), 0.0)  # (n, H)
    now = np.argmax(pr, axis=1)
    mass = pr[:, None, :, None, None] * joint  # (n, P, H, 3, 3)
    cur = np.take_along_axis(mass, now[:, None, None, None, None], axis=2)[:, :, 0]
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
