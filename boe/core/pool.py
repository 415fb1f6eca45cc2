"""Sample and verify under one budget: the adaptive pool (spec section 12).

A question starts with a few candidates; at every step its controller stops, buys a check, or draws m more
candidates, all paid from one budget. Offline, a ledger of K_max candidates in sampling order replays this
exactly: a draw reveals the next candidates, and the menu, the cheap prior and the policy are those of the
pool drawn so far (`boe.core.state.EvidenceState.draw`, `boe.core.session.PolicySession.draw`).

* `PoolSpec` / `parse_pool`: ``fixed`` (every candidate, today's replay), ``fixed:K`` (the first K),
  ``adaptive`` (`AdaptivePool`) and ``greedy`` (`GreedyPool`).
* `Predictive`: the next sample's answer given the pool drawn, a Chinese-restaurant (Pitman-Yor) urn over the
  answers drawn, a new answer and an invalid reply. Its concentration, discount and invalid pseudo-count are
  fitted per dataset by maximum likelihood of every candidate of a pool given those drawn before it
  (`fit_predictive`; no labels needed), cross-fitted with the calibration.
* `AdaptivePool` wraps a controller. The value of drawing on is the expected gain in the probability that the
  selected answer is right, measured (`GainTable`, `fit_gain_table`): on the training pools, cross-fitted,
  what the selection of the `bayes` posterior (another controller gets one beside it) on the first k' > k
  candidates adds over that on the first k, by pool size k and by the probability the posterior gave its pick
  at k. It counts everything the new candidates bring -- their answers and their claims and stances, which
  move the answer where wrong candidates agree on one misreading -- and a pool's value is the best over every
  larger fitted size the budget pays for, per unit cost: several rounds may be worth drawing when one is not.
  Where no table is fitted (an unseen dataset, no labels) a draw of m is valued by an urn over the answers
  (`draw_values`): for each composition of the m draws the posterior is the prior of the new answer counts
  times the likelihood of the checks already bought. The controller (built at price 0: the pool puts the
  price on draws and checks alike) proposes a check, valued by its exact myopic EVSI. The step with the larger
  value per unit cost is taken; the question stops when neither is worth more than ``eta`` per unit cost --
  where a check also counts as worth it while the pick could be wrong with more than ``eta`` per unit of the
  check's cost: the most checking on could gain. A check worth nothing alone (no single outcome changes the
  pick) may pay with the ones after it, so an unsure pick keeps checking and a sure one stops. Where no check
  can change the pick among the candidates drawn (they agree) but a draw could, the pool tests the pick with
  the check most informative about it, on the same terms: evidence against the pick is what makes drawing on
  worth it, and agreement among a few samples alone is not a reason to stop.
* The posterior is that of the pool drawn: the `bayes` prior and claim model are fitted per pool size on the
  training pools' first k candidates (`prefix_question`, `fit_sized_model`; stored beside the predictive), and
  a pool of k reads the model of the largest fitted size <= k. A model fitted on whole pools only misreads a
  small pool (on 4 of 16 it picked worse than majority voting on the 4).
* `GreedyPool` draws a round whenever its controller would stop: the rule the literal reading implements.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from itertools import combinations_with_replacement
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boe.core.calibration import Calibration
from boe.core.graph import Question
from boe.core.policies import FittablePolicy, IntArr, Policy, make_policy, prepare_fit
from boe.core.scoring import first_max
from boe.core.state import EvidenceState
from boe.errors import CalibrationError, ConfigError

__all__ = [
    "DEFAULT_SAMPLE_COST",
    "POOL_KEY",
    "AdaptivePool",
    "GainTable",
    "GreedyPool",
    "PoolSpec",
    "Predictive",
    "PredictiveModel",
    "draw_values",
    "fit_gain_table",
    "fit_predictive",
    "fit_sized_model",
    "make_pool_policy",
    "parse_pool",
    "pool_sizes",
    "predictive_of",
    "prefix_question",
    "repriced",
    "selected_confidence",
    "sized_key",
    "with_sized_model",
]

F64 = npt.NDArray[np.float64]
B_ = npt.NDArray[np.bool_]

#: Key of the fitted predictive in `Calibration.extra`.
POOL_KEY = "pool"
#: The design cost of one sample, in the units of the checks' design costs (record check 1, judge 4). Measured
#: (`boe costs`): a sample's completion tokens are 16.6 on the simulator and 60-80 for a VLM answering in JSON,
#: a judge call's prompt and completion 450 and about 1,600 (the figure's tokens included): 4 x 17 / 450 = 0.15,
#: 4 x 80 / 1,600 = 0.2; 0.25 rounds up for longer answers (see the README, "Sample and verify under one budget").
DEFAULT_SAMPLE_COST = 0.25
#: Candidates an adaptive pool starts with, and draws per round.
DEFAULT_START = 4
DEFAULT_STEP = 2
#: Answers valued one by one when a draw is valued; the others are pooled (their draws go to the best of them).
TOP_ANSWERS = 3
#: The largest draw valued as a whole (a bigger round is valued as this many).
MAX_VALUED = 6

PoolMode = Literal["fixed", "adaptive", "greedy"]


@dataclass(frozen=True)
class PoolSpec:
    """How a replay or the agent treats the candidate pool (``--pool``)."""

    mode: PoolMode = "fixed"
    size: int | None = None  # fixed:K -- the first K candidates (None: all)
    start: int = DEFAULT_START
    step: int = DEFAULT_STEP
    sample_cost: float = DEFAULT_SAMPLE_COST  # for candidates whose record has no cost (formats before 1.3)

    @property
    def adaptive(self) -> bool:
        """Whether samples are drawn step by step and paid from the budget."""
        return self.mode != "fixed"

    @property
    def label(self) -> str:
        if self.mode == "fixed":
            return "fixed" if self.size is None else f"fixed:{self.size}"
        return f"{self.mode}:{self.start},{self.step}"


def parse_pool(
    text: str, *, start: int = DEFAULT_START, step: int = DEFAULT_STEP, sample_cost: float = DEFAULT_SAMPLE_COST
) -> PoolSpec:
    """``fixed``, ``fixed:K``, ``adaptive`` or ``greedy`` (`ConfigError` naming what is wrong)."""
    mode, _, arg = text.strip().partition(":")
    if not (math.isfinite(sample_cost) and sample_cost >= 0):
        raise ConfigError(f"the sample cost must be a finite number >= 0, got {sample_cost}")
    if start < 1 or step < 1:
        raise ConfigError(
            f"an adaptive pool starts with at least 1 candidate and draws at least 1, got {start}, {step}"
        )
    if mode == "fixed":
        if not arg:
            return PoolSpec(sample_cost=sample_cost)
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError(f"--pool fixed:K needs a number of candidates K >= 1, got {arg!r}")
        return PoolSpec("fixed", int(arg), sample_cost=sample_cost)
    if mode in ("adaptive", "greedy") and not arg:
        return PoolSpec(mode, start=start, step=step, sample_cost=sample_cost)  # type: ignore[arg-type]
    raise ConfigError(f"--pool must be fixed, fixed:K, adaptive or greedy, got {text!r}")


# --------------------------------------------------------------------------- the predictive of the next sample


class Predictive(BaseModel):
    """P(next sample) = (n_d - discount) / (k + concentration + invalid) for an answer drawn n_d times,
    (concentration + discount * D) / (...) for a new answer (D answers drawn), (n_invalid + invalid) / (...)
    for an invalid reply, after k samples."""

    model_config = ConfigDict(extra="forbid")

    concentration: float = Field(default=1.0, gt=0.0)
    discount: float = Field(default=0.0, ge=0.0, lt=1.0)
    invalid: float = Field(default=0.5, gt=0.0)
    samples: float = 0.0  # candidates fitted on (diagnostic)


class GainTable(BaseModel):
    """The expected gain in P(the selected answer is right) from drawing on from a pool of ``sizes[i]`` to one of
    ``sizes[j]``, for a pool whose posterior gives its selected answer a probability in bin b of ``edges``:
    ``gain[i][b][j]`` (0 for j <= i), the held-out mean over training pools (`fit_gain_table`)."""

    model_config = ConfigDict(extra="forbid")

    sizes: list[int]
    edges: list[float]
    gain: list[list[list[float]]]
    questions: int = 0  # training pools it was measured on (diagnostic)


class PredictiveModel(BaseModel):
    """The fitted predictives by dataset (`Calibration.extra["pool"]`)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["boe-pool/1"] = "boe-pool/1"
    predictive: dict[str, Predictive] = Field(default_factory=dict)
    # the `bayes` model of the pools an adaptive pool visits: prior and claim model per dataset and pool size
    # (keyed `sized_key`), channels fitted on every size; None: the controller's model at every size
    sizes: list[int] | None = None
    bayes: dict[str, Any] | None = None
    # the calibrated value of drawing on to a larger pool, per dataset (`fit_gain_table`); None: not fitted
    gain: dict[str, GainTable] | None = None


