"""The evidence-tool seam: one small protocol; each kind names its tool (`boe.kinds`: `TOOLS`, `make_tool`).

An evidence tool runs one action of the menu and returns ``confirm``,
``reject`` or ``unresolved``. A tool whose reply could not be read or whose
view could not be made returns ``unresolved`` with the error recorded; a
check that could not be run at all (the model endpoint gave up) is
``failed``: it is no outcome, and the agent does not store the question.
Only programming errors raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from boe.tools.client import ModelCall
from boe.tools.images import LoadedImage

__all__ = ["EvidenceTool", "Outcome", "ToolRequest", "ToolResult"]

Outcome = Literal["confirm", "reject", "unresolved"]


@dataclass(frozen=True)
class ToolRequest:
    """Everything a tool may look at for one action (never the reference answer)."""

    action: Mapping[str, Any]  # the menu entry: id, kind, claim, candidate, cost, group
    question: str
    image: LoadedImage  # the figure the action is about (a claim's figure; the first figure otherwise)
    options: Mapping[str, str] | None = None
    claim: Mapping[str, Any] | None = None  # id, slot, value, known, family, location
    candidate: Mapping[str, Any] | None = None  # index, raw, answer, slots
    context: Mapping[str, str] = field(default_factory=dict)  # slot values the record states (question text, DICOM)
    seed: int | None = None
    figures: tuple[LoadedImage, ...] = ()  # every figure of the question, in order (empty: just ``image``)

    @property
    def all_figures(self) -> tuple[LoadedImage, ...]:
        """Every figure of the question (the whole-response judge sees them all)."""
        return self.figures or (self.image,)


@dataclass
class ToolResult:
    """The outcome of one action, why, what was looked at, and the model calls it took."""

    outcome: Outcome
    rationale: str = ""
    view: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    calls: list[ModelCall] = field(default_factory=list)
    raw_reply: str | None = None  # the judge's reply as received
    seconds: float | None = None  # wall time of the action (set by the agent that ran it)
    failed: bool = False  # the check could not be run (the endpoint failed): no verdict, not an outcome
    p_outcome: float | None = None  # the judge's probability of the outcome, from the server's token logprobs


@runtime_checkable
class EvidenceTool(Protocol):
    """One kind of evidence action."""

    kind: str

    def describe(self) -> dict[str, Any]:
        """Name and arguments, enough to rebuild the tool (recorded with the run)."""
        ...

    async def run(self, request: ToolRequest) -> ToolResult:
        """Run the action; failures become ``unresolved`` with ``error`` set."""
        ...
