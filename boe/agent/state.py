"""Graph state and run context of the agent.

`AgentState` is what LangGraph checkpoints, and it holds plain data only: ids, paths, strings, numbers, lists
and dicts. Any checkpoint serialiser round-trips it, strict msgpack included (``LANGGRAPH_STRICT_MSGPACK=true``
reads an unlisted class back as a dict). Allow-listing classes would not do: a LangGraph server attaches its own
checkpointer with ``Pregel.copy``, which drops the allow-list the graph compiled with (langgraph 1.2.24), and
langgraph-api 0.16.7 ignores ``allowed_msgpack_modules`` in ``langgraph.json``. Candidates and edges are
`TypedDict`s (`Candidate`, `Edge`: plain dicts to any serialiser). The small records below (`ClaimNode`,
`MenuAction`, `Observation`, `Purchase`, `EvidenceEntry`) are the typed views nodes read the state through
(`claim_nodes`, `menu_actions`, `observations`, `pending_purchase`, `evidence_log`); the state stores each as its
``model_dump()``. Images, arrays, clients and the policy live in `AgentContext`, handed to every node by the
runtime and never serialised.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Required, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from boe.agent.configuration import AgentConfig
    from boe.core.calibration import Calibration
    from boe.tools.client import ModelClient
    from boe.tools.images import LoadedImage
    from boe.tools.protocol import EvidenceTool

__all__ = [
    "AgentContext",
    "AgentState",
    "Candidate",
    "CanonClaim",
    "ClaimNode",
    "Edge",
    "EvidenceEntry",
    "MenuAction",
    "Observation",
    "Purchase",
    "claim_node",
    "claim_nodes",
    "evidence_log",
    "menu_action",
    "menu_actions",
    "observation",
    "observations",
    "pending_purchase",
]

M = TypeVar("M", bound=BaseModel)


def typed(model: type[M], value: Any) -> M:
    """A state entry as its record type (the state stores the dict; an older checkpoint may hold the record)."""
    return value if isinstance(value, model) else model.model_validate(value)


class CanonClaim(TypedDict):
    """What a candidate claims in one slot, in canonical form (`boe.vocab.Canon`)."""

    slot: str
    value: str
    known: bool  # found in the slot's vocabulary
    family: str | None  # exclusivity family; None: rivals nothing


class Candidate(TypedDict, total=False):
    """One of the K sampled replies: ``parse`` writes the required keys (and ``figure``, the extraction's), ``claims``
    adds the canonical ``answer``, its ``claims`` by slot and its ``utility`` against the reference."""

    index: Required[int]
    raw_text: Required[str | None]
    valid: Required[bool]
    answer_text: Required[str | None]
    slots: Required[dict[str, str | None]]
    slots_present: Required[bool]  # the reply named its slots itself (else claim extraction may fill them)
    error: Required[str | None]
    figure: str | None  # the figure it is about (questions with several figures)
    extracted: bool  # its slots came from the claim-extraction call
    extraction_error: str
    answer: str | None  # the canonical answer (None: invalid)
    claims: dict[str, CanonClaim]
    utility: float | None  # 1/0 against the reference (None: no reference)


class Edge(TypedDict):
    """A signed candidate–claim edge: +1 the candidate asserts the claim, -1 it asserts a rival value."""

    candidate: int  # the candidate's index
    claim: str  # the claim's id
    sign: int


class ClaimNode(BaseModel):
    """One canonical claim of a question's claim graph (`boe.agent.claims.build_graph`).

    The keys it adds beyond these fields (``known``, ``family``, ``support``, ``location``) are kept, in order.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    slot: str | None = None
    value: str | None = None
    figure: str | int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The claim as `build_graph` wrote it (and as the stored record holds it)."""
        return self.model_dump()


def claim_nodes(state: Mapping[str, Any]) -> list[ClaimNode]:
    """The state's claims as typed entries."""
    return [typed(ClaimNode, c) for c in state.get("claims") or []]


def claim_node(state: Mapping[str, Any], claim_id: str) -> ClaimNode | None:
    """The state's claim ``claim_id``, typed (without reading the others); None when there is none."""
    for c in state.get("claims") or []:
        if (c.id if isinstance(c, ClaimNode) else c.get("id")) == claim_id:
            return typed(ClaimNode, c)
    return None


class MenuAction(BaseModel):
    """One entry of a question's action menu (what a kind's menu rule made), without an outcome.

    Menu rules and tools see it as a mapping (`as_dict`); keys a rule adds beyond these fields (an answer
    check's ``answer`` and ``share``, a plugin's own) are kept, in order, after them.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    kind: str
    claim: str | None = None
    candidate: int | None = None
    cost: float
    design_cost: float | None = None  # the design cost beside the planned ``cost`` (None: not recorded)
    group: str

    def as_dict(self) -> dict[str, Any]:
        """The entry as the menu rule wrote it (and as the stored record's action holds it, before the outcome)."""
        out = self.model_dump()
        if out["design_cost"] is None:
            del out["design_cost"]
        return out


def menu_actions(state: Mapping[str, Any]) -> list[MenuAction]:
    """The state's menu as typed entries."""
    return [typed(MenuAction, a) for a in state.get("actions") or []]


def menu_action(state: Mapping[str, Any], index: int) -> MenuAction:
    """One entry of the state's menu, typed (without reading the others)."""
    return typed(MenuAction, state["actions"][index])


class Observation(BaseModel):
    """What running one action gave: its outcome, why, what was looked at, and what it took."""

    model_config = ConfigDict(extra="forbid")

    outcome: str
    rationale: str | None = None
    view: dict[str, Any] | None = None
    error: str | None = None
    raw_reply: str | None = None
    calls: list[str] = Field(default_factory=list)  # call ids of the model calls it made
    tokens: int | None = None
    seconds: float | None = None
    p_outcome: float | None = None  # the judge's probability of the outcome (token logprobs), when the server gave it


def observations(state: Mapping[str, Any]) -> dict[str, Observation]:
    """Full-ledger mode: every action's result, by action id, as typed entries."""
    return {k: typed(Observation, v) for k, v in (state.get("outcomes") or {}).items()}


def observation(state: Mapping[str, Any], action_id: str) -> Observation:
    """Full-ledger mode: one action's result, typed (without reading the others)."""
    return typed(Observation, (state.get("outcomes") or {})[action_id])


class Purchase(Observation):
    """The result of the action being bought (between ``act`` and ``update``), by its menu index."""

    action: int


def pending_purchase(state: Mapping[str, Any]) -> Purchase | None:
    """The result of the action being bought, typed (None outside ``act`` -> ``update``)."""
    pending = state.get("pending")
    return None if pending is None else typed(Purchase, pending)


class EvidenceEntry(BaseModel):
    """One bought action in the evidence log: the menu entry, what it revealed, and how the scores moved."""

    model_config = ConfigDict(extra="forbid")

    step: int
    action: int  # index into the menu
    id: str
    kind: str
    claim: str | None
    candidate: int | None
    cost: float
    design_cost: float
    tokens: int | None
    seconds: float | None
    group: str
    outcome: str
    rationale: str | None
    error: str | None
    view: dict[str, Any] | None
    raw_reply: str | None
    calls: list[str]
    kappa: float
    moved_up: list[int]
    moved_down: list[int]
    scores: list[float]
    p_outcome: float | None = None  # kept on the ledger's action (spec section 11), not in the evidence log

    def logged(self) -> dict[str, Any]:
        """The entry as the stored record's ``evidence_log`` holds it (no scores, no raw reply)."""
        return self.model_dump(exclude={"scores", "raw_reply", "p_outcome"})


def evidence_log(state: Mapping[str, Any]) -> list[EvidenceEntry]:
    """The evidence log (one entry per bought action, in order) as typed entries."""
    return [typed(EvidenceEntry, b) for b in state.get("bought") or []]


class AgentState(TypedDict, total=False):
    """One question on its way through the graph (checkpointed between nodes; plain data only)."""

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
    candidates: list[Candidate]
    claims: list[dict[str, Any]]  # ClaimNode dumps (read: claim_nodes)
    edges: list[Edge]
    actions: list[dict[str, Any]]  # the menu, without outcomes: MenuAction dumps (read: menu_actions)
    mode: str  # "online" (run the bought actions) or "full" (run every action, then plan over them)
    outcomes: dict[str, dict[str, Any]]  # full-ledger mode: every action's Observation dump, by action id
    bought: list[dict[str, Any]]  # the evidence log: one EvidenceEntry dump per bought action, in order
    skipped: list[dict[str, Any]]  # purchases refused when proposed (planner.skip_entry): action, id, reason, after
    draws: list[dict[str, Any]]  # an adaptive pool's draws after its first round (planner.draw_entry): m, after, skips
    pending: dict[str, Any] | None  # the Purchase dump of the action being bought (between act and update)
    next_action: int  # index into actions, -1: stop (set to -1 with `update_state` to stop the question there);
    # an adaptive pool's draw proposal is `boe.core.session.draw_code(m)` (<= -3)
    planned: int  # the policy's proposal, as `plan` wrote it (only -1 may be set over it)
    selected: int
    answer: str | None  # the selected candidate's canonical answer (None: no candidate selected)
    answer_text: str | None  # ... and its answer as the model wrote it
    raw_selected: int
    scores: list[float]
    prior_scores: list[float]  # the cheap prior s(0)
    cost: float
    calls: Annotated[list[dict[str, Any]], operator.add]  # every model call, appended by the nodes
    record: dict[str, Any]  # the stored ledger record
    transcript: dict[str, Any]  # the spec section 7 transcript line
    # input of a question started by the graph itself (LangGraph Studio / server): the ``intake`` node fills the
    # fields above from these when ``analysis`` is missing
    image_path: str | list[str]


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
    on_step: Any = None  # optional callback(evidence entry dict) for each purchase, beside the stream writer
    # the costs a new question is planned with (Agent.question_costs: design or measured); None: design costs
    question_costs: Any = None
    # the policy session of each question in progress, with the menu it was built on (see nodes.session_for)
    planners: dict[str, tuple[tuple[Any, ...], Any]] = field(default_factory=dict)
