"""Ledger-v1 records (spec/ledger-v1.md section 1) and a streaming loader.

A ledger is JSON Lines, one question per line. `read_ledger` yields valid
records and reports bad ones (file, line, question, field) without stopping;
with ``strict=True`` the first bad record raises.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from boe.errors import LedgerError, RecordError

__all__ = [
    "FACTOR_KINDS",
    "FORMAT",
    "KINDS",
    "OUTCOMES",
    "Action",
    "Candidate",
    "Claim",
    "Edge",
    "LedgerRecord",
    "Task",
    "dump_record",
    "parse_record",
    "read_ledger",
]

FORMAT = "boe-ledger/1"
OUTCOMES: tuple[str, str, str] = ("confirm", "reject", "unresolved")
FACTOR_KINDS: tuple[str, str, str] = ("structured", "vlm_factor", "grounded_factor")
KINDS: tuple[str, ...] = (*FACTOR_KINDS, "whole_response")

Outcome = Literal["confirm", "reject", "unresolved"]
Kind = Literal["structured", "vlm_factor", "grounded_factor", "whole_response"]


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
    kind: Kind
    claim: str | None = None
    candidate: int | None = None
    cost: float
    group: str = Field(min_length=1)
    outcome: Outcome

    @field_validator("cost")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"cost must be a positive finite number, got {v}")
        return v

    @property
    def is_factor(self) -> bool:
        return self.kind != "whole_response"


class LedgerRecord(_Open):
    format: Literal["boe-ledger/1"]
    question_id: str = Field(min_length=1)
    dataset: str = Field(min_length=1)
    task: Task = Field(default_factory=Task)
    reference: Any = None
    candidates: list[Candidate] = Field(min_length=1)
    claims: list[Claim] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)

    @model_validator(mode="after")
    def _graph(self) -> LedgerRecord:
        for pos, cand in enumerate(self.candidates):
            if cand.index != pos:
                raise _FieldError(f"candidates[{pos}].index", f"must be {pos} (list order), got {cand.index}")
        k = len(self.candidates)
        claim_ids: set[str] = set()
        for pos, claim in enumerate(self.claims):
            if claim.id in claim_ids:
                raise _FieldError(f"claims[{pos}].id", f"duplicate claim id {claim.id!r}")
            claim_ids.add(claim.id)
        seen_edges: set[tuple[int, str]] = set()
        for pos, edge in enumerate(self.edges):
            if not 0 <= edge.candidate < k:
                raise _FieldError(f"edges[{pos}].candidate", f"no candidate {edge.candidate} (K={k})")
            if edge.claim not in claim_ids:
                raise _FieldError(f"edges[{pos}].claim", f"unknown claim {edge.claim!r}")
            key = (edge.candidate, edge.claim)
            if key in seen_edges:
                raise _FieldError(f"edges[{pos}]", f"duplicate edge {key}")
            seen_edges.add(key)
        action_ids: set[str] = set()
        for pos, act in enumerate(self.actions):
            if act.id in action_ids:
                raise _FieldError(f"actions[{pos}].id", f"duplicate action id {act.id!r}")
            action_ids.add(act.id)
            if act.kind == "whole_response":
                if act.candidate is None or not 0 <= act.candidate < k:
                    raise _FieldError(
                        f"actions[{pos}].candidate",
                        f"whole_response needs a candidate index in 0..{k - 1}, got {act.candidate}",
                    )
                if act.claim is not None:
                    raise _FieldError(f"actions[{pos}].claim", "whole_response targets a candidate, not a claim")
            else:
                if act.claim is None or act.claim not in claim_ids:
                    raise _FieldError(f"actions[{pos}].claim", f"{act.kind} needs a known claim, got {act.claim!r}")
                if act.candidate is not None:
                    raise _FieldError(f"actions[{pos}].candidate", f"{act.kind} targets a claim, not a candidate")
        return self

    @property
    def k(self) -> int:
        return len(self.candidates)


class _FieldError(ValueError):
    """Raised inside validators to name the offending field precisely."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


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
        try:  # fast path: pydantic-core parses and validates in one pass
            return LedgerRecord.model_validate_json(data)
        except ValidationError:
            pass  # re-parse below to name the question and the field
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as exc:
            raise RecordError(f"not valid JSON ({exc.msg} at column {exc.colno})", source=source, line=line) from exc
    if not isinstance(obj, dict):
        raise RecordError(f"a record must be a JSON object, got {type(obj).__name__}", source=source, line=line)
    qid = obj.get("question_id")
    qid = qid if isinstance(qid, str) else None
    fmt = obj.get("format")
    if fmt != FORMAT:
        raise RecordError(
            f"unknown format {fmt!r}; this reader understands {FORMAT!r}",
            source=source, line=line, question_id=qid, field="format",
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


def dump_record(record: LedgerRecord) -> str:
    """One JSON line for a record (keys that were unknown on input are kept)."""
    return json.dumps(record.model_dump(mode="json", exclude_unset=True), ensure_ascii=False, separators=(",", ":"))


def read_ledger(
    sources: str | Path | Iterable[str | Path] | io.TextIOBase,
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
) -> Iterator[LedgerRecord]:
    """Stream valid records from one or more JSONL files (or an open text stream).

    A bad record is passed to ``on_error`` and skipped; with ``strict`` it
    raises. A question id seen twice for the same dataset is a bad record.
    Blank lines are skipped.
    """
    if isinstance(sources, (str, Path, io.TextIOBase)):
        sources = [sources]  # type: ignore[list-item]
    seen: set[tuple[str, str]] = set()
    for src in sources:  # type: ignore[union-attr]
        if isinstance(src, io.TextIOBase):
            name = getattr(src, "name", "<stream>")
            yield from _read_stream(src, str(name), strict, on_error, seen)
            continue
        path = Path(src)
        try:
            fh = path.open("r", encoding="utf-8")
        except OSError as exc:
            raise LedgerError(f"cannot open ledger {path}: {exc.strerror}") from exc
        with fh:
            yield from _read_stream(fh, str(path), strict, on_error, seen)


def _read_stream(
    fh: Iterable[str],
    name: str,
    strict: bool,
    on_error: Callable[[RecordError], None] | None,
    seen: set[tuple[str, str]],
) -> Iterator[LedgerRecord]:
    lineno = 0
    while True:
        try:
            raw = _next_line(fh)
        except UnicodeDecodeError as exc:
            lineno += 1
            err = RecordError(f"not UTF-8 ({exc.reason})", source=name, line=lineno)
            if strict:
                raise err from exc
            if on_error:
                on_error(err)
            continue
        if raw is None:
            return
        lineno += 1
        if not raw.strip():
            continue
        try:
            rec = parse_record(raw, source=name, line=lineno)
            key = (rec.dataset, rec.question_id)
            if key in seen:
                raise RecordError(
                    "question id already seen for this dataset", source=name, line=lineno,
                    question_id=rec.question_id, field="question_id",
                )
            seen.add(key)
        except RecordError as err:
            if strict:
                raise
            if on_error:
                on_error(err)
            continue
        yield rec


def _next_line(fh: Iterable[str]) -> str | None:
    readline = getattr(fh, "readline", None)
    if readline is not None:
        line: str = readline()
        return line if line else None
    raise TypeError("ledger streams must support readline()")
