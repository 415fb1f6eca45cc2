"""Token and time cost of every (policy, budget) from the model calls recorded in each question's record.

An agent record lists its model calls (``model_calls``: tokens, latency,
and the action a judge call served in ``tags.action``). Calls that serve no
action (generation, claim extraction) are paid by every policy; a judge call
is paid by the policies that buy its action. A replay that buys an action
the record never ran (``"observed": false``, an online run's unbought menu)
reads a placeholder outcome: the share of bought actions that were observed
says how far a row is a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.graph import Question
from boe.core.metrics import _datasets as dataset_rows  # the metrics' own split, so the rows line up
from boe.core.replay import ReplayRun

__all__ = ["CallCosts", "CostRow", "call_costs", "cost_rows", "dataset_rows"]


@dataclass(frozen=True)
class CallCosts:
    """What one question's model calls cost, split into the shared part and each action's part."""

    has_calls: bool
    base_tokens: float
    base_seconds: float
    action_tokens: npt.NDArray[np.float64]  # (A,)
    action_seconds: npt.NDArray[np.float64]  # (A,)
    observed: npt.NDArray[np.bool_]  # (A,) the record holds a real outcome


@dataclass(frozen=True)
class CostRow:
    dataset: str
    policy: str
    budget: float
    n: int
    mean_cost: float  # design cost units
    tokens: float | None  # mean prompt + completion tokens per question (None: no calls recorded)
    seconds: float | None  # mean summed model latency per question
    observed: float | None  # share of bought actions with a recorded outcome (None: nothing bought)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def call_costs(record: Mapping[str, Any], question: Question) -> CallCosts:
    """Split the record's model calls between the shared part and the actions they served."""
    n = question.n_actions
    tokens, seconds = np.zeros(n), np.zeros(n)
    pos = {a: j for j, a in enumerate(question.action_ids)}
    by_call: dict[str, int] = {}
    actions = record.get("actions") or []
    observed = np.ones(n, dtype=bool) if question.unobserved is None else ~question.unobserved
    for k, a in enumerate(actions[:n]):
        for cid in a.get("calls") or []:
            by_call[str(cid)] = k
    calls = record.get("model_calls")
    base_t = base_s = 0.0
    if isinstance(calls, list):
        for c in calls:
            if not isinstance(c, Mapping):
                continue
            t = float(c.get("prompt_tokens") or 0) + float(c.get("completion_tokens") or 0)
            s = float(c.get("latency_ms") or 0.0) / 1000.0
            tags: Mapping[str, Any] = c["tags"] if isinstance(c.get("tags"), Mapping) else {}
            j = by_call.get(str(c.get("call_id")))
            if tags.get("action") is not None:
                j = pos.get(str(tags["action"]))
            if j is None:
                base_t += t
                base_s += s
            else:
                tokens[j] += t
                seconds[j] += s
    return CallCosts(isinstance(calls, list) and bool(calls), base_t, base_s, tokens, seconds, observed)


def cost_rows(questions: Sequence[Question], runs: Sequence[ReplayRun], costs: Sequence[CallCosts]) -> list[CostRow]:
    """Mean design cost, tokens and model time per question of every run, per dataset."""
    per_run = []
    for run in runs:
        tok = np.full(len(questions), np.nan)
        sec = np.full(len(questions), np.nan)
        bought = np.zeros(len(questions))
        seen = np.zeros(len(questions))
        for r, c in enumerate(costs):
            acts = run.actions_of(r)
            bought[r] = len(acts)
            seen[r] = int(c.observed[acts].sum()) if len(acts) else 0
            if c.has_calls:
                tok[r] = c.base_tokens + float(c.action_tokens[acts].sum())
                sec[r] = c.base_seconds + float(c.action_seconds[acts].sum())
        per_run.append((run, tok, sec, bought, seen))
    out = []
    for dataset, idx in dataset_rows(questions):
        for run, tok, sec, bought, seen in per_run:
            t, s = tok[idx], sec[idx]
            has = ~np.isnan(t)
            n_bought = float(bought[idx].sum())
            out.append(
                CostRow(
                    dataset=dataset,
                    policy=run.policy,
                    budget=run.budget,
                    n=len(idx),
                    mean_cost=float(run.cost[idx].mean()) if len(idx) else 0.0,
                    tokens=float(t[has].mean()) if has.any() else None,
                    seconds=float(s[has].mean()) if has.any() else None,
                    observed=float(seen[idx].sum()) / n_bought if n_bought else None,
                )
            )
    return out
