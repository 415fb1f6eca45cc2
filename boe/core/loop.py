"""The policy loop of spec sections 6 and 9: propose, then reveal, skip or draw.

`PolicySession` runs one policy over a batch of questions (an `EvidenceState` with Q rows): `propose` asks
the policy for every row's next action (-1: the row stops for good), `reveal` buys proposed actions with
their outcomes, `skip` refuses them (a veto by a person or a program, or a tool that failed) and `draw`
draws the more candidates an adaptive pool proposed, after which the policy proposes again. It is the only
loop: `run_policy` drives it over many questions, answering proposals from the stored outcomes and
`skipped` flags of a ledger (the replay, and the `bayes` fit's own trial runs), and `boe.core.session.Session`
drives it for one question online, one event at a time.

It imports no policy: the `bayes` model runs it while fitting, below the pools and the replay that use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from boe.core.graph import Question
from boe.core.policies import Policy
from boe.core.state import EvidenceState
from boe.errors import BoeError

__all__ = ["STOP", "PolicySession", "SessionError", "draw_code", "drawn", "run_policy", "skipped_mask"]

IntArr = npt.NDArray[np.intp]

#: The proposal to stop for good.
STOP = -1
#: A consumed proposal (revealed, skipped or drawn): the row must be proposed to again.
_STALE = -2


def draw_code(m: int) -> int:
    """The proposal to draw ``m`` >= 1 more candidates (an adaptive pool, spec section 12): -2 - m."""
    return -2 - m


def drawn(code: int) -> int:
    """How many candidates a proposal draws (0 for a check or a stop)."""
    return -2 - code if code <= -3 else 0


class SessionError(BoeError):
    """An event that does not follow the session: not the proposed action, or after the stop."""


class PolicySession:
    """One policy on a batch of questions, advanced by proposals and their answers."""

    def __init__(self, state: EvidenceState, policy: Policy) -> None:
        self.state = state
        self.policy = policy
        self._proposal: IntArr | None = None
        policy.start(state)

    def propose(self) -> IntArr:
        """Each row's next action (index into its menu) or -1; rows proposed -1 are done for good.

        The policy chooses once per state: asking again before an answer returns the same proposals.
        """
        prop = self._proposal
        if prop is None or bool(np.any(prop == _STALE)):
            state = self.state
            prop = np.where(state.done, STOP, self.policy.choose(state))
            state.done |= prop == STOP
            self._proposal = prop
        return prop

    def _consume(self, rows: IntArr, actions: IntArr, what: str) -> None:
        prop = self._proposal
        if prop is None or not np.array_equal(prop[rows], actions):
            got = None if prop is None else prop[rows].tolist()
            raise SessionError(f"{what} {actions.tolist()} where the policy proposed {got}")
        prop[rows] = _STALE

    def reveal(self, rows: IntArr, actions: IntArr, outcomes: npt.NDArray[np.int8]) -> None:
        """Buy the proposed ``actions[j]`` of rows ``rows[j]`` with their outcomes (codes +1, -1, 0)."""
        if rows.size == 0:
            return
        self._consume(rows, actions, "revealed")
        self.state.reveal(rows, actions, outcomes)
        self.policy.observe(self.state, rows, actions, outcomes)

    def skip(self, rows: IntArr, actions: IntArr) -> None:
        """Refuse the proposed ``actions[j]`` of rows ``rows[j]``: never bought, never proposed again, no cost."""
        if rows.size == 0:
            return
        self._consume(rows, actions, "skipped")
        self.state.refuse(rows, actions)

    def draw(self, rows: IntArr, codes: IntArr) -> None:
        """Draw the proposed more candidates of rows ``rows`` (codes from `draw_code`), then rebuild the policy on
        the larger pool from its purchases in order (spec section 12: a policy on a pool of k with a transcript
        is the fresh policy on that pool given the same transcript)."""
        if rows.size == 0:
            return
        self._consume(rows, codes, "drew")
        state = self.state
        assert state.pool is not None
        state.draw(rows, state.pool.k[rows] + (-2 - codes).astype(np.int32))
        self._rebuild()

    def _rebuild(self) -> None:
        state = self.state
        pool = state.pool
        assert pool is not None
        log, revealed, steps = state.log.copy(), state.revealed.copy(), state.steps.copy()
        state.logit = state.logit0.copy()
        state.bought[:] = False
        pool.check_spent[:] = 0.0
        state.spent = pool.sample_spent.copy()
        state.steps[:] = 0
        state.log[:] = -1
        self.policy.start(state)
        for step in range(int(steps.max(initial=0))):
            rows = np.nonzero(steps > step)[0]
            acts = log[rows, step].astype(np.intp)
            outs = revealed[rows, step]
            state.reveal(rows, acts, outs)
            self.policy.observe(state, rows, acts, outs)

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        """Keep only the rows where ``mask`` is true (finished rows are compacted away by the replay)."""
        self.state = self.state.keep(mask)
        self._proposal = None if self._proposal is None else self._proposal[mask]

    def select(self) -> IntArr:
        """The policy's selected candidate per row."""
        return self.policy.select(self.state)

    def final_scores(self) -> npt.NDArray[np.float64]:
        """The policy's final scores per row (padding 0)."""
        return self.policy.final_scores(self.state)


def run_policy(
    state: EvidenceState,
    policy: Policy,
    outcomes: npt.NDArray[np.int8],
    sink: Callable[[EvidenceState, Policy], None],
    skipped: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Run ``policy`` on every row of ``state`` to its stop, answering its proposals from the ledger.

    A proposed action is bought with its stored outcome (``outcomes``, Q x A),
    or refused when ``skipped`` (Q x A) marks it (spec section 10), after which
    the policy proposes again; a proposed draw (an adaptive pool, spec section
    12) reveals the ledger's next candidates. Finished rows are handed to
    ``sink`` (with the policy, to read selections and scores) before they are
    compacted away, and all rows at the end.
    """
    session = PolicySession(state, policy)
    while True:
        state = session.state
        live = ~state.done
        n_live = int(live.sum())
        if n_live == 0:
            break
        if n_live * 2 < state.n and state.n > 32:
            sink(state.keep(~live), policy)
            session.keep(live)
            outcomes = outcomes[live]
            skipped = None if skipped is None else skipped[live]
        choice = session.propose()
        go = np.nonzero(choice >= 0)[0]
        if go.size:
            acts = choice[go]
            if skipped is not None:
                refuse = skipped[go, acts]
                if refuse.any():
                    session.skip(go[refuse], acts[refuse])
                    go, acts = go[~refuse], acts[~refuse]
            session.reveal(go, acts, outcomes[go, acts])
        draw = np.nonzero(choice <= -3)[0]
        if draw.size:
            session.draw(draw, choice[draw])
    sink(session.state, policy)


def skipped_mask(
    questions: Sequence[Question], rows: npt.NDArray[np.intp], shape: tuple[int, ...]
) -> npt.NDArray[np.bool_] | None:
    """The (Q, A) mask of actions a run refused (spec section 10) for a batch's rows; None when there are none."""
    if all(questions[r].skipped is None for r in rows):
        return None
    out = np.zeros(shape, dtype=bool)
    for i, r in enumerate(rows):
        sk = questions[r].skipped
        if sk is not None:
            out[i, : sk.shape[0]] = sk
    return out