#: An unseen dataset: a new answer as likely as one drawn once, invalid replies rare.
DEFAULT_PREDICTIVE = Predictive()
_CONCENTRATIONS = np.exp(np.linspace(math.log(0.02), math.log(50.0), 41))
_DISCOUNTS = np.round(np.arange(0.0, 0.951, 0.05), 2)
_INVALIDS = np.exp(np.linspace(math.log(0.01), math.log(10.0), 19))


def _sequence_stats(q: Question) -> F64:
    """Per candidate after the first: (k before, n of its answer before, answers before, invalid before, kind)
    with kind 0 an answer drawn before, 1 a new answer, 2 an invalid reply."""
    out = np.zeros((max(q.k - 1, 0), 5))
    seen: dict[int, int] = {}
    inv = 0
    for i in range(q.k):
        a = int(q.answer_id[i])
        if i:
            kind = 2 if a < 0 else (0 if a in seen else 1)
            out[i - 1] = (i, seen.get(a, 0), len(seen), inv, kind)
        if a < 0:
            inv += 1
        else:
            seen[a] = seen.get(a, 0) + 1
    return out


def fit_predictive(questions: Sequence[Question], train: B_ | None = None) -> PredictiveModel:
    """The predictive of each dataset, by maximum likelihood over a grid of every candidate given those before
    it in its pool (the pools' sampling order; no reference needed)."""
    mask = np.ones(len(questions), dtype=bool) if train is None else np.asarray(train, dtype=bool)
    by_ds: dict[str, list[F64]] = {}
    for q, t in zip(questions, mask, strict=True):
        if t and q.k > 1:
            by_ds.setdefault(q.dataset, []).append(_sequence_stats(q))
    out = PredictiveModel()
    a = _CONCENTRATIONS[:, None, None]
    d = _DISCOUNTS[None, :, None]
    b = _INVALIDS[None, None, :]
    for ds, parts in sorted(by_ds.items()):
        x = np.concatenate(parts)
        ll = np.zeros((a.shape[0], d.shape[1], b.shape[2]))
        # each term depends on one statistic of a candidate: summed over its distinct values, times their counts
        k, times = np.unique(x[:, 0], return_counts=True)
        ll -= (times[:, None, None, None] * np.log(k[:, None, None, None] + a + b)).sum(axis=0)
        for kind, col in ((0, 1), (1, 2), (2, 3)):
            v, times = np.unique(x[x[:, 4] == kind, col], return_counts=True)
            if not v.size:
                continue
            v = v[:, None, None, None]
            num = (v - d) if kind == 0 else (a + d * v) if kind == 1 else (v + b)
            num = np.broadcast_to(num, (v.shape[0], *ll.shape))
            ll += (times[:, None, None, None] * np.log(np.maximum(num, 1e-300))).sum(axis=0)
        i, j, m = np.unravel_index(int(np.argmax(ll)), ll.shape)
        out.predictive[ds] = Predictive(
            concentration=float(_CONCENTRATIONS[i]),
            discount=float(_DISCOUNTS[j]),
            invalid=float(_INVALIDS[m]),
            samples=float(x.shape[0]),
        )
    return out


