"""A validated ledger record as rows of the normalised tables (pure Python, no SQLAlchemy).

Besides the ledger-v1 fields, these optional per-item keys of a record are
copied into their own columns (they stay in the stored record JSON too):

* candidate: ``raw_text`` (the model's raw reply), ``slots`` (parsed slot values)
* action: ``view`` (crop box / mask reference / metadata field), and its
  outcome's ``rationale`` (the judge's short reason), ``raw_reply`` and
  ``error`` (why the tool failed, for an ``unresolved`` outcome). An action
  marked ``"observed": false`` (on the menu, not run by an online agent) has
  no row in ``outcomes``.

Child tables are kept column by column and without the question key, which
the writer only learns once the question row exists; `QuestionRows.rows`
zips the columns into row tuples with the key in front. (Columns pickle and
unpickle several times faster than row tuples when a helper process parses.)
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from boe.db.types import ImageRecord, ModelCall, TranscriptRecord

__all__ = [
    "ACTION_COLUMNS",
    "CANDIDATE_COLUMNS",
    "CLAIM_COLUMNS",
    "EDGE_COLUMNS",
    "OUTCOME_COLUMNS",
    "PreparedQuestion",
    "QuestionRows",
    "pack_record",
    "question_rows",
    "unpack_record",
]

# Column order of the rows; the first column, question_pk, is added by the writer.
CANDIDATE_COLUMNS = ("question_pk", "idx", "answer", "raw_text", "slots", "valid", "utility")
CLAIM_COLUMNS = ("question_pk", "pos", "claim_id", "slot", "value", "figure")
EDGE_COLUMNS = ("question_pk", "claim_pos", "candidate_idx", "sign")
ACTION_COLUMNS = (
    "question_pk",
    "pos",
    "action_id",
    "kind",
    "claim_pos",
    "candidate_idx",
    "cost",
    "group_name",
    "view",
)
OUTCOME_COLUMNS = ("question_pk", "action_pos", "outcome", "rationale", "raw_reply", "error")

Columns = tuple[list[Any], ...]
ChildTable = Literal["candidates", "claims", "edges", "actions", "outcomes"]


@dataclass(slots=True)
class QuestionRows:
    """The question's own columns and its child tables, column by column (without the question key)."""

    dataset: str
    source_id: str
    question_text: str | None
    options: Any
    image: Any
    reference: Any
    n_candidates: int
    candidates: Columns
    claims: Columns
    edges: Columns
    actions: Columns
    outcomes: Columns

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.source_id)

    @property
    def n_rows(self) -> int:
        return (
            1
            + self.n_candidates
            + len(self.claims[0])
            + len(self.edges[0])
            + len(self.actions[0])
            + len(self.outcomes[0])
        )

    def rows(self, table: ChildTable, question_pk: int) -> Iterator[tuple[Any, ...]]:
        """Row tuples of one child table, the question key first (the order of ``*_COLUMNS``)."""
        return zip(repeat(question_pk), *getattr(self, table), strict=False)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _json(value)


def question_rows(rec: Mapping[str, Any]) -> QuestionRows:
    """Rows of the normalised tables for one validated record, as a dict (see `boe.core.ledger.parse_record_dict`)."""
    cands = rec["candidates"]
    claims = rec.get("claims", ())
    edges = rec.get("edges", ())
    acts = rec.get("actions", ())
    claim_pos = {cl["id"]: j for j, cl in enumerate(claims)}
    task = rec.get("task") or {}
    return QuestionRows(
        dataset=rec["dataset"],
        source_id=rec["question_id"],
        question_text=task.get("question"),
        options=task.get("options"),
        image=task.get("image"),
        reference=rec.get("reference"),
        n_candidates=len(cands),
        candidates=_candidate_columns(cands),
        claims=(
            list(range(len(claims))),
            [cl["id"] for cl in claims],
            [cl.get("slot") for cl in claims],
            [cl.get("value") for cl in claims],
            [_text_id(cl.get("figure")) for cl in claims],
        ),
        edges=_columns(sorted((claim_pos[e["claim"]], e["candidate"], e["sign"]) for e in edges), 3),
        actions=_action_columns(acts, claim_pos),
        outcomes=_outcome_columns(acts),
    )


def _candidate_columns(cands: Sequence[Mapping[str, Any]]) -> Columns:
    """Columns of the candidates table: index, answer, raw text, slots, valid, utility."""
    return (
        [c["index"] for c in cands],
        [c.get("answer") for c in cands],
        [_text(c.get("raw_text")) for c in cands],
        [_json(c.get("slots")) for c in cands],
        [c.get("valid", True) for c in cands],
        [c.get("utility") for c in cands],
    )


def _action_columns(acts: Sequence[Mapping[str, Any]], claim_pos: Mapping[str, int]) -> Columns:
    """Columns of the actions table (the menu, without outcomes); a claim by its position."""
    return (
        list(range(len(acts))),
        [a["id"] for a in acts],
        [a["kind"] for a in acts],
        [None if a.get("claim") is None else claim_pos[a["claim"]] for a in acts],
        [a.get("candidate") for a in acts],
        [a["cost"] for a in acts],
        [a["group"] for a in acts],
        [_json(a.get("view")) for a in acts],
    )


def _outcome_columns(acts: Sequence[Mapping[str, Any]]) -> Columns:
    """Columns of the outcomes table: one row per observed action."""
    seen = [j for j, a in enumerate(acts) if a.get("observed") is not False]
    return (
        seen,
        [acts[j]["outcome"] for j in seen],
        [_text(acts[j].get("rationale")) for j in seen],
        [_text(acts[j].get("raw_reply")) for j in seen],
        [_text(acts[j].get("error")) for j in seen],
    )


def _columns(rows: list[tuple[Any, ...]], width: int) -> Columns:
    """Rows to columns (edges go in primary-key order, so the writer appends to the B-tree)."""
    return tuple(list(col) for col in zip(*rows, strict=True)) if rows else tuple([] for _ in range(width))


def pack_record(line: str) -> bytes:
    """A ledger line as stored in ``questions.record``: zlib-compressed UTF-8 (about 9x smaller)."""
    return zlib.compress(line.encode("utf-8"), 3)


def unpack_record(blob: bytes) -> str:
    """The ledger line back from ``questions.record``."""
    return zlib.decompress(blob).decode("utf-8")


def _text_id(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(slots=True)
class PreparedQuestion:
    """A question ready to write: its rows, its exact ledger line (packed) and what else belongs to it."""

    rows: QuestionRows
    record: bytes  # `pack_record` of the ledger line
    model_calls: Sequence[ModelCall] = ()
    transcripts: Sequence[TranscriptRecord] = ()
    images: Sequence[ImageRecord] = ()
