"""Answer-level checks in the agent: one verdict moves every candidate giving the judged answer."""

import asyncio

from fakevlm import FakeVLM, reply

from boe.agent import Agent, make_config
from boe.core.calibration import Calibration, GroupCalibration

QUESTION = "Is there a mass in the left lung?"
TRUTH = {"answer": "yes"}
# 13 of 16 candidates say "no" (wrong), 3 say "yes": the raw majority is wrong and widely shared
POOL = [reply("no", finding="normal")] * 13 + [reply("yes", finding="mass", attribute="left")] * 3


def truthful(kappa: float = 0.95) -> Calibration:
    """A calibration in which the answer-level and whole-response judges are (nearly) always right."""
    p = {"confirm": 0.5, "reject": 0.5, "unresolved": 0.0}
    groups = {f"boe-sim/{g}": GroupCalibration(kappa=kappa, p=p) for g in ("answer", "whole")}
    return Calibration(groups=groups, source="test: truthful judges")


def ask(scan, kinds, budget, policy="boe"):
    vlm = FakeVLM(POOL, TRUTH)
    config = make_config(
        base_url="http://vlm.test/v1", model="fake", backoff=0.001, kinds=kinds, budget=budget, policy=policy
    )

    async def go():
        async with Agent(config, calibration=truthful(), http_client=vlm.client(), run_name="t") as agent:
            return await agent.ask(scan, QUESTION, reference="yes")

    return asyncio.run(go()), vlm


def test_a_truthful_answer_judge_overturns_a_wrong_majority_within_answers_times_cost(scan):
    res, vlm = ask(scan, ("answer_response",), budget=2 * 8)  # two distinct answers, cost 8 each
    assert res.raw_answer == "no" and not res.raw_correct
    assert res.answer == "yes" and res.correct
    assert res.cost <= 16 and {e["kind"] for e in res.evidence} == {"answer_response"}
    menu = [a for a in res.record["actions"] if a["kind"] == "answer_response"]
    assert [(a["candidate"], a["answer"], a["share"]) for a in menu] == [(0, "no", 13), (13, "yes", 3)]
    assert res.record["format"] == "boe-ledger/1.1"
    no = next((e for e in res.evidence if e["candidate"] == 0), None)
    if no is not None:  # a rejection of "no" moves all 13 candidates that give it, not one
        assert no["outcome"] == "reject" and set(no["moved_down"]) == set(range(13))
    assert "boe_answer_verdict" in vlm.tasks()
    judged = [b for b in vlm.bodies if b["response_format"]["json_schema"]["name"] == "boe_answer_verdict"]
    assert all("<candidate_response>" in b["messages"][1]["content"][-1]["text"] for b in judged)


def test_the_same_budget_of_whole_response_checks_leaves_the_wrong_majority(scan):
    res, _ = ask(scan, ("whole_response",), budget=2 * 8)
    assert res.answer == "no" and not res.correct  # rejecting two "no" candidates leaves 11 more on top
