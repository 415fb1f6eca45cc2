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

import numpy as np
import numpy.typing as npt

from boe.core.calibration import Calibration
from boe.core.graph import ANSWER_CODE, N_FACTOR_CODES, WHOLE_CODE, Question
from boe.core.scoring import binary_entropy, cheap_logits, first_max, sigmoid, wt

__all__ = ["EvidenceState", "Labels", "bind_questions"]

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
B_ = npt.NDArray[np.bool_]


@dataclass(eq=False)
class Labels:
    """Evaluation data of a batch: only the label-guided diagnostic may read it."""

    utility: F64  # (Q, K), padding 0
    outcome: npt.NDArray[np.int8]  # (Q, A)


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
        self.spent[rows] = self.spent[rows] + self.cost[rows, actions]
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

    def keep(self, mask: B_) -> EvidenceState:
        """A new state with only the rows where ``mask`` is true (arrays are sliced, not shared)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("question_ids", "dataset"):
                v = [q for q, m in zip(v, mask, strict=True) if m]
            elif f.name == "labels":
                v = None if v is None else Labels(v.utility[mask], v.outcome[mask])
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
        n = self.n
        s = _log_width(self.cost, self.available, budget)
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw.update(
            logit=self.logit0.copy(),
            bought=np.zeros_like(self.bought),
            spent=np.zeros(n),
            budget=np.full(n, float(budget)),
            done=np.zeros(n, dtype=bool),
            steps=np.zeros(n, dtype=np.int32),
            log=np.full((n, s), -1, dtype=np.int32),
            revealed=np.zeros((n, s), dtype=np.int8),
            refused=None,
            extra={},
        )
        return EvidenceState(**kw)

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
            utility[i, :k] = np.nan_to_num(q.utility, nan=0.0)
            outcome[i, :na] = q.outcome
    partition = _partition(qs, k_max)
    whole = kind == WHOLE_CODE
    answer = kind == ANSWER_CODE
    s = _log_width(cost, available, budget)
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
        bought=np.zeros((n, a_max), dtype=bool),
        spent=np.zeros(n),
        budget=np.full(n, float(budget)),
        done=np.zeros(n, dtype=bool),
        steps=np.zeros(n, dtype=np.int32),
        log=np.full((n, s), -1, dtype=np.int32),
        revealed=np.zeros((n, s), dtype=np.int8),
        calibration=cal_idx.astype(np.int32),
        labels=Labels(utility, outcome) if with_labels else None,  # type: ignore[arg-type]
        calibrations=list(calibrations),
        group_keys=list(group_keys),
    )


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
