"""The signed candidate–claim graph of one question, as compact arrays.

`Question.from_record` turns a validated ledger record into the arrays the
replay engine and the policies work on: the signed incidence matrix B
(claims x candidates), the per-action signed effect of a *confirm* outcome
(`alpha`, actions x candidates; a reject is its negation, unresolved is 0),
costs, calibration groups and the stored outcomes (kept apart from what
policies see).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from boe.core.ledger import FACTOR_KINDS, KINDS, LedgerRecord

__all__ = ["KIND_CODES", "OUTCOME_CODES", "GroupIndex", "Question", "answer_key"]

KIND_CODES: dict[str, int] = {kind: code for code, kind in enumerate(KINDS)}
WHOLE_CODE = KIND_CODES["whole_response"]
# Outcome codes double as the sign of the update relative to a confirm.
OUTCOME_CODES: dict[str, int] = {"confirm": 1, "reject": -1, "unresolved": 0}

F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
B_ = npt.NDArray[np.bool_]


def answer_key(answer: str | None) -> str | None:
    """The key under which two answers count as equal for the cheap prior."""
    return None if answer is None else answer.strip().lower()


class GroupIndex:
    """Maps calibration-group keys ("dataset/group") to dense integer ids, in first-seen order."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._ids: dict[str, int] = {}

    def id(self, key: str) -> int:
        gid = self._ids.get(key)
        if gid is None:
            gid = self._ids[key] = len(self.keys)
            self.keys.append(key)
        return gid

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: str) -> bool:
        return key in self._ids


@dataclass(eq=False)
class Question:
    """One question of a ledger as arrays (K candidates, A actions, M claims)."""

    question_id: str
    dataset: str
    answers: list[str | None]
    valid: B_  # (K,) valid and answer not null
    counts: F64  # (K,) n_i of the cheap prior
    answer_id: I32  # (K,) id of the candidate's answer among distinct valid answers, -1 if invalid
    utility: F64  # (K,) nan where unknown (evaluation data)
    claim_ids: list[str]
    incidence: I8  # (M, K) signed incidence B^T
    action_ids: list[str]
    kind: I8  # (A,) index into KINDS
    action_claim: I32  # (A,) claim index or -1
    action_candidate: I32  # (A,) candidate index or -1
    cost: F64  # (A,)
    group: I32  # (A,) global calibration-group id
    alpha: I8  # (A, K) signed effect of a confirm outcome
    outcome: I8 = field(repr=False)  # (A,) +1 confirm, -1 reject, 0 unresolved (stored, hidden from policies)

    @property
    def k(self) -> int:
        return len(self.answers)

    @property
    def n_actions(self) -> int:
        return len(self.action_ids)

    @property
    def is_factor(self) -> B_:
        return self.kind != WHOLE_CODE

    @property
    def labelled(self) -> bool:
        return bool(np.all(np.isfinite(self.utility)))

    @classmethod
    def from_record(cls, rec: LedgerRecord, groups: GroupIndex) -> Question:
        """Build the arrays of a validated record; group keys are registered in ``groups``."""
        k = len(rec.candidates)
        answers = [c.answer for c in rec.candidates]
        valid = np.array([c.valid and c.answer is not None for c in rec.candidates], dtype=bool)
        keys = [answer_key(a) if v else None for a, v in zip(answers, valid, strict=True)]
        tally: dict[str, int] = {}
        ids: dict[str, int] = {}
        for key in keys:
            if key is not None:
                tally[key] = tally.get(key, 0) + 1
                ids.setdefault(key, len(ids))
        counts = np.array([tally[key] if key is not None else 0 for key in keys], dtype=np.float64)
        answer_id = np.array([ids[key] if key is not None else -1 for key in keys], dtype=np.int32)
        utility = np.array(
            [np.nan if c.utility is None else float(c.utility) for c in rec.candidates], dtype=np.float64
        )
        claim_pos = {c.id: j for j, c in enumerate(rec.claims)}
        incidence = np.zeros((len(rec.claims), k), dtype=np.int8)
        for e in rec.edges:
            incidence[claim_pos[e.claim], e.candidate] = e.sign
        n_act = len(rec.actions)
        kind = np.empty(n_act, dtype=np.int8)
        a_claim = np.full(n_act, -1, dtype=np.int32)
        a_cand = np.full(n_act, -1, dtype=np.int32)
        cost = np.empty(n_act, dtype=np.float64)
        group = np.empty(n_act, dtype=np.int32)
        outcome = np.empty(n_act, dtype=np.int8)
        alpha = np.zeros((n_act, k), dtype=np.int8)
        for a, act in enumerate(rec.actions):
            kind[a] = KIND_CODES[act.kind]
            cost[a] = act.cost
            group[a] = groups.id(f"{rec.dataset}/{act.group}")
            outcome[a] = OUTCOME_CODES[act.outcome]
            if act.kind in FACTOR_KINDS:
                j = claim_pos[act.claim]  # type: ignore[index]
                a_claim[a] = j
                alpha[a] = incidence[j]
            else:
                a_cand[a] = act.candidate  # type: ignore[assignment]
                alpha[a, act.candidate] = 1  # type: ignore[index]
        return cls(
            question_id=rec.question_id,
            dataset=rec.dataset,
            answers=answers,
            valid=valid,
            counts=counts,
            answer_id=answer_id,
            utility=utility,
            claim_ids=[c.id for c in rec.claims],
            incidence=incidence,
            action_ids=[a.id for a in rec.actions],
            kind=kind,
            action_claim=a_claim,
            action_candidate=a_cand,
            cost=cost,
            group=group,
            alpha=alpha,
            outcome=outcome,
        )

    def action_stats(self) -> F64:
        """Calibration statistics of each action, shape (A, 7).

        Columns: candidates with realised alpha = +1, the sum of their U, the
        same for alpha = -1, then one-hot confirm / reject / unresolved.
        Candidates without a utility contribute no pair.
        """
        out = np.zeros((self.n_actions, 7), dtype=np.float64)
        if self.n_actions == 0:
            return out
        eff = self.alpha.astype(np.int16) * self.outcome[:, None]  # realised alpha, (A, K)
        known = np.isfinite(self.utility)
        u = np.where(known, self.utility, 0.0)
        pos = (eff == 1) & known
        neg = (eff == -1) & known
        out[:, 0] = pos.sum(1)
        out[:, 1] = (pos * u).sum(1)
        out[:, 2] = neg.sum(1)
        out[:, 3] = (neg * u).sum(1)
        out[:, 4] = self.outcome == 1
        out[:, 5] = self.outcome == -1
        out[:, 6] = self.outcome == 0
        return out
