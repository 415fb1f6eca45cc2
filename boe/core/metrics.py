"""Selection metrics of replay runs.

A candidate is *correct* when its utility is at least 0.5 (for the usual 0/1
utilities: when it is 1). Accuracy is the mean utility of the selected
candidate; with 0/1 utilities it is the share of correct selections and the
transition identity  dAcc = (corrections - harms) / N  holds exactly.

* Oracle@K: share of questions whose pool holds a correct candidate.
* MajorityWrong: questions on which `raw` selects an incorrect candidate;
  the rescue rate is the share of them on which a policy selects a correct one.
* Sharp: mean over questions of sum_i H_b(s_i(0)) - H_b(s_i(t)) (a shape
  proxy, not information).
* Paired bootstrap of an accuracy difference (percentile interval, resample
  count and seed recorded) and the exact two-sided McNemar test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from boe.core.graph import Question
from boe.core.replay import ReplayRun

__all__ = ["Comparison", "MetricRow", "compare", "mcnemar_exact", "paired_bootstrap", "summarize"]

CORRECT = 0.5


@dataclass(frozen=True)
class MetricRow:
    dataset: str
    policy: str
    budget: float
    n: int
    accuracy: float
    oracle_at_k: float
    majority_wrong: int
    rescue_rate: float | None
    corrections: int
    harms: int
    delta_acc: float
    mean_cost: float  # the budget spent (an adaptive pool's samples included, spec section 12)
    sharp: float
    samples: float = 0.0  # candidates drawn per question
    sample_cost: float = 0.0  # what they cost (the ledger's sample costs, else the pool's default per sample)
    total_cost: float = 0.0  # samples and checks (a fixed pool's samples are not paid from the budget)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    dataset: str
    budget: float
    a: str
    b: str
    n: int
    accuracy_a: float
    accuracy_b: float
    diff: float
    ci95: tuple[float, float]
    a_only_correct: int
    b_only_correct: int
    mcnemar_p: float
    resamples: int
    seed: int

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        return d


@dataclass(frozen=True)
class _Pools:
    """Per question, padded to the largest K: what the metrics read of every run (built once, not per run)."""

    k: npt.NDArray[np.intp]  # (N,)
    utility: npt.NDArray[np.float64]  # (N, K_max), nan padding
    own_cost: npt.NDArray[np.float64]  # (N, K_max) recorded sample costs (format 1.3), nan padding
    has_cost: npt.NDArray[np.bool_]  # (N,) the record carries sample costs

    @classmethod
    def of(cls, questions: Sequence[Question]) -> _Pools:
        n = len(questions)
        k = np.array([q.k for q in questions], dtype=np.intp)
        width = int(k.max(initial=1))
        utility = np.full((n, width), np.nan)
        own = np.full((n, width), np.nan)
        has = np.zeros(n, dtype=bool)
        for r, q in enumerate(questions):
            utility[r, : q.k] = q.utility
            if q.sample_cost is not None:
                own[r, : q.k] = q.sample_cost
                has[r] = True
        return cls(k, utility, own, has)

    def selected_utility(self, run: ReplayRun, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        """The utility of the candidate ``run`` selected, for each question of ``idx``."""
        sel = run.selected[idx]
        sel = np.where(sel < 0, self.k[idx] + sel, sel)  # (a negative index counts from the question's end)
        out: npt.NDArray[np.float64] = self.utility[idx, sel]
        return out

    def oracle(self, run: ReplayRun, idx: npt.NDArray[np.intp]) -> float:
        """Oracle@K of ``run``'s pool: the share of questions of ``idx`` with a correct candidate among those
        the run drew (every candidate of a fixed pool, the first K of ``fixed:K``)."""
        drawn = np.arange(self.utility.shape[1])[None, :] < self.samples(run, idx)[:, None]  # never the padding
        best = np.where(drawn, self.utility[idx], -np.inf).max(axis=1)
        return float(np.mean(best >= CORRECT))

    def samples(self, run: ReplayRun, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """`ReplayRun.samples_of` of each question of ``idx``."""
        return self.k[idx] if run.samples is None else run.samples[idx].astype(np.intp)

    def sample_cost(self, run: ReplayRun, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        """`ReplayRun.sample_cost_of` of each question of ``idx`` (the same sums: sequential, in index order)."""
        if run.pool.adaptive and run.sample_cost is not None:
            return run.sample_cost[idx].astype(np.float64)
        k = self.samples(run, idx)
        costs = np.where(self.has_cost[idx, None], self.own_cost[idx], run.pool.sample_cost)
        total = np.cumsum(costs, axis=1)
        at = np.take_along_axis(total, (np.maximum(k, 1) - 1)[:, None], axis=1)[:, 0]
        out: npt.NDArray[np.float64] = np.where(k > 0, at, 0.0)
        return out


def _datasets(questions: Sequence[Question]) -> list[tuple[str, npt.NDArray[np.intp]]]:
    """(dataset, labelled question indices) per dataset, plus "all" when there are several."""
    names: dict[str, list[int]] = {}
    for r, q in enumerate(questions):
        if q.labelled:
            names.setdefault(q.dataset, []).append(r)
    out = [(d, np.array(ix, dtype=np.intp)) for d, ix in names.items()]
    if len(out) > 1:
        out.append(("all", np.concatenate([ix for _, ix in out])))
    return out


def summarize(questions: Sequence[Question], runs: Sequence[ReplayRun], raw: ReplayRun) -> list[MetricRow]:
    """One row per dataset x policy x budget (questions without utilities are left out)."""
    rows = []
    pools = _Pools.of(questions)
    for dataset, idx in _datasets(questions):
        n = len(idx)
        raw_u = pools.selected_utility(raw, idx)
        raw_ok = raw_u >= CORRECT
        oracle = pools.oracle(raw, idx)
        mw = ~raw_ok
        for run in runs:
            u = pools.selected_utility(run, idx)
            ok = u >= CORRECT
            corr = int(np.sum(~raw_ok & ok))
            harm = int(np.sum(raw_ok & ~ok))
            samples = pools.samples(run, idx).astype(np.float64)
            sample_cost = pools.sample_cost(run, idx)
            total = run.cost[idx] + (0.0 if run.pool.adaptive else sample_cost)
            rows.append(
                MetricRow(
                    dataset=dataset,
                    policy=run.policy,
                    budget=run.budget,
                    n=n,
                    accuracy=float(u.mean()),
                    oracle_at_k=oracle,
                    majority_wrong=int(mw.sum()),
                    rescue_rate=float(ok[mw].mean()) if mw.any() else None,
                    corrections=corr,
                    harms=harm,
                    delta_acc=(corr - harm) / n,
                    mean_cost=float(run.cost[idx].mean()),
                    sharp=float(run.sharp[idx].mean()),
                    samples=float(samples.mean()),
                    sample_cost=float(sample_cost.mean()),
                    total_cost=float(total.mean()),
                )
            )
    return rows


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p: 2 * P(X <= min(b, c)), X ~ Binomial(b + c, 1/2), capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    m = min(b, c)
    log_half = n * math.log(0.5)
    terms = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half for k in range(m + 1)]
    top = max(terms)
    tail = math.exp(top) * math.fsum(math.exp(t - top) for t in terms)
    return min(1.0, 2.0 * tail)


def paired_bootstrap(
    a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of a - b and its percentile 95% interval from question-level paired resampling."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = len(d)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    if resamples < 1:  # no resampling, no interval
        return (float(d.mean()), math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 4_000_000 // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = d[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def compare(
    questions: Sequence[Question],
    run_a: ReplayRun,
    run_b: ReplayRun,
    resamples: int = 2000,
    seed: int = 0,
) -> list[Comparison]:
    """Paired interval and McNemar p of run_a vs run_b, per dataset."""
    out = []
    pools = _Pools.of(questions)
    for dataset, idx in _datasets(questions):
        ua = pools.selected_utility(run_a, idx)
        ub = pools.selected_utility(run_b, idx)
        oka, okb = ua >= CORRECT, ub >= CORRECT
        diff, lo, hi = paired_bootstrap(ua, ub, resamples, seed)
        b_, c_ = int(np.sum(oka & ~okb)), int(np.sum(~oka & okb))
        out.append(
            Comparison(
                dataset=dataset,
                budget=run_a.budget,
                a=run_a.policy,
                b=run_b.policy,
                n=len(idx),
                accuracy_a=float(ua.mean()),
                accuracy_b=float(ub.mean()),
                diff=diff,
                ci95=(lo, hi),
                a_only_correct=b_,
                b_only_correct=c_,
                mcnemar_p=mcnemar_exact(b_, c_),
                resamples=resamples,
                seed=seed,
            )
        )
    return out
