"""Graph state and run context of the agent.

`AgentState` is what LangGraph checkpoints: plain JSON-ready values only
(ids, paths, strings, numbers, lists and dicts). Images, arrays, clients and
the policy live in `AgentContext`, handed to every node by the runtime and
never serialised.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

if TYPE_CHECKING:
    from boe.agent.configuration import AgentConfig
    from boe.core.calibration import Calibration
    from boe.tools.client import ModelClient
    from boe.tools.images import LoadedImage
    from boe.tools.protocol import EvidenceTool

__all__ = ["AgentContext", "AgentState"]


class AgentState(TypedDict, total=False):
    """One question on its way through the graph (checkpointed between nodes)."""

    question_id: str
    dataset: str  # the calibration namespace of this question (the run's dataset unless overridden)
    question: str
    options: dict[str, str] | None
    reference: str | None
    image: dict[str, Any]  # ImageRef.as_dict() of the first figure: path, content id, size, DICOM metadata
    images: list[dict[str, Any]]  # every figure's ImageRef dict, in order (one for a single-image question)
    costs: dict[str, Any]  # QuestionCosts.as_dict(): the costs planned with, the design costs, their source
    analysis: dict[str, Any]  # question type, asked slot, stated context
    replies: list[str | None]  # the K generation replies, as received
    candidates: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    actions: list[dict[str, Any]]  # the menu, without outcomes
    mode: str  # "online" (run the bought actions) or "full" (run every action, then plan over them)
    outcomes: dict[str, dict[str, Any]]  # full-ledger mode: every action's result, by action id
    bought: list[dict[str, Any]]  # the evidence log: one entry per bought action, in order
    skipped: list[dict[str, Any]]  # purchases refused when proposed (planner.skip_entry): action, id, reason, after
    pending: dict[str, Any] | None  # the result of the action being bought (between act and update)
    next_action: int  # index into actions, -1: stop
    selected: int
    raw_selected: int
    scores: list[float]
    prior_scores: list[float]  # the cheap prior s(0)
    cost: float
    calls: Annotated[list[dict[str, Any]], operator.add]  # every model call, appended by the nodes
    record: dict[str, Any]  # the stored ledger record
    transcript: dict[str, Any]  # the spec section 7 transcript line


@dataclass(eq=False)
class AgentContext:
    """Live collaborators of one run (not checkpointed)."""

    config: AgentConfig
    calibration: Calibration
    generator: ModelClient
    judge: ModelClient
    tools: dict[str, EvidenceTool]
    images: dict[str, LoadedImage] = field(default_factory=dict)  # by content id
    store: Any = None  # boe.db.Store or None
    run_id: Any = None
    on_step: Any = None  # optional callback(state_update) for progress output and tests
    # the policy session of each question in progress, with the menu it was built on (see nodes.session_for)
    planners: dict[str, tuple[tuple[Any, ...], Any]] = field(default_factory=dict)