def predictive_of(cal: Calibration) -> PredictiveModel:
    """The predictives stored in a calibration (empty when it has none)."""
    data = cal.extra.get(POOL_KEY)
    if data is None:
        return PredictiveModel()
    if isinstance(data, PredictiveModel):
        return data
    try:
        return PredictiveModel.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"calibration {cal.source}: extra.pool.{where}: {err['msg']}") from exc


def _row_predictive(state: EvidenceState) -> F64:
    """(concentration, discount, invalid) of every row, shape (Q, 3)."""
    models = [predictive_of(c) for c in state.calibrations] or [PredictiveModel()]
    out = np.empty((state.n, 3))
    cache_: dict[tuple[int, str], tuple[float, float, float]] = {}
    for r in range(state.n):
        key = (int(state.calibration[r]) if state.calibrations else 0, state.dataset[r])
        got = cache_.get(key)
        if got is None:
            p = models[key[0]].predictive.get(key[1], DEFAULT_PREDICTIVE)
            got = cache_[key] = (p.concentration, p.discount, p.invalid)
        out[r] = got
    return out


# --------------------------------------------------------------------------- the posterior of a pool of k

#: Training questions (evenly spaced) per pool size that fit the pool-size models.
SIZED_QUESTIONS = 1000


def sized_key(dataset: str, size: int) -> str:
    """The key of a dataset's prior and claim model at pool size ``size`` (in `PredictiveModel.bayes`)."""
    return f"{dataset}#k{size}"


def prefix_question(q: Question, k: int, dataset: str | None = None) -> Question:
    """The pool of the first k candidates of ``q`` as a question of its own (spec section 12): the claims they
    assert, the actions they make available (file order), the cheap prior counted among them."""
    k = max(1, min(k, q.k))
    aid = q.answer_id[:k]
    counts = np.where(aid >= 0, (aid[:, None] == aid[None, :]).sum(axis=1), 0).astype(np.float64)
    claims = (q.incidence[:, :k] == 1).any(axis=1)
    new_id = np.cumsum(claims) - 1
    acts = q.need() <= k
    a_claim = q.action_claim[acts]
    a_claim = np.where(a_claim >= 0, new_id[np.maximum(a_claim, 0)] if new_id.size else -1, -1).astype(np.int32)
    return replace(
        q,
        dataset=q.dataset if dataset is None else dataset,
        answers=q.answers[:k],
        valid=q.valid[:k],
        counts=counts,
        answer_id=aid,
        utility=q.utility[:k],
        claim_ids=[c for c, keep in zip(q.claim_ids, claims, strict=True) if keep],
        incidence=q.incidence[claims][:, :k],
        action_ids=[a for a, keep in zip(q.action_ids, acts, strict=True) if keep],
        kind=q.kind[acts],
        action_claim=a_claim,
        action_candidate=q.action_candidate[acts],
        cost=q.cost[acts],
        group=q.group[acts],
        alpha=q.alpha[acts][:, :k],
        outcome=q.outcome[acts],
        unobserved=None if q.unobserved is None else q.unobserved[acts],
        skipped=None if q.skipped is None else q.skipped[acts],
        sample_cost=None if q.sample_cost is None else q.sample_cost[:k],
    )


def repriced(questions: Sequence[Question], sample_cost: float) -> list[Question]:
    """``questions`` with every candidate costing ``sample_cost`` (a replay that reprices samples)."""
    if not (math.isfinite(sample_cost) and sample_cost >= 0):
        raise ConfigError(f"the sample cost must be a finite number >= 0, got {sample_cost}")
    return [replace(q, sample_cost=np.full(q.k, float(sample_cost))) for q in questions]


def pool_sizes(k_max: int, start: int, step: int) -> list[int]:
    """The pool sizes an adaptive pool visits when it draws whole rounds: start, start + step, ..., k_max."""
    return sorted({min(k, k_max) for k in range(max(start, 1), k_max + step, step)})


def _sized_rows(questions: Sequence[Question], train: B_) -> IntArr:
    """The labelled training questions (at most `SIZED_QUESTIONS`, evenly spaced) the pool-size models fit on."""
    rows = np.nonzero(np.asarray(train, dtype=bool))[0]
    rows = np.array([i for i in rows.tolist() if questions[i].labelled and questions[i].k], dtype=np.intp)
    if rows.size > SIZED_QUESTIONS:
        rows = rows[np.linspace(0, rows.size - 1, SIZED_QUESTIONS).round().astype(np.intp)]
    return rows


