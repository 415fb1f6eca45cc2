"""Where a report's questions come from: a stored run or ledger files.

`open_source` yields a `Source`: the replay-ready questions, a way to walk
their ledger records again (in the same order, the same ones), the images the
store links to each question, and the run's configuration. The store stays
open while the source is in use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boe.core.lines import decode_line
from boe.errors import ConfigError, RecordError

if TYPE_CHECKING:
    from boe.core.graph import Question
    from boe.db.types import RunInfo

__all__ = ["ImageSource", "Source", "open_source"]


@dataclass(frozen=True)
class ImageSource:
    """Where one image's pixels are: embedded bytes or a file path; its size when known."""

    key: str  # content hash for stored images, else the resolved path
    path: str | None = None
    data: bytes | None = None
    width: int | None = None
    height: int | None = None
    refused: str | None = None  # why the file is not read (a path outside the image root)


def confine(path: str, root: Path | None) -> tuple[str | None, str | None]:
    """(the resolved path, None) for a path under ``root`` (relative paths are read from it), else (None, why).

    As `boe batch` does with its dataset root: an absolute path or one that
    climbs out with ``..`` (or through a symlink) is refused, never opened.
    """
    if root is None:
        return None, f"image path {path!r} not read: no image root (give --image-root)"
    p = Path(path).expanduser()
    try:
        base = root.resolve()
        full = (p if p.is_absolute() else base / p).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        return None, f"image path {path!r} not read: {exc}"
    if not full.is_relative_to(base):
        return None, f"image path {path!r} not read: it is outside the image root {str(base)!r}"
    return str(full), None


