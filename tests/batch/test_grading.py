"""A batch's utilities come from the dataset's evaluator (rules, or an LLM grader for undecided answers)."""

from __future__ import annotations

import asyncio
import json

from boe.batch.grading import regrade
from boe.datasets import AnswerEvaluator, DatasetItem, SemanticGrader


def record(*answers: str | None) -> dict:
    return {
        "candidates": [
            {"index": i, "answer": a, "answer_text": a, "valid": a is not None, "utility": None}
            for i, a in enumerate(answers)
        ]
    }


def test_candidates_and_the_transcript_get_the_evaluators_utilities() -> None:
    item = DatasetItem("q1", "t", "how big is the mass?", "3 cm", "open", alternatives=("30 mm",))
    rec, tr = record("30 mm", "3.0 cm", "5 cm", None, "30 mm"), {"selected": 2}
    assert asyncio.run(regrade(rec, tr, item, AnswerEvaluator())) == []
    assert [c["utility"] for c in rec["candidates"]] == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert [c["grade"]["method"] for c in rec["candidates"]] == ["exact", "numeric", "numeric", "empty", "exact"]
    assert tr["utility"] == 0.0 and rec["evaluation"]["uses_llm"] is False


def test_option_letters_are_graded_against_the_label() -> None:
    item = DatasetItem("q2", "t", "which?", "B", "mcq", options={"A": "CT", "B": "MRI"}, label="B")
    rec, tr = record("B", "(A)", "MRI", "E"), {"selected": 0}
    asyncio.run(regrade(rec, tr, item, AnswerEvaluator()))
    assert [c["utility"] for c in rec["candidates"]] == [1.0, 0.0, 1.0, 0.0] and tr["utility"] == 1.0


def test_the_llm_grader_sees_each_undecided_answer_once() -> None:
    asked: list[str] = []

    async def chat(system: str, user: str, schema: dict) -> str:
        asked.append(user)
        return json.dumps({"equivalent": "pleural" in user, "rationale": "r"})

    item = DatasetItem("q3", "t", "what is seen?", "effusion", "open")
    grader = AnswerEvaluator(semantic=SemanticGrader(chat))
    rec, tr = record("pleural fluid", "pleural fluid", "effusion", "nodule"), {"selected": 1}
    asyncio.run(regrade(rec, tr, item, grader))
    assert [c["utility"] for c in rec["candidates"]] == [1.0, 1.0, 1.0, 0.0]
    assert [c["grade"]["method"] for c in rec["candidates"]] == ["llm", "llm", "exact", "llm"]
    assert len(asked) == 2 and rec["evaluation"]["uses_llm"] is True and tr["utility"] == 1.0
