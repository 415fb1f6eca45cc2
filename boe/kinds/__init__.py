"""Action kinds as registered specs: each kind of check is declared once, in one module.

A `KindSpec` says what a kind targets (a claim, a response, or an answer
shared by every response giving it: the only distinction `boe.core`
knows), its default design cost, how the menu offers it for a question,
which tool runs it and with what arguments, what one call costs in tokens
for a dry-run estimate, and how reports label it. The built-in kinds are
the modules of this package (found by listing it, so a new built-in kind is
one module plus its prompt file); plugins call `register_kind`.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from boe.core.registry import Registry

__all__ = [
    "KINDS",
    "KindSpec",
    "MenuContext",
    "TokenEstimate",
    "ToolContext",
    "builtin_kinds",
    "declare_kinds",
    "claims_per_question",
    "judge_args",
    "kind_names",
    "kind_spec",
    "register_kind",
]

Target = Literal["claim", "response", "answer"]


@dataclass(frozen=True)
class MenuContext:
    """What a menu rule sees for one question (never a reference answer)."""

    claims: Sequence[Mapping[str, Any]]
    cands: Sequence[Mapping[str, Any]]
    costs: Mapping[str, float]  # what the policy plans with
    design: Mapping[str, float]  # recorded beside them as ``design_cost``
    q: Mapping[str, Any]  # the question as the agent parsed it
    covered: frozenset[str] = frozenset()  # answers an answer-level check on the menu already judges

    def action(self, kind: str, aid: str, *, claim: str | None, candidate: int | None, group: str) -> dict[str, Any]:
        """One menu entry of ``kind`` with its planned and design costs."""
        return {
            "id": aid,
            "kind": kind,
            "claim": claim,
            "candidate": candidate,
            "cost": float(self.costs[kind]),
            "design_cost": float(self.design[kind]),
            "group": group,
        }


@dataclass
class ToolContext:
    """What a tool factory may use to build a kind's tool for a run."""

    config: Any  # the run's `AgentConfig`
    judge: Any = None  # the judge `ModelClient`
    segmenter: Any = None  # made on first request by `get_segmenter`

    def get_segmenter(self) -> Any:
        """The run's segmenter (one per run, shared by every kind that needs one)."""
        if self.segmenter is None:
            from boe.tools.segment import make_segmenter

            cfg = self.config
            self.segmenter = make_segmenter(
                cfg.segmenter, checkpoint=cfg.sam_checkpoint, model=cfg.sam_model, device=cfg.sam_device
            )
        return self.segmenter


def judge_args(ctx: ToolContext) -> dict[str, Any]:
    """The arguments of a model-judge tool: the judge client at the judge temperature."""
    return {"client": ctx.judge, "temperature": ctx.config.judge_temperature}


def claims_per_question(k: int, _targets: object = None) -> float:
    """Claims a question gets: 5 + 2.5 log2 K (fitted on the built-in simulator, 30 questions at K = 1, 4, 8, 16)."""
    import math

    return 5.0 + 2.5 * math.log2(k)


@dataclass(frozen=True)
class TokenEstimate:
    """What a dry run counts for a kind's judge calls (see `boe.batch.plan`)."""

    purpose: str  # the prompt purpose its calls are counted under
    text_tokens: int  # prompt text of one call
    images: Literal["figure", "figures", "half"]  # image tokens: one figure, every figure, half a figure (a crop)
    #: calls per question from K and the enabled kinds' targets; None: not counted at all
    calls: Callable[[int, Mapping[str, str]], float | None]
    note: Callable[[Mapping[str, str]], str | None] = lambda _targets: None


@dataclass(frozen=True)
class KindSpec:
    """One kind of evidence action, declared once."""

    name: str
    target: Target
    cost: float  # default design cost
    label: str  # how the CLI and reports call it
    order: int  # menu order (ties between equal-value actions break in it)
    menu: Callable[[str, MenuContext], list[dict[str, Any]]]  # (kind name, context) -> menu entries
    tool: str | Callable[..., Any]  # the tool class ("module:attr", imported on first use)
    tool_args: Callable[[ToolContext], dict[str, Any]] = field(default=lambda _ctx: {})
    prompt: str | None = None  # the prompt template its tool renders (None: no model call)
    estimate: TokenEstimate | None = None  # None: calls no model
    description: str = ""
    report_label: str = ""  # how the HTML report calls it (default: ``label``)

    def __post_init__(self) -> None:
        if not self.report_label:
            object.__setattr__(self, "report_label", self.label)

    @property
    def claim_targeted(self) -> bool:
        """A factor check: its verdict moves the candidates asserting or contradicting one claim."""
        return self.target == "claim"

    def build_tool(self, ctx: ToolContext) -> Any:
        """The run's tool for this kind (through the tool registry, so a registered override wins)."""
        from boe.tools.protocol import make_tool

        return make_tool(self.name, **self.tool_args(ctx))


def _builtins() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


#: Action kinds by name.
KINDS: Registry[KindSpec] = Registry("kinds", "action kind", _builtins)


def register_kind(spec: KindSpec, *, override: bool = False) -> KindSpec:
    """Register an action kind and its tool (a taken name is refused unless ``override=True``)."""
    KINDS.add(spec.name, spec, override=override, where=getattr(spec.menu, "__module__", None))
    from boe.core.ledger import CORE_TARGETS, PLUGIN_KINDS, PluginKind

    if spec.name not in CORE_TARGETS:  # the ledger reader accepts records that declare it (format 1.2)
        PLUGIN_KINDS.add(spec.name, PluginKind(spec.target, KINDS.entry(spec.name).source), override=override)
    protocol = sys.modules.get("boe.tools.protocol")
    if protocol is not None:  # otherwise the tool registry adds every kind's tool when it first fills
        protocol.TOOLS.add(spec.name, spec.tool, override=override, source=KINDS.entry(spec.name).source)
    return spec


def declare_kinds(kinds: Iterable[str]) -> dict[str, dict[str, str]]:
    """The ``kinds`` declaration a ledger record needs for the plugin kinds among ``kinds`` (empty: none)."""
    from boe.core.ledger import CORE_TARGETS

    out: dict[str, dict[str, str]] = {}
    for name in dict.fromkeys(kinds):
        if name and name not in CORE_TARGETS:
            out[name] = {"target": kind_spec(name).target, "plugin": KINDS.entry(name).source}
    return out


def kind_spec(name: str) -> KindSpec:
    """The spec of a registered kind; `ConfigError` naming the known ones."""
    return KINDS.get_obj(name)


def kind_names() -> tuple[str, ...]:
    """Every registered kind, in menu order."""
    return tuple(s.name for s in sorted((KINDS.get_obj(n) for n in KINDS), key=lambda s: s.order))


def builtin_kinds() -> tuple[str, ...]:
    """The kinds this package declares (those of the ledger format), in menu order."""
    return tuple(s.name for s in sorted((KINDS.get_obj(n) for n in KINDS), key=lambda s: s.order) if _is_builtin(s))


def _is_builtin(spec: KindSpec) -> bool:
    return KINDS.entry(spec.name).source == "boe"
