"""Vectorised ledger replay: many questions x budgets x policies (spec sections 4-7).

Questions are stacked into padded batches of similar shape; every step of
every policy is a handful of numpy operations over (questions x actions x
candidates). Rows that finish are compacted away once they are the
majority, so late steps only touch live questions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.calibration import DEFAULT_CHEAP_KAPPA, Calibration, crossfit_folds, fit_groups
from boe.core.forked import forked
from boe.core.graph import Question
from boe.core.loop import run_policy, skipped_mask
from boe.core.policies import Policy
from boe.core.pool import PoolSpec, make_pool_policy
from boe.core.session import transcript_line
from boe.core.state import EvidenceState, bind_pool, bind_questions

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
    """The transcripts of one policy at one budget, in question order (padded arrays)."""

    policy: str
    budget: float
    selected: npt.NDArray[np.intp]  # (N,)
    cost: F64  # (N,)
    scores: F64  # (N, K_max) final s_i; nan beyond a question's K
    actions: npt.NDArray[np.int32]  # (N, S) bought action indices in order; -1 padding
    n_actions: npt.NDArray[np.int32]  # (N,)
    sharp: F64  # (N,) sum_i H_b(s_i(0)) - H_b(s_i(t))
    skipped: dict[int, npt.NDArray[np.intp]] = field(default_factory=dict)  # row -> refused actions (spec 10)
    pool: PoolSpec = field(default_factory=PoolSpec)
    samples: npt.NDArray[np.int32] | None = None  # (N,) candidates drawn (None: every candidate, a fixed pool)
    sample_cost: F64 | None = None  # (N,) what they cost, in the budget's units (spec section 12)
    draws: dict[int, list[list[int]]] = field(default_factory=dict)  # row -> [purchases before, pool after]

    def actions_of(self, r: int) -> npt.NDArray[np.int32]:
        """Bought action indices of question ``r`` in order."""
        return self.actions[r, : self.n_actions[r]]

    def skipped_of(self, r: int) -> npt.NDArray[np.intp]:
        """Actions of question ``r`` refused as skipped (spec section 10), in menu order."""
        return self.skipped.get(r, np.zeros(0, dtype=np.intp))

    def scores_of(self, r: int, k: int) -> F64:
        """Final scores of question ``r`` (its ``k`` candidates)."""
        return self.scores[r, :k]

    @classmethod
    def empty(
        cls, policy: str, budget: float, n: int, k_max: int, width: int, pool: PoolSpec | None = None
    ) -> ReplayRun:
        spec = pool or PoolSpec()
        drawn = spec.adaptive or spec.size is not None
        return cls(
            policy=policy,
            budget=float(budget),
            selected=np.full(n, -1, dtype=np.intp),
            cost=np.zeros(n),
            scores=np.full((n, k_max), np.nan),
            actions=np.full((n, max(width, 1)), -1, dtype=np.int32),
            n_actions=np.zeros(n, dtype=np.int32),
            sharp=np.zeros(n),
            pool=spec,
            samples=np.zeros(n, dtype=np.int32) if drawn else None,
            sample_cost=np.zeros(n) if drawn else None,
        )

    def samples_of(self, r: int, q: Question) -> int:
        """Candidates question ``r`` drew (all of them in a fixed pool)."""
        return q.k if self.samples is None else int(self.samples[r])

    def sample_cost_of(self, r: int, q: Question) -> float:
        """What question ``r``'s candidates cost (recorded costs, else the pool's default per sample), in index
        order; an adaptive pool's are part of its ``cost``."""
        if self.pool.adaptive and self.sample_cost is not None:
            return float(self.sample_cost[r])
        k = self.samples_of(r, q)
        costs = q.sample_cost if q.sample_cost is not None else np.full(q.k, self.pool.sample_cost)
        return float(np.cumsum(costs)[k - 1]) if k else 0.0

    def _ensure_width(self, width: int) -> None:
        if width > self.actions.shape[1]:
            extra = np.full((self.actions.shape[0], width - self.actions.shape[1]), -1, dtype=np.int32)
            self.actions = np.concatenate([self.actions, extra], axis=1)


@dataclass(eq=False)
class CalibrationPlan:
    """Which calibration each question is replayed under."""

    mode: str  # "fit", "crossfit:K" or "file"
    calibrations: list[Calibration]
    of_question: npt.NDArray[np.intp] | None  # index into calibrations; None: calibrations[0] for all
    folds: int = 0
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    # what `plan_calibration`'s ``then`` returned for each fold (`fold_replay`: its replayed batches), in order
    replayed: list[Any] = field(default_factory=list)

    def for_question(self, q: int) -> Calibration:
        return self.calibrations[0 if self.of_question is None else int(self.of_question[q])]


