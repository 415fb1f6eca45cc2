"""Ledger-v1 records (spec/ledger-v1.md section 1) and a streaming loader.

A ledger is JSON Lines, one question per line. `read_ledger` yields valid
records and reports bad ones (file, line, question, field) without stopping;
with ``strict=True`` the first bad record raises.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal, NotRequired

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict

from boe.core.lines import clean_line, decode_line, ledger_name, open_ledger
from boe.core.registry import BUILTIN, DISTRIBUTION, KindInfo, ledger_kind, ledger_kinds
from boe.errors import RecordError

__all__ = [
    "FORMAT",
    "FORMATS",
    "FORMAT_1_1",
    "FORMAT_1_2",
    "FORMAT_1_3",
    "TARGETS",
    "OUTCOMES",
    "Action",
    "Candidate",
    "Claim",
    "Edge",
    "LedgerKinds",
    "LedgerRecord",
    "Task",
    "RecordDict",
    "FieldRuleError",
    "check_graph",
    "dump_record",
    "record_data",
    "record_line",
    "format_for",
    "kind_targets",
    "iter_ledger",
    "ledger_view",
    "parse_record",
    "parse_record_dict",
    "read_ledger",
    "valid_flags",
]

FORMAT = "boe-ledger/1"
OUTCOMES: tuple[str, str, str] = ("confirm", "reject", "unresolved")
# Revision 1.1 (spec section 8): answer-level response checks; a record that contains one carries FORMAT_1_1.
FORMAT_1_1 = "boe-ledger/1.1"
# Revision 1.2 (spec section 9): kinds the format does not name. A record that uses one declares it in its "kinds"
# object (target and the package that defines it) and carries FORMAT_1_2; records of formats 1 and 1.1 are unchanged.
FORMAT_1_2 = "boe-ledger/1.2"
# Revision 1.3 (spec section 12): candidates in sampling order with the planning cost of drawing each, so that
# the first k of a record replay as a pool of k (an adaptive pool). Everything 1.1 and 1.2 allow, 1.3 allows too.
FORMAT_1_3 = "boe-ledger/1.3"
FORMATS: tuple[str, ...] = (FORMAT, FORMAT_1_1, FORMAT_1_2, FORMAT_1_3)
_EXTENDED = (FORMAT_1_2, FORMAT_1_3)  # formats that allow declared kinds (and every kind the format names)
TARGETS: tuple[str, str, str] = ("claim", "response", "answer")


@dataclass(frozen=True)
class LedgerKinds:
    """The ledger's view of the registered action kinds (`boe.core.registry.ledger_kinds`; no name is written
    here): the kinds the format names (spec sections 1 and 8) with their targets, formats and codes."""

    core: dict[str, str]  # kind the format names -> target
    since: dict[str, str]  # kind the format names -> the format that names it
    codes: dict[str, int]  # kind the format names -> code: claim kinds first, then response, then answer
    parent: dict[str, str]  # target -> the kind whose code a declared kind of that target takes (bayes pools it)

    @classmethod
    def of(cls, kinds: Mapping[str, KindInfo]) -> LedgerKinds:
        """The view of a kind listing."""
        named = sorted(
            ((n, i) for n, i in kinds.items() if i.ledger is not None),
            key=lambda x: (TARGETS.index(x[1].target), x[1].order),
        )
        parent: dict[str, str] = {}
        for name, info in named:  # the first model-judged kind of each target (else the first)
            if info.judged and (info.target not in parent or not kinds[parent[info.target]].judged):
                parent[info.target] = name
            parent.setdefault(info.target, name)
        return cls(
            core={n: i.target for n, i in named},
            since={n: str(i.ledger) for n, i in named},
            codes={n: c for c, (n, _) in enumerate(named)},
            parent=parent,
        )

    @property
    def on_candidate(self) -> dict[str, bool]:
        """Kind -> whether it targets a candidate (a response or an answer) rather than a claim."""
        return {n: t != "claim" for n, t in self.core.items()}

    def code_of_target(self, target: str) -> int:
        """The code a declared kind of ``target`` takes."""
        return self.codes[self.parent[target]]


_view: tuple[Mapping[str, KindInfo], LedgerKinds, dict[str, bool], frozenset[str]] | None = None


def _kinds() -> tuple[LedgerKinds, dict[str, bool], frozenset[str]]:
    """The current view, its candidate flags, and the kinds of format 1 (rebuilt when a kind is registered)."""
    global _view
    listing = ledger_kinds()
    if _view is None or _view[0] is not listing:
        v = LedgerKinds.of(listing)
        _view = (listing, v, v.on_candidate, frozenset(n for n, f in v.since.items() if f == FORMAT))
    return _view[1], _view[2], _view[3]


def ledger_view() -> LedgerKinds:
    """The kinds the ledger format names, as the registered kinds declare them."""
    return _kinds()[0]


def __getattr__(name: str) -> Any:
    # names of earlier versions, now read off the registered kinds
    v = ledger_view()
    if name == "CORE_TARGETS":
        return dict(v.core)
    if name == "ALL_KINDS":
        return tuple(v.core)
    if name == "KINDS":
        return tuple(n for n, f in v.since.items() if f == FORMAT)
    if name == "FACTOR_KINDS":
        return tuple(n for n, t in v.core.items() if t == "claim")
    if name in ("WHOLE_KIND", "ANSWER_KIND", "TARGET_PARENT"):
        return dict(v.parent) if name == "TARGET_PARENT" else v.parent["response" if name == "WHOLE_KIND" else "answer"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Outcome = Literal["confirm", "reject", "unresolved"]
Target = Literal["claim", "response", "answer"]
Format = Literal["boe-ledger/1", "boe-ledger/1.1", "boe-ledger/1.2", "boe-ledger/1.3"]


def format_for(kinds: Iterable[str], *, sampled: bool = False) -> str:
    """The format a record with actions of these kinds must carry: 1.3 when its candidates carry their sample
    costs, 1.2 with a kind the format does not name, else the latest format naming one of them (1.1 with an answer
    check), else 1."""
    if sampled:
        return FORMAT_1_3
    since = ledger_view().since
    seen = {since.get(k, FORMAT_1_2) for k in kinds}
    return max(seen, key=FORMATS.index, default=FORMAT)


def kind_targets(declared: Mapping[str, Any] | None) -> dict[str, str]:
    """Kind -> target for a record: the kinds the format names plus those it declares (declarations as written,
    `KindDecl` models, or targets)."""
    core = ledger_view().core
    if not declared:
        return core
    out = dict(core)
    for name, decl in declared.items():
        out.setdefault(
            name, decl if isinstance(decl, str) else decl["target"] if isinstance(decl, Mapping) else decl.target
        )
    return out


class _Open(BaseModel):
    """Unknown keys are ignored by the method but kept, so export round-trips."""

    model_config = ConfigDict(extra="allow", frozen=False)


class Task(_Open):
    question: str | None = None
    image: str | list[str] | None = None
    options: dict[str, str] | list[str] | None = None


class Candidate(_Open):
    index: int
    answer: str | None = None
    valid: bool = True
    utility: float | None = None
    cost: Any = None  # format 1.3: the planning cost of drawing it (checked by `check_graph`; ignored before 1.3)

    @field_validator("utility")
    @classmethod
    def _unit(cls, v: float | None) -> float | None:
        if v is not None and not (0.0 <= v <= 1.0):
            raise ValueError(f"utility must lie in [0, 1], got {v}")
        return v


class Claim(_Open):
    id: str = Field(min_length=1)
    slot: str | None = None
    value: str | None = None
    figure: str | int | None = None


class Edge(_Open):
    candidate: int
    claim: str
    sign: Literal[-1, 1]


class Action(_Open):
    id: str = Field(min_length=1)
    kind: str = Field(min_length=1)  # a kind the format names, or one the record declares (revision 1.2)
    claim: str | None = None
    candidate: int | None = None
    cost: float
    group: str = Field(min_length=1)
    outcome: Outcome
    observed: bool = True  # false: an online run never ran it; its outcome is a placeholder
    failed: bool = False  # the check could not be run: not part of the menu (spec section 1)
    skipped: str | None = Field(default=None, min_length=1)  # why a run refused it when proposed (spec section 10)
    p_outcome: float | None = Field(default=None, ge=0.0, le=1.0)  # the judge's P(outcome); read by no policy (s. 11)

    @field_validator("cost")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"cost must be a positive finite number, got {v}")
        return v

    @property
    def is_factor(self) -> bool:
        """A factor kind the format names (a declared kind's target is in its record's ``kinds``)."""
        return ledger_view().core.get(self.kind) == "claim"


class KindDecl(_Open):
    """Revision 1.2: a kind the format does not name that a record uses, what it targets and which package
    (a plugin's distribution, or best-of-evidence for a later built-in kind) defines it."""

    target: Target
    plugin: str = Field(min_length=1)


class LedgerRecord(_Open):
    format: Format
    question_id: str = Field(min_length=1)
    dataset: str = Field(min_length=1)
    task: Task = Field(default_factory=Task)
    reference: Any = None
    candidates: list[Candidate] = Field(min_length=1)
    claims: list[Claim] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    kinds: dict[str, KindDecl] | None = None  # revision 1.2: the declared kinds the actions use

    @model_validator(mode="after")
    def _graph(self) -> LedgerRecord:
        check_graph(
            [c.index for c in self.candidates],
            [c.id for c in self.claims],
            [(e.candidate, e.claim, e.sign) for e in self.edges],
            [(a.id, a.kind, a.claim, a.candidate) for a in self.actions],
            valid=[c.valid and c.answer is not None for c in self.candidates],
            fmt=self.format,
            kinds=None if self.kinds is None else {k: d.model_dump() for k, d in self.kinds.items()},
            pool=([(c.cost, c.answer) for c in self.candidates] if self.format == FORMAT_1_3 else None),
        )
        return self

    @property
    def k(self) -> int:
        return len(self.candidates)


class _FieldError(ValueError):  # noqa: N818
    """Raised inside validators to name the offending field precisely."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def check_graph(
    indexes: list[int],
    claim_ids: list[str],
    edges: Sequence[tuple[int, str]] | Sequence[tuple[int, str, int]],
    actions: list[tuple[str, str, str | None, int | None]] | list[tuple[Any, ...]],
    *,
    valid: list[bool] | None = None,
    fmt: str | None = None,
    kinds: Mapping[str, Mapping[str, Any]] | None = None,
    pool: list[tuple[Any, str | None]] | None = None,
) -> None:
    """The cross-field rules of ledger-v1; raises `_FieldError` naming the first offending field.

    Edges are (candidate, claim, ...) and actions (id, kind, claim, candidate, ...) tuples.
    ``valid`` (candidate valid and answer not null) and ``fmt`` (the record's format)
    enable the rules of revision 1.1 on answer-level checks; ``kinds`` is the record's
    declaration of the kinds the format does not name (revision 1.2), each of which must be installed; ``pool``
    (each candidate's cost and answer, format 1.3, with signed edges) the rules of revision 1.3.
    """
    view, on_candidate, plain = _kinds()
    if kinds:
        _check_declared(kinds, fmt)
        targets = kind_targets(kinds)
        on_candidate = {name: t != "claim" for name, t in targets.items()}
    else:
        targets = view.core
    k = len(indexes)
    ids = set(claim_ids)
    if (
        indexes == list(range(k))
        and len(ids) == len(claim_ids)
        and len({e[:2] for e in edges}) == len(edges)
        and all(0 <= e[0] < k and e[1] in ids for e in edges)
        and len({a[0] for a in actions}) == len(actions)
        and all(
            (a[2] is None and a[3] is not None and 0 <= a[3] < k)
            if (c := on_candidate.get(a[1]))
            else (c is False and a[3] is None and a[2] in ids)
            for a in actions
        )
        and _answer_checks_ok(actions, valid, fmt, targets, plain, view.since)
    ):
        if pool is not None:
            _check_pool(pool, claim_ids, edges, actions, valid, targets)
        return
    _explain_graph(indexes, claim_ids, edges, actions, valid, fmt, targets)


def _check_pool(
    pool: list[tuple[Any, str | None]],
    claim_ids: list[str],
    edges: Sequence[tuple[int, str]] | Sequence[tuple[int, str, int]],
    actions: list[tuple[str, str, str | None, int | None]] | list[tuple[Any, ...]],
    valid: list[bool] | None,
    targets: Mapping[str, str],
) -> None:
    """Revision 1.3 (spec section 12): every candidate has a sample cost, every claim is asserted by a candidate,
    and an answer check's representative is the first valid candidate giving its answer."""
    for i, (cost, _) in enumerate(pool):
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not (math.isfinite(cost) and cost >= 0):
            raise _FieldError(
                f"candidates[{i}].cost",
                f"format {FORMAT_1_3!r} needs each candidate's sample cost (>= 0), got {cost!r}",
            )
    asserted = {e[1] for e in edges if len(e) > 2 and e[2] == 1}
    for j, cid in enumerate(claim_ids):
        if cid not in asserted:
            raise _FieldError(
                f"claims[{j}]",
                f"claim {cid!r} is asserted by no candidate (format {FORMAT_1_3!r}: a claim exists "
                "once a candidate asserts it)",
            )
    first: dict[str, int] = {}
    for i, (_, answer) in enumerate(pool):
        if answer is not None and (valid is None or valid[i]):
            first.setdefault(answer.strip().lower(), i)
    for pos, (_, kind, _, cand, *_) in enumerate(actions):
        if targets.get(kind) == "answer" and cand is not None:
            answer = pool[cand][1]
            rep = first.get(answer.strip().lower()) if answer is not None else None
            if rep != cand:
                raise _FieldError(
                    f"actions[{pos}].candidate",
                    f"format {FORMAT_1_3!r}: an answer check's representative is the first valid candidate giving "
                    f"its answer ({rep}), not {cand}",
                )


def _check_declared(kinds: Mapping[str, Mapping[str, Any]], fmt: str | None) -> None:
    """Revision 1.2: declared kinds need format 1.2, may not redeclare a kind the format names, and must be
    installed."""
    if fmt is not None and fmt not in _EXTENDED:
        raise _FieldError("kinds", f"declared action kinds need format {FORMAT_1_2!r}; this record says {fmt!r}")
    for name, decl in kinds.items():
        if name in ledger_view().core:
            raise _FieldError(
                f"kinds.{name}", f"{name!r} is a kind the ledger format names; only other kinds are declared"
            )
        info = ledger_kind(name)  # (a miss discovers installed plugins first)
        if info is None:
            raise _FieldError(f"kinds.{name}", _not_installed(name, str(decl.get("plugin"))))
        if info.target != decl.get("target"):
            raise _FieldError(
                f"kinds.{name}.target",
                f"the record says {decl.get('target')!r}; the installed {name!r} (from {info.package}) targets "
                f"{info.target!r}",
            )


def _not_installed(name: str, package: str) -> str:
    """Why a declared kind cannot be read, and what to install (never the unrelated PyPI project ``boe``)."""
    if package in (DISTRIBUTION, BUILTIN):  # a kind built into a later version of this package
        return (
            f"action kind {name!r} is built into a later {DISTRIBUTION} than this one; it is not installed "
            f"(pip install --upgrade {DISTRIBUTION})"
        )
    return f"action kind {name!r} needs plugin {package!r} (pip install {package}); it is not installed"


def _answer_checks_ok(
    actions: list[tuple[Any, ...]] | list[tuple[str, str, str | None, int | None]],
    valid: list[bool] | None,
    fmt: str | None,
    targets: Mapping[str, str],
    plain: frozenset[str],
    since: Mapping[str, str],
) -> bool:
    """Revision 1.1: an answer check needs format 1.1 (or 1.2) and a valid representative; 1.2: a declared kind
    needs format 1.2."""
    for a in actions:
        kind = a[1]
        if kind in plain:
            continue
        if fmt is not None and fmt not in _EXTENDED and FORMATS.index(fmt) < FORMATS.index(since.get(kind, FORMAT_1_2)):
            return False
        if targets.get(kind) == "answer" and valid is not None and not valid[a[3]]:
            return False
    return True


def _explain_graph(
    indexes: list[int],
    claim_ids: list[str],
    edges: Sequence[tuple[int, str]] | Sequence[tuple[int, str, int]],
    actions: list[tuple[str, str, str | None, int | None]] | list[tuple[Any, ...]],
    valid: list[bool] | None = None,
    fmt: str | None = None,
    targets: Mapping[str, str] | None = None,
) -> None:
    since = ledger_view().since
    targets = ledger_view().core if targets is None else targets
    for pos, idx in enumerate(indexes):
        if idx != pos:
            raise _FieldError(f"candidates[{pos}].index", f"must be {pos} (list order), got {idx}")
    k = len(indexes)
    ids: set[str] = set()
    for pos, cid in enumerate(claim_ids):
        if cid in ids:
            raise _FieldError(f"claims[{pos}].id", f"duplicate claim id {cid!r}")
        ids.add(cid)
    pairs: set[tuple[Any, Any]] = set()
    for pos, edge in enumerate(edges):
        cand: int = edge[0]  # type: ignore[assignment]
        claim: str = edge[1]  # type: ignore[assignment]
        if not 0 <= cand < k:
            raise _FieldError(f"edges[{pos}].candidate", f"no candidate {cand} (K={k})")
        if claim not in ids:
            raise _FieldError(f"edges[{pos}].claim", f"unknown claim {claim!r}")
        if (cand, claim) in pairs:
            raise _FieldError(f"edges[{pos}]", f"duplicate edge ({cand}, {claim!r})")
        pairs.add((cand, claim))
    action_ids: set[str] = set()
    for pos, (aid, kind, claim, cand, *_) in enumerate(actions):
        if aid in action_ids:
            raise _FieldError(f"actions[{pos}].id", f"duplicate action id {aid!r}")
        action_ids.add(aid)
        target = targets.get(kind)
        if target is None:
            raise _FieldError(
                f"actions[{pos}].kind",
                f"unknown action kind {kind!r}; the ledger format names {', '.join(since)} (any other kind is "
                f"declared in the record's 'kinds', format {FORMAT_1_2!r})",
            )
        if kind not in since and fmt is not None and fmt not in _EXTENDED:
            raise _FieldError(
                f"actions[{pos}].kind", f"declared kind {kind!r} needs format {FORMAT_1_2!r}; this record says {fmt!r}"
            )
        if target == "answer":
            _explain_answer_check(pos, claim, cand, k, valid, fmt, kind, since.get(kind))
        elif target == "response":
            if cand is None or not 0 <= cand < k:
                raise _FieldError(
                    f"actions[{pos}].candidate", f"{kind} needs a candidate index in 0..{k - 1}, got {cand}"
                )
            if claim is not None:
                raise _FieldError(f"actions[{pos}].claim", f"{kind} targets a candidate, not a claim")
        else:
            if claim is None or claim not in ids:
                raise _FieldError(f"actions[{pos}].claim", f"{kind} needs a known claim, got {claim!r}")
            if cand is not None:
                raise _FieldError(f"actions[{pos}].candidate", f"{kind} targets a claim, not a candidate")


def _explain_answer_check(
    pos: int,
    claim: str | None,
    cand: int | None,
    k: int,
    valid: list[bool] | None,
    fmt: str | None,
    kind: str,
    since: str | None,
) -> None:
    if since is not None and fmt is not None and FORMATS.index(fmt) < FORMATS.index(since):
        raise _FieldError(f"actions[{pos}].kind", f"{kind} is a kind of format {since!r}; this record says {fmt!r}")
    if cand is None or not 0 <= cand < k:
        raise _FieldError(
            f"actions[{pos}].candidate", f"{kind} needs a representative candidate in 0..{k - 1}, got {cand}"
        )
    if valid is not None and not valid[cand]:
        raise _FieldError(
            f"actions[{pos}].candidate",
            f"{kind} needs a valid representative (valid, answer not null); candidate {cand} is not",
        )
    if claim is not None:
        raise _FieldError(f"actions[{pos}].claim", f"{kind} targets an answer, not a claim")


# The dict path: the same rules as typed dicts, validated by pydantic-core in one pass without building model
# objects; ``extra="allow"`` keeps unknown keys (a validated dict is the record as written). The replay loader reads
# lines through `boe.core.structs` instead (msgspec, unknown keys skipped).
_NonEmpty = Annotated[str, StringConstraints(min_length=1)]

#: A ledger-v1 record as a plain dict (what `iter_ledger` yields).
RecordDict = dict[str, Any]


def _record_adapter() -> TypeAdapter[Any]:
    cfg = ConfigDict(extra="allow")

    @with_config(cfg)
    class CandidateD(TypedDict):
        index: int
        answer: NotRequired[str | None]
        valid: NotRequired[bool]
        utility: NotRequired[Annotated[float, Field(ge=0.0, le=1.0)] | None]
        cost: NotRequired[Any]  # format 1.3: the sample cost (checked by `check_graph`)

    @with_config(cfg)
    class ClaimD(TypedDict):
        id: _NonEmpty
        slot: NotRequired[str | None]
        value: NotRequired[str | None]
        figure: NotRequired[str | int | None]

    @with_config(cfg)
    class EdgeD(TypedDict):
        candidate: int
        claim: str
        sign: Literal[-1, 1]

    @with_config(cfg)
    class ActionD(TypedDict):
        id: _NonEmpty
        kind: _NonEmpty
        claim: NotRequired[str | None]
        candidate: NotRequired[int | None]
        cost: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
        group: _NonEmpty
        outcome: Outcome
        observed: NotRequired[bool]  # false: an online run never ran it; its outcome is a placeholder
        failed: NotRequired[bool]  # true: the check could not be run; not part of the menu (spec section 1)
        skipped: NotRequired[_NonEmpty | None]  # why a run refused it when proposed (spec section 10)
        p_outcome: NotRequired[Annotated[float, Field(ge=0.0, le=1.0)] | None]  # the judge's P(outcome) (section 11)

    @with_config(cfg)
    class TaskD(TypedDict, total=False):
        question: str | None
        image: str | list[str] | None
        options: dict[str, str] | list[str] | None

    @with_config(cfg)
    class KindDeclD(TypedDict):
        target: Target
        plugin: _NonEmpty

    @with_config(cfg)
    class RecordD(TypedDict):
        format: Format
        question_id: _NonEmpty
        dataset: _NonEmpty
        task: NotRequired[TaskD]
        reference: NotRequired[Any]
        candidates: Annotated[list[CandidateD], Field(min_length=1)]
        claims: NotRequired[list[ClaimD]]
        edges: NotRequired[list[EdgeD]]
        actions: NotRequired[list[ActionD]]
        kinds: NotRequired[dict[str, KindDeclD]]

    return TypeAdapter(RecordD)


_RECORD_DICT = _record_adapter()


def _check_dict(d: RecordDict) -> None:
    check_graph(
        [c["index"] for c in d["candidates"]],
        [c["id"] for c in d.get("claims", ())],
        [(e["candidate"], e["claim"], e["sign"]) for e in d.get("edges", ())],
        [(a["id"], a["kind"], a.get("claim"), a.get("candidate")) for a in d.get("actions", ())],
        valid=valid_flags(d["candidates"]),
        fmt=d["format"],
        kinds=d.get("kinds"),
        pool=pool_of(d),
    )


def pool_of(d: RecordDict) -> list[tuple[Any, str | None]] | None:
    """Each candidate's (cost, answer) of a format 1.3 record dict (the input of its rules), else None."""
    if d["format"] != FORMAT_1_3:
        return None
    return [(c.get("cost"), c.get("answer")) for c in d["candidates"]]


def valid_flags(candidates: Iterable[dict[str, Any]]) -> list[bool]:
    """Per candidate of a record dict: valid and answer not null (spec section 3)."""
    return [bool(c.get("valid", True)) and c.get("answer") is not None for c in candidates]


def parse_record_dict(
    data: str | bytes | dict[str, Any],
    *,
    source: str | None = None,
    line: int | None = None,
) -> RecordDict:
    """Validate one record into a plain dict, unknown keys kept; errors as in `parse_record`."""
    if isinstance(data, (str, bytes)):
        data = clean_line(data)
    try:
        if isinstance(data, (str, bytes)):
            d = _RECORD_DICT.validate_json(data)
        else:
            d = _RECORD_DICT.validate_python(data)
        _check_dict(d)
        return d  # type: ignore[no-any-return]
    except (ValidationError, _FieldError):
        pass
    # The slow path: Python's json reader (it and pydantic's differ on a few inputs, e.g. lone surrogates),
    # then the full model, which names the question and the field.
    obj = decode_line(data, source=source, line=line) if isinstance(data, (str, bytes)) else data
    if not isinstance(obj, dict):  # (parse_record would read a str as JSON text)
        raise RecordError(f"a record must be a JSON object, got {type(obj).__name__}", source=source, line=line)
    try:
        d = _RECORD_DICT.validate_python(obj)
        _check_dict(d)
        return d  # type: ignore[no-any-return]
    except (ValidationError, _FieldError):
        parse_record(obj, source=source, line=line)  # raises RecordError with the details
        raise AssertionError("a record failed the fast check but passed the full one") from None


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_record(
    data: str | bytes | dict[str, Any], *, source: str | None = None, line: int | None = None
) -> LedgerRecord:
    """Validate one ledger record; raise `RecordError` naming file, line, question and field."""
    obj: Any = data
    if isinstance(data, (str, bytes)):
        data = clean_line(data)
        try:  # fast path: pydantic-core parses and validates in one pass
            return LedgerRecord.model_validate_json(data)
        except ValidationError:
            pass  # re-parse below to name the question and the field
        obj = decode_line(data, source=source, line=line)
    if not isinstance(obj, dict):
        raise RecordError(f"a record must be a JSON object, got {type(obj).__name__}", source=source, line=line)
    qid = obj.get("question_id")
    qid = qid if isinstance(qid, str) else None
    fmt = obj.get("format")
    if fmt not in FORMATS:
        raise RecordError(
            f"unknown format {fmt!r}; this reader understands {', '.join(map(repr, FORMATS[:-1]))} and {FORMATS[-1]!r}",
            source=source,
            line=line,
            question_id=qid,
            field="format",
        )
    try:
        return LedgerRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _FieldError):
            field, msg = ctx_err.field, ctx_err.message
        else:
            field, msg = _loc(tuple(err["loc"])), err["msg"]
        more = len(exc.errors()) - 1
        if more > 0:
            msg += f" (and {more} more error{'s' if more > 1 else ''})"
        raise RecordError(msg, source=source, line=line, question_id=qid, field=field or None) from exc


def record_data(record: LedgerRecord) -> RecordDict:
    """A record as JSON-ready data, exactly what `dump_record` writes (keys unknown on input are kept)."""
    return record.model_dump(mode="json", exclude_unset=True)


def dump_record(record: LedgerRecord | RecordDict) -> str:
    """One JSON line for a record, or for its `record_data` (keys that were unknown on input are kept)."""
    data = record if isinstance(record, dict) else record_data(record)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def record_line(record: LedgerRecord | RecordDict) -> tuple[RecordDict, str]:
    """A record's data and its line, as `record_data` and `dump_record` give them: a `LedgerRecord` is dumped, a
    record dict validated (`parse_record_dict`; `RecordError` naming the field) and written as it is, in one pass.

    The dict path writes the same line as the model's (pydantic orders the keys the same way and coerces the
    same numbers); only what JSON does not hold (a non-finite float, which the model's dump writes as null, or a
    value of no JSON type) goes the model's way.
    """
    if isinstance(record, dict):
        data = parse_record_dict(record)
        try:
            return data, json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            record = LedgerRecord.model_validate(data)
    data = record_data(record)
    return data, dump_record(data)


def read_ledger(
    sources: str | Path | Iterable[str | Path] | IO[str] | IO[bytes],
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
) -> Iterator[LedgerRecord]:
    """Stream valid records (as `LedgerRecord` models) from JSONL files or an open stream.

    A bad record is passed to ``on_error`` and skipped; with ``strict`` it
    raises. A question id seen twice for the same dataset is a bad record.
    Blank lines are skipped.
    """
    yield from _stream(sources, parse_record, strict, on_error)  # type: ignore[misc]


def iter_ledger(
    sources: str | Path | Iterable[str | Path] | IO[str] | IO[bytes],
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
    _dedupe: bool = True,
) -> Iterator[RecordDict]:
    """Like `read_ledger`, but yields validated plain dicts (the fast path for bulk work)."""
    yield from _stream(sources, parse_record_dict, strict, on_error, _dedupe)  # type: ignore[misc]


def _key(rec: LedgerRecord | RecordDict) -> tuple[str, str]:
    if isinstance(rec, dict):
        return (rec["dataset"], rec["question_id"])
    return (rec.dataset, rec.question_id)


def _stream(
    sources: str | Path | Iterable[str | Path] | IO[str] | IO[bytes],
    parse: Callable[..., LedgerRecord | RecordDict],
    strict: bool,
    on_error: Callable[[RecordError], None] | None,
    dedupe: bool = True,
) -> Iterator[LedgerRecord | RecordDict]:
    items: Iterable[Any] = [sources] if isinstance(sources, (str, Path)) or hasattr(sources, "readline") else sources
    seen: set[tuple[str, str]] = set()
    for src in items:
        if hasattr(src, "readline"):
            yield from _read_lines(src, str(getattr(src, "name", "<stream>")), parse, strict, on_error, seen, dedupe)
            continue
        fh = open_ledger(src)
        try:
            yield from _read_lines(fh, ledger_name(src), parse, strict, on_error, seen, dedupe)
        finally:
            if fh is not sys.stdin.buffer:
                fh.close()


def _read_lines(
    fh: IO[str] | IO[bytes],
    name: str,
    parse: Callable[..., LedgerRecord | RecordDict],
    strict: bool,
    on_error: Callable[[RecordError], None] | None,
    seen: set[tuple[str, str]],
    dedupe: bool = True,
) -> Iterator[LedgerRecord | RecordDict]:
    for lineno, raw in enumerate(fh, start=1):
        if not raw.strip():  # type: ignore[attr-defined]
            continue
        try:
            rec = parse(raw, source=name, line=lineno)
            key = _key(rec)
            if dedupe and key in seen:
                raise RecordError(
                    "question id already seen for this dataset",
                    source=name,
                    line=lineno,
                    question_id=key[1],
                    field="question_id",
                )
            seen.add(key)
        except RecordError as err:
            if strict:
                raise
            if on_error:
                on_error(err)
            continue
        yield rec


FieldRuleError = _FieldError
