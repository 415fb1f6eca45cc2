"""The evidence state of a batch of questions, shared by replay and the agent.

All arrays have the batch as first axis (Q), padded to the largest action
count (A) and candidate count (K) of the batch. Policies read this state to
choose their next action; they never see stored outcomes of unbought
actions or utilities. Only a policy that declares ``reads_labels`` (the
non-deployable label-guided diagnostic) is handed a `Labels` object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.calibration import Calibration
from boe.core.graph import ANSWER_CODE, N_FACTOR_CODES, WHOLE_CODE, Question
from boe.core.scoring import binary_entropy, cheap_logits, first_max, sigmoid, wt

__all__ = ["EvidenceState", "Labels", "Pool", "bind_questions", "bind_pool"]

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
B_ = npt.NDArray[np.bool_]


@dataclass(eq=False)
class Labels:
    """Evaluation data of a batch: only the label-guided diagnostic may read it."""

    utility: F64  # (Q, K), padding 0
    outcome: npt.NDArray[np.int8]  # (Q, A)


@dataclass(eq=False)
class Pool:
    """An adaptive pool (spec section 12): which leading candidates of each row are drawn, and the full arrays.

    The state's menu arrays (``alpha``, ``answer_id``, ``candidate``, ``available`` and the kind masks,
    ``logit0``) show only the first ``k`` candidates and the actions they make available; the full ones are
    kept here. ``limit`` is how many candidates a row may draw in all (its ledger's K offline).
    """

    k: I32  # (Q,) candidates drawn
    limit: I32  # (Q,) candidates that can be drawn in all
    need: I32  # (Q, A) leading candidates an action needs to be on the menu
    sample_cost: F64  # (Q, L) planning cost of drawing each candidate, L >= limit (padding 0)
    sample_spent: F64  # (Q,) spent on the candidates drawn: their costs summed in index order
    check_spent: F64  # (Q,) spent on checks: their costs summed in purchase order (spent = the two added)
    real: B_  # (Q, A) every menu entry of the full pool
    present: B_  # (Q, K) every candidate of the full pool (sampled so far, online)
    kind: npt.NDArray[np.int8]  # (Q, A) 0 factor, 1 whole response, 2 answer check, -1 padding
    alpha: npt.NDArray[np.int8]  # (Q, A, K) signed effects over the full pool
    answer_id: I32  # (Q, K) over the full pool
    cheap_kappa: F64  # (Q,)
    draw_at: I32  # (Q, R) purchases made before each draw (the first entry: the starting pool, at 0)
    draw_k: I32  # (Q, R) candidates drawn after each draw
    draws: I32  # (Q,) entries used

    def keep(self, mask: B_) -> Pool:
        return Pool(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})

    def sample_spent_at(self, rows: npt.NDArray[np.intp], k: I32) -> F64:
        """What drawing the first ``k[j]`` candidates costs row ``rows[j]``: their costs summed in index order."""
        total = np.cumsum(self.sample_cost[rows], axis=1)  # sequential, like the literal reading
        out: F64 = np.take_along_axis(total, (np.maximum(k, 1) - 1)[:, None], axis=1)[:, 0]
        return np.where(k > 0, out, 0.0)

    def log_draw(self, rows: npt.NDArray[np.intp], at: I32, k: I32) -> None:
        """Record that ``rows`` drew up to ``k`` candidates after ``at`` purchases."""
        n = self.draws[rows]
        if rows.size and int(n.max()) >= self.draw_at.shape[1]:
            q, r = self.draw_at.shape
            self.draw_at = np.concatenate([self.draw_at, np.zeros((q, r), np.int32)], axis=1)
            self.draw_k = np.concatenate([self.draw_k, np.zeros((q, r), np.int32)], axis=1)
        self.draw_at[rows, n] = at
        self.draw_k[rows, n] = k
        self.draws[rows] = n + 1


@dataclass(eq=False)
class EvidenceState:
    """Scores, menu and purchase history of Q questions (padded arrays)."""

    rows: I32  # (Q,) position of each row in the caller's question list
    question_ids: list[str]
    dataset: list[str]  # dataset of each row
    logit: F64  # (Q, K) current logit scores; padding -inf
    logit0: F64  # (Q, K) cheap prior logits
    partition: F64  # (3, K, M, Q) per claim: 0 where candidate k asserts / ignores / denies it, else -inf
    alpha: npt.NDArray[np.int8]  # (Q, A, K) signed effect of a confirm
    weight: F64  # (Q, A) wt(kappa_e)
    cost: F64  # (Q, A) padding 1
    p: F64  # (Q, A, 3) pooled outcome masses (confirm, reject, unresolved)
    available: B_  # (Q, A) real menu entries
    factor: B_  # (Q, A)
    whole: B_  # (Q, A) whole-response checks
    answer: B_  # (Q, A) answer-level response checks (format 1.1)
    target: I32  # (Q, A) whole-response candidate or answer check's representative, -1 for factor actions
    group: I32  # (Q, A) global calibration-group id, -1 for padding
    claim: I32  # (Q, A) claim index of factor actions within their question, -1 otherwise
    candidate: B_  # (Q, K) real candidates
    answer_id: I32  # (Q, K) distinct-answer id, -1 invalid or padding
    bought: B_  # (Q, A)
    spent: F64  # (Q,)
    budget: F64  # (Q,)
    done: B_  # (Q,)
    steps: I32  # (Q,) number of actions bought
    log: I32  # (Q, S) bought action indices in order, -1 padding
    revealed: npt.NDArray[np.int8]  # (Q, S) their outcomes
    calibration: I32  # (Q,) index of each row's calibration in ``calibrations``
    refused: B_ | None = None  # (Q, A) actions withdrawn unbought by a skip (a veto, a tool error); None: none
    labels: Labels | None = None
    pool: Pool | None = None  # an adaptive pool (spec section 12); None: every candidate is drawn (a fixed pool)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # policy-private arrays, first axis Q
    calibrations: list[Calibration] = field(default_factory=list)  # shared by all rows
    group_keys: list[str] = field(default_factory=list)  # names of the global group ids

    @property
    def n(self) -> int:
        return int(self.rows.shape[0])

    def feasible(self) -> B_:
        """Not bought, real, not refused, and affordable with the remaining budget."""
        remaining = self.budget - self.spent
        out: B_ = self.available & ~self.bought & (self.cost <= remaining[:, None])
        if self.refused is not None:
            out &= ~self.refused
        return out

    def scores(self) -> F64:
        """Current s_i on the probability scale (padding 0)."""
        return sigmoid(self.logit)

    def selection(self) -> npt.NDArray[np.intp]:
        """argmax_i s_i with the spec's tie rule (within 1e-12, lowest index)."""
        return first_max(self.scores(), self.candidate)

    def reveal(self, rows: npt.NDArray[np.intp], actions: npt.NDArray[np.intp], outcomes: npt.NDArray[np.int8]) -> None:
        """Record the purchase of ``actions[j]`` by row ``rows[j]`` with its outcome, and update scores."""
        if rows.size == 0:
            return
        if np.any(self.bought[rows, actions]):
            raise RuntimeError("an action was bought twice")
        if np.any(~self.available[rows, actions]):
            raise RuntimeError("a padding action was bought")
        if self.refused is not None and np.any(self.refused[rows, actions]):
            raise RuntimeError("a refused action was bought")
        step = self.steps[rows]
        if np.any(step >= self.log.shape[1]):
            self._grow_log()
        self.log[rows, step] = actions
        self.revealed[rows, step] = outcomes
        self.steps[rows] = step + 1
        self.bought[rows, actions] = True
        if self.pool is None:
            self.spent[rows] = self.spent[rows] + self.cost[rows, actions]
        else:  # spec section 12: the checks' costs in purchase order, added to the samples'
            pool = self.pool
            pool.check_spent[rows] = pool.check_spent[rows] + self.cost[rows, actions]
            self.spent[rows] = pool.sample_spent[rows] + pool.check_spent[rows]
        # logit += alpha(o) * wt, with alpha(reject) = -alpha(confirm) and alpha(unresolved) = 0
        step_w = outcomes.astype(np.float64) * self.weight[rows, actions]
        self.logit[rows] = self.logit[rows] + self.alpha[rows, actions] * step_w[:, None]
        if np.any(self.spent[rows] > self.budget[rows]):
            raise RuntimeError("budget exceeded")

    def refuse(self, rows: npt.NDArray[np.intp], actions: npt.NDArray[np.intp]) -> None:
        """Withdraw ``actions[j]`` from row ``rows[j]``'s menu unbought (a veto or a tool error); no cost, no update."""
        if rows.size == 0:
            return
        if np.any(self.bought[rows, actions]) or np.any(~self.available[rows, actions]):
            raise RuntimeError("only an unbought menu action can be refused")
        if self.refused is None:
            self.refused = np.zeros(self.available.shape, dtype=bool)
        self.refused[rows, actions] = True

    def _grow_log(self) -> None:
        q, s = self.log.shape
        self.log = np.concatenate([self.log, np.full((q, s), -1, np.int32)], axis=1)
        self.revealed = np.concatenate([self.revealed, np.zeros((q, s), np.int8)], axis=1)

    def keep(self, mask: B_ | npt.NDArray[np.intp]) -> EvidenceState:
        """A new state with only the rows where ``mask`` is true, or the rows an index array ``mask`` lists
        (repeats allowed; arrays are sliced, not shared)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("question_ids", "dataset"):
                if mask.dtype == np.bool_:
                    v = [q for q, m in zip(v, mask, strict=True) if m]
                else:
                    v = [v[i] for i in mask.tolist()]
            elif f.name == "labels":
                v = None if v is None else Labels(v.utility[mask], v.outcome[mask])
            elif f.name == "pool":
                v = None if v is None else v.keep(mask)
            elif f.name == "extra":
                v = {k: a[mask] for k, a in v.items()}
            elif f.name == "partition":
                v = v[..., mask]
            elif isinstance(v, np.ndarray):
                v = v[mask]
            kw[f.name] = v
        return EvidenceState(**kw)

    def fresh(self, budget: float) -> EvidenceState:
        """The same questions and menu with nothing bought, at ``budget`` (menu arrays are shared)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw.update(
            logit=self.logit0.copy(), refused=None, pool=None, extra={}, **_unspent(self.cost, self.available, budget)
        )
        return EvidenceState(**kw)

    def draw(self, rows: npt.NDArray[np.intp], k: I32) -> None:
        """Show rows ``rows`` their first ``k[j]`` candidates (spec section 12): the menu, the cheap prior with
        K = k, and the spend on samples; the purchase log is kept (`PolicySession` replays it on the new pool)."""
        pool = self.pool
        if pool is None:
            raise RuntimeError("a fixed pool cannot draw")
        if rows.size == 0:
            return
        present = pool.present[rows]
        if np.any(k > pool.limit[rows]) or np.any(k < 1) or np.any(k > present.sum(axis=1)):
            raise RuntimeError("drew beyond the pool's limit or the candidates sampled")
        kk = k[:, None]
        width = self.candidate.shape[1]
        shown = np.arange(width)[None, :] < kk  # (n, K)
        cand = shown & present
        aid = np.where(shown, pool.answer_id[rows], -1)
        self.candidate[rows] = cand
        self.answer_id[rows] = aid
        self.alpha[rows] = np.where(shown[:, None, :], pool.alpha[rows], 0)
        avail = pool.real[rows] & (pool.need[rows] <= kk)
        kind = pool.kind[rows]
        self.available[rows] = avail
        self.factor[rows] = avail & (kind == 0)
        self.whole[rows] = avail & (kind == 1)
        self.answer[rows] = avail & (kind == 2)
        # the cheap prior of the pool drawn (spec section 3 with K = k)
        valid = aid >= 0
        same = (aid[:, :, None] == aid[:, None, :]) & valid[:, :, None] & valid[:, None, :]
        counts = same.sum(axis=2).astype(np.float64)
        wk = np.array([wt(float(c)) for c in pool.cheap_kappa[rows]])
        logit0 = np.where(cand, wk[:, None] * (counts - k[:, None] / 2), -np.inf)
        self.logit0[rows] = logit0
        pool.sample_spent[rows] = pool.sample_spent_at(rows, k)
        self.spent[rows] = pool.sample_spent[rows] + pool.check_spent[rows]
        pool.log_draw(rows, self.steps[rows], k)
        pool.k[rows] = k
        if np.any(self.spent[rows] > self.budget[rows]):
            raise RuntimeError("budget exceeded")

    def sharp(self) -> F64:
        """Per-row sum over candidates of H_b(s(0)) - H_b(s(t)) (the paper's Sharp summand)."""
        h0 = binary_entropy(sigmoid(self.logit0))
        h1 = binary_entropy(self.scores())
        out: F64 = np.where(self.candidate, h0 - h1, 0.0).sum(axis=1)
        return out


def bind_questions(
    questions: list[Question],
    rows: npt.NDArray[np.intp] | list[int],
    calibrations: list[Calibration],
    cal_of_row: npt.NDArray[np.intp] | None,
    group_keys: list[str],
    budget: float,
    with_labels: bool = False,
) -> EvidenceState:
    """Stack ``questions[rows]`` into a fresh state under their calibrations.

    ``calibrations[cal_of_row[q]]`` calibrates question ``rows[q]`` (one
    calibration for all when ``cal_of_row`` is None).
    """
    rows = np.asarray(rows, dtype=np.intp)
    qs = [questions[r] for r in rows]
    n = len(qs)
    a_max = max((q.n_actions for q in qs), default=0)
    a_max = max(a_max, 1)
    k_max = max(q.k for q in qs)
    n_groups = len(group_keys)
    # per-calibration tables over the global group index
    w_tab = np.empty((len(calibrations), max(n_groups, 1)), dtype=np.float64)
    p_tab = np.empty((len(calibrations), max(n_groups, 1), 3), dtype=np.float64)
    for c, cal in enumerate(calibrations):
        kappa, p = cal.arrays(group_keys)
        w_tab[c, :n_groups] = [wt(float(k)) for k in kappa]
        p_tab[c, :n_groups] = p
    cal_idx = np.zeros(n, dtype=np.intp) if cal_of_row is None else np.asarray(cal_of_row, dtype=np.intp)

    logit0 = np.full((n, k_max), -np.inf)
    alpha = np.zeros((n, a_max, k_max), dtype=np.int8)
    weight = np.zeros((n, a_max))
    cost = np.ones((n, a_max))
    p = np.zeros((n, a_max, 3))
    available = np.zeros((n, a_max), dtype=bool)
    kind = np.full((n, a_max), -1, dtype=np.int8)
    target = np.full((n, a_max), -1, dtype=np.int32)
    group = np.full((n, a_max), -1, dtype=np.int32)
    claim = np.full((n, a_max), -1, dtype=np.int32)
    candidate = np.zeros((n, k_max), dtype=bool)
    answer_id = np.full((n, k_max), -1, dtype=np.int32)
    utility = np.zeros((n, k_max)) if with_labels else None
    outcome = np.zeros((n, a_max), dtype=np.int8) if with_labels else None
    for i, q in enumerate(qs):
        k, na = q.k, q.n_actions
        cal = calibrations[cal_idx[i]]
        logit0[i, :k] = cheap_logits(q.counts, cal.cheap_kappa)
        candidate[i, :k] = True
        answer_id[i, :k] = q.answer_id
        if na:
            alpha[i, :na, :k] = q.alpha
            weight[i, :na] = w_tab[cal_idx[i], q.group]
            cost[i, :na] = q.cost
            p[i, :na] = p_tab[cal_idx[i], q.group]
            available[i, :na] = True
            kind[i, :na] = q.kind
            target[i, :na] = q.action_candidate
            group[i, :na] = q.group
            claim[i, :na] = q.action_claim
        if with_labels:
            assert utility is not None and outcome is not None
            utility[i, :k] = q.utility
            outcome[i, :na] = q.outcome
    if utility is not None:
        np.nan_to_num(utility, nan=0.0, copy=False)  # once for the batch, not per question
    partition = _partition(qs, k_max)
    whole = kind == WHOLE_CODE
    answer = kind == ANSWER_CODE
    return EvidenceState(
        rows=rows.astype(np.int32),
        question_ids=[q.question_id for q in qs],
        dataset=[q.dataset for q in qs],
        logit=logit0.copy(),
        logit0=logit0,
        partition=partition,
        alpha=alpha,
        weight=weight,
        cost=cost,
        p=p,
        available=available,
        factor=available & (kind >= 0) & (kind < N_FACTOR_CODES),
        whole=available & whole,
        answer=available & answer,
        target=target,
        group=group,
        claim=claim,
        candidate=candidate,
        answer_id=answer_id,
        **_unspent(cost, available, budget),
        calibration=cal_idx.astype(np.int32),
        labels=Labels(utility, outcome) if with_labels else None,  # type: ignore[arg-type]
        calibrations=list(calibrations),
        group_keys=list(group_keys),
    )


def _unspent(cost: F64, available: B_, budget: float) -> dict[str, Any]:
    """The spending fields of questions that have bought nothing yet, at ``budget``."""
    n, a_max = cost.shape
    s = _log_width(cost, available, budget)
    return {
        "bought": np.zeros((n, a_max), dtype=bool),
        "spent": np.zeros(n),
        "budget": np.full(n, float(budget)),
        "done": np.zeros(n, dtype=bool),
        "steps": np.zeros(n, dtype=np.int32),
        "log": np.full((n, s), -1, dtype=np.int32),
        "revealed": np.zeros((n, s), dtype=np.int8),
    }


def _log_width(cost: F64, available: B_, budget: float) -> int:
    """Enough log columns for the most purchases the budget allows (the log grows if needed)."""
    a_max = int(cost.shape[1])
    if not available.any() or budget <= 0:
        return 1
    min_cost = float(cost[available].min())
    if not math.isfinite(budget):
        return a_max
    return max(1, min(a_max, math.floor(budget / min_cost) + 1))


def _partition(qs: list[Question], k_max: int) -> F64:
    """Additive masks (3, K, M, Q): 0 where candidate k asserts / ignores / denies claim m, else -inf.

    Every factor action on one claim moves the pool the same way (asserters
    by +w, deniers by -w), so the best logit of each part is computed once
    per claim; candidates come first and questions last so that the max over
    candidates is an elementwise maximum of contiguous slabs.
    """
    m_max = max(max((q.incidence.shape[0] for q in qs), default=0), 1)
    inc = np.full((len(qs), m_max, k_max), 2, dtype=np.int8)  # 2: padding claim or candidate
    for i, q in enumerate(qs):
        inc[i, : q.incidence.shape[0], : q.k] = q.incidence
    inc_t = inc.transpose(2, 1, 0)  # (K, M, Q)
    out = np.full((3, k_max, m_max, len(qs)), -np.inf)
    for part, sign in enumerate((1, 0, -1)):
        out[part][inc_t == sign] = 0.0
    return out


#: Samples beyond a row's limit whose cost a policy may ask for (`Pool.sample_spent_at`), to value a draw.
LOOKAHEAD = 16


def bind_pool(
    state: EvidenceState,
    questions: list[Question],
    start: int,
    sample_cost: float,
    limits: npt.NDArray[np.intp] | None = None,
    *,
    charge: bool = True,
) -> None:
    """Make ``state`` (fresh, over ``questions[state.rows]``) an adaptive pool that starts with ``start``
    candidates (fewer where the budget cannot pay for them; spec section 12).

    A candidate's sample cost is its recorded one (format 1.3), else ``sample_cost``; ``limits`` (per row)
    lets a row draw beyond the candidates its record holds (online: they are not sampled yet). With
    ``charge=False`` the samples are not paid from the budget (``fixed:K``: a fixed pool of the first K).
    """
    qs = [questions[r] for r in state.rows]
    n = state.n
    k_arr = state.candidate.shape[1]
    limit = np.array([q.k for q in qs], dtype=np.int32) if limits is None else np.asarray(limits, dtype=np.int32)
    # beyond the candidates a row holds (up to LOOKAHEAD more), a sample costs what its last one did: a policy
    # may value draws the ledger cannot serve, the same online (where they are not sampled yet) and offline
    width = max(k_arr, int(limit.max(initial=1))) + LOOKAHEAD
    cost = np.zeros((n, width))
    need = np.full(state.available.shape, np.iinfo(np.int32).max, dtype=np.int32)
    for i, q in enumerate(qs):
        cost[i] = sample_cost
        if q.sample_cost is not None and q.k:
            cost[i, : q.k] = q.sample_cost
            cost[i, q.k :] = q.sample_cost[-1]
        need[i, : q.n_actions] = q.need()
    if not charge:
        cost[:] = 0.0
    kind = np.full(state.available.shape, -1, dtype=np.int8)
    kind[state.factor] = 0
    kind[state.whole] = 1
    kind[state.answer] = 2
    pool = Pool(
        k=np.zeros(n, dtype=np.int32),
        limit=limit,
        need=need,
        sample_cost=cost,
        sample_spent=np.zeros(n),
        check_spent=np.zeros(n),
        real=state.available.copy(),
        present=state.candidate.copy(),
        kind=kind,
        alpha=state.alpha,  # shared with the base state: read only
        answer_id=state.answer_id,
        cheap_kappa=np.array([state.calibrations[int(c)].cheap_kappa for c in state.calibration]),
        draw_at=np.zeros((n, 4), dtype=np.int32),
        draw_k=np.zeros((n, 4), dtype=np.int32),
        draws=np.zeros(n, dtype=np.int32),
    )
    # the state's own copies of what a draw changes (a fresh state shares its menu arrays with its base)
    for name in ("alpha", "answer_id", "candidate", "available", "factor", "whole", "answer", "logit0"):
        setattr(state, name, getattr(state, name).copy())
    state.pool = pool
    rows = np.arange(n)
    want = np.minimum(max(int(start), 1), limit)
    spend = np.cumsum(cost, axis=1)
    fits = spend <= state.budget[:, None]
    if not fits[:, 0].all():
        i = int(np.argmin(fits[:, 0]))
        raise ValueError(
            f"a budget of {state.budget[i]:g} cannot pay for the first sample of question {state.question_ids[i]!r} "
            f"(it costs {cost[i, 0]:g})"
        )
    affordable = fits.sum(axis=1)  # costs are >= 0, so the affordable prefixes are the leading ones
    k0 = np.minimum(want, affordable).astype(np.int32)
    state.draw(rows, k0)
    state.logit = state.logit0.copy()
