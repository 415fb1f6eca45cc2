"""The evidence-tool seam: one small protocol, implementations registered by name.

An evidence tool runs one action of the menu and returns ``confirm``,
``reject`` or ``unresolved``. A tool whose reply could not be read or whose
view could not be made returns ``unresolved`` with the error recorded; a
check that could not be run at all (the model endpoint gave up) is
``failed``: it is no outcome, and the agent does not store the question.
Only programming errors raise.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from boe.core.registry import Entry, current_source
from boe.errors import ConfigError
from boe.tools.client import ModelCall
from boe.tools.images import LoadedImage

__all__ = [
    "TOOLS",
    "EvidenceTool",
    "ToolView",
    "Outcome",
    "ToolRequest",
    "ToolResult",
    "make_tool",
    "register_tool",
]

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


class ToolView(Mapping[str, Callable[..., EvidenceTool]]):
    """Evidence tools by action kind: a view of the registered kinds (each `KindSpec.tool`), no state of its own.

    It answers like a `boe.core.registry.Registry` (``entry``, ``entries``, ``get_obj``) so ``boe plugins``
    lists it; `register_tool` replaces a kind's tool on its spec.
    """

    noun, what, listed = "tools", "evidence tool", True

    def entry(self, kind: str) -> Entry[Callable[..., EvidenceTool]]:
        """The tool of ``kind`` and who registered it; `ConfigError` naming the known kinds."""
        from boe.kinds import KINDS

        try:
            e = KINDS.entry(kind)
        except ConfigError:
            raise ConfigError(f"no evidence tool for action kind {kind!r}; known: {', '.join(sorted(KINDS))}") from None
        tool = KINDS.get_obj(kind).tool
        source = _TOOL_SOURCES.get(kind, e.source)
        return Entry(kind, tool, None, source) if isinstance(tool, str) else Entry(kind, None, tool, source)

    def entries(self) -> list[Entry[Callable[..., EvidenceTool]]]:
        """Every kind's tool, in registration order."""
        return [self.entry(kind) for kind in self]

    def get_obj(self, kind: str) -> Callable[..., EvidenceTool]:
        """The tool class (or factory) of ``kind``, imported on first use."""
        e = self.entry(kind)
        if e.obj is not None:
            return e.obj
        assert e.target is not None
        mod, _, attr = e.target.partition(":")
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj  # type: ignore[no-any-return]

    def __getitem__(self, kind: str) -> Callable[..., EvidenceTool]:
        try:
            return self.get_obj(kind)
        except ConfigError:
            raise KeyError(kind) from None

    def __iter__(self) -> Iterator[str]:
        from boe.kinds import KINDS

        return iter(KINDS)

    def __len__(self) -> int:
        from boe.kinds import KINDS

        return len(KINDS)


#: Evidence tools by action kind (a view of the kinds).
TOOLS = ToolView()
_TOOL_SOURCES: dict[str, str] = {}  # kinds whose tool `register_tool` replaced -> who replaced it


def register_tool(kind: str, *, override: bool = False) -> Callable[[type], type]:
    """Class decorator: make ``cls`` the tool of a registered action kind (`make_tool` builds it).

    A kind's tool (a built-in one included) is replaced only with ``override=True``; a new kind brings its tool in
    its `boe.kinds.KindSpec`.
    """

    def deco(cls: type) -> type:
        from boe.kinds import KINDS

        e = TOOLS.entry(kind)
        if e.obj is cls or (e.target is not None and f"{cls.__module__}:{cls.__qualname__}" == e.target):
            return cls  # the same class registered again (its module imported twice)
        if not override:
            raise ConfigError(
                f"evidence tool {kind!r} is already registered by {e.source!r} ({e.spec()}); "
                f"{current_source()!r} cannot register it again without override=True"
            )
        kind_entry = KINDS.entry(kind)
        spec = replace(KINDS.get_obj(kind), tool=cls)
        KINDS.add(kind, spec, override=True, source=kind_entry.source, where=kind_entry.where)
        _TOOL_SOURCES[kind] = current_source()
        return cls

    return deco


def make_tool(kind: str, **kwargs: Any) -> EvidenceTool:
    """Build the registered tool for an action kind."""
    try:
        factory = TOOLS.get_obj(kind)
    except ConfigError:
        raise ConfigError(f"no evidence tool for action kind {kind!r}; known: {', '.join(sorted(TOOLS))}") from None
    tool = factory(**kwargs)
    if not getattr(tool, "kind", ""):
        tool.kind = kind  # a built-in tool class serves the kind it was registered for
    return tool
