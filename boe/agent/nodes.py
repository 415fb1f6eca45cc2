"""The nodes of the agent graph: small async functions of (state, runtime) -> state update.

intake -> generate -> parse -> claims -> menu -> [ledger] -> (plan -> approve -> act -> update)* -> select -> persist

Progress goes through LangGraph's stream writer (``stream_mode="custom"``):
one event dict per step, ``{"event": "generated" | "purchase" | "veto" | "selected", "question_id": ..., ...}``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from boe.agent.claims import build_graph as claim_graph
from boe.agent.claims import build_menu, canonicalise, grade, parse_candidate, sampled_order
from boe.agent.costs import cost_kinds
from boe.agent.inputs import keep_images, question_input
from boe.agent.planner import draw_entry, events_of, record_dict, skip_entry
from boe.agent.state import (
    AgentContext,
    AgentState,
    Candidate,
    ClaimNode,
    EvidenceEntry,
    MenuAction,
    Observation,
    Purchase,
    claim_node,
    claim_nodes,
    evidence_log,
    menu_action,
    menu_actions,
    observation,
    observations,
    pending_purchase,
)
from boe.core.calls import ModelCall
from boe.core.ledger import LedgerRecord
from boe.core.pool import PoolSpec
from boe.core.relevance import IRRELEVANT
from boe.core.session import Session, drawn
from boe.errors import ModelError
from boe.kinds import figure_context
from boe.prompts import figures_block, load_prompt, options_block, with_figure_key
from boe.tools.images import LoadedImage, open_image
from boe.tools.parse import ReplyError, extract_json, read_figure, read_generation, read_slots
from boe.tools.protocol import ToolRequest, ToolResult

__all__ = [
    "act",
    "build_graph",
    "recursion_limit",
    "approve",
    "context_of",
    "intake",
    "claims",
    "generate",
    "ledger",
    "menu",
    "parse",
    "persist",
    "plan",
    "route_after_approve",
    "route_after_menu",
    "route_after_plan",
    "select",
    "update",
]

Ctx = Runtime[AgentContext]


def context_of(runtime: Ctx) -> AgentContext:
    """The run's live context (a graph built with ``resolve_context`` has turned what it was given into one)."""
    return runtime.context


def emit(ctx: AgentContext, state: AgentState, event: str, **data: Any) -> None:
    """Send one progress event to the stream writer (``stream_mode="custom"``) and, for purchases, ``on_step``."""
    payload = {"event": event, "question_id": state["question_id"], **data}
    get_stream_writer()(payload)
    if event == "purchase" and ctx.on_step is not None:
        ctx.on_step(payload)