#: Bins of the probability the posterior gives its selected answer, by which the gain of a draw is measured.
GAIN_EDGES = (0.0, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0)
#: Pseudo-count of training pools pulling a bin's mean gain towards the mean over all bins of its pool size.
GAIN_SHRINK = 20.0


def selected_confidence(model: Any, state: EvidenceState, sel: IntArr | None = None) -> F64:
    """The probability ``model`` (a started `bayes`) gives the answer it selects (``sel`` when given), per row."""
    sel = model.select(state) if sel is None else sel
    out: F64 = model.final_scores(state)[np.arange(state.n), np.maximum(sel, 0)]
    return out


def _prefixes(
    questions: Sequence[Question], rows: Sequence[int], k: int, cache: dict[Any, Any] | None
) -> list[Question]:
    """`prefix_question` of each row's question at pool size ``k`` under its `sized_key` (kept in ``cache``, by
    row and size, for the fits of one list of questions: every fold and policy of a replay asks for them)."""
    cache = {} if cache is None else cache
    out = []
    for i in rows:
        got = cache.get((i, k))
        if got is None:
            q = questions[i]
            got = cache[i, k] = prefix_question(q, k, sized_key(q.dataset, k))
        out.append(got)
    return out


def fit_gain_table(
    questions: Sequence[Question],
    rows: IntArr,
    cal: Calibration,
    group_keys: Sequence[str],
    sizes: Sequence[int],
    prefixes: dict[Any, Any] | None = None,
) -> dict[str, GainTable]:
    """Per dataset, what drawing on from a pool of ``sizes[i]`` to ``sizes[j]`` candidates adds to the chance
    that the selected answer is right, by the probability the posterior gave it (`GainTable`): measured on the
    training pools ``rows`` (labelled) under ``cal``'s pool-size model, before any check. It counts whatever
    the new candidates bring (answers, claims, stances), which a predictive of the answers alone misses."""
    from boe.core.bayes import Bayes
    from boe.core.state import bind_questions

    picked = [questions[i] for i in rows.tolist()]
    if not picked or len(sizes) < 2:
        return {}
    conf = np.zeros((len(sizes), len(picked)))
    right = np.zeros((len(sizes), len(picked)))
    for i, k in enumerate(sizes):
        sub = _prefixes(questions, rows.tolist(), k, prefixes)
        state = bind_questions(sub, np.arange(len(sub)), [cal], None, list(group_keys), budget=1.0)
        model = Bayes()
        model.start(state)
        sel = np.maximum(model.select(state), 0)
        conf[i] = selected_confidence(model, state)
        right[i] = [float(q.utility[s]) if s < q.k else 0.0 for q, s in zip(sub, sel.tolist(), strict=True)]
    edges = np.asarray(GAIN_EDGES)
    out: dict[str, GainTable] = {}
    datasets = np.array([q.dataset for q in picked])
    for ds in sorted(set(datasets.tolist())):
        mine = datasets == ds
        n_s, n_b = len(sizes), edges.size - 1
        gain = np.zeros((n_s, n_b, n_s))
        for i in range(n_s):
            b = np.clip(np.digitize(conf[i, mine], edges[1:-1]), 0, n_b - 1)
            times = np.bincount(b, minlength=n_b).astype(np.float64)
            for j in range(i + 1, n_s):
                d = right[j, mine] - right[i, mine]
                mean_all = float(d.mean())
                sums = np.bincount(b, weights=d, minlength=n_b)
                gain[i, :, j] = (sums + GAIN_SHRINK * mean_all) / (times + GAIN_SHRINK)
        out[ds] = GainTable(
            sizes=list(sizes), edges=edges.tolist(), gain=gain.round(6).tolist(), questions=int(mine.sum())
        )
    return out


def fit_sized_model(
    questions: Sequence[Question],
    train: B_,
    group_keys: Sequence[str],
    sizes: Sequence[int],
    base: Any,
    prefixes: dict[Any, Any] | None = None,
) -> Any:
    """The `bayes` model of the pools of ``sizes``: fitted on the training pools' prefixes of every size, the
    prior and claim model per (dataset, size) (`sized_key`), the channels on all sizes; each dataset's check
    weight is ``base``'s (fitted on whole pools)."""
    from boe.core.bayes import fit_bayes_model

    rows = _sized_rows(questions, train).tolist()
    sub = [p for k in sizes for p in _prefixes(questions, rows, k, prefixes)]
    model = fit_bayes_model(sub, group_keys)
    for key, cp in model.claims.items():
        ds = key.rpartition("#k")[0]
        if ds in base.claims:
            cp.check_weight = base.claims[ds].check_weight
    return model


