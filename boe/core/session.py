"""One question's policy run as a resumable session: propose, then reveal, skip or draw.

The loop itself is `boe.core.loop.PolicySession` (the only one: `boe.core.loop.run_policy` drives it over
many questions offline, answering proposals from a ledger). `Session` drives it for one question online,
one event at a time, where a tool or a person answers. Online equals offline because both are that code.

`Session` is rebuilt from its start parameters and its events (`Reveal`,
`Skip`, `Draw`), so a checkpoint that stores only the events resumes it; `advance`
applies just the events it has not seen yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.calibration import Calibration
from boe.core.graph import OUTCOME_CODES, GroupIndex, Question
from boe.core.ledger import LedgerRecord
from boe.core.loop import STOP, PolicySession, SessionError, draw_code, drawn
from boe.core.policies import Policy, ScorePolicy, make_policy
from boe.core.pool import PoolSpec, make_pool_policy
from boe.core.relevance import IRRELEVANT
from boe.core.state import EvidenceState, bind_pool, bind_questions

__all__ = [
    "STOP",
    "Draw",
    "Event",
    "PolicySession",
    "Result",
    "Reveal",
    "Session",
    "SessionError",
    "Skip",
    "Step",
    "draw_code",
    "drawn",
    "transcript_line",
]

IntArr = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Reveal:
    """The proposed action was bought and its check gave ``outcome``."""

    action: int
    outcome: str  # "confirm", "reject" or "unresolved"


@dataclass(frozen=True, slots=True)
class Skip:
    """The proposed action was not bought (``reason``: a veto, a tool error, a stop)."""

    action: int
    reason: str


@dataclass(frozen=True, slots=True)
class Draw:
    """The proposed ``m`` more candidates were drawn (an adaptive pool, spec section 12)."""

    m: int


Event = Reveal | Skip | Draw


@dataclass(frozen=True)
class Step:
    """One bought action as the policy saw it (the agent's evidence log)."""

    action: int
    outcome: str
    moved_up: list[int]
    moved_down: list[int]
    kappa: float
    scores: list[float]


@dataclass(frozen=True)
class Result:
    """Where a session ended: the selection, final scores, spend, bought and skipped actions (menu indices), and
    for a drawn pool the candidates drawn and the draws ([purchases before, candidates after])."""

    selected: int
    scores: list[float]
    spent: float
    actions: list[int]
    skipped: list[int]
    samples: int = 0
    draws: list[list[int]] | None = None


class Session:
    """A policy on one question's menu under one calibration and budget, advanced one event at a time.

    With an adaptive ``pool`` (spec section 12) the session starts with the pool's first candidates of the
    question and proposes draws too (`next_action` returns a `draw_code`); ``limit`` is how many candidates
    may be drawn in all, which online exceeds those the question holds so far: the caller samples them and
    continues on the larger question with `from_events` (its menu grows at the end, so action indices hold).
    """

    def __init__(
        self,
        question: Question,
        calibration: Calibration,
        group_keys: Sequence[str],
        policy: str,
        budget: float,
        *,
        options: Mapping[str, Any] | None = None,
        pool: PoolSpec | None = None,
        limit: int | None = None,
    ) -> None:
        self.question = question
        self.calibration = calibration
        self.group_keys = list(group_keys)
        self.policy_name = policy
        self.options = dict(options or {})
        self.budget = float(budget)
        self.pool = pool or PoolSpec()
        self.limit = limit
        self._kappa = calibration.arrays(self.group_keys)[0]
        self._restart()

    @classmethod
    def from_record(
        cls,
        record: LedgerRecord,
        calibration: Calibration,
        policy: str,
        budget: float,
        *,
        options: Mapping[str, Any] | None = None,
        pool: PoolSpec | None = None,
        limit: int | None = None,
    ) -> Session:
        """A fresh session on a validated record's menu (its stored outcomes are never read)."""
        groups = GroupIndex()
        question = Question.from_record(record, groups)
        return cls(question, calibration, groups.keys, policy, budget, options=options, pool=pool, limit=limit)

    @classmethod
    def from_events(
        cls,
        question: Question,
        calibration: Calibration,
        group_keys: Sequence[str],
        policy: str,
        budget: float,
        events: Sequence[Event],
        *,
        options: Mapping[str, Any] | None = None,
        pool: PoolSpec | None = None,
        limit: int | None = None,
    ) -> Session:
        """The session reached by ``events`` from the start (raises `SessionError` if they do not follow it)."""
        session = cls(question, calibration, group_keys, policy, budget, options=options, pool=pool, limit=limit)
        session.advance(events)
        return session

    def _restart(self) -> None:
        spec = self.pool
        policy = make_pool_policy(self.policy_name, spec, **self.options)
        if policy.reads_labels:
            raise SessionError(
                f"policy {self.policy_name!r} reads utilities; it replays offline only, not in a session"
            )
        state = bind_questions([self.question], [0], [self.calibration], None, self.group_keys, self.budget)
        if spec.adaptive or spec.size is not None:
            limits = None if self.limit is None else np.array([max(self.limit, self.question.k)])
            try:
                bind_pool(
                    state,
                    [self.question],
                    spec.start if spec.adaptive else int(spec.size or 0),
                    spec.sample_cost,
                    limits,
                    charge=spec.adaptive,
                )
            except ValueError as exc:
                raise SessionError(str(exc)) from None
        self._run = PolicySession(state, policy)
        self._events: list[Event] = []
        self._steps: list[Step] = []

    @property
    def events(self) -> tuple[Event, ...]:
        """The events applied so far, in order."""
        return tuple(self._events)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The purchases so far with their effect on the scores."""
        return tuple(self._steps)

    @property
    def state(self) -> EvidenceState:
        """The evidence state (one row); read it, do not change it."""
        return self._run.state

    @property
    def policy(self) -> Policy:
        return self._run.policy

    def advance(self, events: Sequence[Event]) -> None:
        """Bring the session to ``events``: only the new ones are applied when they extend those seen so far.

        Events that do not extend them (a checkpoint from another branch) replay from the start.
        """
        seen = self._events
        if len(events) < len(seen) or any(a != b for a, b in zip(seen, events, strict=False)):
            self._restart()
            seen = self._events
        for ev in events[len(seen) :]:
            if isinstance(ev, Reveal):
                self.reveal(ev.action, ev.outcome)
            elif isinstance(ev, Skip):
                self.skip(ev.action, ev.reason)
            else:
                self.draw(ev.m)

    def next_action(self) -> int:
        """The action the policy proposes to buy next (index into the menu), -1 to stop, or (an adaptive pool)
        a `draw_code`: draw `drawn` (code) more candidates."""
        return int(self._run.propose()[0])

    def next_relevant(self, reason: str = IRRELEVANT) -> tuple[int, list[int]]:
        """The next proposal that could change the selected answer, after skipping (as `Skip` events, spec
        section 10) every proposal that cannot under any outcome of the affordable checks; -1 to stop.

        A policy without a ``relevant`` method (a plugin) is not filtered; `bayes` never proposes such a check.
        """
        relevant = getattr(self.policy, "relevant", None)
        skipped: list[int] = []
        while (a := self.next_action()) >= 0 and relevant is not None and not bool(relevant(self.state)[0, a]):
            self.skip(a, reason)
            skipped.append(a)
        return a, skipped

    def _proposed(self, action: int, what: str) -> IntArr:
        proposed = self.next_action()
        if proposed != action:
            what_else = (
                "stopped"
                if proposed == STOP
                else f"proposed to draw {drawn(proposed)}"
                if proposed < 0
                else f"proposed action {proposed}"
            )
            target = f"{drawn(action)} more candidates" if action < -2 else f"action {action}"
            raise SessionError(
                f"policy {self.policy_name!r} {what_else} where the events {what} {target} "
                "(the menu, calibration or policy changed since)"
            )
        return np.array([0], dtype=np.intp)

    @property
    def samples(self) -> int:
        """Candidates drawn so far (all of the question's in a fixed pool)."""
        pool = self._run.state.pool
        return self.question.k if pool is None else int(pool.k[0])

    def draw(self, m: int) -> None:
        """Draw the proposed ``m`` more candidates; they must be in the question already (online: start the
        session again on the larger question with `from_events`, this `Draw` last)."""
        rows = self._proposed(draw_code(m), "drew")
        if self.samples + m > self.question.k:
            raise SessionError(
                f"the question holds {self.question.k} candidates; drawing {m} more after {self.samples} needs "
                "them sampled first"
            )
        self._run.draw(rows, np.array([draw_code(m)], dtype=np.intp))
        self._events.append(Draw(m))

    def reveal(self, action: int, outcome: str) -> Step:
        """Buy the proposed ``action`` with its ``outcome``; returns the step as the evidence log shows it."""
        if outcome not in OUTCOME_CODES:
            raise SessionError(f"unknown outcome {outcome!r}; expected one of {sorted(OUTCOME_CODES)}")
        rows = self._proposed(action, "bought")
        state, k = self._run.state, self.samples
        # who moved: the spec's logits for its policies, the policy's own scores (a posterior) otherwise
        own = not isinstance(self.policy, ScorePolicy)
        before = (self._run.final_scores() if own else state.logit)[0, :k].copy()
        self._run.reveal(rows, np.array([action], dtype=np.intp), np.array([OUTCOME_CODES[outcome]], dtype=np.int8))
        move = (self._run.final_scores() if own else state.logit)[0, :k] - before
        step = Step(
            action=action,
            outcome=outcome,
            moved_up=[int(i) for i in np.nonzero(move > 0)[0]],
            moved_down=[int(i) for i in np.nonzero(move < 0)[0]],
            kappa=float(self._kappa[self.question.group[action]]),
            scores=[float(x) for x in self._run.final_scores()[0, :k]],
        )
        self._events.append(Reveal(action, outcome))
        self._steps.append(step)
        return step

    def skip(self, action: int, reason: str) -> None:
        """Refuse the proposed ``action`` (a veto, a tool error); the policy then proposes again."""
        if not reason:
            raise SessionError("a skip needs a reason")
        rows = self._proposed(action, "skipped")
        self._run.skip(rows, np.array([action], dtype=np.intp))
        self._events.append(Skip(action, reason))

    def stop(self, reason: str) -> list[int]:
        """Skip every action the policy still proposes until it stops; returns them (a stop that replays exactly).

        A drawn pool draws no more: its record holds the candidates drawn, and a replay of it draws no more
        either."""
        pool = self._run.state.pool
        if pool is not None:
            pool.limit[:] = pool.k
            self._run._proposal = None
        out = []
        while (a := self.next_action()) >= 0:
            self.skip(a, reason)
            out.append(a)
        return out

    def skipped(self) -> list[int]:
        """The refused actions, in the order they were refused."""
        return [e.action for e in self._events if isinstance(e, Skip)]

    def finish(self) -> Result:
        """The selection, final scores and spend after the events so far (the session can still go on)."""
        k = self.samples
        state = self._run.state
        pool = state.pool
        return Result(
            selected=int(self._run.select()[0]),
            scores=[float(x) for x in self._run.final_scores()[0, :k]],
            spent=float(state.spent[0]),
            actions=[e.action for e in self._events if isinstance(e, Reveal)],
            skipped=self.skipped(),
            samples=k,
            draws=None
            if pool is None
            else [[int(pool.draw_at[0, e]), int(pool.draw_k[0, e])] for e in range(int(pool.draws[0]))],
        )

    def initial_scores(self) -> list[float]:
        """The policy's scores before any evidence (the cheap prior's for the spec's policies)."""
        state = self._run.state.fresh(self.budget)
        policy = make_policy(self.policy_name, **self.options)
        policy.start(state)
        return [float(x) for x in policy.final_scores(state)[0, : self.question.k]]

    def raw_majority(self) -> tuple[int, list[float]]:
        """The zero-evidence selection (the raw majority answer) and the cheap-prior scores."""
        state = self._run.state.fresh(self.budget)
        raw = make_policy("raw")
        return int(raw.select(state)[0]), [float(x) for x in raw.final_scores(state)[0, : self.question.k]]

    def transcript(self) -> dict[str, object]:
        """The spec section 7 transcript line of the session so far (with ``skipped`` ids when any)."""
        res = self.finish()
        return transcript_line(
            self.question,
            self.policy_name,
            self.budget,
            res.selected,
            res.spent,
            res.actions,
            res.scores,
            sorted(res.skipped),
            draws=res.draws,
        )


def transcript_line(
    question: Question,
    policy: str,
    budget: float,
    selected: int,
    cost: float,
    actions: Sequence[int],
    scores: list[float],
    skipped: Sequence[int] = (),
    *,
    draws: Sequence[Sequence[int]] | None = None,
) -> dict[str, object]:
    """One spec section 7 transcript line; ``skipped`` (spec section 10, menu order) appears only when not empty,
    ``samples`` and ``draws`` (spec section 12: [purchases before, candidates after] per draw) only for a pool
    that is not every candidate."""
    u = question.utility[selected]
    ids = question.action_ids
    line: dict[str, object] = {
        "question_id": question.question_id,
        "dataset": question.dataset,
        "policy": policy,
        "budget": int(budget) if float(budget).is_integer() else budget,
        "selected": selected,
        "actions": [ids[a] for a in actions],
        "cost": int(cost) if cost.is_integer() else cost,
        "scores": scores,
        "utility": None if math.isnan(u) else float(u),
    }
    if len(skipped):
        line["skipped"] = [ids[a] for a in skipped]
    if draws is not None:
        line["samples"] = int(draws[-1][1]) if draws else question.k
        line["draws"] = [[int(a), int(b)] for a, b in draws]
    return line
