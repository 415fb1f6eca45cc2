"""The agent: a LangGraph graph that samples K answers, buys evidence by value per cost, and selects.

Public API: `ask` (one question), `Agent` (many questions on one run),
`AgentConfig` / `make_config` (the validated configuration), `AskResult`.
LangGraph, openai and OpenCV load when a question is asked, not on import.
"""

from __future__ import annotations

from boe.agent.api import Agent, AskResult, ask, ask_async, parse_options
from boe.agent.configuration import AgentConfig, Costs, default_calibration, make_config

__all__ = [
    "Agent",
    "AgentConfig",
    "AskResult",
    "Costs",
    "ask",
    "ask_async",
    "default_calibration",
    "make_config",
    "parse_options",
]
