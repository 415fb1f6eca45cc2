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
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

from boe.core.bayes_data import _fit_data, _FitData, _true_answers
from boe.core.bayes_fit import STANCE_FOLDS, _inner_folds, fit_bayes_model, keys_from_calibration, overrules_supported
from boe.core.bayes_model import (
    B_,
    BAYES_KEY,
    DEFAULT_CLAIMS,
    DEFAULT_PRIOR,
    EPS,
    F64,
    I64,
    INFO_TOL,
    N_SHARE,
    N_STANDING,
    STANDING_EDGES,
    UNINFORMATIVE,
    BayesModel,
    ChannelTable,
    ClaimParams,
    PriorParams,
    _claim_weights,
    _outcome_index,
    _read_model,
    _sigmoid,
    _stance_matrix,
    model_of,
    prior_log,
    prior_model,
    stance_counts,
    standing_bin,
    with_prior_model,
)
from boe.core.calibration import Calibration
from boe.core.graph import Question
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


# -------------------------------------------------------------- the check weight (fitted by running the policy)


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
        data = self._data[1]
        # the fit reads none of this policy's options and none of the calibration's extras (the check weight's
        # states replace the model and read nothing else there): another policy of the family, sharing the
        # tables, may have fitted this model already on the same training rows, keys and groups
        key = (train_mask.tobytes(), tuple(keys), calibration.model_copy(update={"extra": {}}).model_dump_json())
        model = data.models.get(key)
        if model is None:
            model = fit_bayes_model(questions, keys, train_mask, _data=data)
            _fit_check_weight(questions, train_mask, calibration, keys, model, data)
            data.models[key] = model
        return calibration.model_copy(update={"extra": {**calibration.extra, BAYES_KEY: model.model_dump(mode="json")}})

    def prepare_fit(self, questions: Sequence[Question], shared: dict[str, Any] | None = None) -> None:
        """Build the training tables that every `fit_extra` on ``questions`` shares, unless built already;
        ``shared`` (one dict for the policies of one replay) gives them to every policy of the family, whose
        fits are then made once."""
        got = shared.get(BAYES_KEY) if shared is not None else None
        if got is not None and got[0] is questions:
            self._data = got
        elif self._data is None or self._data[0] is not questions:
            self._data = (questions, _fit_data(questions))
        if shared is not None:
            shared[BAYES_KEY] = self._data

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
