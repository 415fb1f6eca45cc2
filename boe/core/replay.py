"""Vectorised ledger replay: many questions x budgets x policies (spec sections 4-7).

Questions are stacked into padded batches of similar shape; every step of
every policy is a handful of numpy operations over (questions x actions x
candidates). Rows that finish are compacted away once they are the
majority, so late steps only touch live questions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from boe.core.calibration import DEFAULT_CHEAP_KAPPA, Calibration, crossfit_folds, fit_groups
from boe.core.graph import Question
from boe.core.policies import Policy, make_policy
from boe.core.state import EvidenceState, bind_questions

__all__ = [
    "CalibrationPlan",
    "ReplayRun",
    "plan_calibration",
    "replay",
    "run_policy",
    "stats_matrix",
    "transcripts",
]

F64 = npt.NDArray[np.float64]

#: Elements of one (Q, A, K) batch array; about 32 MB of float64.
BATCH_ELEMENTS = 4_000_000


@dataclass(eq=False)
class ReplayRun:
    """The transcripts of one policy at one budget, in question order."""

    policy: str
    budget: float
    selected: npt.NDArray[np.intp]  # (N,)
    cost: F64  # (N,)
    scores: list[F64]  # final s_i per question (length K_q)
    actions: list[npt.NDArray[np.int32]]  # bought action indices in order
    sharp: F64  # (N,) sum_i H_b(s_i(0)) - H_b(s_i(t))


@dataclass(eq=False)
class CalibrationPlan:
    """Which calibration each question is replayed under."""

    mode: str  # "fit", "crossfit:K" or "file"
    calibrations: list[Calibration]
    of_question: npt.NDArray[np.intp] | None  # index into calibrations; None: calibrations[0] for all
    folds: int = 0
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def for_question(self, q: int) -> Calibration:
        return self.calibrations[0 if self.of_question is None else int(self.of_question[q])]


def stats_matrix(questions: Sequence[Question], n_groups: int) -> tuple[F64, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Per-action calibration statistics of all questions: (rows, 7), their group ids and question index."""
    per = [q.action_stats() for q in questions]
    if not per or sum(len(x) for x in per) == 0:
        return np.zeros((0, 7)), np.zeros(0, np.intp), np.zeros(0, np.intp)
    stats = np.concatenate(per)
    groups = np.concatenate([q.group for q in questions]).astype(np.intp)
    owner = np.repeat(np.arange(len(questions)), [q.n_actions for q in questions])
    return stats, groups, owner


def _sum_by_group(stats: F64, groups: npt.NDArray[np.intp], n_groups: int) -> F64:
    out = np.zeros((n_groups, 7))
    for c in range(7):
        out[:, c] = np.bincount(groups, weights=stats[:, c], minlength=n_groups)
    return out


def plan_calibration(
    questions: Sequence[Question],
    group_keys: list[str],
    mode: str = "fit",
    *,
    cheap_kappa: float | None = None,
    seed: int = 0,
    file_calibration: Calibration | None = None,
    extra_fit: Callable[[Sequence[Question], npt.NDArray[np.bool_], Calibration], Calibration] | None = None,
) -> CalibrationPlan:
    """Resolve ``fit``, ``crossfit[:K]`` or a loaded file into per-question calibrations.

    ``extra_fit(questions, train_mask, calibration)`` lets a policy add its own
    fitted parameters (e.g. the `bayes` observation model) on the same data.
    """
    n_groups = len(group_keys)
    if mode == "file":
        if file_calibration is None:
            raise ValueError("mode 'file' needs a calibration")
        cal = file_calibration
        if cheap_kappa is not None:
            cal = cal.model_copy(update={"cheap_kappa": cheap_kappa})
        return CalibrationPlan("file", [cal], None)
    ck = DEFAULT_CHEAP_KAPPA if cheap_kappa is None else cheap_kappa
    stats, groups, owner = stats_matrix(questions, n_groups)
    if mode == "fit":
        cal = fit_groups(_sum_by_group(stats, groups, n_groups), group_keys, ck, source="fit")
        if extra_fit is not None:
            cal = extra_fit(questions, np.ones(len(questions), dtype=bool), cal)
        return CalibrationPlan("fit", [cal], None)
    if mode.startswith("crossfit"):
        _, _, k_text = mode.partition(":")
        n_folds = int(k_text) if k_text else 5
        keys = [f"{q.dataset}\x00{q.question_id}" for q in questions]
        folds = crossfit_folds(keys, n_folds, seed)
        cals = []
        for f in range(n_folds):
            train_q = folds != f
            sel = train_q[owner]
            cal = fit_groups(
                _sum_by_group(stats[sel], groups[sel], n_groups), group_keys, ck, source=f"crossfit:{n_folds}/fold{f}"
            )
            if extra_fit is not None:
                cal = extra_fit(questions, train_q, cal)
            cals.append(cal)
        return CalibrationPlan(f"crossfit:{n_folds}", cals, folds.astype(np.intp), folds=n_folds, seed=seed)
    raise ValueError(f"unknown calibration mode {mode!r}")


