"""Selection policies (spec section 6) behind one small interface.

A policy looks at an `EvidenceState` (a batch of questions) and returns, for
every row, the index of the next action to buy or -1 to stop. The replay
engine reveals stored outcomes; the agent runs the tool. Both then call
`EvidenceState.reveal` and `Policy.observe`, so online and offline runs go
through the same code.

Policies register by name; `make_policy("boe", eta=0.0)` builds one.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from boe.core.registry import Registry, load_plugins
from boe.core.relevance import score_relevance
from boe.core.scoring import TIE_TOL, first_max, sigmoid
from boe.core.state import EvidenceState
from boe.errors import ConfigError

__all__ = [
    "POLICIES",
    "BoE",
    "FittablePolicy",
    "LabelGuided",
    "Policy",
    "RandomFactor",
    "Raw",
    "ScorePolicy",
    "Whole",
    "make_policy",
    "prepare_fit",
    "plugin_values",
    "register_policy",
]

IntArr = npt.NDArray[np.intp]


@runtime_checkable
class Policy(Protocol):
    """What the replay engine and the agent need from a policy."""

    name: str
    deployable: bool
    reads_labels: bool

    def start(self, state: EvidenceState) -> None:
        """Prepare policy-private arrays (in ``state.extra``) before the first step."""

    def choose(self, state: EvidenceState) -> IntArr:
        """Next action per row (index into the menu), -1 to stop."""
        ...

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        """Called after ``state.reveal`` with the same arguments."""

    def select(self, state: EvidenceState) -> IntArr:
        """The selected candidate per row."""
        ...

    def final_scores(self, state: EvidenceState) -> npt.NDArray[np.float64]:
        """Scores reported in transcripts (s_i, padding 0)."""
        ...


@runtime_checkable
class FittablePolicy(Protocol):
    """A policy with parameters of its own beyond the group calibration (``bayes``): fitted beside it.

    It may also have ``prepare_fit(questions, shared)``: build once what its fits on those questions share,
    before cross-fit folds are fitted (in forked workers, which inherit it); ``shared`` is one dict for every
    policy of a replay, in which policies whose fits are the same (`bayes`, `bayes-lookahead`) meet."""

    name: str

    def fit_extra(self, questions: Any, train_mask: Any, calibration: Any, group_keys: Any = None) -> Any:
        """The calibration with this policy's parameters fitted on the masked questions added."""
        ...

    def fit_extra_present(self, calibration: Any) -> bool:
        """Whether ``calibration`` already holds this policy's parameters."""
        ...


def prepare_fit(policy: Any, questions: Any, shared: dict[str, Any]) -> None:
    """``policy.prepare_fit(questions, shared)`` where it has one; a plugin's ``prepare_fit(questions)`` (the
    contract as it first was) gets the questions alone."""
    prepare = getattr(policy, "prepare_fit", None)
    if prepare is None:
        return
    if len(inspect.signature(prepare).parameters) > 1:
        prepare(questions, shared)
    else:
        prepare(questions)


#: Every policy by name: those of this module, then (on the first listing or miss) those of the other modules of
#: `boe.core` that register one, so a built-in policy is one module there with `@register_policy`, named nowhere else.
POLICIES: Registry[Callable[..., Policy]] = Registry("policies", "policy")


def _builtin_policies() -> None:
    from importlib import resources

    for mod in pkgutil.iter_modules(importlib.import_module("boe.core").__path__):
        try:  # only the modules that register a policy are imported (replay never needs the others)
            registers = "register_policy(" in resources.files("boe.core").joinpath(f"{mod.name}.py").read_text("utf-8")
        except OSError:
            registers = True
        if registers and mod.name != "policies":
            importlib.import_module(f"boe.core.{mod.name}")


def register_policy(name: str, *, override: bool = False) -> Callable[[type], type]:
    """Class decorator: make a policy available by name to `make_policy`, the CLI and the agent.

    A name already taken is refused unless ``override=True``.
    """

    def deco(cls: type) -> type:
        POLICIES.add(name, cls, override=override)
        return cls

    return deco


def make_policy(name: str, **options: Any) -> Policy:
    """Build a registered policy; options it does not take are ignored."""
    factory = POLICIES.get_obj(name)
    accepted = getattr(factory, "OPTIONS", ())
    return factory(**{k: v for k, v in options.items() if k in accepted})


def _load_plugins() -> None:
    """Discover plugin policies (kept for callers of the old name; the registry loads them on a miss)."""
    load_plugins()


