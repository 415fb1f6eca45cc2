"""Action kinds as registered specs: each kind of check is declared once, in one module.

A `KindSpec` is the one place a kind is described: what it targets (a
claim, a response, or an answer shared by every response giving it: the
only distinction `boe.core` knows), its default design cost, how the menu
offers it for a question, which tool runs it with which prompt (the
template's ``[meta] schema`` or ``[schema]`` section is its reply schema),
what one call costs in tokens for a dry-run estimate, the prior kappa its
checks carry before a calibration is fitted on them, whether a run uses it
by default, and how reports label it. The built-in kinds are the modules of
this package (found by listing it, so a new built-in kind is one module
plus its prompt file); plugins call `register_kind`. Everything else (the
ledger reader, the tool registry, costs, the command-line help) reads the
registered specs.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from boe.core.registry import BUILTIN, DISTRIBUTION, KindInfo, Registry, current_source
from boe.errors import ConfigError

__all__ = [
    "KINDS",
    "KindSpec",
    "MenuContext",
    "Prior",
    "TokenEstimate",
    "ToolContext",
    "builtin_kinds",
    "claims_per_question",
    "declare_kinds",
    "default_kinds",
    "judge_args",
    "kind_names",
    "kind_priors",
    "kind_spec",
    "ledger_kinds",
    "prior_channels",
    "register_kind",
    "unregister_kind",
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
class Prior:
    """The calibration a kind's checks carry where no fitted calibration covers them: kappa and the outcome
    masses (confirm, reject, unresolved) of the paper's order for such a check, not fitted on your data."""

    kappa: float
    p: tuple[float, float, float] = (0.50, 0.40, 0.10)


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
    #: prior calibration per channel its menu rule puts checks in (a group's first part, or ``channel/answer``)
    priors: Mapping[str, Prior] = field(default_factory=dict)
    default_on: bool = True  # on every run's menu unless the configuration's ``kinds`` leaves it out
    #: the ledger format whose kind list names it (spec sections 1 and 8: only the paper's kinds); a new kind
    #: leaves it None and the records using it declare it (format 1.2)
    ledger: str | None = None
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
        """The run's tool for this kind, rendering the spec's prompt when the tool takes one."""
        from boe.tools.protocol import TOOLS, make_tool

        args = self.tool_args(ctx)
        if self.prompt is not None and "prompt" not in args and _takes(TOOLS.get_obj(self.name), "prompt"):
            args["prompt"] = self.prompt
        return make_tool(self.name, **args)


def _takes(factory: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _builtins() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


#: Action kinds by name.
KINDS: Registry[KindSpec] = Registry("kinds", "action kind", _builtins)
_LEDGER_FORMATS = ("boe-ledger/1", "boe-ledger/1.1")  # the formats whose spec names kinds (sections 1 and 8)
_ledger: Mapping[str, KindInfo] | None = None


def register_kind(spec: KindSpec, *, override: bool = False) -> KindSpec:
    """Register an action kind (its tool, prompt, costs and prior come with it); a taken name is refused unless
    ``override=True``."""
    global _ledger
    where = getattr(spec.menu, "__module__", None)
    if spec.ledger is not None and (
        spec.ledger not in _LEDGER_FORMATS or _package(current_source(), where) != DISTRIBUTION
    ):
        raise ConfigError(
            f"action kind {spec.name!r}: ledger={spec.ledger!r} is for the kinds the ledger spec names; a new kind "
            "leaves it out (records using it declare it, format boe-ledger/1.2)"
        )
    KINDS.add(spec.name, spec, override=override, where=where)
    _ledger = None  # the ledger reader's view is rebuilt on next use
    return spec


def unregister_kind(name: str) -> KindSpec | None:
    """Remove a registered kind (for tests, and plugins replacing themselves); its spec, or None."""
    global _ledger
    _ledger = None
    spec: KindSpec | None = KINDS.pop(name)
    return spec


def ledger_kinds() -> Mapping[str, KindInfo]:
    """What the ledger reader knows of every kind registered so far (the built-ins first; no plugin discovery):
    the same object until a kind is registered (`boe.core.registry.set_kind_source` is given this function)."""
    global _ledger
    if _ledger is None:
        entries = [KINDS.entry(name) for name in KINDS.names(discover=False)]
        _ledger = MappingProxyType(
            {
                e.name: KindInfo(s.target, _package(e.source, e.where), s.order, s.prompt is not None, s.ledger)
                for e in entries
                if (s := e.obj) is not None
            }
        )
    return _ledger


def _package(source: str, module: str | None) -> str:
    """The distribution a user installs to have a kind: its plugin's, best-of-evidence for the kinds of this
    package, else (a kind registered in-process) the top-level package of the module that declares it."""
    if source != BUILTIN:
        return source
    if module is None or module == "boe" or module.startswith("boe."):
        return DISTRIBUTION
    return module.split(".")[0]


def declare_kinds(kinds: Iterable[str]) -> dict[str, dict[str, str]]:
    """The ``kinds`` declaration a ledger record needs for the kinds among ``kinds`` that the ledger format does
    not name (empty: none): each kind's target and the distribution that defines it."""
    out: dict[str, dict[str, str]] = {}
    for name in dict.fromkeys(kinds):
        if name and kind_spec(name).ledger is None:
            entry = KINDS.entry(name)
            out[name] = {"target": kind_spec(name).target, "plugin": _package(entry.source, entry.where)}
    return out


def kind_spec(name: str) -> KindSpec:
    """The spec of a registered kind; `ConfigError` naming the known ones."""
    return KINDS.get_obj(name)


def _specs() -> list[KindSpec]:
    return sorted((KINDS.get_obj(n) for n in KINDS), key=lambda s: s.order)


def kind_names() -> tuple[str, ...]:
    """Every registered kind, in menu order."""
    return tuple(s.name for s in _specs())


def default_kinds() -> tuple[str, ...]:
    """The kinds a run uses unless its configuration says otherwise (each spec's ``default_on``), in menu order."""
    return tuple(s.name for s in _specs() if s.default_on)


def builtin_kinds() -> tuple[str, ...]:
    """The kinds this package declares, in menu order."""
    return tuple(s.name for s in _specs() if ledger_kinds()[s.name].package == DISTRIBUTION)


def kind_priors(kinds: Iterable[str] | None = None) -> dict[str, tuple[str, Prior]]:
    """Channel -> (kind, prior) of ``kinds`` (default: every registered kind), in menu order."""
    names = kind_names() if kinds is None else kinds
    return {ch: (name, prior) for name in names for ch, prior in kind_spec(name).priors.items()}


def prior_channels(kinds: Iterable[str] | None = None) -> dict[str, tuple[float, tuple[float, float, float]]]:
    """Channel -> (kappa, outcome masses) of the kinds' priors, as `boe.core.calibration` takes them."""
    return {ch: (prior.kappa, prior.p) for ch, (_, prior) in kind_priors(kinds).items()}
