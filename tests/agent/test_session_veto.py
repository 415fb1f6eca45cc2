"""A purchase refused from outside the graph (a veto, a forced stop) is recorded, stored, and replays exactly.

The real agent on the built-in simulator over HTTP, a real SQLite checkpointer, LangGraph's own
interrupt and `update_state`: the graph pauses before the first purchase, the test vetoes it (or stops
the question), the run resumes, and the offline replay of the stored record equals the online line.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from boe.agent import Agent, make_config
from boe.agent.demo import simulator
from boe.agent.planner import skip_entry
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record
from boe.core.replay import plan_calibration, replay, transcripts
from boe.sim.dataset import generate_dataset, load_sim_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim():
    with simulator() as url:
        yield url


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = generate_dataset(tmp_path_factory.mktemp("sim") / "data", 6, seed=7)
    return root, load_sim_dataset(root)


class _PauseBeforeAct:
    """The agent's compiled graph, interrupted before the first purchase; ``decide`` acts on the pause."""

    def __init__(self, graph: Any, decide: Any) -> None:
        self.graph, self.decide, self.paused = graph, decide, set()

    async def aget_state(self, config: Any) -> Any:
        return await self.graph.aget_state(config)

    async def ainvoke(self, state: Any, config: Any, *, context: Any, **kw: Any) -> Any:
        await self.graph.ainvoke(state, config, context=context, interrupt_before=["act"], **kw)
        snap = await self.graph.aget_state(config)
        if snap.next == ("act",):
            self.paused.add(snap.values["question_id"])
            await self.decide(self.graph, config, snap.values)
        return await self.graph.ainvoke(None, config, context=context, **kw)


async def _veto(graph: Any, config: Any, values: dict[str, Any]) -> None:
    """Refuse the proposed purchase: a skip entry, applied as if `update` had run, so `plan` proposes again."""
    a = values["next_action"]
    entry = skip_entry(values["actions"][a], a, "veto: not this one", len(values.get("bought") or []))
    await graph.aupdate_state(config, {"skipped": [*(values.get("skipped") or []), entry]}, as_node="update")


async def _stop(graph: Any, config: Any, values: dict[str, Any]) -> None:
    """Stop the question where it stands (issue 16: this used to crash `persist`)."""
    await graph.aupdate_state(config, {"next_action": -1})


def _run(sim, root, questions, tmp_path, decide, db):
    cfg = make_config(base_url=sim, model="boe-sim", dataset="boe-sim", root=str(root), budget=12)

    async def go():
        async with Agent(cfg, store=db, run_name="veto", checkpoint=tmp_path / "ckpt.sqlite") as agent:
            agent.graph = pause = _PauseBeforeAct(agent.graph, decide)
            out = []
            for q in questions:
                out.append(
                    await agent.ask(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
                )
            return out, agent.calibration, pause.paused

    return cfg, *asyncio.run(go())


def _offline(cfg, cal, record):
    groups = GroupIndex()
    question = Question.from_record(parse_record(record), groups)
    plan = plan_calibration([question], groups.keys, "file", file_calibration=cal)
    opts = {"eta": cfg.eta, "seed": cfg.policy_seed}
    run = replay([question], groups.keys, [cfg.policy], [cfg.budget], plan, policy_options=opts)[0]
    return transcripts(run, [question])[0]


@pytest.mark.parametrize("decide", [_veto, _stop], ids=["veto", "stop"])
def test_a_refused_purchase_is_stored_and_replays_to_the_online_choice(sim, data, tmp_path, decide):
    root, qs = data
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    cfg, results, cal, paused = _run(sim, root, qs[:4], tmp_path, decide, db)
    assert len(paused) >= 2
    for r in results:
        refused = [a for a in r.record["actions"] if a.get("skipped")]
        assert bool(refused) == (r.question_id in paused), r.question_id  # a pause only where the policy buys
        assert r.transcript.get("skipped", []) == [a["id"] for a in r.record["actions"] if a.get("skipped")]
        assert all(not a["observed"] and a["outcome"] == "unresolved" for a in refused)
        assert not {a["id"] for a in refused} & set(r.transcript["actions"])
        if decide is _stop:
            # nothing bought: the policy's choice before any evidence (bayes: its prior's mode)
            assert r.evidence == [] and r.transcript["actions"] == [] and r.scores == r.record["agent"]["prior_scores"]
        elif r.question_id in paused:  # bayes buys nothing where no check could change the answer
            assert len(refused) == 1 and refused[0]["skipped"] == "veto: not this one"
        assert _offline(cfg, cal, r.record) == r.transcript
    # `boe replay` on the stored run (the installed console script, the run's own calibration) agrees
    out = tmp_path / "replay.jsonl"
    boe = Path(sys.executable).with_name("boe")
    cmd = [str(boe), "replay", "--db", db, "--run", "veto", "--policy", cfg.policy, "--budget", "12"]
    res = subprocess.run(
        [*cmd, "--calibration", "run", "--transcripts", str(out)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    replayed = {t["question_id"]: t for t in map(json.loads, out.read_text().splitlines())}
    assert replayed == {r.question_id: r.transcript for r in results}
