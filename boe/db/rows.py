"""A validated ledger record as rows of the normalised tables (pure Python, no SQLAlchemy).

Besides the ledger-v1 fields, these optional per-item keys of a record are
copied into their own columns (they stay in the stored record JSON too):

* candidate: ``raw_text`` (the model's raw reply), ``slots`` (parsed slot values)
* action: ``view`` (crop box / mask reference / metadata field), and its
  outcome's ``rationale`` (the judge's short reason), ``raw_reply`` and
  ``error`` (why the tool failed, for an ``unresolved`` outcome)

Rows carry no question key: the writer prepends it once the question row exists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
    "question_rows",
]

# Column order of the row tuples below; the first column, question_pk, is added by the writer.
CANDIDATE_COLUMNS = ("question_pk", "idx", "answer", "raw_text", "slots", "valid", "utility")
CLAIM_COLUMNS = ("question_pk", "pos", "claim_id", "slot", "value", "figure")
EDGE_COLUMNS = ("question_pk", "claim_pos", "candidate_idx", "sign")
ACTION_COLUMNS = (
    "question_pk", "pos", "action_id", "kind", "claim_pos", "candidate_idx", "cost", "group_name", "view",
)
OUTCOME_COLUMNS = ("question_pk", "action_pos", "outcome", "rationale", "raw_reply", "error")

Row = tuple[Any, ...]


@dataclass(slots=True)
class QuestionRows:
    """The question's own columns and its child rows (without the question key)."""

    dataset: str
    source_id: str
    question_text: str | None
    options: Any
    image: Any
    reference: Any
    n_candidates: int
    candidates: list[Row]
    claims: list[Row]
    edges: list[Row]
    actions: list[Row]
    outcomes: list[Row]

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.source_id)

    @property
    def n_rows(self) -> int:
        return 1 + len(self.candidates) + len(self.claims) + len(self.edges) + 2 * len(self.actions)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _json(value)


def question_rows(rec: Mapping[str, Any]) -> QuestionRows:
    """Rows of the normalised tables for one validated record, as a dict (see `boe.core.ledger.parse_record_dict`)."""
    candidates = [
        (c["index"], c.get("answer"), _text(c.get("raw_text")), _json(c.get("slots")), c.get("valid", True),
         c.get("utility"))
        for c in rec["candidates"]
    ]
    claim_pos: dict[str, int] = {}
    claims = []
    for j, cl in enumerate(rec.get("claims", ())):
        claim_pos[cl["id"]] = j
        figure = cl.get("figure")
        claims.append((j, cl["id"], cl.get("slot"), cl.get("value"), None if figure is None else str(figure)))
    edges = [(claim_pos[e["claim"]], e["candidate"], e["sign"]) for e in rec.get("edges", ())]
    actions = []
    outcomes = []
    for j, a in enumerate(rec.get("actions", ())):
        claim = a.get("claim")
        actions.append(
            (j, a["id"], a["kind"], None if claim is None else claim_pos[claim], a.get("candidate"), a["cost"],
             a["group"], _json(a.get("view")))
        )
        outcomes.append(
            (j, a["outcome"], _text(a.get("rationale")), _text(a.get("raw_reply")), _text(a.get("error")))
        )
    task = rec.get("task") or {}
    return QuestionRows(
        dataset=rec["dataset"],
        source_id=rec["question_id"],
        question_text=task.get("question"),
        options=task.get("options"),
        image=task.get("image"),
        reference=rec.get("reference"),
        n_candidates=len(candidates),
        candidates=candidates,
        claims=claims,
        edges=edges,
        actions=actions,
        outcomes=outcomes,
    )


@dataclass(slots=True)
class PreparedQuestion:
    """A question ready to write: its rows, its exact ledger JSON and what else belongs to it."""

    rows: QuestionRows
    record_json: str
    model_calls: Sequence[ModelCall] = ()
    transcripts: Sequence[TranscriptRecord] = ()
    images: Sequence[ImageRecord] = ()