class ScorePolicy:
    """Base for the spec's policies: select by the logit scores, never stop early."""

    name: ClassVar[str] = ""
    deployable: ClassVar[bool] = True
    reads_labels: ClassVar[bool] = False
    OPTIONS: ClassVar[tuple[str, ...]] = ()

    def start(self, state: EvidenceState) -> None:
        return None

    def observe(self, state: EvidenceState, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        return None

    def select(self, state: EvidenceState) -> IntArr:
        return state.selection()

    def final_scores(self, state: EvidenceState) -> npt.NDArray[np.float64]:
        return np.where(state.candidate, state.scores(), 0.0)

    def choose(self, state: EvidenceState) -> IntArr:
        raise NotImplementedError

    def relevant(self, state: EvidenceState) -> npt.NDArray[np.bool_]:
        """(Q, A): feasible actions whose purchase could change the selected answer (`boe.core.relevance`).

        A subclass that selects by other scores than the spec's logits gets no filter (every feasible action).
        """
        own = type(self).select is ScorePolicy.select and type(self).final_scores is ScorePolicy.final_scores
        return score_relevance(state) if own else state.feasible()

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.OPTIONS)
        return f"{type(self).__name__}({opts})"


@register_policy("raw")
class Raw(ScorePolicy):
    """Buy nothing; the cheap prior's argmax is the raw majority answer."""

    name = "raw"

    def choose(self, state: EvidenceState) -> IntArr:
        return np.full(state.n, -1, dtype=np.intp)


def plugin_values(state: EvidenceState, mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float64]:
    """Plug-in EVSI(e | t) of every action (spec section 5), shape (Q, A); with ``mask``, of the masked actions
    only (the others are -inf).

    max_i s_i = sigmoid(max_i logit_i) because the logistic map is monotone,
    so maxima are taken on logits and only they are transformed. A factor
    action moves the candidates that assert its claim by +w, those that deny
    it by -w and leaves the rest, so its best hypothetical logit is
    max(P + w, Z, N - w) with P, Z, N the best current logits of the three
    parts, computed once per claim (of a masked action); a whole-response check moves only its
    target (P = its logit, Z = the best of the others, no N), and an
    answer-level check moves the candidates holding its answer (P = their best
    logit, Z = the best of the others, no N). Rounding is monotone, so this
    equals the candidate-by-candidate maximum exactly. The sum runs over
    outcomes in the order confirm, reject, unresolved.
    """
    n = state.n
    out = np.full(state.cost.shape, -np.inf)
    q, a = np.nonzero(mask) if mask is not None else np.indices(state.cost.shape).reshape(2, -1)
    if not q.size:
        return out
    pairs, at = _pairs(state, np.maximum(state.claim[q, a], 0) * n + q)  # each action's (claim, question)
    p_best, z_best, n_best = _part_best(state, pairs)[:, at]  # (3, P)
    logit = state.logit
    whole = state.whole[q, a]
    if whole.any():
        first = np.argmax(logit, axis=1)
        top1 = logit[np.arange(n), first]
        rest = logit.copy()
        rest[np.arange(n), first] = -np.inf
        top2 = rest.max(axis=1)
        tgt = np.maximum(state.target[q, a], 0)
        p_best = np.where(whole, logit[q, tgt], p_best)
        z_best = np.where(whole, np.where(tgt == first[q], top2[q], top1[q]), z_best)
        n_best = np.where(whole, -np.inf, n_best)
    answer = np.nonzero(state.answer[q, a])[0]
    if answer.size:
        qa = q[answer]
        moved = state.alpha[qa, a[answer]] == 1  # (n, K)
        lg = logit[qa]
        p_best[answer] = np.where(moved, lg, -np.inf).max(axis=1)
        z_best[answer] = np.where(moved, -np.inf, lg).max(axis=1)
        n_best[answer] = -np.inf
    w = state.weight[q, a]
    m_conf = np.maximum(np.maximum(p_best + w, z_best), n_best - w)
    m_rej = np.maximum(np.maximum(p_best - w, z_best), n_best + w)
    s_now = sigmoid(logit.max(axis=1))[q]
    p = state.p[q, a]
    out[q, a] = ((p[:, 0] * sigmoid(m_conf) + p[:, 1] * sigmoid(m_rej)) + p[:, 2] * s_now) - s_now
    return out


def _pairs(state: EvidenceState, flat: IntArr) -> tuple[IntArr | None, IntArr]:
    """The distinct (claim, question) pairs that ``flat`` (claim * Q + question) names, and the pair of each of its
    entries; None (every pair, ``flat`` itself) when they are so many that one pass over all is cheaper."""
    size = state.partition.shape[2] * state.partition.shape[3]
    need = np.zeros(size, dtype=bool)
    need[flat] = True
    pairs = np.flatnonzero(need)
    if pairs.size * 3 > size:
        return None, flat
    return pairs, (np.cumsum(need) - 1)[flat]


