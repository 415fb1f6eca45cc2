"""The agent as a LangGraph `StateGraph`, assembled at the bottom of this file.

    generate -> parse -> claims -> menu -> [ledger] -> (plan -> act -> update)* -> select -> persist

`plan` calls the same policy objects as `boe replay`; `act` runs the
evidence tool where the replay reads a stored outcome. In full-ledger mode
`ledger` runs every action first and `act` reads from it.
"""

from __future__ import annotations

import math
from typing import Any

from langgraph.graph import END, START, StateGraph

from boe.agent import nodes
from boe.agent.state import AgentContext, AgentState

__all__ = ["build_graph", "recursion_limit"]


def recursion_limit(n_actions: int, budget: float, min_cost: float) -> int:
    """Supersteps a question can take: the fixed nodes plus three per purchase."""
    purchases = n_actions if min_cost <= 0 or math.isinf(budget) else min(n_actions, math.floor(budget / min_cost))
    return 12 + 3 * (purchases + 1)


def build_graph(checkpointer: Any = None) -> Any:
    """The compiled graph (with an optional checkpointer, so an interrupted question resumes)."""
    g = StateGraph(AgentState, context_schema=AgentContext)
    g.add_node("generate", nodes.generate)
    g.add_node("parse", nodes.parse)
    g.add_node("claims", nodes.claims)
    g.add_node("menu", nodes.menu)
    g.add_node("ledger", nodes.ledger)
    g.add_node("plan", nodes.plan)
    g.add_node("act", nodes.act)
    g.add_node("update", nodes.update)
    g.add_node("select", nodes.select)
    g.add_node("persist", nodes.persist)
    g.add_edge(START, "generate")
    g.add_edge("generate", "parse")
    g.add_edge("parse", "claims")
    g.add_edge("claims", "menu")
    g.add_conditional_edges("menu", nodes.route_after_menu, ["ledger", "plan"])
    g.add_edge("ledger", "plan")
    g.add_conditional_edges("plan", nodes.route_after_plan, ["act", "select"])
    g.add_edge("act", "update")
    g.add_edge("update", "plan")
    g.add_edge("select", "persist")
    g.add_edge("persist", END)
    return g.compile(checkpointer=checkpointer)
