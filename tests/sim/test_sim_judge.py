"""The independent judge `boe-sim-judge`, served beside the generator, over real loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from boe.sim.dataset import generate_dataset, load_sim_dataset
from boe.sim.model import candidate_answer
from boe.sim.protocol import parse_intent
from boe.sim.requests import generation_request, whole_verdict_request
from boe.sim.server import SimHandle


def _client(handle: SimHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=handle.base_url, api_key="unused", max_retries=0)


def _png(q: dict[str, Any]) -> bytes:
    return Path(q["images"][0]).read_bytes()


def _answer(c: openai.OpenAI, model: str, q: dict[str, Any]) -> str | None:
    resp = c.chat.completions.create(
        model=model, temperature=0.0, seed=0, **generation_request(_png(q), q["question"], q["options"])
    )
    assert resp.model == model
    return candidate_answer(parse_intent(q["question"], q["options"]), resp.choices[0].message.content or "")


def _answer_verdict(c: openai.OpenAI, model: str, q: dict[str, Any], candidate: str) -> str:
    """A ``boe_answer_verdict`` request (the whole-response request under the answer task's name)."""
    req = whole_verdict_request(_png(q), q["question"], candidate, q["options"])
    req["response_format"]["json_schema"]["name"] = "boe_answer_verdict"
    req["messages"][0]["content"] = req["messages"][0]["content"].replace("boe_whole_verdict", "boe_answer_verdict")
    resp = c.chat.completions.create(model=model, temperature=0.0, seed=0, **req)
    return str(json.loads(resp.choices[0].message.content or "{}")["verdict"])


@pytest.fixture(scope="module")
def fresh_questions(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return load_sim_dataset(generate_dataset(tmp_path_factory.mktemp("judge") / "ds", 80, seed=313))


def test_both_models_are_served_and_named(sim_server: SimHandle, sim_questions: list[dict[str, Any]]) -> None:
    c = _client(sim_server)
    assert [m.id for m in c.models.list()] == ["boe-sim-vlm", "boe-sim-judge"]
    assert c.models.retrieve("boe-sim-judge").id == "boe-sim-judge"
    _answer(c, "boe-sim-judge", sim_questions[0])
    resp = c.chat.completions.create(model="anything-else", **generation_request(_png(sim_questions[0]), "What?"))
    assert resp.model == "boe-sim-vlm"  # any other name is the generator, as before


def test_the_judge_does_not_share_the_generators_misreadings(
    sim_server: SimHandle, fresh_questions: list[dict[str, Any]]
) -> None:
    c = _client(sim_server)
    gen_ok = judge_ok = gen_wrong = echoed = 0
    for q in fresh_questions:
        g, j = _answer(c, "boe-sim-vlm", q), _answer(c, "boe-sim-judge", q)
        gen_ok += g == q["answer"]
        judge_ok += j == q["answer"]
        if g != q["answer"]:
            gen_wrong += 1
            echoed += j == g
    assert gen_wrong >= 15, gen_wrong
    # the same model at T = 0 repeats its own misreading every time; the judge only sometimes lands on it
    assert echoed <= 0.7 * gen_wrong, (echoed, gen_wrong)
    # and it reads better than the generator, far from an oracle
    assert gen_ok < judge_ok < len(fresh_questions) - 8, (gen_ok, judge_ok)


def test_the_answer_verdict_judges_the_answer_with_the_judges_own_eyes(
    sim_server: SimHandle, fresh_questions: list[dict[str, Any]]
) -> None:
    c = _client(sim_server)
    for q in fresh_questions[:12]:
        mine = _answer(c, "boe-sim-judge", q)
        assert mine is not None
        intent = parse_intent(q["question"], q["options"])
        agree = json.dumps({"answer": mine, "finding": "ignored by the answer judge"})
        assert _answer_verdict(c, "boe-sim-judge", q, agree) == "confirm", q["id"]
        other = "no" if mine == "yes" else "yes" if intent.kind == "closed" else None
        if other is not None:
            assert _answer_verdict(c, "boe-sim-judge", q, json.dumps({"answer": other})) == "reject", q["id"]
