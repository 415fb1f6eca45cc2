"""Hypothesis strategies for random ledger records (format 1, 1.1 with answer-level checks, 1.2 with plugin kinds)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

OUTCOMES = ("confirm", "reject", "unresolved")
FACTOR = ("structured", "vlm_factor", "grounded_factor")
#: Plugin kinds the tests register (tests/core/test_plugin_kinds.py), by target; and the core kind of each target.
PLUGIN = {"claim": "test_claim_kind", "response": "test_response_kind", "answer": "test_answer_kind"}
PARENT = {"claim": "vlm_factor", "response": "whole_response", "answer": "answer_response"}


def as_plugin_kinds(rec: dict[str, Any], pick: list[bool]) -> dict[str, Any]:
    """The record with the picked actions of the parents' kinds renamed to the test plugin kinds (format 1.2)."""
    by_parent = {v: k for k, v in PARENT.items()}
    out = {**rec, "actions": [dict(a) for a in rec["actions"]]}
    used: dict[str, dict[str, str]] = {}
    for a, yes in zip(out["actions"], pick, strict=False):
        target = by_parent.get(a["kind"])
        if yes and target is not None:
            a["kind"] = PLUGIN[target]
            used[PLUGIN[target]] = {"target": target, "plugin": "boe-test-plugin"}
    if used:
        out["format"] = "boe-ledger/1.2"
        out["kinds"] = used
    return out


@st.composite
def records(
    draw: st.DrawFn,
    max_k: int = 6,
    max_claims: int = 5,
    max_actions: int = 12,
    qid: str = "q",
    answer_checks: bool = True,
) -> dict[str, Any]:
    """A valid record with random pool, signed graph, costed menu and outcomes.

    With ``answer_checks`` some records hold answer-level checks (and format 1.1).
    """
    k = draw(st.integers(1, max_k))
    alphabet = ["a", "b", "c", "A ", " b"]
    candidates = []
    for i in range(k):
        answer = draw(st.one_of(st.none(), st.sampled_from(alphabet)))
        valid = draw(st.booleans()) if answer is not None else False
        if answer is not None and draw(st.integers(0, 4)) > 0:
            valid = True
        candidates.append({"index": i, "answer": answer, "valid": valid, "utility": float(draw(st.integers(0, 1)))})
    m = draw(st.integers(0, max_claims))
    claims = [{"id": f"c{j}", "slot": f"s{j % 2}", "value": str(j), "figure": None} for j in range(m)]
    edges = []
    for j in range(m):
        for i in range(k):
            sign = draw(st.sampled_from([0, 0, 1, -1]))
            if sign:
                edges.append({"candidate": i, "claim": f"c{j}", "sign": sign})
    n_act = draw(st.integers(0, max_actions))
    actions = []
    groups = ["g1", "g2", "structured/s0"]
    valid = [i for i, c in enumerate(candidates) if c["valid"]]
    with_answers = answer_checks and bool(valid) and draw(st.booleans())
    for a in range(n_act):
        whole = m == 0 or draw(st.integers(0, 3)) == 0
        cost = draw(st.sampled_from([1, 1, 2, 4, 8, 0.5, 3]))
        outcome = draw(st.sampled_from(OUTCOMES))
        if with_answers and draw(st.integers(0, 2)) == 0:
            actions.append(
                {
                    "id": f"a{a}",
                    "kind": "answer_response",
                    "claim": None,
                    "candidate": draw(st.sampled_from(valid)),
                    "cost": cost,
                    "group": draw(st.sampled_from(["answer", "whole"])),
                    "outcome": outcome,
                }
            )
        elif whole:
            actions.append(
                {
                    "id": f"w{a}",
                    "kind": "whole_response",
                    "claim": None,
                    "candidate": draw(st.integers(0, k - 1)),
                    "cost": cost,
                    "group": "whole",
                    "outcome": outcome,
                }
            )
        else:
            actions.append(
                {
                    "id": f"f{a}",
                    "kind": draw(st.sampled_from(FACTOR)),
                    "claim": f"c{draw(st.integers(0, m - 1))}",
                    "candidate": None,
                    "cost": cost,
                    "group": draw(st.sampled_from(groups)),
                    "outcome": outcome,
                }
            )
    answer = any(x["kind"] == "answer_response" for x in actions)
    return {
        "format": "boe-ledger/1.1" if answer else "boe-ledger/1",
        "question_id": qid,
        "dataset": draw(st.sampled_from(["d1", "d2"])),
        "task": {"question": "?", "image": None, "options": None},
        "reference": "a",
        "candidates": candidates,
        "claims": claims,
        "edges": edges,
        "actions": actions,
    }


@st.composite
def ledgers(draw: st.DrawFn, min_size: int = 1, max_size: int = 6, answer_checks: bool = True) -> list[dict[str, Any]]:
    n = draw(st.integers(min_size, max_size))
    return [draw(records(qid=f"q{i}", answer_checks=answer_checks)) for i in range(n)]
