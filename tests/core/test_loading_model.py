"""The loader (msgspec Structs, vectorised graph rules, the parent and its workers) loads what the model builds."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core import loading
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record
from boe.core.loading import load_ledgers, load_lines
from boe.errors import RecordError
from tests.core.strategies import ledgers
from tests.core.test_packing import assert_same_questions

# Ways to break (or bend) one record: each is one of the graph rules, a flag, or a number beyond int64.
MUTATIONS = [
    "edge candidate out of range",
    "edge candidate negative",
    "edge claim unknown",
    "edge twice",
    "claim twice",
    "action claim unknown",
    "whole check with a claim",
    "factor check with a candidate",
    "candidate -1",
    "candidate out of range",
    "whole check without a candidate",
    "answer check in format 1",
    "action id twice",
    "indexes out of order",
    "failed",
    "unobserved",
    "skipped",
    "huge integer",
    "question id twice",
    "plugin-free kinds",
]


def mutate(rec: dict[str, Any], how: str, pick: int) -> dict[str, Any]:
    """The record changed in one way (``pick`` chooses the element); unchanged when it has no such element."""
    rec = copy.deepcopy(rec)
    cands, claims, edges, acts = rec["candidates"], rec["claims"], rec["edges"], rec["actions"]
    k = len(cands)
    factor = [a for a in acts if a["claim"] is not None]
    other = [a for a in acts if a["claim"] is None]
    if how.startswith("edge") and edges:
        e = edges[pick % len(edges)]
        if how == "edge twice":
            edges.append({**e, "sign": -e["sign"] if pick % 2 else e["sign"]})
        elif how == "edge claim unknown":
            e["claim"] = "nowhere"
        else:
            e["candidate"] = k if how.endswith("range") else -1
    elif how == "claim twice" and claims:
        claims.append(dict(claims[pick % len(claims)]))
    elif how == "action claim unknown" and factor:
        factor[pick % len(factor)]["claim"] = "nowhere"
    elif how == "whole check with a claim" and other and claims:
        other[pick % len(other)]["claim"] = claims[0]["id"]
    elif how == "factor check with a candidate" and factor:
        factor[pick % len(factor)]["candidate"] = 0
    elif how.startswith("candidate") and other:
        other[pick % len(other)]["candidate"] = -1 if how.endswith("-1") else k
    elif how == "whole check without a candidate" and other:
        other[pick % len(other)]["candidate"] = None
    elif how == "answer check in format 1":
        rec["format"] = "boe-ledger/1"
    elif how == "action id twice" and len(acts) > 1:
        acts[pick % len(acts)]["id"] = acts[(pick + 1) % len(acts)]["id"]
    elif how == "indexes out of order" and k > 1:
        cands[0]["index"], cands[1]["index"] = 1, 0
    elif how in ("failed", "unobserved", "skipped") and acts:
        for a in acts[pick % len(acts) :: 2]:
            a.update({"failed": True} if how == "failed" else {"observed": False} if how == "unobserved" else {})
            if how == "skipped":
                a["skipped"] = "budget"
    elif how == "huge integer" and other:
        other[pick % len(other)]["candidate"] = 2**63 + pick
    elif how == "question id twice":
        rec["question_id"] = "q0"
    elif how == "plugin-free kinds":
        rec["kinds"] = {}
    return rec


def reference(lines: list[str]) -> tuple[list[Question], GroupIndex, list[tuple[int | None, str]]]:
    """Record by record through the pydantic model, as the loader's per-record path reads them."""
    groups = GroupIndex()
    questions: list[Question] = []
    errors: list[tuple[int | None, str]] = []
    seen: set[tuple[str, str]] = set()
    for line, raw in enumerate(lines, start=1):
        try:
            rec = parse_record(raw, source="f", line=line)
        except RecordError as err:
            errors.append((err.line, err.message))
            continue
        q = Question.from_record(rec, groups)  # (a repeated question registers its groups too, as ever)
        if (q.dataset, q.question_id) in seen:
            errors.append((line, "question id already seen for this dataset"))
            continue
        seen.add((q.dataset, q.question_id))
        questions.append(q)
    return questions, groups, errors


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ledgers(max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.sampled_from(MUTATIONS), st.integers(0, 50)), max_size=4),
)
def test_the_loader_reads_broken_and_flagged_records_as_the_model(recs, changes):
    for at, how, pick in changes:
        if at < len(recs):
            recs[at] = mutate(recs[at], how, pick)
    lines = [json.dumps(r) for r in recs]
    want, want_groups, want_errors = reference(lines)
    errors: list[RecordError] = []
    got, groups = load_lines(lines, "f", on_error=errors.append)
    assert [(e.line, e.message) for e in errors] == want_errors
    assert groups.keys == want_groups.keys
    assert_same_questions(got, want)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    ledgers(min_size=2, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.sampled_from(MUTATIONS), st.integers(0, 50)), max_size=3),
    st.sampled_from([2, 3]),
    st.integers(50, 3000),
)
def test_the_parent_and_its_workers_load_what_one_process_loads(tmp_path, recs, changes, workers, chunk):
    """The parent reads the first 1/n, workers the rest in chunks: the same questions, groups and errors."""
    for at, how, pick in changes:
        if at < len(recs):
            recs[at] = mutate(recs[at], how, pick)
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" + ("\n" if i % 3 == 1 else "") for i, r in enumerate(recs)))
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loading, "PARALLEL_BYTES", 0)
        mp.setattr(loading, "CHUNK_BYTES", chunk)
        for n in (1, workers):
            errors: list[RecordError] = []
            qs, groups = load_ledgers([path], on_error=errors.append, workers=n)
            runs.append((qs, groups.keys, [(e.line, e.message, e.describe()) for e in errors]))
    (want, want_keys, want_errors), (got, keys, got_errors) = runs
    assert got_errors == want_errors
    assert keys == want_keys
    assert_same_questions(got, want)
