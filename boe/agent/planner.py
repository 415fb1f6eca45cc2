"""The one code path shared with `boe replay`: a question's menu as a `Question`, driven by a policy.

The agent never scores or chooses on its own. It builds the ledger record of
the question (candidates, claims, edges, the menu with placeholder outcomes),
turns it into a `Question` and an `EvidenceState` with ``Q = 1`` under the
run's calibration, and makes exactly the calls `boe.core.replay.run_policy`
makes: ``policy.start``, then per step ``policy.choose`` -> ``state.reveal``
-> ``policy.observe``, then ``policy.select`` / ``policy.final_scores``.
Where the replay reads a stored outcome, the agent has run the tool.

Graph state holds only the bought (action, outcome) pairs, so the planner
rebuilds the policy's state from them at every step; on the way it checks
that the policy chooses the recorded actions again (a determinism check
that also makes a resumed checkpoint safe).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from boe.core.calibration import Calibration
from boe.core.graph import OUTCOME_CODES, GroupIndex, Question
from boe.core.ledger import LedgerRecord, format_for
from boe.core.policies import Policy, make_policy
from boe.core.replay import plan_calibration, replay, transcripts
from boe.core.state import EvidenceState, bind_questions

__all__ = ["Planner", "Step", "build_record"]

#: Outcome stored for an action the online run did not buy (never read: see `Planner`).
PLACEHOLDER = "unresolved"


def build_record(
    *,
    question_id: str,
    dataset: str,
    question: str,
    image: str,
    options: Mapping[str, str] | None,
    reference: str | None,
    candidates: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    edges: Sequence[Mapping[str, Any]],
    actions: Sequence[Mapping[str, Any]],
    outcomes: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> LedgerRecord:
    """A ledger record; actions without an entry in ``outcomes`` carry the placeholder outcome.

    The format is ``boe-ledger/1.1`` when the menu holds an answer-level check, else ``boe-ledger/1``.
    """
    outcomes = outcomes or {}
    data: dict[str, Any] = {
        "format": format_for(a.get("kind", "") for a in actions),
        "question_id": question_id,
        "dataset": dataset,
        "task": {"question": question, "image": image, "options": dict(options) if options else None},
        "reference": reference,
        "candidates": [dict(c) for c in candidates],
        "claims": [dict(c) for c in claims],
        "edges": [dict(e) for e in edges],
        "actions": [{**a, "outcome": outcomes.get(a["id"], PLACEHOLDER)} for a in actions],
    }
    data.update(extra or {})
    return LedgerRecord.model_validate(data)


@dataclass
class _Memo:
    """The state a planner reached after ``pairs`` (and the policy's choice there, once asked)."""

    pairs: list[tuple[int, str]]
    state: EvidenceState
    policy: Policy
    steps: list[Step]
    choice: int | None


@dataclass
class Step:
    """One bought action as the policy saw it."""

    action: int
    outcome: str
    moved_up: list[int]
    moved_down: list[int]
    kappa: float
    scores: list[float]


class Planner:
    """A policy on one question's menu, under one calibration and budget."""

    def __init__(
        self,
        record: LedgerRecord,
        calibration: Calibration,
        policy: str,
        budget: float,
        *,
        eta: float = 0.0,
        seed: int = 0,
        vetoed: Sequence[int] = (),
    ) -> None:
        self.record = record
        # vetoed actions (the approval step refused them) are off the menu, as a stored failed check is
        self.vetoed = [int(a) for a in vetoed]
        self.groups = GroupIndex()
        self.question = Question.from_record(record, self.groups)
        self.calibration = calibration
        self.policy_name = policy
        self.policy_options = {"eta": eta, "seed": seed}
        self.budget = float(budget)
        self.kappa = calibration.arrays(self.groups.keys)[0]
        self._memo: _Memo | None = None

    def _fresh(self) -> tuple[EvidenceState, Policy]:
        state = bind_questions([self.question], [0], [self.calibration], None, self.groups.keys, self.budget)
        if self.vetoed:
            state.available[0, self.vetoed] = False
        policy = make_policy(self.policy_name, **self.policy_options)
        policy.start(state)
        return state, policy

    def _choose(self, state: EvidenceState, policy: Policy) -> int:
        choice = policy.choose(state)
        return int(np.where(state.done, -1, choice)[0])

    def _replay(self, bought: Sequence[tuple[int, str]]) -> tuple[EvidenceState, Policy, list[Step]]:
        """Run the policy over the recorded purchases, exactly as `run_policy` would.

        The nodes ask with one more purchase each time: the state reached last
        time is continued when ``bought`` extends its purchases (the policy
        still chooses once per state, as in `run_policy`); anything else
        replays from the start.
        """
        pairs = [(int(a), str(o)) for a, o in bought]
        memo = self._memo
        if memo is not None and memo.pairs == pairs[: len(memo.pairs)]:
            state, policy, steps, pending = memo.state, memo.policy, list(memo.steps), memo.choice
            todo = pairs[len(memo.pairs) :]
        else:
            (state, policy), steps, pending, todo = self._fresh(), [], None, pairs
        k = self.question.k
        for action, outcome in todo:
            chosen = pending if pending is not None else self._choose(state, policy)
            pending = None
            if chosen != action:
                raise RuntimeError(
                    f"policy {self.policy_name!r} chose action {chosen} where the transcript bought {action}: "
                    "the menu, calibration or policy changed since the purchase"
                )
            rows = np.array([0], dtype=np.intp)
            acts = np.array([action], dtype=np.intp)
            outs = np.array([OUTCOME_CODES[outcome]], dtype=np.int8)
            before = state.logit[0, :k].copy()
            state.reveal(rows, acts, outs)
            policy.observe(state, rows, acts, outs)
            move = state.logit[0, :k] - before
            steps.append(
                Step(
                    action=action,
                    outcome=outcome,
                    moved_up=[int(i) for i in np.nonzero(move > 0)[0]],
                    moved_down=[int(i) for i in np.nonzero(move < 0)[0]],
                    kappa=float(self.kappa[self.question.group[action]]),
                    scores=[float(x) for x in policy.final_scores(state)[0, :k]],
                )
            )
        self._memo = _Memo(pairs, state, policy, list(steps), pending)
        return state, policy, steps

    def next_action(self, bought: Sequence[tuple[int, str]]) -> int:
        """The action the policy buys next (index into the menu), or -1 to stop."""
        state, policy, _ = self._replay(bought)
        memo = self._memo
        assert memo is not None
        if memo.choice is None:
            memo.choice = self._choose(state, policy)
        return memo.choice

    def step(self, bought: Sequence[tuple[int, str]]) -> Step:
        """The last purchase of ``bought`` with its effect on the scores."""
        return self._replay(bought)[2][-1]

    def finish(self, bought: Sequence[tuple[int, str]]) -> tuple[int, list[float], float]:
        """(selected candidate, final scores, spent) after the purchases."""
        state, policy, _ = self._replay(bought)
        sel = int(policy.select(state)[0])
        scores = [float(x) for x in policy.final_scores(state)[0, : self.question.k]]
        return sel, scores, float(state.spent[0])

    def raw_majority(self) -> tuple[int, list[float]]:
        """The zero-evidence selection (the raw majority answer) and the cheap-prior scores."""
        state, _ = self._fresh()
        raw = make_policy("raw")
        return int(raw.select(state)[0]), [float(x) for x in raw.final_scores(state)[0, : self.question.k]]

    def transcript(self, bought: Sequence[tuple[int, str]]) -> dict[str, Any]:
        """The spec section 7 transcript, written by `boe.core.replay` itself from the record with its outcomes.

        The offline replay engine runs the same policy, budget and calibration
        over the bought outcomes; if it does not buy exactly the actions the
        online run bought, the one-code-path promise is broken and this raises.
        """
        outcomes = {self.record.actions[a].id: o for a, o in bought}
        data = self.record.model_dump(mode="json", exclude_unset=True)
        vetoed = {self.record.actions[a].id for a in self.vetoed}
        for act in data["actions"]:
            act["outcome"] = outcomes.get(act["id"], PLACEHOLDER)
            if act["id"] in vetoed:
                act["failed"] = True
        rec = LedgerRecord.model_validate(data)
        groups = GroupIndex()
        question = Question.from_record(rec, groups)
        plan = plan_calibration([question], groups.keys, "file", file_calibration=self.calibration)
        run = replay(
            [question], groups.keys, [self.policy_name], [self.budget], plan, policy_options=dict(self.policy_options)
        )[0]
        line = transcripts(run, [question])[0]
        online = [self.record.actions[a].id for a, _ in bought]
        if line["actions"] != online:
            raise RuntimeError(f"offline replay bought {line['actions']} where the online run bought {online}")
        return line
