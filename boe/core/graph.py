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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import not_
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from boe.core.ledger import (
    FORMAT_1_1,
    FORMAT_1_2,
    FORMAT_1_3,
    LedgerRecord,
    RecordDict,
    check_graph,
    kind_targets,
    ledger_view,
)

if TYPE_CHECKING:
    from boe.core.structs import LedgerLine

__all__ = ["ANSWER_CODE", "KIND_CODES", "OUTCOME_CODES", "GroupIndex", "Question", "answer_key"]

# Kind codes: the kinds the ledger format names, claim kinds first (then the response kind, then the answer kind),
# each in menu order; a declared kind takes the code of its target's parent (`LedgerKinds`).
_KINDS = ledger_view()
KIND_CODES: dict[str, int] = dict(_KINDS.codes)
WHOLE_CODE = _KINDS.code_of_target("response")
ANSWER_CODE = _KINDS.code_of_target("answer")
#: Factor kinds have the lowest codes.
N_FACTOR_CODES = sum(t == "claim" for t in _KINDS.core.values())
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
        self._local: dict[str, dict[str, int]] = {}  # dataset -> group name -> id (a cache of _ids)

    def id(self, key: str) -> int:
        gid = self._ids.get(key)
        if gid is None:
            gid = self._ids[key] = len(self.keys)
            self.keys.append(key)
        return gid

    def ids(self, dataset: str, names: list[str]) -> list[int]:
        """Ids of the keys ``dataset/name`` for each name, registering new ones in order of appearance."""
        local = self._local.get(dataset)
        if local is None:
            local = self._local[dataset] = {}
        try:
            return list(map(local.__getitem__, names))
        except KeyError:
            for name in names:
                if name not in local:
                    local[name] = self.id(f"{dataset}/{name}")
            return list(map(local.__getitem__, names))

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: str) -> bool:
        return key in self._ids


_UNKNOWN = -2  # a claim id the record does not declare
_T = TypeVar("_T")


@dataclass(eq=False, slots=True)
class _Columns:
    """One record as flat columns: claims by position (-1 none), candidates by index (-1 none)."""

    answers: list[str | None]
    valid: list[bool]  # valid and answer not null
    utility: list[float | None]
    claim_ids: list[str]
    edge_candidate: list[int]
    edge_claim: list[int]
    edge_sign: list[int]
    action_ids: list[str]
    kind: list[int]
    action_claim: list[int]
    action_candidate: list[int]
    cost: list[float]
    group: list[str]
    outcome: list[int]
    unobserved: list[bool]
    failed: list[bool] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)  # refused when proposed (spec section 10)
    claims_unique: bool = True
    candidates_none: int = 0  # actions whose candidate is null
    incidence: I8 | None = None
    sample_cost: list[float] | None = None  # format 1.3: each candidate's sample cost (spec section 12)

    def menu(self) -> _Columns:
        """The columns without failed checks: they are not part of the menu (spec section 1)."""
        if True not in self.failed:
            return self
        keep = list(map(not_, self.failed))

        def sel(xs: list[_T]) -> list[_T]:
            return list(compress(xs, keep))

        return replace(
            self,
            action_ids=sel(self.action_ids),
            kind=sel(self.kind),
            action_claim=sel(self.action_claim),
            action_candidate=sel(self.action_candidate),
            cost=sel(self.cost),
            group=sel(self.group),
            outcome=sel(self.outcome),
            unobserved=sel(self.unobserved),
            failed=[],
            skipped=sel(self.skipped) if self.skipped else [],
        )

    def rules_hold(self, indexes: list[int], fmt: str) -> bool:
        """The cross-field rules of `check_graph`, without naming the field (keeps the incidence matrix it builds)."""
        k = len(self.answers)
        if indexes != list(range(k)) or not self.claims_unique:
            return False
        if self.edge_candidate and (
            _UNKNOWN in self.edge_claim or min(self.edge_candidate) < 0 or max(self.edge_candidate) >= k
        ):
            return False
        incidence = _incidence(self, k)
        if np.count_nonzero(incidence) != len(self.edge_sign):  # a repeated (candidate, claim) pair
            return False
        self.incidence = incidence
        n = len(self.action_ids)
        if not n:
            return True
        if len(set(self.action_ids)) != n or self.action_candidate.count(-1) != self.candidates_none:
            return False  # (an explicit -1 is not a null candidate)
        answers_ok = fmt in (FORMAT_1_1, FORMAT_1_2, FORMAT_1_3)
        valid = self.valid
        # (plain Python: on a few dozen actions, cheaper than the dozen small numpy operations it would take)
        for kind, claim, cand in zip(self.kind, self.action_claim, self.action_candidate, strict=True):
            if kind < N_FACTOR_CODES:
                if kind < 0 or cand != -1 or claim < 0:
                    return False
            elif claim != -1 or not 0 <= cand < k or (kind == ANSWER_CODE and not (answers_ok and valid[cand])):
                return False
        return True


def _one_hot(k: int) -> I8:
    """The k x k identity and a row of zeros below it."""
    out = _ONE_HOT.get(k)
    if out is None:
        out = _ONE_HOT[k] = np.vstack((np.eye(k, dtype=np.int8), np.zeros((1, k), dtype=np.int8)))
    return out


