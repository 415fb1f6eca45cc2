"""The agent as a LangGraph `StateGraph`, and the factory to embed it.

    intake -> generate -> parse -> claims -> menu -> [ledger]
        -> (plan -> approve -> act -> update | plan -> generate -> parse -> claims -> menu)* -> select -> persist

The edge back to `generate` is an adaptive pool's draw (``pool="adaptive"``): its policy weighs drawing more
candidates against buying a check under one budget, and a draw samples the next round, reads and links it,
grows the menu at its end, and plans again from the same session (spec section 12).

`plan` calls the same policy objects as `boe replay`; `act` runs the
evidence tool where the replay reads a stored outcome. In full-ledger mode
`ledger` runs every action first and `act` reads from it. `approve` pauses
(a LangGraph ``interrupt``) before each purchase when the configuration has
``approve=True``; resume with ``Command(resume=True | False | {"approve": bool, "reason": str})``: a veto is a
skipped action (spec section 10), stored on the record and replayed.
Progress events go to LangGraph's stream writer (``stream_mode="custom"``).

Embedding (see `make_graph`)::

    async with make_graph(config, checkpointer=saver) as boe_graph:
        state = boe_graph.input("scan.png", "what imaging modality was used?")
        async for mode, chunk in boe_graph.graph.astream(
            state, boe_graph.run_config(state), context=boe_graph.context, stream_mode=["updates", "custom"]
        ):
            ...

`graph` (module level) is the compiled graph `langgraph.json` names for
LangGraph Studio / server: it takes ``{"question": ..., "image_path": ...}``
and, given no context, builds one from the environment (`config_from_env`).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from boe.agent import nodes
from boe.agent.api import Agent, question_input
from boe.agent.configuration import AgentConfig, make_config
from boe.agent.settings import config_from_env
from boe.agent.state import AgentContext, AgentState

if TYPE_CHECKING:
    from boe.agent.api import ImageInput
    from boe.core.calibration import Calibration
    from boe.tools.images import LoadedImage

__all__ = [
    "BoeGraph",
    "StudioContext",
    "build_graph",
    "config_from_env",
    "environment_context",
    "graph",
    "make_graph",
    "plain_serializer",
    "question_input",
    "recursion_limit",
    "sqlite_saver",
]

#: The `AgentConfig` fields LangGraph Studio shows in the context form of the module graph.
STUDIO_FIELDS = [
    "base_url",
    "model",
    "judge_base_url",
    "judge_model",
    "k",
    "budget",
    "pool",
    "policy",
    "approve",
    "dataset",
    "root",
    "calibration",
]
#: Figures kept decoded in a shared context (older ones are read again from their path when needed).
MAX_IMAGES = 32


def recursion_limit(n_actions: int, budget: float, min_cost: float) -> int:
    """Supersteps a question can take: the fixed nodes plus four per purchase."""
    purchases = n_actions if min_cost <= 0 or math.isinf(budget) else min(n_actions, math.floor(budget / min_cost))
    return 14 + 4 * (purchases + 1)


#: What LangGraph Studio / server may pass as the module graph's context: `AgentConfig` fields over those of the
#: environment (`config_from_env`); the clients are built once per distinct set.
StudioContext = TypedDict(  # type: ignore[misc]  # (the functional form: its fields are AgentConfig's)
    "StudioContext",
    {f: AgentConfig.model_fields[f].annotation for f in STUDIO_FIELDS},
    total=False,
)


def build_graph(checkpointer: Any = None, *, context_schema: Any = AgentContext) -> Any:
    """The compiled graph (with an optional checkpointer, so an interrupted question resumes).

    Its nodes take an `AgentContext` (``context=``); ``context_schema=StudioContext`` (the module-level
    `graph`) declares a dict of configuration fields instead, from which a context is built.
    """
    g = StateGraph(AgentState, context_schema=context_schema)
    g.add_node("intake", nodes.intake)
    g.add_node("generate", nodes.generate)
    g.add_node("parse", nodes.parse)
    g.add_node("claims", nodes.claims)
    g.add_node("menu", nodes.menu)
    g.add_node("ledger", nodes.ledger)
    g.add_node("plan", nodes.plan)
    g.add_node("approve", nodes.approve)
    g.add_node("act", nodes.act)
    g.add_node("update", nodes.update)
    g.add_node("select", nodes.select)
    g.add_node("persist", nodes.persist)
    g.add_edge(START, "intake")
    g.add_edge("intake", "generate")
    g.add_edge("generate", "parse")
    g.add_edge("parse", "claims")
    g.add_edge("claims", "menu")
    g.add_conditional_edges("menu", nodes.route_after_menu, ["ledger", "plan"])
    g.add_edge("ledger", "plan")
    g.add_conditional_edges("plan", nodes.route_after_plan, ["approve", "select", "generate"])
    g.add_conditional_edges("approve", nodes.route_after_approve, ["act", "plan", "select"])
    g.add_edge("act", "update")
    g.add_edge("update", "plan")
    g.add_edge("select", "persist")
    g.add_edge("persist", END)
    return g.compile(checkpointer=checkpointer)


class BoeGraph:
    """The compiled graph with what it needs at run time: the live context and per-question inputs."""

    # a plain class, not a dataclass: LangGraph loaders exec this file by path, not always as a registered module
    def __init__(self, graph: Any, context: AgentContext, agent: Agent) -> None:
        self.graph = graph  # a compiled LangGraph graph
        self.context = context  # pass as ``context=`` to invoke / stream
        self.agent = agent  # owns the clients, tools and store run behind the context

    @property
    def config(self) -> AgentConfig:
        return self.agent.config

    def input(
        self,
        image: ImageInput,
        question: str,
        *,
        options: Mapping[str, str] | str | None = None,
        reference: str | None = None,
        question_id: str | None = None,
        dataset: str | None = None,
        opened: Sequence[LoadedImage] | None = None,
    ) -> dict[str, Any]:
        """The input state of one question (its figures are opened and kept in the context)."""
        state, imgs = question_input(
            self.agent.config,
            image,
            question,
            options=options,
            reference=reference,
            question_id=question_id,
            dataset=dataset,
            opened=opened,
            costs=self.agent.question_costs(),
        )
        keep_images(self.context, imgs)
        return state

    def run_config(self, state: Mapping[str, Any], thread_id: str | None = None) -> dict[str, Any]:
        """``{"configurable": {"thread_id": ...}, "recursion_limit": ...}`` for this question's input state."""
        return self.agent.run_config(state, thread_id)

    async def aclose(self) -> None:
        """Close the model clients and the store."""
        await self.agent.aclose()

    async def __aenter__(self) -> BoeGraph:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def keep_images(ctx: AgentContext, imgs: Sequence[LoadedImage]) -> None:
    """Add decoded figures to a context, dropping the oldest beyond `MAX_IMAGES`."""
    for img in imgs:
        ctx.images.pop(img.ref.image_id, None)
        ctx.images[img.ref.image_id] = img
    while len(ctx.images) > max(MAX_IMAGES, len(imgs)):
        del ctx.images[next(iter(ctx.images))]


