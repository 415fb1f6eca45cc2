"""The agent graph as a LangGraph user embeds it: `make_graph`, `langgraph.json`, streamed progress, approval
interrupts with vetoes, and checkpointed resumes with the real SQLite saver.

Everything runs for real: the built-in simulator on a loopback port, the openai client, LangGraph with
`langgraph-checkpoint-sqlite`, a SQLite store, and `boe replay` / `boe export` as installed console scripts.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langgraph.types import Command

from boe.agent import make_config, make_graph
from boe.agent.graph import sqlite_saver
from boe.core.relevance import IRRELEVANT
from boe.errors import ConfigError, InputError
from boe.sim import serve_in_thread
from boe.sim.dataset import generate_dataset, load_sim_dataset

REPO = Path(__file__).resolve().parents[2]
BOE = Path(sys.executable).with_name("boe")
# the agent goldens' online run: the simulator's models, K=6, boe at budget 12
SETTINGS = {"model": "boe-sim-vlm", "judge_model": "boe-sim-judge", "k": 6, "budget": 12.0, "policy": "boe"}
VOLATILE = {"seconds", "latency_ms", "call_id", "calls", "cached_tokens", "cache_hit", "requests", "started_at"}


@pytest.fixture(scope="module")
def sim():
    handle = serve_in_thread()
    try:
        yield handle.base_url
    finally:
        handle.close()


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    root = generate_dataset(tmp_path_factory.mktemp("sim") / "data", 6, seed=5, size=64)
    return root, load_sim_dataset(root)


def config(sim, root, **kw):
    return make_config(base_url=sim, root=str(root), **{**SETTINGS, **kw})


async def stream(g, state, run_config):
    """Stream one leg of a question; (interrupt values, update chunks, custom events)."""
    paused, updates, custom = [], [], []
    async for mode, chunk in g.graph.astream(state, run_config, context=g.context, stream_mode=["updates", "custom"]):
        if mode == "custom":
            custom.append(chunk)
        elif "__interrupt__" in chunk:
            paused.extend(i.value for i in chunk["__interrupt__"])
        else:
            updates.append(chunk)
    return paused, updates, custom


def replay_run(db: Path, run: str, tmp: Path) -> dict[str, dict]:
    """`boe replay` of a stored run under the run's own calibration, policy and budget: transcripts by question."""
    out = tmp / f"{run}.transcripts.jsonl"
    done = subprocess.run(
        [str(BOE), "replay", "--db", f"sqlite:///{db}", "--run", run, "--calibration", "run",
         "--policy", SETTINGS["policy"], "--budget", "12", "--transcripts", str(out), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {t["question_id"]: t for t in map(json.loads, out.read_text().splitlines())}


def exported(db: Path, run: str, tmp: Path) -> dict[str, dict]:
    out = tmp / f"{run}.jsonl"
    done = subprocess.run(
        [str(BOE), "export", "--db", f"sqlite:///{db}", "--run", run, "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {r["question_id"]: r for r in map(json.loads, out.read_text().splitlines())}


def normalise(value):
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in sorted(value.items()) if k not in VOLATILE}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    return value


def test_langgraph_json_names_an_importable_compiled_graph():
    spec = json.loads((REPO / "langgraph.json").read_text())
    assert spec["dependencies"] and spec["graphs"]
    for name, target in spec["graphs"].items():
        path, _, attr = target.partition(":")
        file = (REPO / path).resolve()
        assert file.is_file(), f"langgraph.json graph {name!r} names a missing file {path}"
        # loaded by file path, as `langgraph dev` / LangGraph server do
        module_spec = importlib.util.spec_from_file_location(f"lg_{name}", file)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        compiled = getattr(module, attr)
        from langgraph.graph.state import CompiledStateGraph

        assert isinstance(compiled, CompiledStateGraph)
        assert {"intake", "plan", "approve", "act", "persist"} <= set(compiled.get_graph().nodes)


def test_the_module_graph_without_a_configuration_says_what_to_set(monkeypatch):
    from boe.agent.graph import config_from_env

    for var in ("BOE_BASE_URL", "OPENAI_BASE_URL", "BOE_MODEL", "BOE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="BOE_BASE_URL and BOE_MODEL"):
        config_from_env()
    for var, value in {"BOE_BASE_URL": "http://127.0.0.1:9/v1", "BOE_MODEL": "m", "BOE_BUDGET": "8",
                       "BOE_KINDS": '["structured", "vlm_factor"]', "BOE_APPROVE": "true"}.items():  # fmt: skip
        monkeypatch.setenv(var, value)
    cfg = config_from_env()
    assert (cfg.budget, cfg.kinds, cfg.approve) == (8.0, ("structured", "vlm_factor"), True)


def test_studio_input_streams_progress_through_the_module_graph(sim, questions, monkeypatch):
    """`langgraph dev` runs the module-level graph with no context: it builds one from the environment."""
    import boe.agent.graph as module

    root, qs = questions
    q = qs[0]
    for key, value in {"BOE_BASE_URL": sim, "BOE_ROOT": str(root), **{f"BOE_{k.upper()}": str(v) for k, v in
                                                                     SETTINGS.items()}}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(module, "_ENV_CONTEXTS", {})

    async def go():
        events = []
        async for mode, chunk in module.graph.astream(
            {"question": q["question"], "image_path": q["images"][0], "options": q.get("options")},
            {"recursion_limit": 500},
            context={"budget": 8.0},  # configuration fields over the environment's, as Studio passes them
            stream_mode=["updates", "custom"],
        ):
            if mode == "custom":
                events.append(chunk)
            else:
                last = chunk
        await next(iter(module._ENV_CONTEXTS.values())).generator.aclose()
        return events, last

    events, last = asyncio.run(go())
    assert [e["event"] for e in events][0] == "generated" and events[-1]["event"] == "selected"
    record = last["persist"]["record"]
    assert [e["id"] for e in events if e["event"] == "purchase"] == [e["id"] for e in record["evidence_log"]]
    assert record["agent"]["selected"] == events[-1]["selected"] == last["persist"]["transcript"]["selected"]
    assert record["agent"]["budget"] == 8.0 and sum(e["cost"] for e in record["evidence_log"]) <= 8.0


def test_a_vetoed_purchase_is_logged_and_the_stored_ledger_replays_to_the_online_choice(sim, questions, tmp_path):
    """The issue's test: stream with updates + custom, interrupt before the first purchase, veto it, resume,
    approve the rest; `boe replay` of the stored run equals the online choice."""
    root, qs = questions
    db, ckpt = tmp_path / "runs.db", tmp_path / "ckpt.sqlite"

    async def go():
        async with (
            sqlite_saver(ckpt) as saver,
            make_graph(config(sim, root, approve=True), checkpointer=saver, store=db, run_name="embed") as g,
        ):
            out = []
            for q in qs[:3]:
                state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
                rc = g.run_config(state)
                legs = [await stream(g, state, rc)]
                if legs[0][0]:  # paused before the first purchase: veto it, then approve the rest
                    legs.append(await stream(g, Command(resume={"approve": False, "reason": "too dear"}), rc))
                    while legs[-1][0]:
                        legs.append(await stream(g, Command(resume=True), rc))
                values = (await g.graph.aget_state(rc)).values
                out.append((q["id"], legs, values))
            return out

    results = asyncio.run(go())
    vetoed_any = False
    replayed = replay_run(db, "embed", tmp_path)
    stored = exported(db, "embed", tmp_path)
    for qid, legs, values in results:
        record, transcript = values["record"], values["transcript"]
        custom = [e for leg in legs for e in leg[2]]
        purchases = [e["id"] for e in custom if e["event"] == "purchase"]
        assert purchases == [e["id"] for e in values["bought"]] == transcript["actions"]
        assert {"generated", "selected"} <= {e["event"] for e in custom}
        # the online choice is what the replay engine makes of the stored ledger
        assert replayed[qid]["actions"] == transcript["actions"]
        assert replayed[qid]["selected"] == record["agent"]["selected"] == values["selected"]
        assert stored[qid]["agent"]["selected"] == values["selected"]
        first = legs[0][0]
        if not first:
            continue
        vetoed_any = True
        asked = first[0]
        assert asked["step"] == 1 and asked["spent"] == 0 and asked["budget"] == 12.0
        assert not [e for e in legs[0][2] if e["event"] == "purchase"]  # nothing bought before the approval
        vid = asked["action"]["id"]
        assert vid not in purchases
        assert [e["id"] for e in custom if e["event"] == "veto"] == [vid]
        vetoes = [s for s in values["skipped"] if s["reason"] != IRRELEVANT]  # the rest: could not change the answer
        assert vetoes == [{"action": asked["index"], "id": vid, "reason": "veto: too dear", "after": 0}]
        # the veto is on the stored record (spec section 10) and in the transcript
        row = next(a for a in stored[qid]["actions"] if a["id"] == vid)
        assert row["skipped"] == "veto: too dear" and not row["observed"] and row["outcome"] == "unresolved"
        assert transcript["skipped"] == replayed[qid]["skipped"] and vid in transcript["skipped"]
        assert len(transcript["skipped"]) == len(values["skipped"])
        # each later purchase was asked for first, and asked in the order bought
        later = [leg[0][0]["action"]["id"] for leg in legs[1:] if leg[0]]
        assert later == purchases[: len(later)]
    assert vetoed_any, "no question paused before a purchase: the test would not test a veto"


def plain(value) -> bool:
    """Whether a value is JSON-shaped data (what any checkpoint serialiser round-trips, strict msgpack included)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


@pytest.mark.parametrize("ledger", ["online", "full"])
def test_the_state_is_plain_data_so_a_strict_checkpoint_rebuilds_it_unchanged(sim, questions, tmp_path, ledger):
    """Every value the graph checkpoints is plain data: a checkpoint read back in strict mode (only LangGraph's safe
    types rebuilt) meets no class to block or warn about, and a vetoed question resumes from it to its answer."""
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener

    root, qs = questions
    q = qs[0]
    serde_events: list[dict] = []
    unregister = register_serde_event_listener(serde_events.append)

    async def go():
        async with (
            sqlite_saver(tmp_path / "ckpt.sqlite") as saver,
            make_graph(config(sim, root, approve=True, ledger=ledger), checkpointer=saver) as g,
        ):
            state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
            rc = g.run_config(state)
            outputs = [await g.graph.ainvoke(state, rc, context=g.context)]
            answer = {"approve": False, "reason": "no"}
            while "__interrupt__" in outputs[-1]:  # veto the first purchase, approve the rest
                outputs.append(await g.graph.ainvoke(Command(resume=answer), rc, context=g.context))
                answer = True
            history = [snap.values async for snap in g.graph.aget_state_history(rc)]
            return outputs, history

    try:
        outputs, history = asyncio.run(go())
    finally:
        unregister()
    assert len(outputs) > 2, "the question did not pause twice: no veto and resume to test"
    assert serde_events == []  # nothing blocked, nothing unregistered
    final = outputs[-1]  # the graph's own values (not read back from the checkpoint)
    assert plain({k: v for k, v in final.items() if k != "__interrupt__"})
    assert final["bought"] and final["skipped"][0]["reason"] == "veto: no"
    assert final["answer"] == final["candidates"][final["selected"]]["answer"] is not None
    assert final["answer_text"] == final["candidates"][final["selected"]]["answer_text"]
    assert history[0] == final  # read back strictly, the state is what the graph wrote
    assert all(plain(values) for values in history)
    if ledger == "full":
        assert any(values.get("outcomes") for values in history)
    assert any(values.get("pending") for values in history)


def test_stopping_with_update_state_before_act_stores_a_ledger_that_replays(sim, questions, tmp_path):
    """`interrupt_before=["act"]` then `update_state({"next_action": -1})` (issue 16: this crashed `persist`):
    the question stops there, the purchases the policy still proposes are stored as skipped, and the replay
    engine agrees. Setting another action than the policy's is refused."""
    root, qs = questions
    db = tmp_path / "runs.db"
    q = qs[0]

    async def go():
        from langgraph.checkpoint.memory import InMemorySaver

        async with make_graph(config(sim, root), checkpointer=InMemorySaver(), store=db, run_name="stop") as g:
            state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
            rc = g.run_config(state)
            await g.graph.ainvoke(state, rc, context=g.context, interrupt_before=["act"])
            snap = await g.graph.aget_state(rc)
            assert snap.next == ("act",)
            proposed = snap.values["actions"][snap.values["next_action"]]["id"]
            await g.graph.aupdate_state(rc, {"next_action": -1})
            await g.graph.ainvoke(None, rc, context=g.context)
            values = (await g.graph.aget_state(rc)).values
            bad = {**rc, "configurable": {"thread_id": "other"}}
            await g.graph.ainvoke(state, bad, context=g.context, interrupt_before=["act"])
            snap = await g.graph.aget_state(bad)
            other = next(i for i in range(len(snap.values["actions"])) if i != snap.values["next_action"])
            await g.graph.aupdate_state(bad, {"next_action": other})
            with pytest.raises(InputError, match="only -1"):
                await g.graph.ainvoke(None, bad, context=g.context)
            return proposed, values

    proposed, values = asyncio.run(go())
    assert values["bought"] == [] and values["transcript"]["actions"] == []
    assert values["skipped"][0]["id"] == proposed and {s["reason"] for s in values["skipped"]} == {"stopped"}
    assert values["selected"] == values["raw_selected"]
    replayed = replay_run(db, "stop", tmp_path)
    assert replayed[q["id"]]["actions"] == [] and replayed[q["id"]]["selected"] == values["selected"]
    assert replayed[q["id"]]["skipped"] == values["transcript"]["skipped"]


KILLED_RUN = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from boe.agent import make_config, make_graph
    from boe.sim.dataset import load_sim_dataset

    url, root, ckpt, db, qid, settings = sys.argv[1:7]
    q = next(q for q in load_sim_dataset(root) if q["id"] == qid)
    seen = []

    def on_step(event):  # inside the update of a purchase: the process dies mid-question
        seen.append(event["id"])
        if len(seen) == 2:
            print(*seen, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    async def go():
        async with AsyncSqliteSaver.from_conn_string(ckpt) as saver:
            cfg = make_config(base_url=url, root=root, **eval(settings))
            async with make_graph(cfg, checkpointer=saver, store=db, run_name="crash", on_step=on_step) as g:
                state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=qid)
                await g.graph.ainvoke(state, g.run_config(state), context=g.context, durability="sync")

    asyncio.run(go())
    """
)


def test_a_killed_run_resumes_from_the_sqlite_checkpoint_to_the_same_stored_ledger(sim, questions, tmp_path):
    root, qs = questions
    q = qs[0]
    ckpt, db, fresh_db = tmp_path / "ckpt.sqlite", tmp_path / "runs.db", tmp_path / "fresh.db"
    args = [sim, str(root), str(ckpt), str(db), q["id"], repr(SETTINGS)]
    done = subprocess.run([sys.executable, "-c", KILLED_RUN, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    first, second = done.stdout.split()
    with sqlite3.connect(db) as con:  # nothing stored before the kill
        assert con.execute("select count(*) from questions").fetchone() == (0,)

    async def resume():  # the killed run used LangGraph's own saver; this one reads its file
        async with (
            sqlite_saver(ckpt) as saver,
            make_graph(config(sim, root), checkpointer=saver, store=db, run_name="crash") as g,
        ):
            state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
            rc = g.run_config(state)
            snap = await g.graph.aget_state(rc)
            # killed inside the second purchase's update: the first is checkpointed, the second's act too
            assert snap.next == ("update",), (snap.next, sorted(snap.values), rc, snap.metadata)
            assert snap.values["pending"] is not None
            assert [b["id"] for b in snap.values["bought"]] == [first] != [second]
            custom = [c async for c in g.graph.astream(None, rc, context=g.context, stream_mode="custom")]
            return custom, (await g.graph.aget_state(rc)).values

    async def fresh():
        async with make_graph(config(sim, root), store=fresh_db, run_name="crash") as g:
            state = g.input(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])
            return await g.graph.ainvoke(state, g.run_config(state), context=g.context)

    custom, resumed = asyncio.run(resume())
    assert custom[0]["event"] != "generated"  # nothing before the kill is asked again
    clean = asyncio.run(fresh())
    assert resumed["transcript"] == clean["transcript"]
    got, want = exported(db, "crash", tmp_path)[q["id"]], exported(fresh_db, "crash", tmp_path)[q["id"]]
    assert normalise(got) == normalise(want)
    assert os.path.getsize(ckpt) > 0


def test_an_agent_with_an_approver_answers_each_pause(sim, questions, tmp_path):
    """`Agent(approver=...)`: `Agent.ask` resumes each interrupt with the approver's answer."""
    from boe.agent import Agent

    root, qs = questions
    asked = []

    def approver(request):
        asked.append(request)
        return {"approve": len(asked) > 1, "reason": "first one refused"}

    async def go(**kw):
        async with Agent(config(sim, root, approve=True), **kw) as agent:
            q = qs[0]
            return await agent.ask(q["images"][0], q["question"], options=q.get("options"), question_id=q["id"])

    with pytest.raises(ConfigError, match="approver"):
        asyncio.run(go())
    res = asyncio.run(go(approver=approver, checkpoint=tmp_path / "ckpt.sqlite"))
    assert asked and res.transcript["skipped"] == [asked[0]["action"]["id"]]
    assert [e["id"] for e in res.evidence] == [r["action"]["id"] for r in asked[1:]]
    assert next(a for a in res.record["actions"] if a["id"] == asked[0]["action"]["id"])["skipped"] == (
        "veto: first one refused"
    )


def test_make_graph_takes_a_mapping_of_configuration_fields_and_refuses_bad_ones():
    async def go():
        async with make_graph({"base_url": "http://127.0.0.1:9/v1", "model": "m", "budget": 4}) as g:
            assert g.config.budget == 4.0 and g.context.config is g.config
            assert set(g.context.tools) == set(g.config.kinds) and g.graph.checkpointer is None

    asyncio.run(go())
    with pytest.raises(ConfigError, match="budget"):
        make_graph({"base_url": "http://127.0.0.1:9/v1", "model": "m", "budget": -1})


def test_a_studio_input_is_planned_with_the_agents_measured_costs(sim, questions, tmp_path):
    """A question given as image_path + question (Studio / server) gets the costs `Agent.ask` would plan with:
    measured ones when the agent measures them, not the design costs."""
    from boe.agent.costs import CostMeter

    root, qs = questions
    meter = CostMeter()
    meter.add_actions([{"kind": "vlm_factor", "tokens": 200, "seconds": 0.1},
                       {"kind": "whole_response", "tokens": 1400, "seconds": 0.4}])  # fmt: skip
    cost_file = tmp_path / "costs.json"
    cost_file.write_text(json.dumps(meter.to_json()))
    g = make_graph(config(sim, root, cost_mode="measured", cost_file=str(cost_file), budget=0.0))
    q = qs[0]

    async def go():
        try:
            return await stream(g, {"question": q["question"], "image_path": q["images"][0]}, {"recursion_limit": 200})
        finally:
            await g.aclose()

    _, updates, _ = asyncio.run(go())
    costs = next(u["intake"]["costs"] for u in updates if "intake" in u)
    expected = g.agent.question_costs().as_dict()
    assert costs == expected
    assert costs["used"] != costs["design"]  # the measurement moved them: the test can tell the two apart