_ONE_HOT: dict[int, I8] = {}


def _positions(claim_ids: list[str]) -> tuple[dict[str | None, int], bool]:
    """Claim id -> position (null -> -1), and whether the ids are unique."""
    pos: dict[str | None, int] = dict(zip(claim_ids, range(len(claim_ids)), strict=True))
    unique = len(pos) == len(claim_ids)
    pos[None] = -1
    return pos, unique


def _codes(declared: Mapping[str, Any] | None) -> dict[str, int]:
    """Kind -> code; revision 1.2: a declared kind takes the code of its target's parent."""
    if not declared:
        return KIND_CODES
    return {**{n: _KINDS.code_of_target(t) for n, t in kind_targets(declared).items()}, **KIND_CODES}


def _columns(rec: RecordDict) -> _Columns:
    """The columns of a record dict validated by `parse_record_dict` (every action, failed ones too)."""
    codes = _codes(rec.get("kinds"))
    cands = rec["candidates"]
    edges = rec.get("edges", ())
    acts = rec.get("actions", ())
    answers = [c.get("answer") for c in cands]
    claim_ids = [c["id"] for c in rec.get("claims", ())]
    pos, _ = _positions(claim_ids)
    get = pos.get
    candidates = [a.get("candidate") for a in acts]
    # (comprehensions with plain subscripts: cheaper per element than map with itemgetter on CPython 3.11)
    return _Columns(
        answers=answers,
        valid=[bool(c.get("valid", True)) and a is not None for a, c in zip(answers, cands, strict=True)],
        utility=[c.get("utility") for c in cands],
        claim_ids=claim_ids,
        edge_candidate=[e["candidate"] for e in edges],
        edge_claim=[get(e["claim"], _UNKNOWN) for e in edges],
        edge_sign=[e["sign"] for e in edges],
        action_ids=[a["id"] for a in acts],
        kind=[codes.get(a["kind"], _UNKNOWN) for a in acts],
        action_claim=[get(a.get("claim"), _UNKNOWN) for a in acts],
        action_candidate=[-1 if c is None else c for c in candidates],
        cost=[a["cost"] for a in acts],
        group=[a["group"] for a in acts],
        outcome=[OUTCOME_CODES[a["outcome"]] for a in acts],
        unobserved=[a.get("observed") is False for a in acts],
        failed=[bool(a.get("failed")) for a in acts],
        skipped=[a.get("skipped") is not None for a in acts],
        sample_cost=[c.get("cost") for c in cands] if rec["format"] == FORMAT_1_3 else None,
    )


def _incidence(cols: _Columns, k: int) -> I8:
    """The signed incidence matrix (claims x candidates) of known, in-range edges."""
    m = len(cols.claim_ids)
    flat = np.zeros(m * k, dtype=np.int8)
    if cols.edge_sign:
        at = np.array(cols.edge_claim, dtype=np.intp) * k + np.array(cols.edge_candidate, dtype=np.intp)
        flat[at] = cols.edge_sign
    return flat.reshape(m, k)


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
    sample_cost: F64 | None = None  # (K,) planning cost of drawing each candidate (format 1.3); None: not recorded

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
    def from_record(cls, rec: LedgerRecord | LedgerLine, groups: GroupIndex, check: bool = False) -> Question:
        """Build the arrays of a record validated by `parse_record` or decoded by `decode_record`; group keys are
        registered in ``groups``.

        ``check=True`` applies the ledger's cross-field rules on the way (raising `FieldRuleError` naming the
        field), for a decoded `LedgerLine`: vectorised while the arrays are built, and only when one fails does
        `check_graph` go through the record again to name it.
        """
        declared = (
            None if rec.kinds is None else {n: {"target": d.target, "plugin": d.plugin} for n, d in rec.kinds.items()}
        )
        cols = _record_columns(rec, _codes(declared))
        if check:
            _check_record(rec, cols, declared)
        return cls._build(rec.question_id, rec.dataset, cols.menu(), groups)

    @classmethod
    def from_dict(cls, rec: RecordDict, groups: GroupIndex) -> Question:
        """Build the arrays of a record validated by `parse_record_dict`."""
        return cls._build(rec["question_id"], rec["dataset"], _columns(rec).menu(), groups)

    @classmethod
    def _build(cls, question_id: str, dataset: str, cols: _Columns, groups: GroupIndex) -> Question:
        k = len(cols.answers)
        answers = cols.answers
        valid = np.array(cols.valid, dtype=bool)
        keys = [answer_key(a) if v else None for a, v in zip(answers, cols.valid, strict=True)]
        tally: dict[str, int] = {}
        ids: dict[str, int] = {}
        for key in keys:
            if key is not None:
                tally[key] = tally.get(key, 0) + 1
                ids.setdefault(key, len(ids))
        counts = np.array([tally[key] if key is not None else 0 for key in keys], dtype=np.float64)
        answer_id = np.array([ids[key] if key is not None else -1 for key in keys], dtype=np.int32)
        utility = np.array(cols.utility, dtype=np.float64)  # (None: nan)
        incidence = cols.incidence if cols.incidence is not None else _incidence(cols, k)
        kind = np.array(cols.kind, dtype=np.int8)
        a_claim = np.array(cols.action_claim, dtype=np.int32)
        a_cand = np.array(cols.action_candidate, dtype=np.int32)
        cost = np.array(cols.cost, dtype=np.float64)
        group = np.array(groups.ids(dataset, cols.group), dtype=np.int32)
        outcome = np.array(cols.outcome, dtype=np.int8)
        # a factor check's row is its claim's, a response check's its candidate's one-hot row, any other zero
        m = len(cols.claim_ids)
        rows = np.where(kind < N_FACTOR_CODES, a_claim, np.where(kind == WHOLE_CODE, m + a_cand, m + k))
        alpha = np.concatenate((incidence, _one_hot(k)))[rows]
        if ANSWER_CODE in cols.kind:
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
            claim_ids=cols.claim_ids,
            incidence=incidence,
            action_ids=cols.action_ids,
            kind=kind,
            action_claim=a_claim,
            action_candidate=a_cand,
            cost=cost,
            group=group,
            alpha=alpha,
            outcome=outcome,
            unobserved=np.array(cols.unobserved, dtype=bool) if True in cols.unobserved else None,
            skipped=np.array(cols.skipped, dtype=bool) if True in cols.skipped else None,
            sample_cost=None if cols.sample_cost is None else np.array(cols.sample_cost, dtype=np.float64),
        )

    def need(self) -> I32:
        """Per action, how many leading candidates must be drawn for it to be on the menu (spec section 12).

        A claim exists once a candidate asserts it (its first +1 edge; a claim nobody asserts needs the whole
        pool); a factor action needs its claim, a response check its candidate, an answer check its
        representative.
        """
        k = self.k
        asserted = self.incidence == 1  # (M, K)
        first = np.where(asserted.any(axis=1), np.argmax(asserted, axis=1) + 1, k)
        out = np.where(self.action_candidate >= 0, self.action_candidate + 1, 0)
        factor = self.is_factor
        if factor.any():
            out = np.where(factor, first[np.maximum(self.action_claim, 0)] if first.size else k, out)
        return out.astype(np.int32)

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


