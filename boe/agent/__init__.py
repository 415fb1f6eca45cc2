"""The agent: a LangGraph graph that samples K answers, buys evidence by value per cost, and selects.

Public API: `ask` (one question), `Agent` (many questions on one run),
`AgentConfig` / `make_config` (the validated configuration), `AskResult`,
and `make_graph` (the compiled LangGraph graph with its run context, to embed).
LangGraph, openai and OpenCV load when a question is asked, not on import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from boe.agent.api import Agent, AskResult, ask, ask_async, parse_options
from boe.agent.configuration import AgentConfig, Costs, default_calibration
from boe.agent.settings import make_config

if TYPE_CHECKING:
    from boe.agent.graph import BoeGraph, make_graph

__all__ = [
    "Agent",
    "AgentConfig",
    "AskResult",
    "BoeGraph",
    "Costs",
    "ask",
    "ask_async",
    "default_calibration",
    "make_config",
    "make_graph",
    "parse_options",
]


def __getattr__(name: str) -> Any:
    if name in ("make_graph", "BoeGraph"):  # LangGraph loads with them, not with `import boe.agent`
        from boe.agent import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'boe.agent' has no attribute {name!r}")
