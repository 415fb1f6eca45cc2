"""The paper's finite theory as numbers: exact curves and Monte-Carlo replays of the policies.

Exact quantities (paper, Section 4 and the appendix sections "Compressive
Verification and Finite Probe Calculations" and "Residual Evidence Capacity
and Information Upper Laws"):

* factor-code model, K = 2^M candidates, one per assignment of M binary claims:
  after q exact factor checks the best success is ``P_factor(q) = min(2^q / K, 1)``;
  after q exact candidate checks it is at most ``P_candidate(q) = min((q + 1) / K, 1)``,
  so success >= 1 - eps needs ``ceil((1 - eps) K) - 1`` candidate checks;
* noisy model, M binary-symmetric factor checks of accuracy rho: the posterior
  mode is right with probability rho^M, a gain ``rho^M - 1/K`` over the uniform
  prior, from ``I(U; T) = M [1 - H_b(rho)]`` bits of information; the evidence-only
  ceiling bounds the gain of a size-m selection by ``sqrt(m/2 * Lambda)`` with
  Lambda in nats.

`replay_success` measures the same quantities by replaying registered policies
on generated ledgers, with the calibration fitted on a separate ledger.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from boe.core.calibration import Calibration
from boe.core.experiment import fit_deployable_calibration, load_questions
from boe.core.graph import GroupIndex
from boe.core.ledger import parse_record_dict
from boe.core.replay import plan_calibration, replay

__all__ = [
    "MonteCarlo",
    "binary_entropy_bits",
    "bsc_information_bits",
    "bsc_information_nats",
    "candidate_queries_needed",
    "candidate_success",
    "factor_success",
    "fit_calibration",
    "information_ceiling",
    "mode_gain",
    "mode_success",
    "replay_success",
]


def factor_success(q: int, k: int) -> float:
    """Best success after q exact factor checks in the factor-code model with K candidates."""
    return min(2.0**q / k, 1.0)


def candidate_success(q: int, k: int) -> float:
    """Best success after q exact candidate checks and one final guess: min((q + 1) / K, 1)."""
    return min((q + 1) / k, 1.0)


def candidate_queries_needed(eps: float, k: int) -> int:
    """Candidate checks needed for success at least 1 - eps: ceil((1 - eps) K) - 1 (at least 0)."""
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"eps must lie in [0, 1), got {eps}")
    return max(math.ceil((1.0 - eps) * k - 1e-12) - 1, 0)


def binary_entropy_bits(rho: float) -> float:
    """H_b(rho) in bits."""
    if rho <= 0.0 or rho >= 1.0:
        return 0.0
    return -(rho * math.log2(rho) + (1.0 - rho) * math.log2(1.0 - rho))


def bsc_information_bits(rho: float, m: int) -> float:
    """I(U; T) of M uniform bits read through a binary-symmetric channel of accuracy rho: M [1 - H_b(rho)]."""
    return m * (1.0 - binary_entropy_bits(rho))


def bsc_information_nats(rho: float, m: int) -> float:
    """The same information in nats (the unit of the ceiling)."""
    return math.log(2.0) * bsc_information_bits(rho, m)


def mode_success(rho: float, m: int) -> float:
    """The posterior mode of the noisy model is right when all M bits are read correctly: rho^M (rho >= 1/2)."""
    return max(rho, 1.0 - rho) ** m


def mode_gain(rho: float, m: int) -> float:
    """Gain of the posterior mode over the uniform prior: rho^M - 1/K with K = 2^M."""
    return mode_success(rho, m) - 2.0**-m


def information_ceiling(info_nats: float, m_sel: int = 1) -> float:
    """Evidence-only ceiling sqrt(m/2 * Lambda) on the expected gain of a size-m selection (Lambda in nats)."""
    return math.sqrt(m_sel / 2.0 * max(info_nats, 0.0))


@dataclass(frozen=True)
class MonteCarlo:
    """Success of one policy at one budget over n replayed questions."""

    policy: str
    budget: float
    n: int
    success: float  # mean utility of the selected candidate
    se: float  # binomial standard error sqrt(p (1 - p) / n)
    checks: float  # mean number of actions bought
    factor_checks: float  # mean number of factor actions bought
    cost: float  # mean cost spent

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_calibration(train_records: Iterable[dict[str, Any]], policies: Sequence[str]) -> Calibration:
    """Plug-in calibration of ``train_records`` plus the fitted extras of the policies that have them."""
    questions, groups = load_questions([parse_record_dict(r) for r in train_records], GroupIndex())
    return fit_deployable_calibration(questions, groups.keys, policies=policies)


def replay_success(
    calibration: Calibration,
    test_records: Iterable[dict[str, Any]],
    policies: Sequence[str],
    budgets: Sequence[float],
    *,
    policy_options: dict[str, object] | None = None,
    workers: int | None = None,
) -> list[MonteCarlo]:
    """Replay ``policies`` at ``budgets`` on ``test_records`` under a fixed calibration; success per run."""
    questions, groups = load_questions([parse_record_dict(r) for r in test_records], GroupIndex())
    plan = plan_calibration(questions, groups.keys, "file", file_calibration=calibration)
    runs = replay(
        questions, groups.keys, list(policies), list(budgets), plan, policy_options=policy_options, workers=workers
    )
    out = []
    n = len(questions)
    for run in runs:
        util = np.array([questions[i].utility[run.selected[i]] for i in range(n)], dtype=np.float64)
        p = float(util.mean()) if n else math.nan
        factor = [int(questions[i].is_factor[run.actions_of(i)].sum()) for i in range(n)]
        out.append(
            MonteCarlo(
                policy=run.policy,
                budget=run.budget,
                n=n,
                success=p,
                se=math.sqrt(max(p * (1 - p), 0.0) / n) if n else math.nan,
                checks=float(run.n_actions.mean()) if n else math.nan,
                factor_checks=float(np.mean(factor)) if n else math.nan,
                cost=float(run.cost.mean()) if n else math.nan,
            )
        )
    return out
