"""Decoded ledger records straight into packed columns, a run of questions at a time.

`pack_records` builds for a run of `LedgerLine`s what `Question.from_record(rec, groups, check=True)` builds for
each one and `boe.core.packing.pack_questions` concatenates, with whole-array operations instead of a few dozen
small ones per question, and checks the same graph rules on the way. It takes the common shape (`fits`: no
declared kinds, not format 1.3) with one number of candidates per run; a record that breaks a rule is left out
and named, for the per-record path to explain (tests/core/test_columns.py: the same questions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_not
from typing import Any

import numpy as np
import numpy.typing as npt

from boe.core.graph import ANSWER_CODE, KIND_CODES, N_FACTOR_CODES, OUTCOME_CODES, WHOLE_CODE, GroupIndex, answer_key
from boe.core.ledger import FORMAT_1_1, FORMAT_1_2, FORMAT_1_3
from boe.core.packing import PackedQuestions, local_groups
from boe.core.structs import LedgerLine

__all__ = ["fits", "pack_records"]

_CANDIDATES, _CLAIMS, _EDGES, _ACTIONS = (attrgetter(n) for n in ("candidates", "claims", "edges", "actions"))
_ID, _CLAIM, _CANDIDATE, _ANSWER = (attrgetter(n) for n in ("id", "claim", "candidate", "answer"))
_FAILED, _OBSERVED, _SKIPPED = (attrgetter(n) for n in ("failed", "observed", "skipped"))
_ANSWER_FORMATS = (FORMAT_1_1, FORMAT_1_2, FORMAT_1_3)
_PER_CANDIDATE = ("valid", "counts", "answer_id", "utility", "sample_cost")
_PER_ACTION = ("kind", "action_claim", "action_candidate", "cost", "group", "outcome", "unobserved", "skipped")
_UNKNOWN = -2  # a kind the ledger format does not name, a claim id the record does not declare


def fits(rec: LedgerLine) -> bool:
    """Whether `pack_records` takes the record: no declared kinds, not format 1.3 (sample costs)."""
    return not rec.kinds and rec.format != FORMAT_1_3


def pack_records(recs: list[LedgerLine], lines: list[int]) -> tuple[PackedQuestions, list[int]] | None:
    """The questions of records that `fit` and have one number of candidates, packed, with the line of each; and
    the positions in ``recs`` of those that break a graph rule (left out). None when a number is beyond int64."""
    try:
        return _pack(recs, lines)
    except OverflowError:
        return None


def _pack(recs: list[LedgerLine], lines: list[int]) -> tuple[PackedQuestions, list[int]]:
    n, k = len(recs), len(recs[0].candidates)
    per_claims, per_edges, per_acts = (list(map(get, recs)) for get in (_CLAIMS, _EDGES, _ACTIONS))
    m, ne, na = (np.fromiter(map(len, per), np.intp, n) for per in (per_claims, per_edges, per_acts))
    cands = list(chain.from_iterable(map(_CANDIDATES, recs)))
    claims = list(chain.from_iterable(per_claims))
    edges = list(chain.from_iterable(per_edges))
    acts = list(chain.from_iterable(per_acts))
    bad = np.zeros(n, dtype=np.bool_)

    # candidates: the cheap prior's counts and answer ids, per question over a (K, K) table of equal answer keys
    answers = list(map(_ANSWER, cands))
    valid = _bools(map(attrgetter("valid"), cands), n * k) & _bools(map(is_not, answers, repeat(None)), n * k)
    index = np.fromiter(map(attrgetter("index"), cands), np.int64, n * k).reshape(n, k)
    bad |= (index != np.arange(k)).any(axis=1)
    answer_id, counts = _answer_ids(answers, valid.reshape(n, k))
    utility = np.array(list(map(attrgetter("utility"), cands)), dtype=np.float64)  # (None: nan)

    # claims by position in their record: one interned id per string, then a sorted (question, id) key
    strings: defaultdict[str | None, int] = defaultdict(count().__next__)
    strings[None]  # id 0: no claim
    claim_ids = list(map(_ID, claims))
    cid = np.fromiter(map(strings.__getitem__, claim_ids), np.int64, len(claims))
    eid = np.fromiter(map(strings.__getitem__, map(_CLAIM, edges)), np.int64, len(edges))
    aid = np.fromiter(map(strings.__getitem__, map(_CLAIM, acts)), np.int64, len(acts))
    rows = _Rows(m, cid, len(strings))
    bad[rows.repeated] = True

    # edges: a known claim and a candidate in range, each (candidate, claim) pair once
    eq = np.repeat(np.arange(n), ne)
    erow = rows.find(eq, eid)
    ecand = np.fromiter(map(_CANDIDATE, edges), np.int64, len(edges))
    ok = (erow >= 0) & (ecand >= 0) & (ecand < k)
    bad[eq[~ok]] = True
    incidence = np.zeros((rows.total, k), dtype=np.int8)
    sign = np.fromiter(map(attrgetter("sign"), edges), np.int8, len(edges))
    incidence[(rows.start[eq] + erow)[ok], ecand[ok]] = sign[ok]
    bad |= _per_question(np.count_nonzero(incidence, axis=1), rows.start) != ne

    # actions: the rules of `check_graph` on kind, claim and candidate; ids unique in their record
    aq = np.repeat(np.arange(n), na)
    kind = np.fromiter(map(KIND_CODES.get, map(attrgetter("kind"), acts), repeat(_UNKNOWN)), np.int64, len(acts))
    claim = np.where(aid == 0, -1, rows.find(aq, aid))
    claim[(aid != 0) & (claim < 0)] = _UNKNOWN
    cand_f = np.array(list(map(_CANDIDATE, acts)), dtype=np.float64).reshape(-1)  # (None: nan)
    no_cand = np.isnan(cand_f)
    cand_in = ~no_cand & (cand_f >= 0) & (cand_f < k)
    cand = np.where(cand_in, cand_f, 0).astype(np.intp)
    answers_ok = _bools((r.format in _ANSWER_FORMATS for r in recs), n)[aq] & valid.reshape(n, k)[aq, cand]
    factor = kind < N_FACTOR_CODES
    rule = np.where(
        factor,
        (kind >= 0) & no_cand & (claim >= 0),
        (claim == -1) & cand_in & ((kind != ANSWER_CODE) | answers_ok),
    )
    bad[aq[~rule]] = True
    ids = list(map(_ID, acts))
    a_off = np.concatenate(([0], np.cumsum(na))).tolist()
    bad |= np.fromiter(map(len, map(set, map(ids.__getitem__, map(slice, a_off[:-1], a_off[1:])))), np.intp, n) != na

    # a factor check's row is its claim's, a response check's its candidate's one-hot row, an answer check's every
    # valid candidate with its representative's answer
    table = np.concatenate((incidence, np.eye(k, dtype=np.int8), np.zeros((1, k), dtype=np.int8)))
    at = np.where(factor, rows.start[aq] + claim, np.where(kind == WHOLE_CODE, rows.total + cand, rows.total + k))
    alpha = table[np.where(rule, at, rows.total + k)]
    answer = np.flatnonzero((kind == ANSWER_CODE) & rule)
    if answer.size:
        rep = answer_id[aq[answer], cand[answer]]
        alpha[answer] = (answer_id[aq[answer]] == rep[:, None]) & (rep[:, None] >= 0)

    groups = GroupIndex()
    datasets = [r.dataset for r in recs]
    if datasets.count(datasets[0]) == n:
        group = groups.ids(datasets[0], list(map(attrgetter("group"), acts)))
    else:
        group = list(chain.from_iterable(groups.ids(r.dataset, [a.group for a in r.actions]) for r in recs))
    # (each flag scanned for first: most ledgers have none)
    menu = ~_bools(map(_FAILED, acts), len(acts)) if True in map(_FAILED, acts) else None
    unobserved = _flags(map(is_not, map(_OBSERVED, acts), repeat(True)), False in map(_OBSERVED, acts), len(acts))
    skipped = _flags(map(is_not, map(_SKIPPED, acts), repeat(None)), any(map(_SKIPPED, acts)), len(acts))
    on_menu = na if menu is None else _per_question(menu, a_off)
    arrays: dict[str, npt.NDArray[Any]] = {
        "line": np.array(lines, dtype=np.int64),
        "k": np.full(n, k, dtype=np.int32),
        "n_actions": on_menu.astype(np.int32),
        "n_claims": m.astype(np.int32),
        "valid": valid,
        "counts": counts.reshape(-1),
        "answer_id": answer_id.reshape(-1),
        "utility": utility,
        "kind": kind.astype(np.int8),
        "action_claim": claim.astype(np.int32),
        "action_candidate": np.where(no_cand, -1, cand).astype(np.int32),
        "cost": np.fromiter(map(attrgetter("cost"), acts), np.float64, len(acts)),
        "group": np.array(group, dtype=np.int32),
        "outcome": np.fromiter(map(OUTCOME_CODES.__getitem__, map(attrgetter("outcome"), acts)), np.int8, len(acts)),
        "incidence": incidence.reshape(-1),
        "alpha": alpha.reshape(-1),
        "has_unobserved": _per_question(unobserved if menu is None else unobserved & menu, a_off) > 0,
        "unobserved": unobserved,
        "has_skipped": _per_question(skipped if menu is None else skipped & menu, a_off) > 0,
        "skipped": skipped,
        "has_sample_cost": np.zeros(n, dtype=np.bool_),
        "sample_cost": np.zeros(n * k, dtype=np.float64),
    }
    strs = {
        "question_ids": [r.question_id for r in recs],
        "datasets": datasets,
        "answers": answers,
        "claim_ids": claim_ids,
        "action_ids": ids,
    }
    if bad.any() or menu is not None:  # the questions that pass, the actions on the menu (not failed: spec section 1)
        keep = ~bad
        per_candidate, per_claim, per_action = (np.repeat(keep, c) for c in (np.full(n, k), m, na))
        if menu is not None:
            per_action &= menu
        masks = {
            **dict.fromkeys(_PER_CANDIDATE, per_candidate),
            **dict.fromkeys(_PER_ACTION, per_action),
            "incidence": np.repeat(per_claim, k),
            "alpha": np.repeat(per_action, k),
        }
        arrays = {name: values[masks.get(name, keep)] for name, values in arrays.items()}
        parts = {"question_ids": keep, "datasets": keep, "answers": per_candidate}
        parts |= {"claim_ids": per_claim, "action_ids": per_action}
        strs = {name: list(compress(strs[name], part.tolist())) for name, part in parts.items()}
    arrays["group"], group_keys = local_groups(arrays["group"], groups.keys)
    packed = PackedQuestions(arrays=arrays, group_keys=group_keys, **strs)
    return packed, np.flatnonzero(bad).tolist()


class _Rows:
    """The claims of a run by (question, interned id): where each question's rows start, and a lookup."""

    def __init__(self, m: npt.NDArray[np.intp], cid: npt.NDArray[np.int64], n_ids: int) -> None:
        self.total = int(cid.size)
        self.start = np.concatenate(([0], np.cumsum(m)))
        self.n_ids = n_ids
        key = np.repeat(np.arange(m.size), m) * n_ids + cid
        self.order = np.argsort(key, kind="stable")
        self.sorted = key[self.order]
        same = np.flatnonzero(self.sorted[1:] == self.sorted[:-1])
        self.repeated = self.sorted[same] // n_ids  # questions with a claim id twice

    def find(self, q: npt.NDArray[np.intp], ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The row of claim ``ids[i]`` in question ``q[i]``, counted from the question's first; -1 when absent."""
        if not self.total:
            return np.full(ids.size, -1, dtype=np.int64)
        key = q * self.n_ids + ids
        at = np.minimum(np.searchsorted(self.sorted, key), self.total - 1)
        row: npt.NDArray[np.int64] = np.where(self.sorted[at] == key, self.order[at] - self.start[q], -1)
        return row


def _answer_ids(answers: list[str | None], valid: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[Any], ...]:
    """Per candidate, the id of its answer key among its question's valid ones (first-seen order, -1 invalid) and
    how many valid candidates share it (0 invalid)."""
    n, k = valid.shape
    keys: defaultdict[str | None, int] = defaultdict(count().__next__)
    flat = valid.reshape(-1).tolist()
    key = np.fromiter(
        map(keys.__getitem__, (answer_key(a) if v else None for a, v in zip(answers, flat, strict=True))),
        np.int64,
        n * k,
    ).reshape(n, k)
    same = (key[:, :, None] == key[:, None, :]) & valid[:, None, :]  # (question, candidate, other)
    first = same.argmax(axis=2)
    is_first = (first == np.arange(k)) & valid
    rank = np.cumsum(is_first, axis=1) - 1
    answer_id = np.where(valid, np.take_along_axis(rank, first, axis=1), -1).astype(np.int32)
    counts = np.where(valid, same.sum(axis=2), 0).astype(np.float64)
    return answer_id, counts


def _per_question(values: npt.NDArray[Any], start: Any) -> npt.NDArray[np.int64]:
    """Sums of ``values`` over each question's slice (``start``: the offsets, one more than questions)."""
    total = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    out: npt.NDArray[np.int64] = np.diff(total[np.asarray(start)])
    return out


def _bools(values: Iterator[Any], n: int) -> npt.NDArray[np.bool_]:
    return np.fromiter(values, np.bool_, n)


def _flags(values: Iterator[Any], some: bool, n: int) -> npt.NDArray[np.bool_]:
    """The flags when ``some`` are set, else n False."""
    return _bools(values, n) if some else np.zeros(n, dtype=np.bool_)