@dataclass(eq=False)
class Source:
    """The questions of a report and access to their full records."""

    label: str  # what the report says it was made from (URLs without credentials)
    questions: list[Question]
    group_keys: list[str]
    _lines: Callable[[], Iterable[str | bytes]]
    run: RunInfo | None = None
    base_dir: Path | None = None  # the image root: relative paths are read from it, nothing outside it is read
    stored_images: dict[tuple[str, str], list[ImageSource]] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)
    db: str | None = None
    also_in: list[str] = field(default_factory=list)  # other runs of the store holding the question asked for

    def records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(question index, record dict) of every loaded question, in question order."""
        index = {(q.dataset, q.question_id): r for r, q in enumerate(self.questions)}
        for raw in self._lines():
            if not raw.strip():
                continue
            try:
                rec = decode_line(raw)
            except RecordError:
                continue  # a bad record: it is in `bad` already
            if not isinstance(rec, dict):
                continue
            r = index.pop((str(rec.get("dataset")), str(rec.get("question_id"))), None)
            if r is not None:
                yield r, rec

    def find(self, question_id: str, dataset: str | None = None) -> int:
        """Index of a question by id (``DATASET/ID`` or ``--dataset`` when the id is in several datasets)."""
        if dataset is None and "/" in question_id:
            head, _, tail = question_id.partition("/")
            if any(q.dataset == head and q.question_id == tail for q in self.questions):
                dataset, question_id = head, tail
        hits = [
            r
            for r, q in enumerate(self.questions)
            if q.question_id == question_id and (dataset is None or q.dataset == dataset)
        ]
        if not hits:
            raise ConfigError(
                f"no question {question_id!r}" + (f" of dataset {dataset!r}" if dataset else "") + f" in {self.label}"
            )
        if len(hits) > 1:
            names = ", ".join(sorted(self.questions[r].dataset for r in hits))
            raise ConfigError(
                f"question {question_id!r} is in several datasets ({names}); give DATASET/ID or --dataset"
            )
        return hits[0]

    def record(self, index: int) -> dict[str, Any]:
        """The full record of one question."""
        for r, rec in self.records():
            if r == index:
                return rec
        raise ConfigError(f"the record of question {self.questions[index].question_id!r} could not be read again")


@contextmanager
def open_source(
    *,
    db: str | None = None,
    run: str | None = None,
    ledgers: Sequence[str | Path] = (),
    on_error: Callable[[RecordError], None] | None = None,
    image_root: str | Path | None = None,
    question: tuple[str, str | None] | None = None,
) -> Iterator[Source]:
    """The questions of ``--db URL --run NAME`` or of ledger files (bad records go to ``on_error``).

    Without ``run``, a store holding several runs needs ``question`` (its id and dataset, as `Source.find`
    takes them): the most recent run holding it is read, and `Source.also_in` names the others.
    """
    bad: list[str] = []

    def note(err: RecordError) -> None:
        bad.append(err.describe())
        if on_error is not None:
            on_error(err)

    root = None if image_root is None else Path(image_root)
    if db is not None:
        if ledgers:
            raise ConfigError("give --ledger files or --db/--run, not both")
        from boe.db import Store
        from boe.db.loading import load_questions

        with Store(db, create=False) as store:
            also_in: list[str] = []
            if not run:
                names = [r.name for r in store.list_runs()]
                if len(names) > 1 and question is not None:
                    holding = _runs_holding(store, *question)
                    if not holding:
                        raise ConfigError(f"no question {question[0]!r} in any run of {store.url} ({', '.join(names)})")
                    names, also_in = holding[-1:], holding[:-1]
                run = store.only_run(names)
            info = store.get_run(run)
            if root is None:  # the dataset root the batch read its images from
                agent = (info.config or {}).get("agent") if isinstance(info.config, dict) else None
                batch_root = agent.get("root") if isinstance(agent, dict) else None
                root = Path(batch_root) if isinstance(batch_root, str) and batch_root else None
            questions, groups = load_questions(store, run, on_error=note)
            yield Source(
                label=f"{store.url}#{run}",
                questions=questions,
                group_keys=groups.keys,
                _lines=lambda: store.iter_ledger_lines(run),
                run=info,
                base_dir=root,
                stored_images=_stored_images(store, info.id),
                bad=bad,
                db=store.url,
                also_in=also_in[::-1],
            )
        return
    if not ledgers:
        raise ConfigError("give --ledger FILE (repeatable) or --db URL --run NAME")
    from boe.core.lines import STDIN, open_ledger
    from boe.core.loading import load_ledgers
    from boe.ledger_cache import default_ledger_cache

    if any(str(p) == STDIN for p in ledgers):
        raise ConfigError("--ledger -: a report reads its ledgers twice, so it needs files, not standard input")
    paths = [Path(p) for p in ledgers]
    questions, groups = load_ledgers(paths, on_error=note, cache=default_ledger_cache())

    def lines() -> Iterator[bytes]:
        for p in paths:
            with open_ledger(p) as fh:
                yield from fh

    yield Source(
        label=", ".join(str(p) for p in paths),
        questions=questions,
        group_keys=groups.keys,
        _lines=lines,
        base_dir=root if root is not None else paths[0].resolve().parent,
        bad=bad,
    )


def _runs_holding(store: Any, question_id: str, dataset: str | None) -> list[str]:
    """The runs (oldest first) holding a question: ``ID``, ``DATASET/ID`` or ``ID`` of ``dataset``."""
    from sqlalchemy import and_, or_, select

    from boe.db.models import Question as QuestionRow
    from boe.db.models import table

    qt = table(QuestionRow)
    keys = [(dataset, question_id)]
    if dataset is None and "/" in question_id:
        head, _, tail = question_id.partition("/")
        keys.append((head, tail))
    match = or_(*(and_(qt.c.source_id == qid, *([qt.c.dataset == ds] if ds else [])) for ds, qid in keys))
    with store.engine.connect() as conn:
        ids = set(conn.execute(select(qt.c.run_id).where(match).distinct()).scalars())
    return [r.name for r in store.list_runs() if r.id in ids]


def _stored_images(store: Any, run_id: int) -> dict[tuple[str, str], list[ImageSource]]:
    """The images the store links to each question of the run, in position order."""
    from sqlalchemy import select

    from boe.db.models import Image, QuestionImage, table
    from boe.db.models import Question as QuestionRow

    qt, qi, it = table(QuestionRow), table(QuestionImage), table(Image)
    stmt = (
        select(qt.c.dataset, qt.c.source_id, it.c.sha256, it.c.path, it.c.data, it.c.width, it.c.height)
        .select_from(qi.join(qt, qt.c.id == qi.c.question_pk).join(it, it.c.id == qi.c.image_id))
        .where(qt.c.run_id == run_id)
        .order_by(qi.c.question_pk, qi.c.pos)
    )
    out: dict[tuple[str, str], list[ImageSource]] = {}
    with store.engine.connect() as conn:
        for ds, qid, sha, path, data, w, h in conn.execute(stmt):
            out.setdefault((ds, qid), []).append(ImageSource(sha, path, data, w, h))
    return out
