"""Ledger lines decoded straight into typed msgspec Structs: the loader's one pass that parses and type-checks.

The Structs mirror the fields of `boe.core.ledger.LedgerRecord` that replay reads (keys the spec does not
define are skipped) and are stricter than its pydantic model: no number from a string, no int from a float,
no NaN or infinity, no lone surrogate. So a line they accept is one the model accepts, with the same values,
and a line they refuse (`decode_record` returns None) goes to the model, which accepts it or names the file,
line and field. What the Structs would let through in a key they skip is refused here too: bytes that are not
UTF-8 and nesting deeper than `boe.core.lines.MAX_DEPTH`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from msgspec import Meta, MsgspecError, Struct, field
from msgspec.json import Decoder

from boe.core.lines import MAX_DEPTH, clean_line, nesting_depth

__all__ = ["LedgerLine", "decode_record"]

_NonEmpty = Annotated[str, Meta(min_length=1)]
_Unit = Annotated[float, Meta(ge=0.0, le=1.0)]


class CandidateS(Struct, gc=False):
    index: int
    answer: str | None = None
    valid: bool = True
    utility: _Unit | None = None
    cost: Any = None  # format 1.3: the sample cost (checked by `check_graph`)


class ClaimS(Struct, gc=False):
    id: _NonEmpty
    slot: str | None = None
    value: str | None = None
    figure: str | int | None = None


class EdgeS(Struct, gc=False):
    candidate: int
    claim: str
    sign: Literal[-1, 1]


class ActionS(Struct, gc=False):
    id: _NonEmpty
    kind: _NonEmpty
    cost: Annotated[float, Meta(gt=0.0)]  # finite: msgspec refuses a number beyond float's range
    group: _NonEmpty
    outcome: Literal["confirm", "reject", "unresolved"]
    claim: str | None = None
    candidate: int | None = None
    observed: bool = True
    failed: bool = False
    skipped: _NonEmpty | None = None
    p_outcome: _Unit | None = None


class TaskS(Struct, gc=False):
    question: str | None = None
    image: str | list[str] | None = None
    options: dict[str, str] | list[str] | None = None


class KindDeclS(Struct, gc=False):
    target: Literal["claim", "response", "answer"]
    plugin: _NonEmpty


class LedgerLine(Struct, gc=False):
    """One ledger record as the loader reads it (the attributes of `LedgerRecord` replay needs)."""

    format: Literal["boe-ledger/1", "boe-ledger/1.1", "boe-ledger/1.2", "boe-ledger/1.3"]
    question_id: _NonEmpty
    dataset: _NonEmpty
    candidates: Annotated[list[CandidateS], Meta(min_length=1)]
    task: TaskS = field(default_factory=TaskS)
    reference: Any = None
    claims: list[ClaimS] = field(default_factory=list)
    edges: list[EdgeS] = field(default_factory=list)
    actions: list[ActionS] = field(default_factory=list)
    kinds: dict[str, KindDeclS] | None = None


_DECODER = Decoder(LedgerLine)
# The deepest a skipped key or untyped value sits: in a candidate (or a declared kind) of the record's list.
_TYPED_DEPTH = 3


def decode_record(raw: str | bytes) -> LedgerLine | None:
    """The record of a line, or None when the Structs refuse it (the pydantic model then decides and explains)."""
    data = clean_line(raw)
    if isinstance(data, bytes) and not data.isascii():
        try:
            data.decode("utf-8")  # msgspec checks UTF-8 only in the values it reads
        except UnicodeDecodeError:
            return None
    try:
        rec = _DECODER.decode(data)
    except (MsgspecError, ValueError, RecursionError):
        return None
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if (
        _skipped_containers(data, rec) + _TYPED_DEPTH > MAX_DEPTH
        and nesting_depth(data.decode("utf-8", "surrogatepass")) > MAX_DEPTH
    ):
        return None
    return rec


def _skipped_containers(data: bytes, rec: LedgerLine) -> int:
    """At most how many arrays and objects the line has beyond the Structs' own (in keys they skip, in
    untyped values): the nesting they could add. Bytes in strings count too: an overestimate, never under."""
    b = np.frombuffer(data, np.uint8) | 32  # "[" | 32 == "{"
    typed = 1 + len(rec.candidates) + len(rec.claims) + len(rec.edges) + len(rec.actions)
    return int(np.count_nonzero(b == ord("{"))) - typed - (len(rec.kinds) if rec.kinds else 0)
