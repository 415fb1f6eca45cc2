"""Plain records that go into and come out of the store (no SQLAlchemy needed to build them)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boe.core.calls import ModelCall

if TYPE_CHECKING:
    from boe.core.ledger import LedgerRecord, RecordDict

__all__ = [
    "CachedResponse",
    "ImageRecord",
    "ImportReport",
    "ModelCall",
    "QuestionData",
    "RunInfo",
    "TranscriptRecord",
    "WorkItem",
]


@dataclass(frozen=True)
class RunInfo:
    """One stored run: its name, configuration and provenance."""

    id: int
    name: str
    created: datetime
    config: dict[str, Any]
    boe_version: str
    git_revision: str | None


@dataclass(frozen=True)
class ImageRecord:
    """An image a question uses: content hash, original path, size, format; bytes only if embedded."""

    sha256: str
    path: str | None = None
    width: int | None = None
    height: int | None = None
    format: str | None = None
    data: bytes | None = None

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        path: str | Path | None = None,
        width: int | None = None,
        height: int | None = None,
        format: str | None = None,
        embed: bool = False,
    ) -> ImageRecord:
        """Describe image bytes; the bytes themselves are kept only with ``embed=True``."""
        return cls(
            sha256=hashlib.sha256(data).hexdigest(),
            path=None if path is None else str(path),
            width=width,
            height=height,
            format=format,
            data=data if embed else None,
        )

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        width: int | None = None,
        height: int | None = None,
        format: str | None = None,
        embed: bool = False,
    ) -> ImageRecord:
        """Describe an image file (hashing its bytes); ``format`` defaults to the file suffix."""
        from boe.errors import InputError

        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read image {p}: {exc.strerror}") from exc
        fmt = format or (p.suffix.lstrip(".").lower() or None)
        return cls.from_bytes(data, path=p, width=width, height=height, format=fmt, embed=embed)


@dataclass(frozen=True)
class TranscriptRecord:
    """One selection transcript (spec section 7) plus the agent's evidence log."""

    dataset: str
    question_id: str
    policy: str
    budget: float
    selected: int
    actions: list[str]
    scores: list[float]
    cost: float = 0.0
    utility: float | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, line: Mapping[str, Any]) -> TranscriptRecord:
        """From a transcript line as written by `boe.core.replay.transcripts` (plus optional ``evidence``)."""
        return cls(
            dataset=str(line["dataset"]),
            question_id=str(line["question_id"]),
            policy=str(line["policy"]),
            budget=float(line["budget"]),
            selected=int(line["selected"]),
            actions=[str(a) for a in line.get("actions", [])],
            scores=[float(s) for s in line.get("scores", [])],
            cost=float(line.get("cost", 0.0)),
            utility=None if line.get("utility") is None else float(line["utility"]),
            evidence=list(line.get("evidence") or []),
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec section 7 line (numbers that are whole print as integers), with ``evidence`` if any."""
        out: dict[str, Any] = {
            "question_id": self.question_id,
            "dataset": self.dataset,
            "policy": self.policy,
            "budget": _num(self.budget),
            "selected": self.selected,
            "actions": list(self.actions),
            "cost": _num(self.cost),
            "scores": list(self.scores),
            "utility": self.utility,
        }
        if self.evidence:
            out["evidence"] = list(self.evidence)
        return out


def _num(x: float) -> float | int:
    return int(x) if math.isfinite(x) and float(x).is_integer() else x


@dataclass(frozen=True)
class QuestionData:
    """Everything stored for one question in one transaction (a record dict is validated as it is stored)."""

    record: LedgerRecord | RecordDict
    model_calls: Sequence[ModelCall] = ()
    transcripts: Sequence[TranscriptRecord] = ()
    images: Sequence[ImageRecord] = ()


@dataclass(frozen=True)
class CachedResponse:
    """A cached model reply and its token usage."""

    response: Any
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    created: datetime


@dataclass(frozen=True)
class WorkItem:
    """A question a worker has claimed, until ``lease_until`` (seconds since the epoch)."""

    dataset: str
    question_id: str
    attempts: int
    lease_until: float


@dataclass
class ImportReport:
    """What `boe import` did: stored, already present (skipped) and bad records."""

    stored: int = 0
    skipped: int = 0
    bad: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of this process (the writer), not of the parser process