def with_sized_model(
    cal: Calibration,
    questions: Sequence[Question],
    train: B_,
    group_keys: Sequence[str],
    start: int = DEFAULT_START,
    step: int = DEFAULT_STEP,
    cache: dict[str, Any] | None = None,
) -> Calibration:
    """``cal`` (with a fitted `bayes` model) whose pool extra also holds the model of the pool sizes an adaptive
    pool of ``start`` and ``step`` visits (`fit_sized_model`); ``cal`` itself when it has no `bayes` model or
    the training pools are no larger than ``start``. ``cache`` (one dict for the fits of one list of
    ``questions``) keeps the prefix pools and the fitted models, by everything they are fitted from."""
    from boe.core.bayes import BAYES_KEY, model_of

    k_max = max((q.k for q, t in zip(questions, train, strict=True) if t), default=0)
    if BAYES_KEY not in cal.extra or k_max <= start:
        return cal
    fitted = None if cache is None else cache.setdefault("sized", {})
    key = (np.asarray(train, dtype=bool).tobytes(), tuple(group_keys), start, step, cal.model_dump_json())
    pm = None if fitted is None else fitted.get(key)
    if pm is None:
        prefixes = None if cache is None else cache.setdefault("prefixes", {})
        sizes = pool_sizes(k_max, start, step)
        sized = fit_sized_model(questions, train, group_keys, sizes, model_of(cal), prefixes)
        at_size = cal.model_copy(update={"extra": {**cal.extra, BAYES_KEY: sized}})
        gain = fit_gain_table(questions, _sized_rows(questions, train), at_size, group_keys, sizes, prefixes)
        pm = predictive_of(cal).model_copy(
            update={"sizes": sizes, "bayes": sized.model_dump(mode="json"), "gain": gain}
        )
        if fitted is not None:
            fitted[key] = pm
    return cal.model_copy(update={"extra": {**cal.extra, POOL_KEY: pm.model_dump(mode="json")}})


# --------------------------------------------------------------------------- the value of a draw


@cache
def _compositions(m: int, c: int) -> tuple[npt.NDArray[np.int64], F64]:
    """Every way m draws fall into c categories (R, c), and log of its multinomial coefficient (R,)."""
    combos = list(combinations_with_replacement(range(c), m))
    counts = np.zeros((len(combos), c), dtype=np.int64)
    for r, combo in enumerate(combos):
        for cat in combo:
            counts[r, cat] += 1
    lf = np.array([math.lgamma(i + 1) for i in range(m + 1)])
    return counts, lf[m] - lf[counts].sum(axis=1)


def _log_rising(w: F64, j: npt.NDArray[np.int64]) -> F64:
    """log of w (w + 1) ... (w + j - 1), elementwise; 0 for j = 0 and -inf for w = 0 < j."""
    out = np.zeros(np.broadcast_shapes(w.shape, j.shape))
    for i in range(int(j.max(initial=0))):
        with np.errstate(divide="ignore"):
            out += np.where(j > i, np.log(np.maximum(w + i, 0.0)), 0.0)
    return out


def draw_values(
    lpost: F64, lprior_fn: Any, counts: F64, k: F64, n_invalid: F64, predictive: F64, m: int, now: IntArr
) -> F64:
    """Expected gain in P(the selected answer is right) from m more samples, per row.

    ``lpost`` (n, D + 1) is the controller's log posterior (answers by id, `none` last; -inf for answers not
    drawn), ``lprior_fn(counts, k)`` its log prior from answer counts (n', D') and pool sizes (n',), ``counts``
    (n, D) the answers' counts, ``k`` the pool sizes, ``n_invalid`` the invalid replies, ``predictive`` (n, 3)
    the urn's parameters, ``now`` the answer selected now. The posterior after a draw keeps the likelihood of
    the checks bought (a new answer's is that of `none`: every candidate drawn is wrong under both).
    """
    n, d = counts.shape
    m = min(m, MAX_VALUED)
    if n == 0 or m < 1:
        return np.zeros(n)
    real = np.isfinite(lpost[:, :d]) & (counts > 0)
    with np.errstate(invalid="ignore"):
        lik = lpost - lprior_fn(counts, k)  # the checks' log likelihood (up to a constant per row)
    lik[:, :d] = np.where(real, lik[:, :d], -np.inf)
    post = np.where(real, np.exp(lpost[:, :d]), -1.0)
    order = np.argsort(-post, axis=1, kind="stable")
    t = min(TOP_ANSWERS, d)
    top = order[:, :t]  # (n, t), may hold answers not drawn (weight 0)
    rest = order[:, t:]
    rows = np.arange(n)[:, None]
    conc, disc, inv_w = predictive[:, 0], predictive[:, 1], predictive[:, 2]
    w_top = np.where(real[rows, top], counts[rows, top] - disc[:, None], 0.0)
    w_rest = np.where(real[rows, rest], counts[rows, rest] - disc[:, None], 0.0).sum(axis=1)
    best_rest = rest[:, 0] if rest.shape[1] else np.zeros(n, dtype=np.int64)
    n_answers = real.sum(axis=1)
    weights = np.concatenate(
        [w_top, w_rest[:, None], (conc + disc * n_answers)[:, None], (n_invalid + inv_w)[:, None]], axis=1
    )  # categories: the top answers, the rest, a new answer, an invalid reply
    total = weights.sum(axis=1)
    comp, log_multi = _compositions(m, t + 3)
    # log P(composition) under the urn, (n, R)
    lp_comp = log_multi[None, :] + _log_rising(weights[:, None, :], comp[None, :, :]).sum(axis=2)
    lp_comp -= _log_rising(total, np.full(n, m, dtype=np.int64))[:, None]
    r = comp.shape[0]
    new_counts = np.zeros((n, r, d + 1))
    new_counts[:, :, :d] = counts[:, None, :]
    for j in range(t):
        new_counts[np.arange(n)[:, None], np.arange(r)[None, :], top[:, j][:, None]] += comp[None, :, j]
    if rest.shape[1]:
        new_counts[np.arange(n)[:, None], np.arange(r)[None, :], best_rest[:, None]] += comp[None, :, t]
    new_counts[:, :, d] = comp[None, :, t + 1]
    flat = lprior_fn(new_counts.reshape(n * r, d + 1), np.repeat(k + m, r)).reshape(n, r, d + 2)
    lik_ext = np.concatenate([lik[:, :d], lik[:, d : d + 1], lik[:, d : d + 1]], axis=1)  # new answer as `none`
    lp = flat + lik_ext[:, None, :]
    top_lp = lp.max(axis=2, keepdims=True)
    p = np.exp(lp - top_lp)
    p /= p.sum(axis=2, keepdims=True)
    selectable = p[:, :, : d + 1]
    gain = selectable.max(axis=2) - selectable[np.arange(n)[:, None], np.arange(r)[None, :], now[:, None]]
    with np.errstate(under="ignore"):
        out: F64 = (np.exp(lp_comp) * np.maximum(gain, 0.0)).sum(axis=1)
    return out


