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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from boe.core.registry import BUILTIN, DISTRIBUTION, Entry, KindInfo, Registry, current_source
from boe.errors import ConfigError

if TYPE_CHECKING:
    from boe.tools.protocol import EvidenceTool

__all__ = [
    "KINDS",
    "TOOLS",
    "KindSpec",
    "MenuContext",
    "Prior",
    "SHORT_CHARS",
    "SHORT_WORDS",
    "TokenEstimate",
    "ToolContext",
    "ToolView",
    "answer_key",
    "answer_slot",
    "builtin_kinds",
    "claim_group",
    "claims_per_question",
    "declare_kinds",
    "default_kinds",
    "figure_context",
    "judge_args",
    "kind_names",
    "kind_priors",
    "kind_spec",
    "ledger_kinds",
    "make_tool",
    "prior_channels",
    "record_states",
    "register_kind",
    "register_tool",
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


# What menu rules read of a question's claims and candidates (claims and candidates are plain dicts).


def figure_context(q: Mapping[str, Any], figure: str | None) -> dict[str, str]:
    """The record context a check of a claim about ``figure`` reads: the question's, plus that figure's header."""
    ctx = dict(q.get("context") or {})
    if figure is not None:
        ctx.update((q.get("figure_context") or {}).get(figure) or {})
    return ctx


def answer_slot(q: Mapping[str, Any]) -> str:
    """The slot whose claims carry the answer itself (yes/no answers fill ``attribute``)."""
    return "attribute" if q.get("closed") else str(q["slot"])


def claim_group(channel: str, claim: Mapping[str, Any], q: Mapping[str, Any]) -> str:
    """Calibration group of a factor action: the channel, then ``answer:SLOT`` for a claim that carries
    the answer, or the slot of a supporting claim (their discrimination differs by far)."""
    if claim["slot"] == answer_slot(q):
        # attribute answers split by family: yes/no, side, vertical, size answers differ in reliability
        kind = claim.get("family") if claim["slot"] == "attribute" and claim.get("family") else claim["slot"]
        return f"{channel}/answer:{kind}"
    return f"{channel}/{claim['slot']}"


def record_states(q: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """Whether the record (DICOM header, metadata, question text) states what the claim's record check reads.

    Such checks form the ``record`` channel, whatever the dataset is called: their reliability is the record's.
    """
    from boe.tools.structured import _option_against_context
    from boe.vocab import vocabulary

    ctx = figure_context(q, claim.get("figure"))
    if claim["slot"] == "option":
        text = (q.get("options") or {}).get(claim.get("value")) if isinstance(q.get("options"), Mapping) else None
        return isinstance(text, str) and _option_against_context(vocabulary(), text, ctx) is not None
    return bool(ctx.get(claim["slot"]))


#: An answer is short enough for an answer-level check up to this many words and characters.
SHORT_WORDS = 5
SHORT_CHARS = 48


def answer_key(cand: Mapping[str, Any]) -> str | None:
    """The normalised answer an answer-level verdict is shared by (``strip().lower()``); None if invalid."""
    if not cand.get("valid") or cand.get("answer") is None:
        return None
    return str(cand["answer"]).strip().lower()


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


class ToolView(Mapping[str, Callable[..., Any]]):  # (of EvidenceTool: the tools load on first use)
    """Evidence tools by action kind: a view of the registered kinds (each `KindSpec.tool`), no state of its own.

    It answers like a `boe.core.registry.Registry` (``entry``, ``entries``, ``get_obj``) so ``boe plugins``
    lists it; `register_tool` replaces a kind's tool on its spec.
    """

    noun, what, listed = "tools", "evidence tool", True

    def entry(self, kind: str) -> Entry[Callable[..., EvidenceTool]]:
        """The tool of ``kind`` and who registered it; `ConfigError` naming the known kinds."""
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
        return iter(KINDS)

    def __len__(self) -> int:
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
