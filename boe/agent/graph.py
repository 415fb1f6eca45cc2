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
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from boe.agent.api import Agent, plain_serializer, sqlite_saver
from boe.agent.configuration import AgentConfig
from boe.agent.inputs import ImageInput, QuestionFields, keep_images, question_input
from boe.agent.nodes import build_graph, recursion_limit
from boe.agent.settings import config_from_env, make_config
from boe.agent.state import AgentContext

if TYPE_CHECKING:
    from boe.core.calibration import Calibration

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
    "studio_context",
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
#: What LangGraph Studio / server may pass as the module graph's context: `AgentConfig` fields over those of the
#: environment (`config_from_env`); the clients are built once per distinct set.
StudioContext = TypedDict(  # type: ignore[misc]  # (the functional form: its fields are AgentConfig's)
    "StudioContext",
    {f: AgentConfig.model_fields[f].annotation for f in STUDIO_FIELDS},
    total=False,
)


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

    def input(self, image: ImageInput, question: str, **fields: Unpack[QuestionFields]) -> dict[str, Any]:
        """The input state of one question (its figures are opened and kept in the context); keywords as
        `Agent.ask`'s."""
        state, imgs = question_input(self.agent.config, image, question, costs=self.agent.question_costs(), **fields)
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
    return BoeGraph(graph=agent.compile(checkpointer), context=agent.context(), agent=agent)


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


def studio_context(given: Any) -> AgentContext:
    """The live context of a run: the `AgentContext` given, else (LangGraph Studio / server, which pass none or a
    dict of `AgentConfig` overrides) the one built once per process from the environment."""
    if isinstance(given, AgentContext):
        return given
    return environment_context(given if isinstance(given, dict) else None)


#: The graph `langgraph.json` names (LangGraph Studio / server): no checkpointer (the server brings its own),
#: context from the environment unless one is passed.
graph = build_graph(context_schema=StudioContext, resolve_context=studio_context)
