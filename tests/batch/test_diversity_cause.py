"""The collapsed-pool note names sampling as the cause only when the K completions are one text."""

from __future__ import annotations

import json

from boe.batch.diversity import PoolDiversity


def _pool(answer: str, texts: list[str]) -> list[dict]:
    return [{"answer": answer, "valid": True, "raw_text": t} for t in texts]


def test_k_wordings_of_one_answer_are_not_blamed_on_the_generation_config():
    div = PoolDiversity(0.5)
    for q in range(4):  # a confident model: sixteen different completions that all answer "yes"
        div.add(_pool("yes", [json.dumps({"answer": "yes", "rationale": f"reason {q}.{i}"}) for i in range(16)]))
    note = div.warning({"server": "vllm", "top_k": 0})
    assert note is not None and "4 of 4 questions (100%)" in note
    assert "generation_config" not in note and "worded differently" in note and "top_k=0" in note


def test_k_copies_of_one_completion_are_blamed_on_sampling():
    div = PoolDiversity(0.5)
    for _ in range(3):
        div.add(_pool("yes", ['{"answer": "yes"}'] * 16))
    div.add(_pool("no", ['{"answer": "no"}'] * 8) + _pool("yes", ['{"answer": "yes"}'] * 8))  # two answers
    note = div.warning({"server": "openai"})
    assert note is not None and "3 of 4 questions" in note and "generation_config.json" in note
    assert "one text, word for word" in note


def test_pools_without_recorded_texts_keep_the_sampling_hint():
    div = PoolDiversity(0.5)
    div.add([{"answer": "yes", "valid": True}] * 8)
    note = div.warning(None)
    assert note is not None and "generation_config.json" in note
