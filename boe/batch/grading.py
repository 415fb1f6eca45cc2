"""Utilities of a batch's candidates from the dataset's answer evaluation, not the agent's own matcher.

The agent grades a candidate's canonical answer against the reference with
its vocabulary (enough for ``boe ask --reference``). A batch knows each
item's accepted answers, option label and answer type, so the stored
utilities come from `boe.datasets.AnswerEvaluator` (deterministic by
default; an LLM `SemanticGrader` for undecided open answers when the run asks
for one). Each candidate keeps how it was graded; the transcript's utility is
that of the selected candidate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from boe.datasets import AnswerEvaluator, DatasetItem, Grade

__all__ = ["regrade"]


async def regrade(
    record: dict[str, Any], transcript: dict[str, Any], item: DatasetItem, evaluator: AnswerEvaluator
) -> list[dict[str, Any]]:
    """Set every candidate's utility (and ``grade``) in ``record``, and the transcript's utility, in place.

    Each distinct answer text is graded once. Returns the model calls an LLM
    grader made (empty for deterministic grading).
    """
    cands = record["candidates"]
    texts = [c.get("answer_text") if c.get("valid") else None for c in cands]
    unique = list(dict.fromkeys(texts))
    if evaluator.uses_llm:
        grades: list[Grade] = await asyncio.gather(*(evaluator.agrade(t, item) for t in unique))
    else:
        grades = [evaluator.grade(t, item) for t in unique]
    by_text = dict(zip(unique, grades, strict=True))
    for cand, text in zip(cands, texts, strict=True):
        g = by_text[text]
        cand["utility"] = g.score
        cand["grade"] = {k: v for k, v in g.as_dict().items() if v not in (None, "")}
    selected = transcript.get("selected")
    if isinstance(selected, int) and 0 <= selected < len(cands):
        transcript["utility"] = cands[selected]["utility"]
    record["evaluation"] = {"evaluator": f"{evaluator.name}/{evaluator.version}", "uses_llm": evaluator.uses_llm}
    return [c.as_dict() for g in grades for c in g.calls if c is not None]