# --------------------------------------------------------------------------- the policies


class _PoolPolicy:
    """A controller with a pool: everything but `choose` goes to the controller."""

    deployable: ClassVar[bool] = True
    reads_labels: ClassVar[bool] = False

    def __init__(self, inner: Policy, step: int) -> None:
        self.inner = inner
        self.step = int(step)
        self._shared: dict[str, Any] | None = None  # what the fits of one replay share (`prepare_fit`)
        self.name = inner.name
        self.deployable = inner.deployable  # type: ignore[misc]
        self.reads_labels = inner.reads_labels  # type: ignore[misc]

    def start(self, state: EvidenceState) -> None:
        self.inner.start(state)

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        self.inner.observe(state, rows, actions, outcomes)

    def select(self, state: EvidenceState) -> IntArr:
        return self.inner.select(state)

    def final_scores(self, state: EvidenceState) -> F64:
        return self.inner.final_scores(state)

    def draw_sizes(self, state: EvidenceState) -> IntArr:
        """Per row, the candidates a draw takes now: up to ``step``, as many as remain and the budget pays for."""
        pool = state.pool
        if pool is None:
            return np.zeros(state.n, dtype=np.intp)
        room = np.minimum(self.step, pool.limit - pool.k)
        out = np.zeros(state.n, dtype=np.intp)
        rows = np.arange(state.n)
        for m in range(int(room.max(initial=0)), 0, -1):
            fits = (room >= m) & (out == 0)
            if not fits.any():
                continue
            spend = pool.sample_spent_at(rows[fits], (pool.k[fits] + m).astype(np.int32)) + pool.check_spent[fits]
            ok = spend <= state.budget[fits]
            out[np.nonzero(fits)[0][ok]] = m
        return out

    def fit_extra(
        self, questions: Any, train_mask: Any, calibration: Calibration, group_keys: Any = None
    ) -> Calibration:
        """The controller's fitted parameters, then the predictive of the next sample."""
        cal = calibration
        if isinstance(self.inner, FittablePolicy):
            cal = self.inner.fit_extra(questions, train_mask, cal, group_keys)
        model = fit_predictive(questions, train_mask)
        return cal.model_copy(update={"extra": {**cal.extra, POOL_KEY: model.model_dump(mode="json")}})

    def prepare_fit(self, questions: Any, shared: dict[str, Any] | None = None) -> None:
        """What the controller's fits on ``questions`` share, built once (`Bayes.prepare_fit`)."""
        shared = {} if shared is None else shared
        got = shared.get(POOL_KEY)
        if got is None or got["questions"] is not questions:  # another list: what is kept was fitted on that one
            got = shared[POOL_KEY] = {"questions": questions}
        self._shared = got
        for pol in {id(p): p for p in (self.inner, getattr(self, "model", None))}.values():
            prepare_fit(pol, questions, shared)

    def fit_extra_present(self, calibration: Calibration) -> bool:
        """The controller's parameters are there (a missing predictive is the unseen-dataset default)."""
        return not isinstance(self.inner, FittablePolicy) or bool(self.inner.fit_extra_present(calibration))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, step={self.step})"


class GreedyPool(_PoolPolicy):
    """Draw a round (``step`` candidates, or what remains and the budget pays for) whenever the controller stops."""

    def choose(self, state: EvidenceState) -> IntArr:
        choice = self.inner.choose(state)
        m = self.draw_sizes(state)
        draw = (choice == -1) & (m > 0)
        return np.where(draw, -2 - m, choice)