def stats_matrix(
    questions: Sequence[Question], n_groups: int
) -> tuple[F64, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
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
    workers: int | None = None,
    prepare: Callable[[Sequence[Question]], None] | None = None,
    then: Callable[[npt.NDArray[np.intp], Calibration], Any] | None = None,
    fitted: Callable[[Any], None] | None = None,
) -> CalibrationPlan:
    """Resolve ``fit``, ``crossfit[:K]`` or a loaded file into per-question calibrations.

    ``extra_fit(questions, train_mask, calibration)`` lets a policy add its own
    fitted parameters (e.g. the `bayes` observation model) on the same data;
    with it, ``workers`` > 1 fits cross-fit folds in forked processes (default:
    as `replay` splits its batches); results are identical. ``prepare(questions)``,
    if given, builds once what every fold's ``extra_fit`` shares, before the
    folds are fitted; ``then(held_out_rows, calibration)``, in cross-fitting, runs right after
    each fold's fit where it ran, its results kept in the plan's ``replayed`` (`fold_replay`);
    ``fitted(result)`` is called in this process with each fold's ``then`` result as it arrives (progress).
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

        def fit_fold(f: int) -> tuple[int, tuple[Calibration, Any]]:
            train_q = folds != f
            sel = train_q[owner]
            cal = fit_groups(
                _sum_by_group(stats[sel], groups[sel], n_groups), group_keys, ck, source=f"crossfit:{n_folds}/fold{f}"
            )
            cal = cal if extra_fit is None else extra_fit(questions, train_q, cal)
            return f, (cal, None if then is None else then(np.nonzero(~train_q)[0], cal))

        n_workers = 1 if extra_fit is None else _auto_workers(questions) if workers is None else workers
        if prepare is not None:
            # what the folds' fits share (`bayes`: its training tables) is built first, then this process fits
            # fold 0 while forked workers, which inherit it, fit the others
            prepare(questions)
            arriving = forked(fit_fold, list(range(n_folds)), n_workers, here=1)
        else:
            # a policy's fit builds what it caches on the questions in fold 0, here; the workers inherit it
            arriving = itertools.chain([fit_fold(0)], forked(fit_fold, list(range(1, n_folds)), n_workers))
        cals = {}
        for f, got in arriving:
            cals[f] = got
            if fitted is not None and then is not None:
                fitted(got[1])
        return CalibrationPlan(
            f"crossfit:{n_folds}",
            [cals[f][0] for f in range(n_folds)],
            folds.astype(np.intp),
            folds=n_folds,
            seed=seed,
            replayed=[] if then is None else [cals[f][1] for f in range(n_folds)],
        )
    raise ValueError(f"unknown calibration mode {mode!r}")


#: Fewest elements in a batch split for `parts` processes (below this, a batch costs more than it saves).
MIN_SPLIT_ELEMENTS = 100_000


def _batches(questions: Sequence[Question], rows: npt.NDArray[np.intp], parts: int = 1) -> list[npt.NDArray[np.intp]]:
    """Group rows of similar (A, K) into batches of at most BATCH_ELEMENTS padded elements; for ``parts`` > 1
    processes, into at least about 2 x ``parts`` batches, so that they share the work evenly (3,000 questions
    were one batch of 2,941 and one of 59: one worker replayed nearly all)."""
    shape_a = np.array([max(questions[r].n_actions, 1) for r in rows], dtype=np.int64)
    shape_k = np.array([questions[r].k for r in rows], dtype=np.int64)
    order = rows[np.lexsort((shape_k, shape_a))]
    cap = BATCH_ELEMENTS
    if parts > 1:
        cap = min(cap, max(MIN_SPLIT_ELEMENTS, -(-int((shape_a * shape_k).sum()) // (2 * parts))))
    out: list[npt.NDArray[np.intp]] = []
    start = 0
    a_max = k_max = 0
    for i, r in enumerate(order):
        q = questions[r]
        na, nk = max(a_max, max(q.n_actions, 1)), max(k_max, q.k)
        if i > start and (i - start + 1) * na * nk > cap:
            out.append(order[start:i])
            start, na, nk = i, max(q.n_actions, 1), q.k
        a_max, k_max = na, nk
    if start < len(order):
        out.append(order[start:])
    return out


def replay(
    questions: Sequence[Question],
    group_keys: list[str],
    policies: Sequence[str | Policy],
    budgets: Sequence[float],
    plan: CalibrationPlan,
    *,
    policy_options: dict[str, object] | None = None,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    pool: PoolSpec | None = None,
    done: Sequence[_BatchResult] = (),
) -> list[ReplayRun]:
    """Replay every policy at every budget on every question; one `ReplayRun` per (policy, budget).

    ``pool`` (default: fixed, every candidate) replays the first K candidates (``fixed:K``) or an adaptive
    pool that draws from the ledger's candidates in order (spec section 12); a policy given as a name is
    wrapped for it (`make_pool_policy`), a built one is used as it is.
    ``workers`` > 1 splits the batches over forked processes (default: up to
    two when the input is large and fork is available); results are identical.
    ``done``: batches already replayed (`fold_replay`), whose rows are not replayed again (nor counted by
    ``progress``, which counts the rows this call replays: their fits counted them as they arrived).
    """
    opts = policy_options or {}
    spec = pool or PoolSpec()
    built = [make_pool_policy(p, spec, **opts) if isinstance(p, str) else p for p in policies]
    n = len(questions)
    _check_labels(built, questions)
    k_max = max((q.k for q in questions), default=1)
    costs = [float(q.cost.min()) for q in questions if q.n_actions]
    a_max = max((q.n_actions for q in questions), default=1)
    c_min = min(costs) if costs else 1.0
    runs = [ReplayRun.empty(pol.name, b, n, k_max, _width(b, c_min, a_max), spec) for pol in built for b in budgets]
    if n == 0:
        return runs
    left = np.ones(n, dtype=bool)
    for res in done:
        _merge(runs, res)
        left[res[0]] = False
    procs = _auto_workers(questions) if workers is None else workers
    batches = _batches(questions, np.nonzero(left)[0], procs)
    job = _Job(questions, group_keys, built, [float(b) for b in budgets], plan, spec)
    # each batch's result: in this process, or from forked workers as they finish
    for res in forked(job.run, batches, procs):
        _merge(runs, res)
        if progress is not None:
            progress(len(res[0]))
    return runs


def fold_replay(
    questions: Sequence[Question],
    group_keys: list[str],
    policies: Sequence[Policy],
    budgets: Sequence[float],
    pool: PoolSpec | None = None,
) -> Callable[[npt.NDArray[np.intp], Calibration], list[_BatchResult]]:
    """`plan_calibration`'s ``then`` that replays a fold's held-out rows under its calibration in the process
    that fitted it (while other folds are still being fitted); `replay` takes the results as ``done``."""
    _check_labels(policies, questions)

    def run(rows: npt.NDArray[np.intp], calibration: Calibration) -> list[_BatchResult]:
        plan = CalibrationPlan("file", [calibration], None)
        job = _Job(questions, group_keys, list(policies), [float(b) for b in budgets], plan, pool or PoolSpec())
        # in batches as for two processes: a fold's worker holds a quarter of its rows' arrays at a time
        return [job.run(batch) for batch in _batches(questions, rows, 2)]

    return run


def _check_labels(policies: Sequence[Policy], questions: Sequence[Question]) -> None:
    """`ValueError` when a policy that reads utilities meets a question without them."""
    for pol in policies:
        if pol.reads_labels and any(not q.labelled for q in questions):
            missing = next(q.question_id for q in questions if not q.labelled)
            raise ValueError(f"policy {pol.name!r} reads utilities, but question {missing!r} has none")


def _width(budget: float, c_min: float, a_max: int) -> int:
    if not math.isfinite(budget):
        return a_max
    return max(1, min(a_max, math.floor(budget / c_min) + 1))


def _auto_workers(questions: Sequence[Question]) -> int:
    import multiprocessing as mp
    import os

    if "fork" not in mp.get_all_start_methods() or os.environ.get("BOE_WORKERS") == "1":
        return 1
    if os.environ.get("BOE_WORKERS"):
        return max(1, int(os.environ["BOE_WORKERS"]))
    work = sum(q.n_actions * q.k for q in questions)
    return min(2, os.cpu_count() or 1) if work > 2_000_000 else 1


_Part = tuple[
    npt.NDArray[np.intp],
    F64,
    F64,
    npt.NDArray[np.int32],
    npt.NDArray[np.int32],
    F64,
    dict[int, npt.NDArray[np.intp]],
    npt.NDArray[np.int32],
    F64,
    dict[int, list[list[int]]],
]
_BatchResult = tuple[npt.NDArray[np.intp], list[_Part]]


@dataclass(eq=False)
class _Job:
    """Everything a (possibly forked) worker needs to replay a batch of rows."""

    questions: Sequence[Question]
    group_keys: list[str]
    policies: list[Policy]
    budgets: list[float]
    plan: CalibrationPlan
    pool: PoolSpec = field(default_factory=PoolSpec)

    def run(self, rows: npt.NDArray[np.intp]) -> _BatchResult:
        plan = self.plan
        cal_rows = None if plan.of_question is None else plan.of_question[rows]
        base = bind_questions(
            list(self.questions),
            rows,
            plan.calibrations,
            cal_rows,
            self.group_keys,
            budget=max(self.budgets),
            with_labels=True,
        )
        assert base.labels is not None
        outcomes = base.labels.outcome
        skipped = skipped_mask(self.questions, rows, outcomes.shape)
        out = []
        for pol in self.policies:
            for b in self.budgets:
                st = base.fresh(b)
                # deployable policies never see labels
                st.labels = base.labels if pol.reads_labels else None
                spec = self.pool
                if spec.adaptive:
                    bind_pool(st, list(self.questions), spec.start, spec.sample_cost)
                elif spec.size is not None:  # the first K, paid as a fixed pool is: not from the budget
                    bind_pool(st, list(self.questions), spec.size, 0.0, charge=False)
                collected: list[EvidenceState] = []
                picks: list[tuple[npt.NDArray[np.intp], F64]] = []

                def sink(
                    state: EvidenceState,
                    policy: Policy,
                    collected: list[EvidenceState] = collected,
                    picks: list[tuple[npt.NDArray[np.intp], F64]] = picks,
                ) -> None:
                    if state.n:
                        collected.append(state)
                        picks.append((policy.select(state), policy.final_scores(state)))

                run_policy(st, pol, outcomes, sink, skipped)
                out.append(_collect(rows, collected, picks))
        return rows, out


def _collect(
    rows: npt.NDArray[np.intp], states: list[EvidenceState], picks: list[tuple[npt.NDArray[np.intp], F64]]
) -> _Part:
    """Per-row results of one run on one batch, in the order of ``rows``."""
    pos = {int(r): i for i, r in enumerate(rows)}
    n = len(rows)
    k = max(st.candidate.shape[1] for st in states)
    width = max(int(st.steps.max(initial=0)) for st in states)
    selected = np.empty(n, dtype=np.intp)
    cost = np.empty(n)
    scores = np.full((n, k), np.nan)
    actions = np.full((n, max(width, 1)), -1, dtype=np.int32)
    n_act = np.empty(n, dtype=np.int32)
    sharp = np.empty(n)
    skipped: dict[int, npt.NDArray[np.intp]] = {}
    samples = np.zeros(n, dtype=np.int32)
    sample_spent = np.zeros(n)
    draws: dict[int, list[list[int]]] = {}
    for st, (sel, sc) in zip(states, picks, strict=True):
        idx = np.array([pos[int(r)] for r in st.rows], dtype=np.intp)
        selected[idx] = sel
        cost[idx] = st.spent
        kk = st.candidate.shape[1]
        scores[idx, :kk] = np.where(st.candidate, sc, np.nan)
        w = min(st.log.shape[1], actions.shape[1])
        actions[idx, :w] = st.log[:, :w]
        n_act[idx] = st.steps
        sharp[idx] = st.sharp()
        if st.refused is not None:
            for j in np.nonzero(st.refused.any(axis=1))[0]:
                skipped[int(idx[j])] = np.nonzero(st.refused[j])[0]
        drawn = st.pool
        if drawn is not None:
            samples[idx] = drawn.k
            sample_spent[idx] = drawn.sample_spent
            for row in range(st.n):
                draws[int(idx[row])] = [
                    [int(drawn.draw_at[row, e]), int(drawn.draw_k[row, e])] for e in range(int(drawn.draws[row]))
                ]
    return selected, cost, scores, actions, n_act, sharp, skipped, samples, sample_spent, draws


def _merge(runs: list[ReplayRun], res: _BatchResult) -> None:
    rows, parts = res
    for run, part in zip(runs, parts, strict=True):
        selected, cost, scores, actions, n_act, sharp, skipped, samples, sample_spent, draws = part
        run.selected[rows] = selected
        run.cost[rows] = cost
        run.scores[rows, : scores.shape[1]] = scores
        run._ensure_width(actions.shape[1])
        run.actions[rows, : actions.shape[1]] = actions
        run.n_actions[rows] = n_act
        run.sharp[rows] = sharp
        for i, acts in skipped.items():
            run.skipped[int(rows[i])] = acts
        if run.samples is not None and run.sample_cost is not None:
            run.samples[rows] = samples
            run.sample_cost[rows] = sample_spent
            for i, d in draws.items():
                run.draws[int(rows[i])] = d


def transcripts(run: ReplayRun, questions: Sequence[Question]) -> list[dict[str, object]]:
    """Spec section 7 transcript lines of one run (with the ids a run skipped, spec section 10, when any, and
    the candidates drawn and when, spec section 12, for a pool that is not every candidate)."""
    return [
        transcript_line(
            q,
            run.policy,
            run.budget,
            int(run.selected[r]),
            float(run.cost[r]),
            run.actions_of(r).tolist(),
            run.scores_of(r, run.samples_of(r, q)).tolist(),
            run.skipped_of(r).tolist(),
            draws=None if run.samples is None else run.draws.get(r, []),
        )
        for r, q in enumerate(questions)
    ]