def _part_logits(state: EvidenceState, pairs: IntArr) -> npt.NDArray[np.float64]:
    """The logits of the candidates in each part (asserting, ignoring, denying) of the (claim, question) pairs
    ``pairs``, shape (3, K, pairs)."""
    part = state.partition  # (3, K, M, Q)
    k = part.shape[1]
    v = np.take(part.reshape(3 * k, -1), pairs, axis=1).reshape(3, k, -1)
    v += state.logit.T[:, pairs % state.n]
    return v


def _part_best(state: EvidenceState, pairs: IntArr | None) -> npt.NDArray[np.float64]:
    """The best logit of each part of the (claim, question) pairs ``pairs`` (None: every pair), shape (3, pairs)."""
    out: npt.NDArray[np.float64]
    if pairs is not None:
        out = _part_logits(state, pairs).max(axis=1)
        return out
    part = state.partition  # (3, K, M, Q): one pass over K slabs that stay in cache
    lt = state.logit.T  # (K, Q)
    best = part[:, 0] + lt[0]
    tmp = np.empty_like(best)
    for k in range(1, part.shape[1]):
        np.add(part[:, k], lt[k], out=tmp)
        np.maximum(best, tmp, out=best)
    out = best.reshape(3, -1)
    return out


def _literal_value(logit: list[float], alpha: list[int], w: float, p: tuple[float, float, float], cost: float) -> float:
    """EVSI / cost of one action computed term by term with scalar math (as a literal reading of the spec)."""

    def s(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    best = max(s(x) for x in logit)
    total = 0.0
    for sign, mass in ((1, p[0]), (-1, p[1]), (0, p[2])):
        total += mass * max(s(x + (sign * a) * w) for x, a in zip(logit, alpha, strict=True))
    return (total - best) / cost


@register_policy("boe")
class BoE(ScorePolicy):
    """Greedy plug-in EVSI per cost; stop when the chosen value is <= eta + 1e-12 (the tie tolerance)."""

    name = "boe"
    OPTIONS: ClassVar[tuple[str, ...]] = ("eta", "factor_only")

    def __init__(self, eta: float = 0.0, factor_only: bool = False) -> None:
        if not math.isfinite(eta):
            raise ConfigError(f"eta must be finite, got {eta}")
        self.eta = float(eta)
        self.factor_only = factor_only

    def choose(self, state: EvidenceState) -> IntArr:
        feasible = state.feasible()
        if self.factor_only:
            feasible &= state.factor
        value = plugin_values(state, feasible) / state.cost
        choice = first_max(value, feasible)
        rows = np.nonzero(choice >= 0)[0]
        chosen = value[rows, choice[rows]]
        limit = self.eta + TIE_TOL
        stop = chosen <= limit
        # Near the limit the comparison can hinge on the last bit of exp(); decide
        # those few cases with scalar arithmetic, the way a literal reading computes them.
        close = np.nonzero(np.abs(chosen - limit) <= 1e-9)[0]
        for j in close:
            q, a = int(rows[j]), int(choice[rows[j]])
            k = state.candidate[q]
            v = _literal_value(
                state.logit[q, k].tolist(),
                state.alpha[q, a, k].tolist(),
                float(state.weight[q, a]),
                (float(state.p[q, a, 0]), float(state.p[q, a, 1]), float(state.p[q, a, 2])),
                float(state.cost[q, a]),
            )
            stop[j] = v <= limit
        choice[rows[stop]] = -1
        return choice


@register_policy("boe-factor")
class BoEFactor(BoE):
    """`boe` restricted to factor actions (the matched-menu comparison)."""

    name = "boe-factor"
    OPTIONS: ClassVar[tuple[str, ...]] = ("eta",)

    def __init__(self, eta: float = 0.0) -> None:
        super().__init__(eta=eta, factor_only=True)


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def action_priorities(question_ids: list[str], n_actions: int, seed: int) -> npt.NDArray[np.float64]:
    """Uniform [0, 1) draws per (question, action), reproducible from (seed, question id) alone."""
    qh = np.array(
        [int.from_bytes(hashlib.sha256(f"{seed}\x00{q}".encode()).digest()[:8], "little") for q in question_ids],
        dtype=np.uint64,
    )
    idx = np.arange(1, n_actions + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = qh[:, None] ^ (idx[None, :] * np.uint64(0xD1B54A32D192ED03))
    return (_splitmix64(_splitmix64(x)) >> np.uint64(11)).astype(np.float64) * 2.0**-53


@register_policy("random-factor")
class RandomFactor(ScorePolicy):
    """Uniform draws among feasible factor actions until none is feasible.

    Each question gets a private stream seeded by (seed, question id): a
    random priority per action, and each step takes the feasible factor
    action of highest priority. Because feasibility only shrinks, this is a
    uniform draw among the feasible actions at every step.
    """

    name = "random-factor"
    OPTIONS = ("seed",)

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)

    def start(self, state: EvidenceState) -> None:
        state.extra["priority"] = action_priorities(state.question_ids, state.cost.shape[1], self.seed)

    def choose(self, state: EvidenceState) -> IntArr:
        feasible = state.feasible() & state.factor
        pr = np.where(feasible, state.extra["priority"], -1.0)
        choice = np.argmax(pr, axis=1)
        return np.where(feasible.any(axis=1), choice, -1)


@register_policy("whole")
class Whole(ScorePolicy):
    """Response checks on the currently best-scored candidate until none is feasible.

    Answer-level checks count as response checks on their representative.
    """

    name = "whole"

    def choose(self, state: EvidenceState) -> IntArr:
        feasible = state.feasible() & (state.whole | state.answer)
        s = state.scores()
        s_target = np.take_along_axis(s, np.maximum(state.target, 0), axis=1)
        s_target = np.where(feasible, s_target, -np.inf)
        top = s_target.max(axis=1, keepdims=True)
        hit = feasible & (s_target >= top - TIE_TOL)
        n_act = state.cost.shape[1]
        key = np.where(hit, state.target.astype(np.int64) * n_act + np.arange(n_act), np.iinfo(np.int64).max)
        choice = np.argmin(key, axis=1)
        return np.where(hit.any(axis=1), choice, -1)


@register_policy("label-guided")
class LabelGuided(ScorePolicy):
    """Non-deployable diagnostic: the factor whose revealed outcome gives the best selection utility."""

    name = "label-guided"
    deployable = False
    reads_labels = True

    def choose(self, state: EvidenceState) -> IntArr:
        labels = state.labels
        if labels is None:
            raise RuntimeError("label-guided needs the evaluation labels")
        feasible = state.feasible() & state.factor
        sel = _selection_after(state, labels.outcome * state.weight, feasible)
        util = np.take_along_axis(labels.utility, np.maximum(sel, 0), axis=1)
        return first_max(util, feasible)


#: Logit gap that certainly separates two scores by more than TIE_TOL while |logit| < SAFE_LOGIT.
_GAP = 1e-3
_SAFE_LOGIT = 20.0


def _selection_after(state: EvidenceState, step: npt.NDArray[np.float64], mask: npt.NDArray[np.bool_]) -> IntArr:
    """The selected candidate after each factor action moved its claim's parts by ``step`` (Q, A).

    For every claim of a masked action and part (asserting / ignoring /
    denying) it takes the best logit, the first candidate holding it and the
    best *different* logit. Where the winner is clear -- every other
    candidate at least 1e-3 below in logit and the scores not saturated, so
    that no score is within 1e-12 of the best -- the first holder of the
    maximum is the selection. Other entries of ``mask`` are decided exactly on
    the probability scale; entries outside ``mask`` (infeasible actions) are
    -1 and cost nothing, and so do claims that no masked action checks.
    """
    sel = np.full(mask.shape, -1, dtype=np.intp)
    q, a = np.nonzero(mask)  # only these: most actions are infeasible or not factors
    if not q.size:
        return sel
    pairs, at = _pairs(state, np.maximum(state.claim[q, a], 0) * state.n + q)
    if pairs is None:  # most claims: one pass over the candidates, in K slabs that stay in cache
        part = state.partition
        lt = state.logit.T
        best = part[:, 0] + lt[0]
        first = np.zeros(best.shape, dtype=np.intp)
        second = np.full(best.shape, -np.inf)
        for k in range(1, part.shape[1]):
            v = part[:, k] + lt[k]
            up = v > best
            second = np.where(up, best, np.where(v < best, np.maximum(second, v), second))
            first = np.where(up, k, first)
            best = np.where(up, v, best)
        best, first, second = best.reshape(3, -1), first.reshape(3, -1), second.reshape(3, -1)
    else:
        v = _part_logits(state, pairs)
        best = v.max(axis=1)
        first = v.argmax(axis=1)  # the first candidate holding the best
        second = np.where(v < best[:, None], v, -np.inf).max(axis=1)  # the best different logit
    st = step[q, a]
    shift = np.stack([st, np.zeros_like(st), -st])
    b = best[:, at] + shift  # (3, P)
    s2 = second[:, at] + shift
    f = first[:, at]
    top = b.max(axis=0)
    holds = b == top  # parts whose best reaches the new maximum exactly
    clear = (np.abs(top) < _SAFE_LOGIT) & np.all(holds | (b < top - _GAP), axis=0) & np.all(s2 < top - _GAP, axis=0)
    sel[q, a] = np.where(holds, f, np.iinfo(np.intp).max).min(axis=0)
    todo = ~clear
    if todo.any():
        qt, at = q[todo], a[todo]
        x = state.logit[qt] + state.alpha[qt, at] * step[qt, at][:, None]
        sel[qt, at] = first_max(sigmoid(x), state.candidate[qt])
    return sel


POLICIES.set_builtins(_builtin_policies)  # set last: this module's own policies register without it
