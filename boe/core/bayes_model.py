"""The `bayes` observation model (see `boe.core.bayes`): its fitted parameters (`BayesModel`), the labelled
default, and the likelihood pieces that fitting and the policy share (stance counts, the prior, claim weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boe.core.calibration import Calibration, Priors, default_names
from boe.errors import CalibrationError

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
