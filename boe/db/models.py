"""SQLAlchemy 2 typed models of the store (schema version 1).

    runs ─┬─ questions ─┬─ candidates ─┐
          │             ├─ claims ─────┼─ edges
          │             ├─ actions ── outcomes
          │             ├─ question_images ── images (shared, content-addressed)
          │             ├─ transcripts
          │             └─ model_calls (also per run, without a question)
          ├─ work_items (the queue many workers claim from)
          └─ calibrations (optional link)
    request_cache, boe_schema (stand alone)

``questions.record`` holds the exact ledger-v1 line of the question
(zlib-compressed, see `boe.db.rows.pack_record`); export and replay read it,
the normalised tables serve queries. Child tables are
keyed by (question_pk, position) so a whole question is written with a few
bulk inserts and no id round trips. Columns holding evaluation data
(references, utilities) carry ``info={"evaluation": True}``: no deployable
policy may read them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "EVALUATION_COLUMNS",
    "Action",
    "Base",
    "CalibrationRow",
    "Candidate",
    "CacheEntry",
    "Claim",
    "Edge",
    "Image",
    "ModelCallRow",
    "Outcome",
    "Question",
    "QuestionImage",
    "Run",
    "SchemaVersion",
    "Transcript",
    "WorkItemRow",
    "table",
    "utcnow",
]


def table(model: type[Base]) -> Table:
    """The Core table of a model (for bulk statements)."""
    return cast(Table, model.__table__)


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


_EVAL = {"evaluation": True}
_CHILD = {"sqlite_with_rowid": False}  # clustered by (question_pk, position) on SQLite


class Base(DeclarativeBase):
    type_annotation_map = {
        dict[str, Any]: JSON(none_as_null=True),
        Any: JSON(none_as_null=True),
        datetime: DateTime(timezone=True),
    }


class SchemaVersion(Base):
    """One row per schema version applied to this database."""

    __tablename__ = "boe_schema"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    boe_version: Mapped[str] = mapped_column(String(32))
    applied: Mapped[datetime] = mapped_column(default=utcnow)


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created: Mapped[datetime] = mapped_column(default=utcnow)
    config: Mapped[dict[str, Any]]
    boe_version: Mapped[str] = mapped_column(String(32))
    git_revision: Mapped[str | None] = mapped_column(String(64))

    questions: Mapped[list[Question]] = relationship(back_populates="run", viewonly=True)


class Image(Base):
    __tablename__ = "images"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str | None] = mapped_column(Text)
    width: Mapped[int | None]
    height: Mapped[int | None]
    format: Mapped[str | None] = mapped_column(String(16))
    data: Mapped[bytes | None] = mapped_column(LargeBinary)
    created: Mapped[datetime] = mapped_column(default=utcnow)


class Question(Base):
    __tablename__ = "questions"
    __table_args__ = (
        UniqueConstraint("run_id", "source_id", "dataset", name="uq_questions_run_key"),
        Index("ix_questions_run_order", "run_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    dataset: Mapped[str] = mapped_column(String(200))
    source_id: Mapped[str] = mapped_column(String(400))
    question_text: Mapped[str | None] = mapped_column(Text)
    options: Mapped[Any | None]
    image: Mapped[Any | None]  # the ledger's task.image: a path or a list of paths
    reference: Mapped[Any | None] = mapped_column(info=_EVAL, comment="evaluation data")
    n_candidates: Mapped[int]
    record: Mapped[bytes] = mapped_column(LargeBinary)  # the exact ledger-v1 line, zlib-compressed UTF-8
    stored: Mapped[datetime] = mapped_column(default=utcnow)

    run: Mapped[Run] = relationship(back_populates="questions", viewonly=True)
    candidates: Mapped[list[Candidate]] = relationship(order_by="Candidate.idx", viewonly=True)
    claims: Mapped[list[Claim]] = relationship(order_by="Claim.pos", viewonly=True)
    edges: Mapped[list[Edge]] = relationship(
        primaryjoin="Question.id == foreign(Edge.question_pk)",
        order_by="(Edge.claim_pos, Edge.candidate_idx)",
        viewonly=True,
    )
    actions: Mapped[list[Action]] = relationship(order_by="Action.pos", viewonly=True)


class QuestionImage(Base):
    __tablename__ = "question_images"
    __table_args__ = (Index("ix_question_images_image", "image_id"),)

    question_pk: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True)
    pos: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"))


class Candidate(Base):
    __tablename__ = "candidates"
    __table_args__ = _CHILD

    question_pk: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True)
    idx: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    answer: Mapped[str | None] = mapped_column(Text)  # the parsed answer
    raw_text: Mapped[str | None] = mapped_column(Text)  # the model's raw reply
    slots: Mapped[Any | None]
    valid: Mapped[bool] = mapped_column(Boolean)
    utility: Mapped[float | None] = mapped_column(Float, info=_EVAL, comment="evaluation data")


class Claim(Base):
    __tablename__ = "claims"
    __table_args__ = _CHILD

    question_pk: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True)
    pos: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    claim_id: Mapped[str] = mapped_column(Text)
    slot: Mapped[str | None] = mapped_column(String(100))
    value: Mapped[str | None] = mapped_column(Text)  # the canonical value
    figure: Mapped[str | None] = mapped_column(String(200))


class Edge(Base):
    __tablename__ = "edges"
    __table_args__ = (
        ForeignKeyConstraint(["question_pk", "claim_pos"], ["claims.question_pk", "claims.pos"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["question_pk", "candidate_idx"], ["candidates.question_pk", "candidates.idx"], ondelete="CASCADE"
        ),
        CheckConstraint("sign IN (-1, 1)", name="ck_edges_sign"),
        _CHILD,
    )

    question_pk: Mapped[int] = mapped_column(primary_key=True)
    claim_pos: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    candidate_idx: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    sign: Mapped[int] = mapped_column(SmallInteger)


class Action(Base):
    __tablename__ = "actions"
    __table_args__ = (
        ForeignKeyConstraint(["question_pk", "claim_pos"], ["claims.question_pk", "claims.pos"], ondelete="CASCADE"),
        ForeignKeyConstraint(
            ["question_pk", "candidate_idx"], ["candidates.question_pk", "candidates.idx"], ondelete="CASCADE"
        ),
        _CHILD,
    )

    question_pk: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"), primary_key=True)
    pos: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)  # file order = tie-breaking order
    action_id: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32))
    claim_pos: Mapped[int | None]  # target of a factor action
    candidate_idx: Mapped[int | None]  # target of a response-level action
    cost: Mapped[float] = mapped_column(Float)
    group_name: Mapped[str] = mapped_column(String(200))  # calibration group
    view: Mapped[Any | None]  # crop box / mask reference / metadata field

    outcome: Mapped[Outcome | None] = relationship(viewonly=True)


class Outcome(Base):
    __tablename__ = "outcomes"
    __table_args__ = (
        ForeignKeyConstraint(["question_pk", "action_pos"], ["actions.question_pk", "actions.pos"], ondelete="CASCADE"),
        CheckConstraint("outcome IN ('confirm', 'reject', 'unresolved')", name="ck_outcomes_outcome"),
        _CHILD,
    )

    question_pk: Mapped[int] = mapped_column(primary_key=True)
    action_pos: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    outcome: Mapped[str] = mapped_column(String(16))
    rationale: Mapped[str | None] = mapped_column(Text)  # the judge's short rationale
    raw_reply: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)  # why the tool failed


class ModelCallRow(Base):
    __tablename__ = "model_calls"
    __table_args__ = (Index("ix_model_calls_run", "run_id"), Index("ix_model_calls_question", "question_pk"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    question_pk: Mapped[int | None] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    endpoint: Mapped[str] = mapped_column(Text)  # base URL without credentials
    model: Mapped[str] = mapped_column(String(200))
    request_hash: Mapped[str] = mapped_column(String(64))
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    latency_s: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(32))
    retries: Mapped[int] = mapped_column(default=0)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(default=utcnow)


class Transcript(Base):
    __tablename__ = "transcripts"
    __table_args__ = (Index("ix_transcripts_run", "run_id", "id"), Index("ix_transcripts_question", "question_pk"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    question_pk: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    policy: Mapped[str] = mapped_column(String(100))
    budget: Mapped[float] = mapped_column(Float)
    actions: Mapped[Any]  # ordered ids of the bought actions
    scores: Mapped[Any]  # final s_i
    selected: Mapped[int]
    cost: Mapped[float] = mapped_column(Float)
    utility: Mapped[float | None] = mapped_column(Float, info=_EVAL, comment="evaluation data")
    evidence: Mapped[Any | None]  # the evidence log
    created: Mapped[datetime] = mapped_column(default=utcnow)


class CalibrationRow(Base):
    """A calibration (boe.core.calibration.Calibration as JSON) stored by name."""

    __tablename__ = "calibrations"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    data: Mapped[dict[str, Any]]
    created: Mapped[datetime] = mapped_column(default=utcnow)


class CacheEntry(Base):
    """Request cache: a model reply keyed on (endpoint, model, messages, sampling parameters, seed)."""

    __tablename__ = "request_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    response: Mapped[str] = mapped_column(Text)  # JSON
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    created: Mapped[datetime] = mapped_column(default=utcnow)


class WorkItemRow(Base):
    """A question queued for a run; workers claim it under a lease."""

    __tablename__ = "work_items"
    __table_args__ = (
        UniqueConstraint("run_id", "source_id", "dataset", name="uq_work_items_run_key"),
        Index("ix_work_items_claim", "run_id", "status", "id"),
        CheckConstraint("status IN ('pending', 'claimed', 'done')", name="ck_work_items_status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    dataset: Mapped[str] = mapped_column(String(200))
    source_id: Mapped[str] = mapped_column(String(400))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    worker: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[float | None] = mapped_column(Float)  # seconds since the epoch, database clock
    attempts: Mapped[int] = mapped_column(default=0)


EVALUATION_COLUMNS: tuple[str, ...] = tuple(
    f"{t.name}.{c.name}" for t in Base.metadata.sorted_tables for c in t.columns if c.info.get("evaluation")
)