def plain_serializer() -> Any:
    """A checkpoint serialiser that rebuilds no class beyond LangGraph's safe list (strict msgpack, whatever the
    environment says): the agent's state is plain data, so nothing in a checkpoint file can run code on load."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=None)


@asynccontextmanager
async def sqlite_saver(path: str | Path) -> AsyncIterator[Any]:
    """LangGraph's `AsyncSqliteSaver` on a file, with the strict serialiser (`plain_serializer`)."""
    try:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as exc:
        from boe.errors import MissingExtraError

        raise MissingExtraError("agent", "langgraph-checkpoint-sqlite", "checkpointing") from exc
    async with aiosqlite.connect(str(path)) as conn:
        yield AsyncSqliteSaver(conn, serde=plain_serializer())


def make_graph(
    config: AgentConfig | Mapping[str, Any] | None = None,
    *,
    checkpointer: Any = None,
    calibration: Calibration | None = None,
    api_key: str | None = None,
    store: Any = None,
    run_name: str | None = None,
    http_client: Any = None,
    cache: Any = None,
    on_step: Any = None,
) -> BoeGraph:
    """The agent's compiled graph and its run context, from a configuration (an `AgentConfig`, a mapping of its
    fields, or None: `config_from_env`).

    ``checkpointer`` (say `sqlite_saver`, or any LangGraph saver) makes questions resumable and is needed
    for the approval step (``approve=True``); run with ``durability="sync"`` to survive a crash at any step.
    ``store`` (a path, URL or `boe.db.Store`) stores each answered question in run ``run_name``. Close the
    result (``await g.aclose()`` or ``async with``) to close its clients and store.
    """
    try:
        if isinstance(config, AgentConfig):
            cfg = config
        else:
            cfg = config_from_env() if config is None else make_config(**dict(config))
        agent = Agent(
            cfg,
            api_key=api_key,
            store=store,
            run_name=run_name,
            calibration=calibration,
            http_client=http_client,
            on_step=on_step,
            cache=cache,
        )
        agent.connect()
    except ImportError as exc:
        from boe.errors import MissingExtraError

        raise MissingExtraError("agent", exc.name or "openai", "the agent") from exc
    compiled = build_graph(checkpointer)
    agent.graph = compiled
    agent._saver = checkpointer
    return BoeGraph(graph=compiled, context=agent.context(), agent=agent)


_ENV_CONTEXTS: dict[str, AgentContext] = {}
_ENV_LOCK = threading.Lock()


def environment_context(overrides: Mapping[str, Any] | None = None) -> AgentContext:
    """The run context built from the environment (once per process and set of overrides): what the module-level
    `graph` runs with when LangGraph Studio or a LangGraph server gives it no `AgentContext`. With ``BOE_DB`` (a
    store, as ``--db`` takes it) each answered question is stored there, in run ``BOE_RUN`` (default: a new
    ``ask-...`` run)."""
    key = json.dumps(dict(overrides or {}), sort_keys=True, default=str)
    with _ENV_LOCK:
        ctx = _ENV_CONTEXTS.get(key)
        if ctx is None:
            cfg = config_from_env(overrides)
            store, run = os.environ.get("BOE_DB") or None, os.environ.get("BOE_RUN") or None
            ctx = _ENV_CONTEXTS[key] = make_graph(cfg, store=store, run_name=run).context
    return ctx


#: The graph `langgraph.json` names (LangGraph Studio / server): no checkpointer (the server brings its own),
#: context from the environment unless one is passed.
graph = build_graph(context_schema=StudioContext)