class AdaptivePool(_PoolPolicy):
    """Draw when m more candidates are worth more per unit cost than the controller's check; stop when neither
    is worth more than ``eta`` per unit cost (see the module docstring)."""

    def __init__(self, inner: Policy, step: int, eta: float = 0.0, start: int = DEFAULT_START) -> None:
        super().__init__(inner, step)
        if not math.isfinite(eta) or eta < 0:
            raise ConfigError(f"eta must be a finite number >= 0, got {eta}")
        self.eta = float(eta)
        self.first = int(start)
        from boe.core.bayes import Bayes

        self.model: Any = inner if isinstance(inner, Bayes) else Bayes()
        self._sized: dict[int, tuple[Calibration, Calibration, list[int]]] = {}

    def start(self, state: EvidenceState) -> None:
        k = _drawn(state)
        with self._at_size(state, k):
            super().start(state)
            if self.model is not self.inner:
                self.model.start(state)
        state.extra["pool_predictive"] = _row_predictive(state)

    def _sized_calibration(self, cal: Calibration) -> tuple[Calibration, list[int]]:
        """``cal`` with the `bayes` model of the pool sizes in place of the whole pools' one, and those sizes
        (``cal`` itself and no sizes when it has none)."""
        got = self._sized.get(id(cal))
        if got is None or got[0] is not cal:
            from boe.core.bayes import BAYES_KEY, BayesModel

            pm = predictive_of(cal)
            if pm.bayes is None or not pm.sizes:
                got = (cal, cal, [])
            else:
                model = BayesModel.model_validate(pm.bayes)  # validated once, kept as a model
                got = (cal, cal.model_copy(update={"extra": {**cal.extra, BAYES_KEY: model}}), sorted(pm.sizes))
            self._sized[id(cal)] = got
        return got[1], got[2]

    @contextmanager
    def _at_size(self, state: EvidenceState, k: IntArr) -> Iterator[None]:
        """``state`` as the `bayes` model of pools of ``k[r]`` candidates sees it: its row's calibration's
        sized model, under the largest fitted size <= k (the smallest above it when none is)."""
        cals, datasets = state.calibrations, state.dataset
        sized = [self._sized_calibration(c) for c in cals]
        if not any(sizes for _, sizes in sized):
            yield
            return
        names = []
        for r in range(state.n):
            sizes = sized[int(state.calibration[r])][1]
            if not sizes:
                names.append(datasets[r])
                continue
            fit = [s for s in sizes if s <= k[r]]
            names.append(sized_key(datasets[r], fit[-1] if fit else sizes[0]))
        state.calibrations = [c for c, _ in sized]
        state.dataset = names
        try:
            yield
        finally:
            state.calibrations, state.dataset = cals, datasets

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        super().observe(state, rows, actions, outcomes)
        if self.model is not self.inner:
            self.model.observe(state, rows, actions, outcomes)

    def fit_extra(
        self, questions: Any, train_mask: Any, calibration: Calibration, group_keys: Any = None
    ) -> Calibration:
        cal = super().fit_extra(questions, train_mask, calibration, group_keys)
        if self.model is not self.inner and not self.model.fit_extra_present(cal):
            cal = self.model.fit_extra(questions, train_mask, cal, group_keys)
        from boe.core.bayes import keys_from_calibration

        train = np.asarray(train_mask, dtype=bool)
        keys = list(group_keys) if group_keys is not None else keys_from_calibration(questions, train, cal)
        shared = self._shared if self._shared is not None and self._shared["questions"] is questions else None
        return with_sized_model(cal, questions, train, keys, self.first, self.step, shared)

    def fit_extra_present(self, calibration: Calibration) -> bool:
        return super().fit_extra_present(calibration) and bool(self.model.fit_extra_present(calibration))

    def choose(self, state: EvidenceState) -> IntArr:
        choice = self.inner.choose(state).astype(np.intp)
        n = state.n
        rows = np.arange(n)
        check = np.full(n, -np.inf)
        has = choice >= 0
        if has.any():
            values = self.model.values(state)
            check[has] = values[rows[has], choice[has]] / state.cost[rows[has], choice[has]]
        m = self.draw_sizes(state)
        draw = np.full(n, -np.inf)
        live = np.nonzero(m > 0)[0]
        if live.size:
            draw[live] = self._draw_density(state, live)
        limit = self.eta + 1e-12
        take_draw = (draw > check) & (draw > limit)
        # at eta = 0 the controller's own proposal stands when no draw beats it (its budget is spent as it
        # would spend it); at a price, a check must be worth it too by what checking on could gain at most --
        # the probability the pick is wrong, per unit cost of this check, which bounds its myopic EVSI (a check
        # worth nothing alone may be worth it with the ones after it; a sure pick stops)
        keep = has.copy()
        if self.eta > 0.0:
            sel = self.model.select(state)
            wrong = 1.0 - selected_confidence(self.model, state, sel)
            if has.any():
                keep[has] = wrong[has] / state.cost[rows[has], choice[has]] > limit
            # no check can change the pick among the candidates drawn (they agree, or no outcome moves it), but
            # a draw may: test the pick with the check most informative about it -- evidence against it makes
            # drawing on worth it (the measured gain of a draw grows as the pick's probability falls)
            pick = (sel >= 0) & (state.answer_id[rows, np.maximum(sel, 0)] >= 0)
            test = np.nonzero(~has & pick & (m > 0) & ~take_draw & ~state.done)[0]
            if test.size:
                tested = self._test_pick(state, test, wrong[test])
                choice[test], keep[test] = tested, tested >= 0
        return np.where(take_draw, -2 - m, np.where(keep, choice, -1))

    def _test_pick(self, state: EvidenceState, rows: IntArr, wrong: F64) -> IntArr:
        """For ``rows``, the feasible check carrying most information about the selected answer per unit cost
        among those worth it by what checking could gain (wrong / cost > eta), or -1."""
        from boe.core.bayes import _View

        view = _View(state, rows)
        ok = state.feasible()[rows] & state.extra["bayes_informative"][rows]
        info = view.decision_info(np.arange(rows.size)) / view.cost
        ok &= (info > 1e-9) & (wrong[:, None] / view.cost > self.eta + 1e-12)
        return first_max(info, ok)

    def _draw_density(self, state: EvidenceState, rows: IntArr) -> F64:
        """The best value per unit cost of drawing on for ``rows``: measured (`GainTable`) where the row's
        dataset has a table, else by the answer urn (`_urn_density`)."""
        out, has = self._measured_density(state, rows)
        if not has.all():
            out[~has] = self._urn_density(state, rows[~has])
        return out

    def _urn_density(self, state: EvidenceState, rows: IntArr) -> F64:
        """The best value per unit cost of drawing 1, 2, ... rounds more (at most `MAX_VALUED` candidates) for
        ``rows`` under the answer urn (`draw_values`): a round that changes nothing alone may be worth drawing
        when two would."""
        pool = state.pool
        assert pool is not None
        best = np.zeros(rows.size)
        sizes = sorted({min(s, MAX_VALUED) for s in range(self.step, max(self.step, MAX_VALUED) + 1, self.step)})
        for size in sizes:
            # valued whether or not the pool's limit serves it (online the limit is not the record's size), only
            # as far as the budget pays for it
            k_next = (pool.k[rows] + size).astype(np.int32)
            cost = pool.sample_spent_at(rows, k_next) - pool.sample_spent[rows]
            ok = pool.sample_spent_at(rows, k_next) + pool.check_spent[rows] <= state.budget[rows]
            if not ok.any():
                break
            r = np.nonzero(ok)[0]
            value = self._draw_value(state, rows[r], size)
            best[r] = np.maximum(best[r], _density(value, cost[r]))
        return best

    def _measured_density(self, state: EvidenceState, rows: IntArr) -> tuple[F64, B_]:
        """The best calibrated gain per unit cost of drawing on to a larger fitted pool size (`GainTable`) for
        ``rows``, as far as the budget pays, and whether the row's dataset has a table."""
        pool = state.pool
        assert pool is not None
        out = np.zeros(rows.size)
        has = np.zeros(rows.size, dtype=bool)
        conf: F64 | None = None  # computed once a row's dataset has a table
        k = _drawn(state)[rows]
        keys = [(int(state.calibration[r]) if state.calibrations else 0, state.dataset[r]) for r in rows.tolist()]
        for key in sorted(set(keys)):
            cals = state.calibrations
            table = (predictive_of(cals[key[0]]).gain or {}).get(key[1]) if cals else None
            if table is None:
                continue
            if conf is None:
                conf = selected_confidence(self.model, state)[rows]
            mine = np.array([kk == key for kk in keys])
            has |= mine
            sizes = np.asarray(table.sizes)
            gain = np.asarray(table.gain)  # (sizes, bins, sizes)
            at = np.maximum(np.searchsorted(sizes, k[mine], side="right") - 1, 0)
            b = np.clip(np.digitize(conf[mine], np.asarray(table.edges)[1:-1]), 0, gain.shape[1] - 1)
            r = rows[mine]
            best = np.zeros(r.size)
            for j, size in enumerate(sizes.tolist()):
                ahead = size > k[mine]
                spend = pool.sample_spent_at(r, np.full(r.size, size, dtype=np.int32))
                ok = ahead & (spend + pool.check_spent[r] <= state.budget[r])
                if ok.any():
                    dens = _density(gain[at, b, j], spend - pool.sample_spent[r])
                    best = np.where(ok, np.maximum(best, dens), best)
            out[mine] = best
        return out, has

    def _draw_value(self, state: EvidenceState, rows: IntArr, m: int) -> F64:
        """The expected gain of drawing m more candidates (`draw_values`) for ``rows``."""
        from boe.core.bayes import prior_log, prior_setup

        aid = state.answer_id[rows]
        with self._at_size(state, _drawn(state) + m):  # the prior of the pool after the draw
            counts, k, params = prior_setup(state)
        counts, k, params = counts[rows], k[rows], params[rows]
        if counts.shape[1] == 0:
            counts = np.zeros((rows.size, 1))
        d = counts.shape[1]
        n_inv = k - counts.sum(axis=1)
        lpost = state.extra["bayes_lpost"][rows]
        lpost = np.concatenate([lpost[:, :d], lpost[:, -1:]], axis=1)  # answers 0..d-1, then `none`
        reps = {"n": params.shape[0]}

        def lprior(c: F64, kk: F64) -> F64:
            par = params if c.shape[0] == reps["n"] else np.repeat(params, c.shape[0] // reps["n"], axis=0)
            out, _ = prior_log(c, kk, par)
            return out

        sel = self.model.select(state)[rows]
        now = np.where(sel >= 0, aid[np.arange(rows.size), np.maximum(sel, 0)], 0)
        return draw_values(lpost, lprior, counts, k, n_inv, state.extra["pool_predictive"][rows], m, np.maximum(now, 0))


def _density(value: F64, cost: F64) -> F64:
    """Value per unit cost (a free positive value is worth any price)."""
    out: F64 = np.where(cost > 0, value / np.maximum(cost, 1e-300), np.where(value > 0, np.inf, 0.0))
    return out


def _drawn(state: EvidenceState) -> IntArr:
    """Candidates drawn per row."""
    out: IntArr = state.candidate.sum(axis=1).astype(np.intp)
    return out


def make_pool_policy(name: str | Policy, spec: PoolSpec, **options: Any) -> Policy:
    """The policy ``name`` (or a built one) under the pool ``spec``: itself for a fixed pool, else wrapped."""
    # an adaptive pool puts the price on checks and draws alike: its controller proposes as at price 0
    own = {**options, "eta": 0.0} if spec.mode == "adaptive" else options
    inner = make_policy(name, **own) if isinstance(name, str) else name
    if spec.mode == "adaptive":
        return AdaptivePool(inner, spec.step, eta=float(options.get("eta", 0.0)), start=spec.start)  # type: ignore[return-value]
    if spec.mode == "greedy":
        return GreedyPool(inner, spec.step)  # type: ignore[return-value]
    return inner
