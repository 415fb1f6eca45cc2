"""`Store`: every run persisted, SQLite by default, PostgreSQL for many workers."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Select, Table, delete, func, insert, select
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError

from boe.core.version import __version__
from boe.db import cache as _cache
from boe.db import work as _work
from boe.db.engine import display_url, make_engine, read_tx, sqlite_path, to_url, write_tx
from boe.db.migrate import ensure_schema
from boe.db.models import (
    Action,
    CalibrationRow,
    Candidate,
    Claim,
    Edge,
    Image,
    ModelCallRow,
    Outcome,
    Question,
    QuestionImage,
    Run,
    Transcript,
    table,
    utcnow,
)
from boe.db.rows import (
    ACTION_COLUMNS,
    CANDIDATE_COLUMNS,
    CLAIM_COLUMNS,
    EDGE_COLUMNS,
    OUTCOME_COLUMNS,
    ChildTable,
    PreparedQuestion,
    pack_record,
    question_rows,
    unpack_record,
)
from boe.db.sql import bulk_insert, insert_ignore, upsert
from boe.db.types import (
    CachedResponse,
    ImageRecord,
    ModelCall,
    QuestionData,
    RunInfo,
    TranscriptRecord,
    WorkItem,
)
from boe.errors import ConfigError, RecordError, StoreError, StoreNotFoundError
from boe.util import redact_url

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from boe.core.calibration import Calibration
    from boe.core.ledger import LedgerRecord, RecordDict

__all__ = ["DEFAULT_URL", "Store"]

DEFAULT_URL = "sqlite:///boe.db"

T = TypeVar("T")
P = TypeVar("P")
RunRef = str | RunInfo

_Q = table(Question)
_R = table(Run)
_T = table(Transcript)
_MC = table(ModelCallRow)
_IMG = table(Image)
_QI = table(QuestionImage)
_CAL = table(CalibrationRow)
_CHUNK = 500
# Child tables in insert order (a child after its parents); deletes run in reverse.
_CHILDREN: tuple[tuple[Table, tuple[str, ...], ChildTable], ...] = (
    (table(Candidate), CANDIDATE_COLUMNS, "candidates"),
    (table(Claim), CLAIM_COLUMNS, "claims"),
    (table(Edge), EDGE_COLUMNS, "edges"),
    (table(Action), ACTION_COLUMNS, "actions"),
    (table(Outcome), OUTCOME_COLUMNS, "outcomes"),
)
# Configuration keys whose values are masked: api_key, openai_api_key, password, hf_token, client_secret, ...
_SECRET_KEY = re.compile(r"(?i)^(?:.*[_-])?(?:api[_-]?key|password|passwd|secret|token|authorization|credentials?)$")


class Store:
    """A boe store at a database URL.

    ``sqlite:///path.db`` (the default; WAL journal, foreign keys on, busy
    timeout) or ``postgresql+psycopg://user@host/db`` for many workers; a bare
    path means an SQLite file. Opening creates the schema (``create``),
    migrates an older one (``migrate``) and refuses a newer one. ``cache=False``
    turns the model request cache off. Every write is one transaction,
    retried on lock contention; a question is either fully stored or absent.
    """

    def __init__(
        self,
        url: str | Path = DEFAULT_URL,
        *,
        create: bool = True,
        migrate: bool = True,
        cache: bool = True,
        busy_timeout: float = 30.0,
        echo: bool = False,
    ) -> None:
        parsed = to_url(url)
        self.url = display_url(parsed)
        self._url_text = parsed.render_as_string(hide_password=False)  # for worker processes; never shown
        self.cache_enabled = cache
        self._run_ids: dict[str, int] = {}
        path = sqlite_path(parsed)
        if path is not None and not path.exists():
            if not create:
                raise StoreNotFoundError(f"no store at {path} (the file does not exist)")
            if not path.parent.is_dir():
                raise StoreNotFoundError(f"cannot create the store {path}: the folder {path.parent} does not exist")
        self._engine = make_engine(parsed, busy_timeout=busy_timeout, echo=echo)
        try:
            with self._errors("opening"):
                ensure_schema(self._engine, self.url, create=create, migrate=migrate)
        except BaseException:
            self._engine.dispose()
            raise

    # -- plumbing ----------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for read queries with the models in `boe.db.models`)."""
        return self._engine

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return str(self._engine.dialect.name)

    def close(self) -> None:
        """Release every connection."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except DatabaseError as exc:
            if not isinstance(exc, OperationalError) and type(exc) is not DatabaseError:
                raise  # integrity and programming errors are not the database's state
            msg = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
            raise StoreError(f"{what} {self.url}: {msg}") from exc

    def _write(self, fn: Callable[[Connection], T], what: str = "writing to") -> T:
        with self._errors(what):
            return write_tx(self._engine, fn, what=f"{what} {self.url}")

    @contextmanager
    def _read(self, **options: Any) -> Iterator[Connection]:
        with self._errors("reading"), read_tx(self._engine, **options) as conn:
            yield conn

    def _run_id(self, run: RunRef) -> int:
        if isinstance(run, RunInfo):
            return run.id
        rid = self._run_ids.get(run)
        if rid is None:
            rid = self.get_run(run).id
        return rid

    # -- runs ----------------------------------------------------------------------

    def create_run(
        self,
        name: str,
        config: Mapping[str, Any] | None = None,
        *,
        exist_ok: bool = False,
        git_revision: str | None = None,
    ) -> RunInfo:
        """Create a run with its configuration (secrets masked), boe version and git revision (found if None).

        With ``exist_ok`` an existing run of that name is returned as it is.
        """
        if not name or len(name) > 200:
            raise ConfigError(f"a run name (--run) must have 1 to 200 characters, got {len(name)}")
        clean = _scrub(dict(config or {}))
        revision = git_revision if git_revision is not None else _git_revision()

        def create(conn: Connection) -> bool:
            stmt = insert_ignore(conn, _R, ["name"]).values(
                name=name, created=utcnow(), config=clean, boe_version=__version__, git_revision=revision
            )
            return conn.execute(stmt.returning(_R.c.id)).first() is not None

        if not self._write(create) and not exist_ok:
            raise StoreError(f"a run named {name!r} already exists in {self.url}")
        return self.get_run(name)

    def get_run(self, name: str) -> RunInfo:
        """The run called ``name``; `StoreError` naming the known runs if there is none."""
        with self._read() as conn:
            row = conn.execute(select(_R).where(_R.c.name == name)).first()
            if row is None:
                known = conn.execute(select(_R.c.name).order_by(_R.c.id).limit(20)).scalars().all()
        if row is None:
            hint = f"; runs: {', '.join(known)}" if known else "; it holds no runs"
            raise StoreNotFoundError(f"no run named {name!r} in {self.url}{hint}")
        info = _run_info(row)
        self._run_ids[name] = info.id
        return info

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self._read() as conn:
            return [_run_info(r) for r in conn.execute(select(_R).order_by(_R.c.id))]

    def only_run(self, names: Sequence[str] | None = None) -> str:
        """The one run of ``names`` (default: of the store), which a command may take without --run; else a
        `ConfigError` asking for --run and naming the runs."""
        names = [r.name for r in self.list_runs()] if names is None else list(names)
        if len(names) != 1:
            raise ConfigError(f"--db needs --run NAME; runs in {self.url}: {', '.join(names) or 'none'}")
        return names[0]

    def delete_run(self, run: RunRef) -> None:
        """Delete a run and everything stored for it."""
        run_id = self._run_id(run)

        def drop(conn: Connection) -> None:
            pks = conn.execute(select(_Q.c.id).where(_Q.c.run_id == run_id)).scalars().all()
            _delete_questions(conn, list(pks))
            conn.execute(delete(_R).where(_R.c.id == run_id))

        self._write(drop)
        self._run_ids = {k: v for k, v in self._run_ids.items() if v != run_id}

    # -- questions -------------------------------------------------------------------

    def save_question(
        self,
        run: RunRef,
        record: LedgerRecord | RecordDict,
        *,
        model_calls: Sequence[ModelCall] = (),
        transcripts: Sequence[TranscriptRecord] = (),
        images: Sequence[ImageRecord] = (),
        replace: bool = False,
        worker: str | None = None,
    ) -> bool:
        """Store one question with its calls, transcripts and images in one transaction.

        A record dict is validated here (`RecordError` naming the field); a `LedgerRecord` was when it was made.
        A question already stored under (run, dataset, question_id) is left as
        it is (returns False) unless ``replace``, which swaps it whole.
        ``worker`` also marks the question's work item done, atomically.
        """
        item = QuestionData(record, model_calls=model_calls, transcripts=transcripts, images=images)
        return self.save_questions(run, [item], replace=replace, worker=worker) == 1

    def save_questions(
        self, run: RunRef, items: Iterable[QuestionData], *, replace: bool = False, worker: str | None = None
    ) -> int:
        """Store several questions in one transaction (same rules as `save_question`); returns how many were written."""
        from boe.core.ledger import record_line

        prepared = []
        for it in items:
            data, line = record_line(it.record)  # a dict validated here, once; mapped to rows and written as the line
            rows = question_rows(data)
            prepared.append(PreparedQuestion(rows, pack_record(line), it.model_calls, it.transcripts, it.images))
        return self.save_prepared(run, prepared, replace=replace, worker=worker)

    def save_prepared(
        self, run: RunRef, items: Sequence[PreparedQuestion], *, replace: bool = False, worker: str | None = None
    ) -> int:
        """Store questions already turned into rows (the import path); returns how many were written."""
        if not items:
            return 0
        run_id = self._run_id(run)
        for _ in range(5):
            try:
                return self._write(lambda conn: _save(conn, run_id, items, replace, worker))
            except IntegrityError as exc:  # PostgreSQL: another worker stored the same question meanwhile
                if "uq_questions_run_key" not in str(exc.orig):
                    raise
        raise StoreError(f"could not store {len(items)} question(s) in {self.url}: conflicting writers kept winning")

    def has_question(self, run: RunRef, dataset: str, question_id: str) -> bool:
        """Whether the run holds this question."""
        run_id = self._run_id(run)
        with self._read() as conn:
            stmt = select(_Q.c.id).where(_Q.c.run_id == run_id, _Q.c.source_id == question_id, _Q.c.dataset == dataset)
            return conn.execute(stmt).first() is not None

    def done_question_ids(self, run: RunRef) -> set[tuple[str, str]]:
        """(dataset, question id) of every question the run holds."""
        run_id = self._run_id(run)
        with self._read() as conn:
            rows = conn.execute(select(_Q.c.dataset, _Q.c.source_id).where(_Q.c.run_id == run_id))
            return {(d, q) for d, q in rows}

    def count_questions(self, run: RunRef) -> int:
        """How many questions the run holds."""
        run_id = self._run_id(run)
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(_Q).where(_Q.c.run_id == run_id)).scalar_one())

    def iter_ledger_lines(self, run: RunRef) -> Iterator[str]:
        """The run's ledger-v1 JSON lines (no newline), in the order the questions were stored."""
        run_id = self._run_id(run)
        stmt = select(_Q.c.record).where(_Q.c.run_id == run_id).order_by(_Q.c.id)
        for (blob,) in self._stream(stmt):
            yield unpack_record(blob)

    def iter_records(
        self,
        run: RunRef,
        *,
        strict: bool = False,
        on_error: Callable[[RecordError], None] | None = None,
    ) -> Iterator[LedgerRecord]:
        """The run's records in insertion order; an invalid one goes to ``on_error`` (raises if ``strict``)."""
        from boe.core.ledger import parse_record

        yield from self._parsed(run, parse_record, strict, on_error)

    def iter_record_dicts(
        self,
        run: RunRef,
        *,
        strict: bool = False,
        on_error: Callable[[RecordError], None] | None = None,
    ) -> Iterator[RecordDict]:
        """Like `iter_records`, as validated plain dicts (the fast path for replay and bulk work)."""
        from boe.core.ledger import parse_record_dict

        yield from self._parsed(run, parse_record_dict, strict, on_error)

    def _parsed(
        self,
        run: RunRef,
        parse: Callable[..., P],
        strict: bool,
        on_error: Callable[[RecordError], None] | None,
    ) -> Iterator[P]:
        name = run.name if isinstance(run, RunInfo) else run
        source = f"{self.url}#{name}"
        for n, line in enumerate(self.iter_ledger_lines(run), 1):
            try:
                yield parse(line, source=source, line=n)
            except RecordError as err:
                if strict:
                    raise
                if on_error is not None:
                    on_error(err)

    def _stream(self, stmt: Select[Any]) -> Iterator[Any]:
        with self._read(yield_per=256) as conn:
            yield from conn.execute(stmt)

    # -- transcripts and model calls -------------------------------------------------

    def save_transcripts(self, run: RunRef, transcripts: Iterable[TranscriptRecord]) -> int:
        """Store transcripts of questions the run already holds (one transaction); returns the count."""
        run_id = self._run_id(run)
        items = list(transcripts)

        def write(conn: Connection) -> int:
            pks = _question_pks(conn, run_id, {(t.dataset, t.question_id) for t in items})
            _insert_transcripts(conn, run_id, [(pks[t.dataset, t.question_id], t) for t in items])
            return len(items)

        return self._write(write)

    def iter_transcripts(
        self, run: RunRef, *, policy: str | None = None, budget: float | None = None
    ) -> Iterator[TranscriptRecord]:
        """The run's stored transcripts in the order they were stored, optionally of one policy / budget."""
        run_id = self._run_id(run)
        stmt = (
            select(
                _Q.c.dataset,
                _Q.c.source_id,
                _T.c.policy,
                _T.c.budget,
                _T.c.selected,
                _T.c.actions,
                _T.c.scores,
                _T.c.cost,
                _T.c.utility,
                _T.c.evidence,
            )
            .join(_Q, _Q.c.id == _T.c.question_pk)
            .where(_T.c.run_id == run_id)
            .order_by(_T.c.id)
        )
        if policy is not None:
            stmt = stmt.where(_T.c.policy == policy)
        if budget is not None:
            stmt = stmt.where(_T.c.budget == float(budget))
        for r in self._stream(stmt):
            yield TranscriptRecord(
                dataset=r.dataset,
                question_id=r.source_id,
                policy=r.policy,
                budget=r.budget,
                selected=r.selected,
                actions=list(r.actions),
                scores=list(r.scores),
                cost=r.cost,
                utility=r.utility,
                evidence=list(r.evidence or []),
            )

    def save_model_calls(
        self, run: RunRef, calls: Iterable[ModelCall], *, question: tuple[str, str] | None = None
    ) -> int:
        """Record model calls of the run, optionally of one stored (dataset, question id); returns the count."""
        run_id = self._run_id(run)
        items = list(calls)

        def write(conn: Connection) -> int:
            pk = None if question is None else _question_pks(conn, run_id, {question})[question]
            _insert_calls(conn, run_id, pk, items)
            return len(items)

        return self._write(write)

    def iter_model_calls(self, run: RunRef) -> Iterator[ModelCall]:
        """The run's recorded model calls, oldest first."""
        run_id = self._run_id(run)
        stmt = select(_MC).where(_MC.c.run_id == run_id).order_by(_MC.c.id)
        for r in self._stream(stmt):
            yield _call_from_row(r)

    # -- request cache ----------------------------------------------------------------

    def cache_get(self, key: str) -> CachedResponse | None:
        """The cached reply under ``key`` (None when absent or the cache is off)."""
        if not self.cache_enabled:
            return None
        with self._read() as conn:
            return _cache.cache_get(conn, key)

    def cache_keys(self, limit: int) -> set[str] | None:
        """The keys of the cached replies (empty when the cache is off), None when there are more than ``limit``."""
        if not self.cache_enabled:
            return set()
        with self._read() as conn:
            return _cache.cache_keys(conn, limit)

    def cache_put(
        self,
        key: str,
        response: Any,
        *,
        endpoint: str,
        model: str,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> None:
        """Cache a JSON-serialisable reply under ``key`` (a no-op when the cache is off)."""
        if not self.cache_enabled:
            return
        self._write(
            lambda conn: _cache.cache_put(
                conn,
                key,
                response,
                endpoint=endpoint,
                model=model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
        )

    def cache_put_many(self, entries: Iterable[Mapping[str, Any]]) -> int:
        """Cache several replies in one transaction; each entry has `cache_put`'s arguments by name."""
        if not self.cache_enabled:
            return 0
        rows = [
            _cache.cache_row(
                e["key"],
                e["response"],
                endpoint=e["endpoint"],
                model=e["model"],
                prompt_tokens=e.get("prompt_tokens"),
                completion_tokens=e.get("completion_tokens"),
            )
            for e in entries
        ]
        if not rows:
            return 0
        self._write(lambda conn: _cache.cache_put_rows(conn, rows))
        return len(rows)

    # -- calibrations -----------------------------------------------------------------

    def save_calibration(self, name: str, calibration: Calibration, *, run: RunRef | None = None) -> None:
        """Store a calibration under ``name``, replacing one of the same name."""
        data = calibration.model_dump(mode="json", exclude_none=True)
        data.pop("source", None)
        run_id = None if run is None else self._run_id(run)
        values = {"name": name, "run_id": run_id, "data": data, "created": utcnow()}
        self._write(lambda conn: upsert(conn, _CAL, ["name"], values))

    def load_calibration(self, name: str) -> Calibration:
        """The calibration stored under ``name``."""
        from boe.core.calibration import Calibration

        with self._read() as conn:
            data = conn.execute(select(_CAL.c.data).where(_CAL.c.name == name)).scalar()
        if data is None:
            raise StoreError(f"no calibration named {name!r} in {self.url}")
        cal = Calibration.model_validate(data)
        cal.source = f"{self.url}#calibration={name}"
        return cal

    def list_calibrations(self) -> list[str]:
        """Names of the stored calibrations."""
        with self._read() as conn:
            return list(conn.execute(select(_CAL.c.name).order_by(_CAL.c.name)).scalars())

    # -- work queue -------------------------------------------------------------------

    def enqueue(self, run: RunRef, keys: Iterable[tuple[str, str]]) -> int:
        """Queue (dataset, question id) pairs of a run for workers; returns how many were not queued yet."""
        run_id = self._run_id(run)
        items = list(keys)
        return self._write(lambda conn: _work.enqueue(conn, run_id, items))

    def claim_questions(self, run: RunRef, worker_id: str, n: int = 1, lease_seconds: float = 600.0) -> list[WorkItem]:
        """Claim up to ``n`` queued questions for ``worker_id`` until the lease expires (then others may take them)."""
        if n < 1 or lease_seconds <= 0:
            raise ValueError("claim at least one question for a positive lease")
        run_id = self._run_id(run)
        return self._write(lambda conn: _work.claim(conn, run_id, worker_id, n, lease_seconds))

    def complete(self, run: RunRef, keys: Iterable[tuple[str, str]]) -> int:
        """Mark queued questions done; returns how many changed."""
        run_id = self._run_id(run)
        items = list(keys)
        return self._write(lambda conn: _work.complete(conn, run_id, items))

    def renew(
        self, run: RunRef, worker_id: str, keys: Iterable[tuple[str, str]], lease_seconds: float = 600.0
    ) -> list[tuple[str, str]]:
        """Extend the leases ``worker_id`` holds on these questions; returns those renewed (the others were lost)."""
        if lease_seconds <= 0:
            raise ValueError("a lease must be positive")
        run_id = self._run_id(run)
        items = list(keys)
        return self._write(lambda conn: _work.renew(conn, run_id, worker_id, items, lease_seconds))

    def release(self, run: RunRef, worker_id: str, keys: Iterable[tuple[str, str]] | None = None) -> int:
        """Give back questions ``worker_id`` claimed (all of them by default); returns how many."""
        run_id = self._run_id(run)
        items = None if keys is None else list(keys)
        return self._write(lambda conn: _work.release(conn, run_id, worker_id, items))

    def work_counts(self, run: RunRef) -> dict[str, int]:
        """Queued questions of the run by status: pending, claimed, done."""
        run_id = self._run_id(run)
        with self._read() as conn:
            return _work.counts(conn, run_id)

    def work_leases(self, run: RunRef) -> list[tuple[str, float, float]]:
        """(worker, questions held, when its latest lease ends: epoch seconds) per worker holding questions."""
        run_id = self._run_id(run)
        with self._read() as conn:
            return _work.leases(conn, run_id)


# -- helpers (module level: they run inside one transaction) ----------------------------------


def _run_info(row: Any) -> RunInfo:
    return RunInfo(
        id=row.id,
        name=row.name,
        created=row.created,
        config=dict(row.config or {}),
        boe_version=row.boe_version,
        git_revision=row.git_revision,
    )


def _scrub(value: Any) -> Any:
    """JSON-safe copy of a configuration with secrets masked and URLs stripped of credentials."""
    if isinstance(value, Mapping):
        return {str(k): "***" if _SECRET_KEY.match(str(k)) and v else _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return redact_url(value) if "://" in value else value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _scrub(json.loads(json.dumps(value, default=str)))


@functools.cache
def _git_revision() -> str | None:
    """The git commit of the boe checkout in use, if it is one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", rev) else None


def _chunks(items: Sequence[T], size: int = _CHUNK) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _existing(conn: Connection, run_id: int, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
    wanted = set(keys)
    found: dict[tuple[str, str], int] = {}
    for chunk in _chunks(sorted({q for _, q in wanted})):
        stmt = select(_Q.c.id, _Q.c.dataset, _Q.c.source_id).where(_Q.c.run_id == run_id, _Q.c.source_id.in_(chunk))
        for pk, ds, qid in conn.execute(stmt):
            if (ds, qid) in wanted:
                found[ds, qid] = pk
    return found


def _question_pks(conn: Connection, run_id: int, keys: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    found = _existing(conn, run_id, keys)
    missing = keys - set(found)
    if missing:
        ds, qid = sorted(missing)[0]
        raise StoreError(f"the run holds no question {qid!r} of dataset {ds!r} (store the question first)")
    return found


def _delete_questions(conn: Connection, pks: list[int]) -> None:
    """Delete questions and everything hanging off them, children first (cheap foreign-key checks)."""
    for chunk in _chunks(pks):
        for child in [t for t, _, _ in reversed(_CHILDREN)] + [_QI, _T, _MC]:
            conn.execute(delete(child).where(child.c.question_pk.in_(chunk)))
        conn.execute(delete(_Q).where(_Q.c.id.in_(chunk)))


def _save(conn: Connection, run_id: int, items: Sequence[PreparedQuestion], replace: bool, worker: str | None) -> int:
    """Write whole questions (skipping or replacing ones already stored); returns how many were written."""
    keys = [p.rows.key for p in items]
    existing = _existing(conn, run_id, keys)
    todo: dict[tuple[str, str], PreparedQuestion] = {}
    for p in items:
        if p.rows.key in todo or (p.rows.key in existing and not replace):
            continue  # the first of duplicates wins; a stored question stays unless replaced
        todo[p.rows.key] = p
    if replace and existing:
        _delete_questions(conn, [existing[k] for k in todo if k in existing])
    batch = list(todo.values())
    if batch:
        now = utcnow()
        params = [
            {
                "run_id": run_id,
                "dataset": r.dataset,
                "source_id": r.source_id,
                "question_text": r.question_text,
                "options": r.options,
                "image": r.image,
                "reference": r.reference,
                "n_candidates": r.n_candidates,
                "record": p.record,
                "stored": now,
            }
            for p in batch
            for r in (p.rows,)
        ]
        result = conn.execute(insert(_Q).returning(_Q.c.id, sort_by_parameter_order=True), params)
        pks = [row[0] for row in result]
        for child, columns, name in _CHILDREN:
            rows = list(chain.from_iterable(p.rows.rows(name, pk) for pk, p in zip(pks, batch, strict=True)))
            if rows:
                bulk_insert(conn, child, columns, rows)
        for pk, p in zip(pks, batch, strict=True):
            if p.images:
                _link_images(conn, pk, p.images)
            if p.model_calls:
                _insert_calls(conn, run_id, pk, p.model_calls)
            if p.transcripts:
                for t in p.transcripts:
                    if (t.dataset, t.question_id) != p.rows.key:
                        raise ValueError(f"a transcript of {t.dataset}/{t.question_id} given with {p.rows.key}")
                _insert_transcripts(conn, run_id, [(pk, t) for t in p.transcripts])
    if worker is not None:
        _work.complete(conn, run_id, keys)
    return len(batch)


def _link_images(conn: Connection, question_pk: int, images: Sequence[ImageRecord]) -> None:
    for img in images:
        conn.execute(
            insert_ignore(conn, _IMG, ["sha256"]).values(
                sha256=img.sha256,
                path=img.path,
                width=img.width,
                height=img.height,
                format=img.format,
                data=img.data,
                created=utcnow(),
            )
        )
    stmt = select(_IMG.c.sha256, _IMG.c.id).where(_IMG.c.sha256.in_({i.sha256 for i in images}))
    ids = dict(conn.execute(stmt).all())
    links = [{"question_pk": question_pk, "pos": j, "image_id": ids[img.sha256]} for j, img in enumerate(images)]
    conn.execute(insert(_QI), links)


def _call_from_row(r: Any) -> ModelCall:
    """A ``model_calls`` row as a `ModelCall`: the columns it has; the rest (role, prompt, tags) is in the ledger."""
    cached = bool(r.cached)
    return ModelCall(
        call_id="",
        role="",
        purpose="",
        prompt_version="",
        model=r.model,
        base_url=r.endpoint,
        n=0,
        temperature=0.0,
        request_key=r.request_hash,
        started_at=r.created.isoformat() if r.created is not None else "",
        requests=0 if cached else int(r.retries or 0) + 1,
        prompt_tokens=r.prompt_tokens or 0,
        completion_tokens=r.completion_tokens or 0,
        latency_ms=(r.latency_s or 0.0) * 1000.0,
        cache_hit=cached,
        error=r.error,
    )


def _insert_calls(conn: Connection, run_id: int, question_pk: int | None, calls: Sequence[ModelCall]) -> None:
    if not calls:
        return
    now = utcnow()
    conn.execute(
        insert(_MC),
        [
            {
                "run_id": run_id,
                "question_pk": question_pk,
                "endpoint": redact_url(c.base_url),
                "model": c.model,
                "request_hash": c.request_key,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "latency_s": (c.latency_ms or 0.0) / 1000.0,
                "status": c.status,
                "retries": c.retries,
                "cached": c.cache_hit,
                "error": c.error,
                "created": c.created or now,
            }
            for c in calls
        ],
    )


def _insert_transcripts(conn: Connection, run_id: int, items: Sequence[tuple[int, TranscriptRecord]]) -> None:
    if not items:
        return
    now = utcnow()
    conn.execute(
        insert(_T),
        [
            {
                "run_id": run_id,
                "question_pk": pk,
                "policy": t.policy,
                "budget": float(t.budget),
                "actions": list(t.actions),
                "scores": [float(s) for s in t.scores],
                "selected": int(t.selected),
                "cost": float(t.cost),
                "utility": t.utility,
                "evidence": list(t.evidence) or None,
                "created": now,
            }
            for pk, t in items
        ],
    )