def _record_columns(rec: LedgerRecord | LedgerLine, codes: dict[str, int]) -> _Columns:
    """The columns of a validated or decoded record (see `Question.from_record`)."""
    cands, edges = rec.candidates, rec.edges
    claim_ids = [c.id for c in rec.claims]
    pos, unique = _positions(claim_ids)
    get = pos.get
    sampled = rec.format == FORMAT_1_3
    return _Columns(
        answers=[c.answer for c in cands],
        valid=[c.valid and c.answer is not None for c in cands],
        utility=[c.utility for c in cands],
        claim_ids=claim_ids,
        edge_candidate=[e.candidate for e in edges],
        edge_claim=[get(e.claim, _UNKNOWN) for e in edges],
        edge_sign=[e.sign for e in edges],
        claims_unique=unique,
        sample_cost=[c.cost for c in cands] if sampled else None,
        **_action_columns(rec.actions, pos, codes),
    )


def _action_columns(acts: Sequence[Any], claims: Mapping[Any, int], codes: dict[str, int]) -> dict[str, Any]:
    """The action columns of `_Columns` from a record's actions."""
    candidates = [a.candidate for a in acts]
    flagged = any(a.failed or a.skipped is not None or a.observed is False for a in acts)
    return {
        "action_ids": [a.id for a in acts],
        "kind": [codes.get(a.kind, _UNKNOWN) for a in acts],
        "action_claim": [claims.get(a.claim, _UNKNOWN) for a in acts],
        "action_candidate": [-1 if c is None else c for c in candidates],
        "cost": [a.cost for a in acts],
        "group": [a.group for a in acts],
        "outcome": [OUTCOME_CODES[a.outcome] for a in acts],
        "unobserved": [a.observed is False for a in acts] if flagged else [],
        "failed": [a.failed for a in acts] if flagged else [],
        "skipped": [a.skipped is not None for a in acts] if flagged else [],
        "candidates_none": candidates.count(None),
    }


def _check_record(rec: LedgerRecord | LedgerLine, cols: _Columns, declared: dict[str, dict[str, Any]] | None) -> None:
    """The ledger's cross-field rules on a decoded record, vectorised; `check_graph` names a broken one."""
    cands = rec.candidates
    indexes = [c.index for c in cands]
    sampled = rec.format == FORMAT_1_3
    if declared or sampled or not cols.rules_hold(indexes, rec.format):
        check_graph(
            indexes,
            cols.claim_ids,
            [(e.candidate, e.claim, e.sign) for e in rec.edges],
            [(a.id, a.kind, a.claim, a.candidate) for a in rec.actions],
            valid=cols.valid,
            fmt=rec.format,
            kinds=declared,
            pool=[(c.cost, c.answer) for c in cands] if sampled else None,
        )
        if not declared and not sampled:
            raise AssertionError("the vectorised graph rules and check_graph disagree")