async def intake(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """A question given as ``image_path`` + ``question`` (LangGraph Studio / server): open its figures and fill
    in the id, figures, analysis and costs exactly as `Agent.ask` does; a prepared input passes unchanged."""
    if state.get("analysis") is not None:
        return {}
    ctx = context_of(runtime)
    if not state.get("image_path") or not state.get("question"):
        from boe.errors import InputError

        raise InputError("a question needs 'question' and 'image_path' (one path or a list) in the graph input")
    prepared, imgs = question_input(
        ctx.config,
        state["image_path"],
        state["question"],
        options=state.get("options"),
        reference=state.get("reference"),
        question_id=state.get("question_id"),
        dataset=state.get("dataset"),
        costs=ctx.question_costs() if ctx.question_costs is not None else None,
    )
    keep_images(ctx, imgs)
    return prepared


def figure_refs(state: AgentState) -> list[dict[str, Any]]:
    """The question's figures (ImageRef dicts) in order; one for a single-image question."""
    return list(state.get("images") or [state["image"]])


def figure_ids(state: AgentState) -> list[str]:
    return [str(r.get("figure", "0")) for r in figure_refs(state)]


def is_multi(state: AgentState) -> bool:
    """Whether the question has several figures (claims then carry the figure they are about)."""
    return len(figure_refs(state)) > 1


def image_of(ctx: AgentContext, state: AgentState, figure: str | None = None) -> LoadedImage:
    """A figure of the question (the first when ``figure`` is None) from the run's in-memory cache."""
    refs = figure_refs(state)
    ref = refs[0] if figure is None else next((r for r in refs if r.get("figure", "0") == figure), None)
    if ref is None:
        raise KeyError(f"the question has no figure {figure!r}; it has {[r.get('figure') for r in refs]}")
    img = ctx.images.get(ref["image_id"])
    if img is None:
        frame = (ref.get("dicom") or {}).get("frame")
        cfg = ctx.config
        img = open_image(
            ref["path"],
            cfg.root,
            figure=ref.get("figure", "0"),
            frame=frame,
            max_pixels=cfg.max_pixels or None,
            pixel_limit=cfg.pixel_limit,
        )
        if img.ref.image_id != ref["image_id"]:
            from boe.errors import InputError

            raise InputError(f"image {ref['path']!r} changed since the question was started")
        ctx.images[ref["image_id"]] = img
    return img


def all_images(ctx: AgentContext, state: AgentState) -> list[LoadedImage]:
    """Every figure of the question, in order."""
    return [image_of(ctx, state, f) for f in figure_ids(state)]


def drawing(cfg: Any) -> bool:
    """Whether the run samples in rounds (an adaptive pool answered online; a full ledger samples all k at once)."""
    return bool(cfg.pool == "adaptive" and cfg.ledger == "online")


def pool_spec(ctx: AgentContext, state: AgentState) -> PoolSpec | None:
    """The adaptive pool of this run (None: a fixed pool): its rounds and the planned cost of one sample."""
    cfg = ctx.config
    if cfg.pool != "adaptive":
        return None
    used = (state.get("costs") or {}).get("used") or {}
    cost = float(used.get("sample", cfg.costs.of("sample")))
    return PoolSpec("adaptive", start=min(cfg.pool_start, cfg.k), step=cfg.pool_round, sample_cost=cost)


async def generate(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Sample K candidates in one request (n=K; the client falls back to K requests); an adaptive pool samples
    its first round, and later the round its policy asked for, each with a fresh seed (the prompt is the same,
    so a server's prefix cache serves it)."""
    ctx = context_of(runtime)
    cfg = ctx.config
    images = all_images(ctx, state)
    ids = figure_ids(state)
    prompt = load_prompt("generation").render(
        question=state["question"],
        options_block=options_block(state.get("options")),
        figures_block=figures_block(ids, ask=True),
    )
    have = list(state.get("replies") or [])
    draws = list(state.get("draws") or [])
    n, seed, out = cfg.k, cfg.seed, {}
    if drawing(cfg):
        m = drawn(state.get("next_action", -1)) if have else 0
        n = m if have else min(cfg.pool_start, cfg.k)
        if have:
            if m < 1 or len(have) + m > cfg.k:
                raise RuntimeError(f"generate was reached without a draw of at most {cfg.k - len(have)} proposed")
            seed = None if cfg.seed is None else cfg.seed + len(draws) + 1  # a fresh seed per round
            draws.append(draw_entry(m, len(state.get("bought") or []), len(state.get("skipped") or [])))
            out = {"draws": draws, "next_action": -1, "planned": -1}
    comp = await ctx.generator.complete(
        with_figure_key(prompt, ids),
        [img.data_url for img in images],
        n=n,
        temperature=cfg.temperature,
        seed=seed,
        tags={"question_id": state["question_id"]},
        accept=_generation_problem,
    )
    emit(ctx, state, "generated", k=len(comp.texts), **({"drawn": len(have) + len(comp.texts)} if have else {}))
    return {"replies": have + comp.texts, "calls": [comp.call.as_dict()], **out}


def _generation_problem(texts: list[str | None]) -> str | None:
    """None when at least one reply can be read; a batch with none is asked again (a server fault, likely)."""
    errors = []
    for t in texts:
        try:
            read_generation(t)
            return None
        except ReplyError as exc:
            errors.append(str(exc))
    return f"none of the {len(texts)} replies is readable ({errors[0] if errors else 'no replies'})"


async def parse(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Read every reply; unreadable ones stay as invalid candidates; slot-less ones get claim extraction."""
    ctx = context_of(runtime)
    ids = figure_ids(state)
    old = list(state.get("candidates") or [])  # an adaptive pool's earlier rounds, read already
    new = [parse_candidate(i, raw) for i, raw in enumerate(state["replies"]) if i >= len(old)]
    cands = old + new
    if len(ids) > 1:
        for c in new:
            c["figure"] = read_figure(c["raw_text"], ids) if c["valid"] else None
    need = [c for c in new if c["valid"] and not c["slots_present"]]
    calls: list[dict[str, Any]] = []
    if need and ctx.config.extract_claims:
        urls = [img.data_url for img in all_images(ctx, state)]
        prompt = load_prompt("claim_extraction")

        async def extract(cand: Candidate) -> None:
            rendered = prompt.render(
                question=state["question"],
                options_block=options_block(state.get("options")),
                figures_block=figures_block(ids, ask=True),
                candidate=cand["raw_text"] or cand["answer_text"],
            )
            try:
                comp = await ctx.judge.complete(
                    with_figure_key(rendered, ids),
                    urls,
                    temperature=ctx.config.judge_temperature,
                    seed=ctx.config.seed,
                    tags={"question_id": state["question_id"], "candidate": cand["index"]},
                )
            except ModelError as exc:
                cand["extraction_error"] = str(exc)
                call = getattr(exc, "call", None)
                if call is not None:
                    calls.append(call.as_dict())
                return
            calls.append(comp.call.as_dict())
            try:
                slots, _ = read_slots(extract_json(comp.texts[0]))
            except ReplyError as exc:
                cand["extraction_error"] = f"unreadable claims: {exc}"
                return
            cand["slots"] = slots
            cand["extracted"] = True
            if len(ids) > 1 and cand.get("figure") is None:
                cand["figure"] = read_figure(comp.texts[0], ids)

        await asyncio.gather(*(extract(c) for c in need))
    return {"candidates": cands, "calls": calls}


async def claims(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Canonicalise answers and slots, merge claims, sign the edges."""
    q = state["analysis"]
    cands = [canonicalise(c, q) for c in state["candidates"]]
    for c in cands:
        c["utility"] = grade(c["answer"], state.get("reference"), q)
    ids = figure_ids(state)
    sampled = context_of(runtime).config.pool == "adaptive"
    claim_list, edges = claim_graph(cands, figure=ids[0], multi=len(ids) > 1, sampled=sampled)
    claim_list = [ClaimNode.model_validate(c).as_dict() for c in claim_list]  # checked once here, stored plain
    return {"candidates": cands, "claims": claim_list, "edges": edges}


async def menu(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """The action menu with the costs this question is planned with (design or measured) and its groups."""
    cfg = context_of(runtime).config
    design = {k: cfg.costs.of(k) for k in cost_kinds()}
    used = (state.get("costs") or {}).get("used") or design
    claim_list = [c.as_dict() for c in claim_nodes(state)]  # menu rules read mappings
    made = build_menu(claim_list, state["candidates"], used, cfg.kinds, state["analysis"], design)
    if cfg.pool == "adaptive":  # grows at the end as rounds are drawn (spec section 12)
        made = sampled_order(made, state["edges"])
    actions = [MenuAction.model_validate(a).as_dict() for a in made]  # the menu rules' dicts, checked once here
    if "bought" in state:  # a later round of an adaptive pool: the purchases so far stand
        return {"actions": actions}
    return {"actions": actions, "bought": [], "skipped": [], "draws": [], "pending": None, "mode": cfg.ledger}


def route_after_menu(state: AgentState) -> str:
    return "ledger" if state["mode"] == "full" else "plan"


def _request(state: AgentState, ctx: AgentContext, action: MenuAction) -> ToolRequest:
    claim = claim_node(state, action.claim) if action.claim else None
    cand = state["candidates"][action.candidate] if action.candidate is not None else None
    figure = claim.figure if claim is not None else None
    if figure is not None and figure not in figure_ids(state):
        figure = None  # a claim of a single-figure question made before figures were recorded
    return ToolRequest(
        action=action.as_dict(),
        question=state["question"],
        image=image_of(ctx, state, figure),
        options=state.get("options"),
        claim=claim.as_dict() if claim is not None else None,
        candidate=cand,
        context=figure_context(state["analysis"], figure),
        seed=ctx.config.seed,
        figures=tuple(all_images(ctx, state)) if is_multi(state) else (),
    )


async def _run_tool(state: AgentState, ctx: AgentContext, action: MenuAction) -> ToolResult:
    """Run an action's tool, measuring its wall time (recorded on the result as ``seconds``)."""
    tool = ctx.tools[action.kind]
    t0 = time.perf_counter()
    res = await tool.run(_request(state, ctx, action))
    res.seconds = time.perf_counter() - t0
    return res


def _observation(res: ToolResult) -> Observation:
    return Observation(
        outcome=res.outcome,
        rationale=res.rationale,
        view=res.view,
        error=res.error,
        raw_reply=res.raw_reply,
        calls=[c.call_id for c in res.calls],
        tokens=sum(c.prompt_tokens + c.completion_tokens for c in res.calls),
        seconds=round(float(res.seconds or 0.0), 4),
        p_outcome=res.p_outcome,
    )


async def ledger(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Full-ledger mode: run every action of the menu once (bounded concurrency), store all outcomes."""
    ctx = context_of(runtime)
    actions = menu_actions(state)
    results = await asyncio.gather(*(_run_tool(state, ctx, a) for a in actions))
    failed = [r for r in results if r.failed]
    if failed:  # an outage is no evidence: the question is not stored, and a re-run asks again (paid replies cached)
        raise ModelError(f"{len(failed)} of {len(results)} evidence check(s) could not be run: {failed[0].error}")
    outcomes = {a.id: _observation(r).model_dump() for a, r in zip(actions, results, strict=True)}
    calls = [c.as_dict() for r in results for c in r.calls]
    return {"outcomes": outcomes, "calls": calls}


#: Sessions kept at most (questions in progress at once in one agent).
MAX_SESSIONS = 1024


def session_for(state: AgentState, ctx: AgentContext) -> Session:
    """The policy session of this question (the loop `boe replay` runs), advanced to the state's events.

    Built once per question and kept while the state holds the same menu (compared by value, so a
    restored checkpoint reuses it too); `Session.advance` applies only the events it has not seen.
    """
    parts = (state["candidates"], state["claims"], state["edges"], state["actions"])
    qid = state["question_id"]
    hit = ctx.planners.get(qid)
    if hit is not None and hit[0] == parts:
        session = cast(Session, hit[1])
    else:
        cfg = ctx.config
        # the menu, checked once as the session starts (the finished record is validated where it is stored)
        rec = LedgerRecord.model_validate(_state_record(state, ctx, [a.as_dict() for a in menu_actions(state)]))
        options = {"eta": cfg.eta, "seed": cfg.policy_seed}
        session = Session.from_record(
            rec, ctx.calibration, cfg.policy, cfg.budget, options=options, pool=pool_spec(ctx, state), limit=cfg.k
        )
        ctx.planners.pop(qid, None)
        ctx.planners[qid] = (parts, session)
        while len(ctx.planners) > MAX_SESSIONS:
            del ctx.planners[next(iter(ctx.planners))]
    bought = [{"action": b.action, "outcome": b.outcome} for b in evidence_log(state)]
    session.advance(events_of(bought, state.get("skipped") or [], state.get("draws") or []))
    return session


def _state_record(state: AgentState, ctx: AgentContext, actions: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """The question's ledger record with these actions (``outcomes`` and ``extra`` as `record_dict` takes them),
    not validated; an adaptive pool's candidates carry their sample cost (format 1.3)."""
    spec = pool_spec(ctx, state)
    cands = _ledger_candidates(state)
    if spec is not None:
        cands = [{**c, "cost": spec.sample_cost} for c in cands]
    return record_dict(
        sampled=spec is not None,
        question_id=state["question_id"],
        dataset=state.get("dataset") or ctx.config.dataset,
        question=state["question"],
        image=state["image"]["path"],
        options=state.get("options"),
        reference=state.get("reference"),
        candidates=cands,
        claims=[c.as_dict() for c in claim_nodes(state)],
        edges=state["edges"],
        actions=actions,
        **kwargs,
    )


async def plan(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Ask the policy for the next action (value per cost for `boe`), -1 to stop, or (an adaptive pool) a draw:
    sampled by `generate` online, revealed here when the candidates are there already (a full ledger).

    Online, a proposal that no outcome of the affordable checks could turn into another answer is skipped
    (spec section 10, so the stored record replays exactly); a full ledger keeps every check on the menu.
    """
    ctx = context_of(runtime)
    session = session_for(state, ctx)
    full = ctx.config.ledger == "full"
    out: dict[str, Any] = {}
    draws = list(state.get("draws") or [])
    skipped = list(state.get("skipped") or [])
    after = len(state.get("bought") or [])
    while True:
        choice, irrelevant = (session.next_action(), []) if full else session.next_relevant()
        skipped += [skip_entry(menu_action(state, a), a, IRRELEVANT, after) for a in irrelevant]
        if choice > -3 or drawing(ctx.config):
            break
        m = drawn(choice)
        draws.append(draw_entry(m, after, len(skipped)))
        session.draw(m)
        emit(ctx, state, "generated", k=m, drawn=session.samples)
        out["draws"] = draws
    if len(skipped) > len(state.get("skipped") or []):
        out["skipped"] = skipped
    return {**out, "next_action": choice, "planned": choice}


def route_after_plan(state: AgentState) -> str:
    if state["next_action"] <= -3:
        return "generate"
    return "approve" if state["next_action"] >= 0 else "select"


def approval(answer: Any) -> tuple[bool, str]:
    """Read a resume value of the approval step: ``True``/``False``, or ``{"approve": bool, "reason": str}``."""
    from boe.errors import InputError

    if isinstance(answer, bool):
        return answer, ""
    if isinstance(answer, dict) and isinstance(answer.get("approve"), bool):
        reason = answer.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError(f"the approval's 'reason' must be a string, got {type(reason).__name__}")
        return answer["approve"], (reason or "").strip()
    raise InputError(
        f"an approval is True, False or {{'approve': bool, 'reason': str}}, got {answer!r} "
        "(resume with Command(resume=...))"
    )


async def approve(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """With ``approve`` on, pause (LangGraph ``interrupt``) before the purchase the policy proposes; a veto is a
    skip (spec section 10: never bought, the policy proposes again). Otherwise, or when approved, a pass-through."""
    ctx = context_of(runtime)
    _check_override(state)
    if state["next_action"] < 0 or not ctx.config.approve:  # -1 here: stopped with `update_state` (see select)
        return {}
    idx = state["next_action"]
    action = menu_action(state, idx)
    bought = evidence_log(state)
    answer = interrupt(
        {
            "question_id": state["question_id"],
            "question": state["question"],
            "step": len(bought) + 1,
            "index": idx,
            "action": action.model_dump(include={"id", "kind", "claim", "candidate", "cost", "group"}),
            "target": _target(state, action),
            "spent": sum(b.cost for b in bought),
            "budget": ctx.config.budget,
        }
    )
    ok, reason = approval(answer)
    if ok:
        return {}
    entry = skip_entry(action, idx, f"veto: {reason}" if reason else "veto", len(bought))
    emit(ctx, state, "veto", **entry)
    return {"skipped": [*(state.get("skipped") or []), entry]}


def _check_override(state: AgentState) -> None:
    """Only the policy chooses what to buy: ``next_action`` may be set to -1 (stop), never to another action."""
    planned = state.get("planned", state["next_action"])
    if state["next_action"] >= 0 and state["next_action"] != planned:
        from boe.errors import InputError

        raise InputError(
            f"next_action was set to {state['next_action']} where the policy proposed {planned}: only -1 (stop "
            "here) can be set; refuse a purchase by vetoing it (approve=True) or with a skip entry "
            "(boe.agent.planner.skip_entry) applied as node 'update'; a purchase the policy did not choose could "
            "not be replayed"
        )


def _target(state: AgentState, action: MenuAction) -> str:
    """What the action checks, in words (for the person approving)."""
    if action.claim is not None:
        claim = claim_node(state, action.claim)
        if claim is not None:
            return f"claim {claim.slot} = {claim.value!r}"
    if action.candidate is not None:
        return f"candidate {action.candidate}: {state['candidates'][action.candidate].get('answer')!r}"
    return action.id


def route_after_approve(state: AgentState) -> str:
    if state["next_action"] < 0:
        return "select"
    after = len(state.get("bought") or [])
    refused = any(s["action"] == state["next_action"] and s["after"] == after for s in state.get("skipped") or [])
    return "plan" if refused else "act"


async def act(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Run the chosen tool (or, in full-ledger mode, read its stored outcome)."""
    ctx = context_of(runtime)
    _check_override(state)
    idx = state["next_action"]
    action = menu_action(state, idx)
    if ctx.config.ledger == "full":
        return {"pending": Purchase(action=idx, **observation(state, action.id).model_dump()).model_dump()}
    res = await _run_tool(state, ctx, action)
    if res.failed:  # no outcome to reveal: the question stops here and is not stored
        raise ModelError(f"evidence check {action.id!r} could not be run: {res.error}")
    purchase = Purchase(action=idx, **_observation(res).model_dump())
    return {"pending": purchase.model_dump(), "calls": [c.as_dict() for c in res.calls]}


async def update(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Reveal the outcome to the policy's state; log who moved up and down."""
    ctx = context_of(runtime)
    pending = pending_purchase(state)
    assert pending is not None
    bought = [b.model_dump() for b in evidence_log(state)]
    step = session_for(state, ctx).reveal(pending.action, pending.outcome)
    action = menu_action(state, pending.action)
    entry = EvidenceEntry(
        step=len(bought) + 1,
        action=pending.action,
        id=action.id,
        kind=action.kind,
        claim=action.claim,
        candidate=action.candidate,
        cost=action.cost,
        design_cost=action.cost if action.design_cost is None else action.design_cost,
        tokens=pending.tokens,
        seconds=pending.seconds,
        group=action.group,
        outcome=pending.outcome,
        rationale=pending.rationale,
        error=pending.error,
        view=pending.view,
        raw_reply=pending.raw_reply,
        calls=pending.calls,
        p_outcome=pending.p_outcome,
        kappa=step.kappa,
        moved_up=step.moved_up,
        moved_down=step.moved_down,
        scores=step.scores,
    )
    bought.append(entry.model_dump())
    emit(ctx, state, "purchase", **bought[-1])
    return {"bought": bought, "pending": None}


async def select(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """The policy's selection and final scores, and the raw-majority selection beside it.

    A run steered to stop where the policy would still buy (``next_action`` set to -1 from outside
    the graph) skips each purchase the policy still proposes, so the stored ledger replays to this stop.
    """
    ctx = context_of(runtime)
    session = session_for(state, ctx)
    out: dict[str, Any] = {}
    if state.get("next_action", -1) == -1 and session.next_action() != -1:  # (a check, or a draw, still proposed)
        after = len(state.get("bought") or [])
        actions = menu_actions(state)
        entries = [skip_entry(actions[a], a, "stopped", after) for a in session.stop("stopped")]
        out["skipped"] = [*(state.get("skipped") or []), *entries]
    res = session.finish()
    raw, _ = session.raw_majority()
    prior = session.initial_scores()
    emit(ctx, state, "selected", selected=res.selected, raw_selected=raw, cost=res.spent, scores=res.scores)
    chosen = state["candidates"][res.selected] if res.selected >= 0 else None
    return {
        **out,
        "selected": res.selected,
        "answer": None if chosen is None else chosen.get("answer"),
        "answer_text": None if chosen is None else chosen["answer_text"],
        "scores": res.scores,
        "cost": res.spent,
        "raw_selected": raw,
        "prior_scores": prior,
    }


def _ledger_candidates(state: AgentState) -> list[dict[str, Any]]:
    out = []
    for c in state["candidates"]:
        out.append(
            {
                "index": c["index"],
                "answer": c["answer"],
                "valid": c["valid"],
                "utility": c.get("utility"),
                "answer_text": c["answer_text"],
                "slots": c["slots"],
                "claims": c.get("claims", {}),
                "raw_text": c["raw_text"],
                "error": c["error"],
                **({"figure": c["figure"]} if "figure" in c else {}),
                **({"extracted": True} if c.get("extracted") else {}),
                **({"extraction_error": c["extraction_error"]} if c.get("extraction_error") else {}),
            }
        )
    return out


def final_record(state: AgentState, ctx: AgentContext) -> dict[str, Any]:
    """The stored ledger record as a plain dict (validated once, where the store takes it): the menu with the
    outcomes this run observed, plus the evidence log."""
    cfg = ctx.config
    bought = evidence_log(state)
    step_of = {b.id: b.step for b in bought}
    skipped = {s["id"]: s["reason"] for s in state.get("skipped") or []}
    keys = ("outcome", "rationale", "view", "error", "raw_reply", "calls", "tokens", "seconds", "p_outcome")
    observed: dict[str, dict[str, Any]] = {k: v.model_dump() for k, v in observations(state).items()}
    for b in bought:
        observed[b.id] = b.model_dump(include=set(keys))
    actions = []
    for a in menu_actions(state):
        res = observed.get(a.id)
        extra: dict[str, Any] = {"observed": res is not None, "bought_step": step_of.get(a.id)}
        if res is not None:
            extra.update({k: res.get(k) for k in keys[1:-1]})
            if res.get("p_outcome") is not None:  # optional (spec section 11): absent when the server gave none
                extra["p_outcome"] = res["p_outcome"]
        if a.id in skipped:  # refused when proposed (spec section 10): a replay refuses it too
            extra["skipped"] = skipped[a.id]
        actions.append({**a.as_dict(), **extra})
    return _state_record(
        state,
        ctx,
        actions,
        outcomes={k: v["outcome"] for k, v in observed.items()},
        extra={
            "ledger": cfg.ledger,
            "analysis": state["analysis"],
            "image_ref": state["image"],
            **({"figures": figure_refs(state)} if is_multi(state) else {}),
            "costs": state.get("costs") or {"used": None, "source": "design"},
            "agent": {
                "policy": cfg.policy,
                "budget": cfg.budget,
                "eta": cfg.eta,
                "policy_seed": cfg.policy_seed,
                "calibration": ctx.calibration.source,
                "selected": state["selected"],
                "raw_selected": state["raw_selected"],
                "cost": state["cost"],
                "scores": state["scores"],
                "prior_scores": state["prior_scores"],
                **(
                    {
                        "pool": {
                            "mode": cfg.pool,
                            "start": cfg.pool_start,
                            "round": cfg.pool_round,
                            "limit": cfg.k,
                            "draws": state.get("draws") or [],
                        }
                    }
                    if cfg.pool == "adaptive"
                    else {}
                ),
            },
            "evidence_log": [b.logged() for b in bought],
            # every model call with its prompt version (the store's call table has no column for it)
            "model_calls": [ModelCall.from_dict(c).ledger_entry() for c in state.get("calls") or []],
        },
    )


async def persist(state: AgentState, runtime: Ctx) -> dict[str, Any]:
    """Write the question's record, model calls, transcript and image reference to the store."""
    ctx = context_of(runtime)
    record = final_record(state, ctx)
    transcript = session_for(state, ctx).transcript()
    ctx.planners.pop(state["question_id"], None)  # the question is done
    if ctx.store is not None:
        from boe.agent.persist import save_question

        await asyncio.to_thread(save_question, ctx, record, state.get("calls") or [], transcript, figure_refs(state))
    return {"record": record, "transcript": transcript}


def recursion_limit(n_actions: int, budget: float, min_cost: float) -> int:
    """Supersteps a question can take: the fixed nodes plus four per purchase."""
    purchases = n_actions if min_cost <= 0 or math.isinf(budget) else min(n_actions, math.floor(budget / min_cost))
    return 14 + 4 * (purchases + 1)


Node = Callable[[AgentState, Ctx], Awaitable[dict[str, Any]]]


def _resolving(node: Node, resolve: Callable[[Any], AgentContext]) -> Node:
    """The node run with the context ``resolve`` makes of the one the graph was given."""

    async def run(state: AgentState, runtime: Ctx) -> dict[str, Any]:  # LangGraph passes `runtime` by its name
        return await node(state, runtime.override(context=resolve(runtime.context)))

    run.__name__ = run.__qualname__ = node.__name__
    return run


def _on_loop(route: Callable[[AgentState], str]) -> Callable[[AgentState], Awaitable[str]]:
    """``route`` as a coroutine function: LangGraph runs a plain function in a worker thread (a thread hop per
    routing decision, several per question), a coroutine function on the event loop."""

    async def run(state: AgentState) -> str:
        return route(state)

    run.__name__ = route.__name__  # (the branch's name in the compiled graph)
    return run


def build_graph(
    checkpointer: Any = None,
    *,
    context_schema: Any = AgentContext,
    resolve_context: Callable[[Any], AgentContext] | None = None,
) -> Any:
    """The compiled graph (with an optional checkpointer, so an interrupted question resumes).

    Its nodes take an `AgentContext` (``context=``); a graph that declares another ``context_schema`` (the
    module-level `boe.agent.graph.graph`: a dict of configuration fields) passes ``resolve_context``, which
    turns what the graph is given into an `AgentContext` before each node runs.
    """
    g = StateGraph(AgentState, context_schema=context_schema)
    steps: list[Node] = [intake, generate, parse, claims, menu, ledger, plan, approve, act, update, select, persist]
    for step in steps:
        action: Any = step if resolve_context is None else _resolving(step, resolve_context)  # (LangGraph's protocols)
        g.add_node(step.__name__, action)
    g.add_edge(START, "intake")
    g.add_edge("intake", "generate")
    g.add_edge("generate", "parse")
    g.add_edge("parse", "claims")
    g.add_edge("claims", "menu")
    g.add_conditional_edges("menu", _on_loop(route_after_menu), ["ledger", "plan"])
    g.add_edge("ledger", "plan")
    g.add_conditional_edges("plan", _on_loop(route_after_plan), ["approve", "select", "generate"])
    g.add_conditional_edges("approve", _on_loop(route_after_approve), ["act", "plan", "select"])
    g.add_edge("act", "update")
    g.add_edge("update", "plan")
    g.add_edge("select", "persist")
    g.add_edge("persist", END)
    return g.compile(checkpointer=checkpointer)
