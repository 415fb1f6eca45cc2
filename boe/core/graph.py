"""The signed candidate–claim graph of one question, as compact arrays.

`Question.from_record` turns a validated ledger record into the arrays the
replay engine and the policies work on: the signed incidence matrix B
(claims x candidates), the per-action signed effect of a *confirm* outcome
(`alpha`, actions x candidates; a reject is its negation, unresolved is 0;
an answer-level check moves every valid candidate sharing its representative's
answer, spec section 8),
costs, calibration groups and the stored outcomes (kept apart from what
policies see).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.ledger import (
    ALL_KINDS,
    ANSWER_KIND,
    FACTOR_KINDS,
    TARGET_PARENT,
    WHOLE_KIND,
    LedgerRecord,
    RecordDict,
    check_graph,
    kind_targets,
    valid_flags,
)

__all__ = ["ANSWER_CODE", "KIND_CODES", "OUTCOME_CODES", "GroupIndex", "Question", "answer_key"]

KIND_CODES: dict[str, int] = {kind: code for code, kind in enumerate(ALL_KINDS)}
WHOLE_CODE = KIND_CODES[WHOLE_KIND]
ANSWER_CODE = KIND_CODES[ANSWER_KIND]
#: Factor kinds have the lowest codes.
N_FACTOR_CODES = len(FACTOR_KINDS)
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
    action_candidate: I32  # (A,) target (whole-response) or representative (answer check) candidate, or -1
    cost: F64  # (A,)
    group: I32  # (A,) global calibration-group id
    alpha: I8  # (A, K) signed effect of a confirm outcome
    outcome: I8 = field(repr=False)  # (A,) +1 confirm, -1 reject, 0 unresolved (stored, hidden from policies)
    unobserved: B_ | None = None  # (A,) actions an online run never ran ("observed": false); None: all observed
    skipped: B_ | None = None  # (A,) actions refused whenever a policy proposes them (spec section 10); None: none

    @property
    def k(self) -> int:
        return len(self.answers)

    @property
    def n_actions(self) -> int:
        return len(self.action_ids)

    @property
    def is_factor(self) -> B_:
        out: B_ = self.kind < N_FACTOR_CODES
        return out

    @property
    def is_answer(self) -> B_:
        """Answer-level response checks (format 1.1)."""
        out: B_ = self.kind == ANSWER_CODE
        return out

    @property
    def labelled(self) -> bool:
        return bool(np.all(np.isfinite(self.utility)))

    @classmethod
    def from_record(cls, rec: LedgerRecord, groups: GroupIndex) -> Question:
        """Build the arrays of a validated `LedgerRecord`; group keys are registered in ``groups``."""
        acts = [a for a in rec.actions if not a.failed]  # a failed check is not on the menu (spec section 1)
        q = cls._build(
            rec.question_id,
            rec.dataset,
            [(c.answer, c.valid, c.utility) for c in rec.candidates],
            [c.id for c in rec.claims],
            [(e.candidate, e.claim, e.sign) for e in rec.edges],
            [(a.id, a.kind, a.claim, a.candidate, a.cost, a.group, a.outcome) for a in acts],
            groups,
            None if rec.kinds is None else {k: d.target for k, d in rec.kinds.items()},
        )
        unobserved = [a.observed is False for a in acts]
        if any(unobserved):
            q.unobserved = np.array(unobserved, dtype=bool)
        skipped = [a.skipped is not None for a in acts]
        if any(skipped):
            q.skipped = np.array(skipped, dtype=bool)
        return q

    @classmethod
    def from_dict(cls, rec: RecordDict, groups: GroupIndex, check: bool = False) -> Question:
        """Build the arrays of a record validated by `parse_record_dict`.

        ``check=True`` applies the ledger's cross-field rules on the way
        (raising `FieldRuleError`), for records parsed with ``check=False``.
        """
        cands = rec["candidates"]
        claim_ids = [c["id"] for c in rec.get("claims", ())]
        edges = [(e["candidate"], e["claim"], e["sign"]) for e in rec.get("edges", ())]
        actions = [
            (a["id"], a["kind"], a.get("claim"), a.get("candidate"), a["cost"], a["group"], a["outcome"])
            for a in rec.get("actions", ())
        ]
        if check:
            check_graph(
                [c["index"] for c in cands],
                claim_ids,
                edges,
                actions,
                valid=valid_flags(cands),
                fmt=rec["format"],
                kinds=rec.get("kinds"),
            )
        acts = rec.get("actions", ())
        if any(a.get("failed") for a in acts):  # a failed check is not on the menu (spec section 1)
            actions = [t for t, a in zip(actions, acts, strict=True) if not a.get("failed")]
            acts = [a for a in acts if not a.get("failed")]
        unobserved = [a.get("observed") is False for a in acts]
        q = cls._build(
            rec["question_id"],
            rec["dataset"],
            [(c.get("answer"), c.get("valid", True), c.get("utility")) for c in cands],
            claim_ids,
            edges,
            actions,
            groups,
            rec.get("kinds"),
        )
        if any(unobserved):
            q.unobserved = np.array(unobserved, dtype=bool)
        skipped = [a.get("skipped") is not None for a in acts]
        if any(skipped):
            q.skipped = np.array(skipped, dtype=bool)
        return q

    @classmethod
    def _build(
        cls,
        question_id: str,
        dataset: str,
        cands: list[tuple[str | None, bool, float | None]],
        claim_ids: list[str],
        edges: list[tuple[int, str, int]],
        actions: list[tuple[str, str, str | None, int | None, float, str, str]],
        groups: GroupIndex,
        declared: Mapping[str, Any] | None = None,
    ) -> Question:
        k = len(cands)
        answers = [c[0] for c in cands]
        valid = np.array([bool(v) and a is not None for a, v, _ in cands], dtype=bool)
        keys = [answer_key(a) if v else None for a, v in zip(answers, valid, strict=True)]
        tally: dict[str, int] = {}
        ids: dict[str, int] = {}
        for key in keys:
            if key is not None:
                tally[key] = tally.get(key, 0) + 1
                ids.setdefault(key, len(ids))
        counts = np.array([tally[key] if key is not None else 0 for key in keys], dtype=np.float64)
        answer_id = np.array([ids[key] if key is not None else -1 for key in keys], dtype=np.int32)
        utility = np.array([np.nan if u is None else float(u) for _, _, u in cands], dtype=np.float64)
        claim_pos = {c: j for j, c in enumerate(claim_ids)}
        incidence = np.zeros((len(claim_ids), k), dtype=np.int8)
        if edges:
            e_cand, e_claim, e_sign = zip(*edges, strict=True)
            incidence[[claim_pos[c] for c in e_claim], list(e_cand)] = e_sign
        n_act = len(actions)
        if declared:  # revision 1.2: a plugin kind takes the code of the core kind of its target
            targets = kind_targets(declared)
            codes = {**{n: KIND_CODES[TARGET_PARENT[t]] for n, t in targets.items()}, **KIND_CODES}
        else:
            codes = KIND_CODES
        kind = np.array([codes[a[1]] for a in actions], dtype=np.int8)
        a_claim = np.array([-1 if a[2] is None else claim_pos[a[2]] for a in actions], dtype=np.int32)
        a_cand = np.array([-1 if a[3] is None else a[3] for a in actions], dtype=np.int32)
        cost = np.array([a[4] for a in actions], dtype=np.float64)
        gid = groups.id
        group = np.array([gid(f"{dataset}/{a[5]}") for a in actions], dtype=np.int32)
        outcome = np.array([OUTCOME_CODES[a[6]] for a in actions], dtype=np.int8)
        alpha = np.zeros((n_act, k), dtype=np.int8)
        if n_act:
            factor = kind < N_FACTOR_CODES
            alpha[factor] = incidence[a_claim[factor]]
            whole = np.nonzero(kind == WHOLE_CODE)[0]
            alpha[whole, a_cand[whole]] = 1
            answer = np.nonzero(kind == ANSWER_CODE)[0]
            if answer.size:  # every valid candidate with the representative's answer (validated: rep is valid)
                rep = answer_id[a_cand[answer]]
                alpha[answer] = (answer_id[None, :] == rep[:, None]) & (rep[:, None] >= 0)
        return cls(
            question_id=question_id,
            dataset=dataset,
            answers=answers,
            valid=valid,
            counts=counts,
            answer_id=answer_id,
            utility=utility,
            claim_ids=list(claim_ids),
            incidence=incidence,
            action_ids=[a[0] for a in actions],
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