def _batches(questions: Sequence[Question], rows: npt.NDArray[np.intp]) -> list[npt.NDArray[np.intp]]:
    """Group rows of similar (A, K) into batches of at most BATCH_ELEMENTS padded elements."""
    shape_a = np.array([max(questions[r].n_actions, 1) for r in rows])
    shape_k = np.array([questions[r].k for r in rows])
    order = rows[np.lexsort((shape_k, shape_a))]
    out: list[npt.NDArray[np.intp]] = []
    start = 0
    a_max = k_max = 0
    for i, r in enumerate(order):
        q = questions[r]
        na, nk = max(a_max, max(q.n_actions, 1)), max(k_max, q.k)
        if i > start and (i - start + 1) * na * nk > BATCH_ELEMENTS:
            out.append(order[start:i])
            start, na, nk = i, max(q.n_actions, 1), q.k
        a_max, k_max = na, nk
    if start < len(order):
        out.append(order[start:])
    return out


def run_policy(
    state: EvidenceState,
    policy: Policy,
    outcomes: npt.NDArray[np.int8],
    sink: Callable[[EvidenceState, Policy], None],
) -> None:
    """Run ``policy`` on every row of ``state`` to its stop, revealing stored ``outcomes`` (Q, A).

    Finished rows are handed to ``sink`` (with the policy, to read selections
    and scores) before they are compacted away, and all rows at the end.
    """
    policy.start(state)
    while True:
        live = ~state.done
        n_live = int(live.sum())
        if n_live == 0:
            break
        if n_live * 2 < state.n and state.n > 32:
            sink(state.keep(~live), policy)
            state = state.keep(live)
            outcomes = outcomes[live]
        choice = policy.choose(state)
        choice = np.where(state.done, -1, choice)
        state.done |= choice < 0
        go = np.nonzero(choice >= 0)[0]
        if go.size:
            acts = choice[go]
            outs = outcomes[go, acts]
            state.reveal(go, acts, outs)
            policy.observe(state, go, acts, outs)
    sink(state, policy)


def replay(
    questions: Sequence[Question],
    group_keys: list[str],
    policies: Sequence[str | Policy],
    budgets: Sequence[float],
    plan: CalibrationPlan,
    *,
    policy_options: dict[str, object] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[ReplayRun]:
    """Replay every policy at every budget on every question; one `ReplayRun` per (policy, budget)."""
    opts = policy_options or {}
    built = [make_policy(p, **opts) if isinstance(p, str) else p for p in policies]
    n = len(questions)
    runs: dict[tuple[int, int], ReplayRun] = {}
    for pi, pol in enumerate(built):
        if pol.reads_labels and any(not q.labelled for q in questions):
            missing = next(q.question_id for q in questions if not q.labelled)
            raise ValueError(f"policy {pol.name!r} reads utilities, but question {missing!r} has none")
        for bi, b in enumerate(budgets):
            runs[pi, bi] = ReplayRun(
                policy=pol.name,
                budget=float(b),
                selected=np.full(n, -1, dtype=np.intp),
                cost=np.zeros(n),
                scores=[np.empty(0)] * n,
                actions=[np.empty(0, np.int32)] * n,
                sharp=np.zeros(n),
            )
    if n == 0:
        return [runs[pi, bi] for pi in range(len(built)) for bi in range(len(budgets))]
    need_labels = any(p.reads_labels for p in built)
    for rows in _batches(questions, np.arange(n)):
        cal_rows = None if plan.of_question is None else plan.of_question[rows]
        base = bind_questions(
            list(questions), rows, plan.calibrations, cal_rows, group_keys, budget=max(budgets), with_labels=True
        )
        assert base.labels is not None
        outcomes = base.labels.outcome
        for pi, pol in enumerate(built):
            for bi, b in enumerate(budgets):
                st = base.fresh(float(b))
                if pol.reads_labels:
                    st.labels = base.labels
                else:
                    st.labels = None  # deployable policies never see labels
                run_policy(st, pol, outcomes, _sink(runs[pi, bi], questions))
        if progress is not None:
            progress(len(rows))
    return [runs[pi, bi] for pi in range(len(built)) for bi in range(len(budgets))]


def _sink(run: ReplayRun, questions: Sequence[Question]) -> Callable[[EvidenceState, Policy], None]:
    def write(state: EvidenceState, policy: Policy) -> None:
        if state.n == 0:
            return
        sel = policy.select(state)
        scores = policy.final_scores(state)
        sharp = state.sharp()
        for j, r in enumerate(state.rows):
            q = questions[r]
            run.selected[r] = sel[j]
            run.cost[r] = state.spent[j]
            run.scores[r] = scores[j, : q.k].copy()
            run.actions[r] = state.log[j, : state.steps[j]].copy()
            run.sharp[r] = sharp[j]

    return write


def transcripts(run: ReplayRun, questions: Sequence[Question]) -> list[dict[str, object]]:
    """Spec section 7 transcript lines of one run."""
    out = []
    budget: float | int = int(run.budget) if float(run.budget).is_integer() else run.budget
    for r, q in enumerate(questions):
        sel = int(run.selected[r])
        cost = float(run.cost[r])
        u = q.utility[sel]
        out.append(
            {
                "question_id": q.question_id,
                "dataset": q.dataset,
                "policy": run.policy,
                "budget": budget,
                "selected": sel,
                "actions": [q.action_ids[a] for a in run.actions[r]],
                "cost": int(cost) if cost.is_integer() else cost,
                "scores": [float(x) for x in run.scores[r]],
                "utility": None if math.isnan(u) else float(u),
            }
        )
    return out
