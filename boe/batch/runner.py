"""The batch runner: many questions through one agent, claimed from the store's work queue, stored once each.

One worker is one process with one event loop:

* questions are claimed from the run's work queue under a lease (PostgreSQL:
  ``FOR UPDATE SKIP LOCKED``; SQLite: ``BEGIN IMMEDIATE``) just in time, at
  most ``max_active`` at once; a heartbeat renews the leases of the questions
  the worker still holds, and a question whose lease was lost (the worker
  stalled past its lease and another took it over) is dropped, never
  finished twice;
* every model call of every question goes through one HTTP client that
  admits ``--concurrency`` requests at a time (see `boe.batch.http`);
* replies go to the store's request cache in gathered writes (see
  `boe.batch.cache`), so a question re-done after a crash is answered from
  the cache;
* a finished question is graded with the dataset's evaluator and stored in
  one transaction that also marks its queue item done; finished questions
  are written in groups by one writer thread (`GroupWriter`);
* figures can be decoded in a process pool (``cpu_workers``).

Restarting after ``kill -9`` needs nothing: stored questions are done, the
questions the dead process held come back (at once on the same machine, see
`boe.batch.identity`; elsewhere when their lease runs out), and the cache
answers every call that was paid for before the kill.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from boe.agent.configuration import AgentConfig
from boe.batch.diversity import PoolDiversity
from boe.batch.files import Parked
from boe.batch.plan import BatchItem, describe_dataset, select_items
from boe.batch.progress import BatchStats, NullProgress, ProgressView
from boe.errors import BoeError, ConfigError, InputError, StoreError, StoreNotFoundError, Terminated
from boe.logs import get_logger

if TYPE_CHECKING:
    from boe.agent import Agent
    from boe.batch.cache import WriteBehindCache
    from boe.batch.files import ReadReport
    from boe.batch.identity import WorkerIdentity
    from boe.datasets import AnswerEvaluator, Dataset
    from boe.db import QuestionData, RunInfo, Store

__all__ = ["BatchConfig", "BatchRunner", "BatchSummary", "GroupWriter", "run_batch"]

_log = get_logger("batch")

T = TypeVar("T")
Key = tuple[str, str]


class BatchConfig(BaseModel):
    """One batch worker: the dataset, the agent, the store and run, and how the worker behaves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str = Field(min_length=1)  # a dataset folder or file
    format: str | None = None  # detected when None
    split: str | None = None  # one published split, or "all"; None refuses a folder with several splits
    columns: dict[str, str] | None = None  # field -> column of an hf dataset ("question=q,image=img" also accepted)
    namespace: str | None = None  # calibration namespace and stored dataset name [the dataset's name]
    agent: AgentConfig  # endpoints, K, budget, policy, ledger, concurrency (root and dataset are set per batch)
    db: str = Field(min_length=1)
    run: str = Field(min_length=1, max_length=200)
    limit: int | None = Field(default=None, ge=1)  # the first N items in file order
    resume: bool = False  # the run must exist already
    semantic_grader: bool = False  # an LLM grader (the judge model) for open answers rules leave undecided
    worker: str | None = None  # this worker's name [the first free slot on this machine]
    lease_seconds: float = Field(default=120.0, ge=2.0)
    max_active: int | None = Field(default=None, ge=1)  # questions in progress at once [concurrency + 2]
    cpu_workers: int = Field(default=0, ge=0, le=64)  # processes decoding figures (0: in the event loop)
    max_failures: int = Field(default=20, ge=0)  # stop claiming after this many failed questions (0: never)
    wait: bool = True  # wait for questions other workers hold (their leases may run out)
    poll_seconds: float = Field(default=1.0, gt=0)
    flush_seconds: float = Field(default=0.05, gt=0)  # how often the writer looks for gathered cache writes
    collapse_share: float = Field(default=0.5, ge=0.0, le=1.0)  # warn above this share of collapsed pools
    write_requests: str | None = None  # batch files: write the requests of this stage here instead of sending them
    read_replies: tuple[str, ...] = ()  # batch files: result files to store in the request cache first

    @model_validator(mode="after")
    def _files(self) -> BatchConfig:
        from boe.batch.files import check_files

        try:
            check_files(self.write_requests, self.read_replies)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, value: Any) -> Any:
        from boe.datasets._hf import parse_columns

        try:
            return None if value is None else parse_columns(value) or None
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


@dataclass
class BatchSummary:
    """What one worker session did."""

    run: str
    worker: str
    store: str
    selected: int  # questions of the batch
    skipped: list[tuple[str, str]]  # (question id, why it cannot run)
    stored_before: int  # already stored when the session started
    stored: int  # stored by this session
    failed: list[tuple[str, str]]  # (question id, error), released for a later run
    lost: int  # dropped because another worker took their lease over
    reclaimed: int  # questions a dead earlier process of this worker held, taken back at start
    remaining: dict[str, int]  # the run's queue at the end: pending, claimed, done
    calls_paid: int
    calls_cached: int
    call_errors: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float  # wall time of the session's work loop
    startup_seconds: float  # loading the dataset, opening the store, run and agent
    cpu_seconds: float  # CPU of this process during the work loop (threads included)
    pool_cpu_seconds: float  # CPU of the figure-decoding processes
    store_seconds: float  # wall time the writer thread spent in the store
    cpu_breakdown: dict[str, float]  # CPU seconds of parts of cpu_seconds: store writes and reads, grading
    segmentation_seconds: float  # wall time of the grounded views' segmentations (in threads), summed
    peak_in_flight: int  # most model requests in flight at once
    request_ms: float = 0.0  # mean time a request held its slot (sent to reply read): latency as this worker saw it
    parked: int = 0  # batch files: questions waiting for a reply written to the requests file
    files: dict[str, Any] = field(default_factory=dict)  # batch files: results read, requests written
    segmentation_cpu_seconds: float = 0.0  # CPU of the segmentations (part of cpu_seconds)
    servers: list[dict[str, Any]] = field(default_factory=list)  # each server's share: requests, errors, down
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every question of the run's queue is stored."""
        return self.remaining.get("pending", 0) == 0 and self.remaining.get("claimed", 0) == 0

    @property
    def per_minute(self) -> float:
        return 60.0 * self.stored / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_question(self) -> float:
        """CPU per stored question (this process and its pool, segmentation included), waiting excluded."""
        return 1000.0 * (self.cpu_seconds + self.pool_cpu_seconds) / self.stored if self.stored else math.nan

    @property
    def segmentation_ms_per_question(self) -> float:
        """The segmentations' CPU per stored question."""
        return 1000.0 * self.segmentation_cpu_seconds / self.stored if self.stored else math.nan

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the derived rates."""
        d = asdict(self)
        d.update(
            complete=self.complete,
            questions_per_minute=round(self.per_minute, 2),
            cpu_ms_per_question=None if not self.stored else round(self.cpu_ms_per_question, 1),
            framework_cpu_ms_per_question=None
            if not self.stored
            else round(self.cpu_ms_per_question - self.segmentation_ms_per_question, 1),
            segmentation_cpu_ms_per_question=None if not self.stored else round(self.segmentation_ms_per_question, 1),
        )
        return d


class GroupWriter:
    """Writes submitted items in groups: while one group is being written, the next one gathers.

    ``write(items)`` runs on ``executor`` (one thread: writes never contend
    inside a worker); each `submit` returns once its item's group is stored.
    """

    def __init__(self, write: Callable[[list[Any]], Any], run: Callable[..., Awaitable[Any]]) -> None:
        self._write = write
        self._run = run
        self._pending: list[tuple[Any, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self.groups = 0

    async def submit(self, item: Any) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        await fut

    async def join(self) -> None:
        """Wait until every submitted item is written (or failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)

    async def _drain(self) -> None:
        while self._pending:
            group, self._pending = self._pending, []
            try:
                await self._run(self._write, [item for item, _ in group])
            except BaseException as exc:
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self.groups += 1
            for _, fut in group:
                if not fut.done():
                    fut.set_result(None)


def _agent_config(agent: AgentConfig, **changes: Any) -> AgentConfig:
    try:
        return AgentConfig.model_validate({**agent.model_dump(), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "configuration"
        raise ConfigError(f"{where}: {err['msg'].removeprefix('Value error, ')}") from None


def _evaluator_settings(desc: dict[str, Any]) -> dict[str, Any]:
    """The parts of an evaluator's description that decide a stored utility."""
    sem = desc.get("semantic") or {}
    return {k: desc.get(k) for k in ("name", "version", "config", "uses_llm")} | {
        "semantic": {k: sem.get(k) for k in ("kind", "model", "prompt")} if sem else None
    }


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process, from /proc (0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@contextmanager
def _fewer_collections(young: int = 50_000) -> Iterator[None]:
    """The garbage collector tuned for the work loop, then restored.

    A batch allocates many short-lived containers (replies, graph states) over a large heap of long-lived ones
    (modules, models, the store). With the default thresholds a full collection walked that heap every few
    seconds: a quarter of the framework's CPU (60 simulator questions at K=16: 3 s of 24 s). The heap built
    before the loop is frozen (never scanned again) and the youngest generation collected every ``young``
    allocations instead of 700; cyclic garbage still goes, in larger batches.
    """
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], young), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, BoeError):
        return str(exc)
    tb = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" at {tb[0].filename}:{tb[0].lineno}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


class BatchRunner:
    """One worker session of a batch (use `run_batch`, or ``await BatchRunner(config).run()``)."""

    def __init__(
        self,
        config: BatchConfig,
        *,
        progress: ProgressView | None = None,
        api_key: str | None = None,
        http_client: Any = None,
    ) -> None:
        self.config = config
        self.progress: ProgressView = progress or NullProgress()
        self._http_live: Any = None
        self._waiting_said: set[str] = set()
        self.api_key = api_key
        self._http_client = http_client
        self.stats = BatchStats()
        self.notes: list[str] = []
        self.diversity = PoolDiversity(config.collapse_share)
        self.store: Store | None = None
        self.run_info: RunInfo | None = None
        self.identity: WorkerIdentity | None = None
        self.agent: Agent | None = None
        self.evaluator: AnswerEvaluator | None = None
        self.cache: WriteBehindCache | None = None
        self.items: dict[Key, BatchItem] = {}
        self.active: dict[Key, asyncio.Task[None]] = {}
        self.held: set[Key] = set()  # claimed by this worker and neither stored nor released
        self.failed: dict[Key, str] = {}
        self._lost: set[Key] = set()
        self._saving: set[Key] = set()  # answered, being written
        self.parked: set[Key] = set()  # batch files: waiting for a reply of the next file (held until the end)
        self._db_pool: ThreadPoolExecutor | None = None
        self._cpu_pool: Executor | None = None
        self._writer: GroupWriter | None = None
        self._store_seconds = 0.0
        self._store_cpu = 0.0  # CPU of the writer thread
        self._prep_cpu = 0.0  # CPU of grading and turning answers into store rows
        self._segmentation = 0.0
        self._stopping = False
        self._failures: list[BaseException] = []  # what ends the batch: a store write failed (or a bug), first first
        self._unstored = 0  # answered questions a failed store write could not keep

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def worker_id(self) -> str:
        assert self.identity is not None
        return self.identity.worker_id

    async def _db(
        self, fn: Callable[..., T], *args: Any, on_cancel: Callable[[T], object] | None = None, **kwargs: Any
    ) -> T:
        """Run a store call on the writer thread (store calls never block the event loop for long).

        A cancelled caller still waits for the call to end, so the store's state
        is known (``on_cancel`` gets its result: a claim's items are then held
        and given back by the wind-down).
        """
        assert self._db_pool is not None

        def call() -> T:
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._store_cpu += time.thread_time() - c0

        t0 = time.perf_counter()
        fut = asyncio.get_running_loop().run_in_executor(self._db_pool, call)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            try:
                result = await fut
            except Exception:
                raise asyncio.CancelledError from None
            if on_cancel is not None:
                on_cancel(result)
            raise
        finally:
            self._store_seconds += time.perf_counter() - t0

    def _save_group(self, items: list[QuestionData]) -> int:
        assert self.store is not None and self.run_info is not None
        return self.store.save_questions(self.run_info, items, worker=self.worker_id)

    # -- setup --------------------------------------------------------------------------------------

    def _load(self) -> tuple[Dataset, list[BatchItem], list[tuple[str, str]], AgentConfig]:
        from boe.batch.plan import load_batch_dataset

        cfg = self.config
        ds = load_batch_dataset(cfg.dataset, cfg.format, cfg.split, cfg.columns)
        namespace = cfg.namespace or ds.name
        items, skipped = select_items(ds, namespace, cfg.limit)
        if ds.issues:
            self.notes.append(f"{len(ds.issues)} record(s) of the dataset could not be loaded ({ds.summary()})")
        for qid, why in skipped:
            _log.warning("skipped question %s: %s", qid, why)
        if skipped:
            self.notes.append(f"{len(skipped)} question(s) cannot run (first: {skipped[0][0]}: {skipped[0][1]})")
        if not items:
            raise InputError(f"no question of {cfg.dataset} can run ({ds.summary()})")
        agent_cfg = _agent_config(cfg.agent, root=str(ds.root), dataset=namespace)
        if agent_cfg.cost_mode == "measured" and agent_cfg.cost_file is None:
            self.notes.append(
                "costs measured from this run's earlier questions depend on the order questions finish in; "
                "a resumed or shared batch plans with other costs (pass a cost FILE for a reproducible run)"
            )
        return ds, items, skipped, agent_cfg

    def _open_run(self, store: Store, ds: Dataset, agent_cfg: AgentConfig, evaluator: AnswerEvaluator) -> RunInfo:
        from boe.agent.persist import open_store

        cfg = self.config
        try:
            existing: RunInfo | None = store.get_run(cfg.run)
        except StoreError:
            existing = None
        if existing is None and cfg.resume:
            raise ConfigError(f"--resume: {store.url} has no run {cfg.run!r} to resume")
        mine = evaluator.describe()
        if existing is not None:
            batch = existing.config.get("batch")
            if existing.config.get("kind") != "batch" or not isinstance(batch, dict):
                raise ConfigError(f"run {cfg.run!r} in {store.url} was not made by boe batch; choose another --run")
            if batch.get("namespace") != agent_cfg.dataset:
                raise ConfigError(
                    f"run {cfg.run!r} holds dataset {batch.get('namespace')!r}, this batch {agent_cfg.dataset!r}"
                )
            if _evaluator_settings(batch.get("evaluator") or {}) != _evaluator_settings(mine):
                raise ConfigError(
                    f"run {cfg.run!r} was graded with another answer evaluator "
                    f"({'an LLM grader' if batch.get('evaluator', {}).get('uses_llm') else 'rules only'}); "
                    "use the same --semantic-grader setting or another --run"
                )
        calibration = self.agent.calibration if self.agent is not None else agent_cfg.load_calibration()
        dump = calibration.model_dump(mode="json", exclude_none=True, exclude={"source"})
        cal = {"source": calibration.source, **dump}
        run_config = {
            "kind": "batch",
            "agent": agent_cfg.public(),
            "calibration": cal,
            "batch": {
                "namespace": agent_cfg.dataset,
                "dataset": describe_dataset(ds, cfg.dataset),
                "limit": cfg.limit,
                "evaluator": mine,
                "ledger": agent_cfg.ledger,
            },
        }
        store.create_run(cfg.run, run_config, exist_ok=True)
        _, run, _, _ = open_store(store, agent_cfg, calibration, cfg.run)  # refuses other agent settings
        info: RunInfo = run
        return info

    # -- one question -------------------------------------------------------------------------------

    async def _open_figures(self, bi: BatchItem, agent_cfg: AgentConfig) -> list[Any]:
        from boe.agent.api import open_figures

        if self._cpu_pool is None:
            return open_figures(bi.image, agent_cfg)
        return await asyncio.get_running_loop().run_in_executor(self._cpu_pool, open_figures, bi.image, agent_cfg)

    async def _answer(self, bi: BatchItem) -> None:
        from boe.agent.persist import question_data
        from boe.batch.grading import regrade

        assert self.agent is not None and self.evaluator is not None and self._writer is not None
        item = bi.item
        try:
            opened = await self._open_figures(bi, self.agent.config)
            res = await self.agent.ask(
                bi.image,
                item.question,
                options=item.for_generator()["options"],
                reference=item.reference,
                question_id=item.question_id,
                opened=opened,
            )
            c0 = time.thread_time()  # grading and store rows (an LLM grader's waiting would count: rules never wait)
            grader_calls = await regrade(res.record, res.transcript, item, self.evaluator)
        except asyncio.CancelledError:
            if bi.key in self._lost:
                self.stats.lost += 1
                return
            raise
        except Parked:  # batch files: a request of it goes into the next file; the question is held until the end
            self.parked.add(bi.key)
            return
        except Exception as exc:  # the question failed: recorded, counted, released at the end, never stored
            self.failed[bi.key] = _error_text(exc)
            _log.warning("question %s failed: %s", bi.key[1], self.failed[bi.key])
            self.stats.failed += 1
            self.progress.update(self.stats)
            return
        self.diversity.add(res.record.get("candidates") or [])
        calls = [*res.calls, *grader_calls]
        self._segmentation += sum(
            float(((a.get("view") or {}).get("segmentation") or {}).get("seconds") or 0.0)
            for a in res.record["actions"]
        )
        if grader_calls:
            res.record.setdefault("model_calls", []).extend(
                {k: v for k, v in c.items() if k not in ("base_url", "request_key")} for c in grader_calls
            )
        data = question_data(res.record, calls, res.transcript, [img.ref.as_dict() for img in opened])
        self._prep_cpu += time.thread_time() - c0
        self._saving.add(bi.key)
        try:
            await self._writer.submit(data)
        except BoeError as exc:  # a store failure (a full disk) is not the question's: it ends the batch
            self._unstored += 1
            self._fail(exc)
            return
        finally:
            self._saving.discard(bi.key)
        self.held.discard(bi.key)
        self.stats.add_calls(calls)
        self.stats.done += 1
        self.progress.update(self.stats)

    # -- background tasks ---------------------------------------------------------------------------

    async def _flush_cache(self) -> None:
        assert self.cache is not None and self.store is not None
        entries = self.cache.take()
        if entries:
            try:
                await self._db(self.store.cache_put_many, entries)
            except BaseException:
                self.cache.put_back(entries)
                raise
            self.cache.mark_written(entries)

    async def _flusher(self) -> None:
        assert self.cache is not None
        while True:
            await asyncio.sleep(self.config.flush_seconds)
            if self.cache.due():
                try:
                    await self._flush_cache()
                except BoeError:  # kept for the next flush; a store that stays broken fails the next save
                    continue

    async def _heartbeat(self) -> None:
        assert self.store is not None and self.run_info is not None
        lease = self.config.lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            keys = sorted(self.held)
            if not keys:
                continue
            renewed = set(await self._db(self.store.renew, self.run_info, self.worker_id, keys, lease))
            for key in keys:
                if key in renewed or key not in self.held or key in self._saving:
                    continue  # renewed, or stored (or being stored) meanwhile
                self.held.discard(key)
                self.failed.pop(key, None)
                task = self.active.get(key)
                if task is not None and not task.done():
                    _log.warning("lost the lease of question %s to another worker", key[1])
                    self._lost.add(key)
                    task.cancel()

    # -- the work loop ------------------------------------------------------------------------------

    def _forget(self, key: Key, task: asyncio.Task[None]) -> None:
        if self.active.get(key) is task:
            del self.active[key]
        if not task.cancelled() and task.exception() is not None:  # retrieved here: reported once, by `run`
            self._fail(task.exception())  # type: ignore[arg-type]

    def _fail(self, exc: BaseException) -> None:
        """Stop the batch for this error (the first one is reported once the work has wound down)."""
        self._failures.append(exc)
        self._stopping = True

    def _raise_failure(self) -> None:
        if not self._failures:
            return
        first = self._failures[0]
        if not isinstance(first, StoreError):
            raise first  # a programming error is the CLI's internal-error line and crash log
        lost = f"; {self._unstored} answered question(s) could not be stored" if self._unstored else ""
        raise StoreError(
            f"{first}{lost}. Every question stored so far is kept: fix the store (free space) and run the same "
            "command to resume"
        ) from first

    def _may_claim(self) -> bool:
        cfg = self.config
        if cfg.max_failures and self.stats.failed >= cfg.max_failures and not self._stopping:
            self._stopping = True
            self.notes.append(f"stopped claiming after {self.stats.failed} failed questions (--max-failures)")
        return not self._stopping

    async def _loop(self, max_active: int) -> None:
        assert self.store is not None and self.run_info is not None
        cfg = self.config
        run = self.run_info
        while True:
            room = max_active - len(self.active)
            claimed_any = False
            if room > 0 and self._may_claim():
                got = await self._db(
                    self.store.claim_questions,
                    run,
                    self.worker_id,
                    room,
                    cfg.lease_seconds,
                    on_cancel=lambda items: self.held.update((w.dataset, w.question_id) for w in items),
                )
                for w in got:
                    key = (w.dataset, w.question_id)
                    self.held.add(key)
                    bi = self.items.get(key)
                    if bi is None:  # queued by a worker with another --limit or dataset: not ours to answer
                        self.failed[key] = "not in this worker's selection of the dataset"
                        continue
                    claimed_any = True
                    task = asyncio.create_task(self._answer(bi), name=f"boe-batch:{w.question_id}")
                    self.active[key] = task
                    task.add_done_callback(partial(self._forget, key))
            self._tick()
            if not self.active and not claimed_any:
                counts = await self._db(self.store.work_counts, run)
                others = counts["claimed"] - len(self.held)
                if self._stopping or counts["pending"] == 0 and (others <= 0 or not cfg.wait):
                    return
                if others > 0:
                    await self._say_waiting(run)
            if self.active:
                await asyncio.wait(
                    list(self.active.values()), timeout=cfg.poll_seconds, return_when=asyncio.FIRST_COMPLETED
                )
            else:
                await asyncio.sleep(cfg.poll_seconds)
            if self._failures:
                return

    def _tick(self) -> None:
        """Move the progress view with the model requests finished so far (it moves per check, not per question)."""
        transport = getattr(self._http_live, "_transport", None)
        sent = getattr(transport, "sent", None)
        if isinstance(sent, int) and (sent != self.stats.live_requests or len(self.active) != self.stats.active):
            self.stats.live_requests = sent
            self.stats.active = len(self.active)
            self.progress.update(self.stats)

    async def _say_waiting(self, run: Any) -> None:
        """Say which questions this worker waits for: held by other workers, until their leases end."""
        assert self.store is not None
        held = [x for x in await self._db(self.store.work_leases, run) if x[0] != self.worker_id]
        if not held:
            return
        from datetime import UTC, datetime

        parts = []
        for worker, n, until in held:
            when = datetime.fromtimestamp(until, UTC).strftime("%H:%M:%S UTC")
            parts.append(f"{int(n)} held by {worker} until {when}")
        text = (
            "waiting: " + "; ".join(parts) + " (a stopped worker's questions are taken back when its lease ends; "
            "--no-wait stops now)"
        )
        status = getattr(self.progress, "status", None)
        if status is not None:
            status(text)
        if text.split(" (", 1)[0] not in self._waiting_said:
            self._waiting_said.add(text.split(" (", 1)[0])
            if status is None:
                self.notes.append(text)

    async def run(self) -> BatchSummary:
        """Answer and store the batch's questions this worker can claim; returns what it did."""
        from boe.agent import Agent
        from boe.batch.cache import WriteBehindCache
        from boe.batch.files import file_http_client, read_replies
        from boe.batch.http import bounded_http_client
        from boe.batch.identity import acquire_identity
        from boe.datasets import AnswerEvaluator, SemanticGrader
        from boe.db import Store

        cfg = self.config
        t_start = time.perf_counter()
        ds, items, skipped, agent_cfg = self._load()
        self.items = {bi.key: bi for bi in items}
        background: list[asyncio.Task[None]] = []
        pool_cpu = 0.0
        reclaimed = 0
        try:
            store = self.store = Store(cfg.db, create=not cfg.resume)  # --resume: the run, so its store, must exist
        except StoreNotFoundError as exc:
            raise ConfigError(f"--resume: {exc}; no run {cfg.run!r} to resume") from None
        self._db_pool = ThreadPoolExecutor(1, thread_name_prefix="boe-batch-store")
        self._writer = GroupWriter(self._save_group, self._db)
        files = _files_check(cfg, agent_cfg)
        if self._http_client is not None:
            http = self._http_client
        elif files:
            http = file_http_client(lambda key: (hit := store.cache_get(key)) and hit.response)
        else:
            http = bounded_http_client(agent_cfg.concurrency)
        self._http_live = http
        read = None
        try:
            self.cache = WriteBehindCache(store)
            self.agent = Agent(agent_cfg, api_key=self.api_key, cache=self.cache, http_client=http)
            await self.agent.open()
            self.notes.extend(self.agent.notes)
            semantic = SemanticGrader.from_client(self.agent.judge) if cfg.semantic_grader else None
            self.evaluator = AnswerEvaluator(semantic=semantic)
            run = self.run_info = self._open_run(store, ds, agent_cfg, self.evaluator)
            if cfg.read_replies:
                read = await self._db(read_replies, store, cfg.read_replies)
                self.notes.extend(read.notes())
            keys = [bi.key for bi in items]
            await self._db(store.enqueue, run, keys)
            stored = (await self._db(store.done_question_ids, run)) & set(keys)
            if stored:
                await self._db(store.complete, run, stored)  # stored without the queue (or before it)
            self.identity = acquire_identity(store.url, cfg.run, cfg.worker)
            if self.identity.reclaim:
                reclaimed = await self._db(store.release, run, self.worker_id)
            if cfg.cpu_workers:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                self._cpu_pool = ProcessPoolExecutor(cfg.cpu_workers, mp_context=multiprocessing.get_context("spawn"))
            todo = len(items) - len(stored)
            self.stats = BatchStats(todo=todo, expected_requests=_expected_requests(agent_cfg))
            startup = time.perf_counter() - t_start
            self.progress.start(todo, f"{cfg.run} [{self.worker_id}]")
            background = [asyncio.create_task(self._flusher()), asyncio.create_task(self._heartbeat())]
            cpu0, t0 = time.process_time(), time.perf_counter()
            max_active = cfg.max_active or agent_cfg.concurrency + 2
            try:
                with _fewer_collections():
                    await self._loop(max_active)
                if files:
                    await _settle(background)
            except BoeError as exc:  # a store call of the loop failed
                self._fail(exc)
            finally:
                await self._wind_down(background)
            self._raise_failure()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            pool_cpu = self._close_cpu_pool()
            remaining = await self._db(store.work_counts, run)
            collapsed = self.diversity.warning(self.agent.generator.last_sampling)
            if collapsed is not None:
                self.notes.append(collapsed)
            self.notes.extend(self.agent.endpoint_notes())
        finally:
            self.progress.stop()
            await self._close(http)
        transport = getattr(http, "_transport", None)
        s = self.stats
        written = self._write_files(transport, read) if files else {}
        return BatchSummary(
            run=cfg.run,
            worker=self.worker_id,
            store=store.url,
            selected=len(items),
            skipped=skipped,
            stored_before=len(stored),
            stored=s.done,
            failed=sorted((k[1], msg) for k, msg in self.failed.items()),
            lost=s.lost,
            reclaimed=reclaimed,
            remaining=remaining,
            calls_paid=s.calls_paid,
            calls_cached=s.calls_cached,
            call_errors=s.call_errors,
            requests=s.requests,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            seconds=seconds,
            startup_seconds=startup,
            cpu_seconds=cpu,
            pool_cpu_seconds=pool_cpu,
            store_seconds=self._store_seconds,
            cpu_breakdown={
                "store_writes": round(self._store_cpu, 3),
                "cache_reads": round(self.cache.read_cpu if self.cache is not None else 0.0, 3),
                "grading_and_rows": round(self._prep_cpu, 3),
            },
            segmentation_seconds=self._segmentation,
            segmentation_cpu_seconds=self._segmentation_cpu(),
            servers=self.agent.server_shares() if self.agent is not None else [],
            peak_in_flight=int(getattr(transport, "peak", 0)),
            notes=self.notes,
            parked=len(self.parked),
            files=written,
            request_ms=1000.0 * getattr(transport, "slot_seconds", 0.0) / max(1, getattr(transport, "sent", 0)),
        )

    def _write_files(self, transport: Any, read: ReadReport | None) -> dict[str, Any]:
        """Batch files: write this stage's requests (none once the run is complete); what was read and written."""
        from boe.batch.files import write_requests

        assert self.config.write_requests is not None
        requests = getattr(transport, "requests", {})
        out: dict[str, Any] = {"read": read.as_dict() if read is not None else None, "requests": len(requests)}
        out["answered"] = getattr(transport, "answered", 0)
        models = {c.model for c in (self.agent.generator, self.agent.judge)} if self.agent is not None else set()
        out["written"] = write_requests(self.config.write_requests, requests, models) if requests else []
        return out

    def _segmentation_cpu(self) -> float:
        """CPU seconds the agent's grounded judges spent segmenting."""
        tools = self.agent.tools.values() if self.agent is not None else ()
        return float(sum(getattr(t, "segmentation_cpu", 0.0) for t in tools))

    async def _wind_down(self, background: Sequence[asyncio.Task[None]]) -> None:
        """Stop the work (cancelling unfinished questions), store what is finished, give back the rest."""
        self._stopping = True
        for task in list(self.active.values()):
            task.cancel()
        await asyncio.gather(*self.active.values(), return_exceptions=True)  # their errors: `_forget`
        if self._writer is not None:
            await self._writer.join()
        for task in background:
            task.cancel()
        for r in await asyncio.gather(*background, return_exceptions=True):
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                self._fail(r)
        try:
            if self.cache is not None and self.store is not None:
                await self._flush_cache()
            if self.store is not None and self.run_info is not None and self.identity is not None and self.held:
                await self._db(self.store.release, self.run_info, self.worker_id, sorted(self.held))
        except BoeError as exc:  # the store is failing (a full disk): the leases run out instead
            self._fail(exc)

    def _close_cpu_pool(self) -> float:
        """Shut the figure pool down; returns the CPU its processes used."""
        pool, self._cpu_pool = self._cpu_pool, None
        if pool is None:
            return 0.0
        procs = getattr(pool, "_processes", None) or {}
        cpu = sum(_process_cpu(pid) for pid in list(procs))
        pool.shutdown(wait=True, cancel_futures=True)
        return cpu

    async def _close(self, http: Any) -> None:
        if self.agent is not None:
            await self.agent.aclose()
        elif http is not self._http_client:
            await http.aclose()
        self._close_cpu_pool()
        if self._db_pool is not None:
            self._db_pool.shutdown(wait=True)
        if self.identity is not None:
            self.identity.release()
        if self.store is not None:
            self.store.close()


def _files_check(cfg: BatchConfig, agent: AgentConfig) -> bool:
    """Whether this is a batch-file stage; refuses one that cannot say which server will run the file."""
    if cfg.write_requests is None:
        return False
    urls = [agent.base_url, agent.judge_url]
    if agent.server == "auto" and not all("api.openai.com" in (u or "") for u in urls):
        raise ConfigError(
            "--write-requests: there is no server to ask what it takes, so name the one that will run the file: "
            "--server vllm (vllm run-batch), openai (the OpenAI Batch API), sglang or generic"
        )
    return True


async def _settle(background: Sequence[asyncio.Task[None]], limit: float = 600.0) -> None:
    """Batch files: wait for the work a parked question left running (its other checks record their requests
    too), at most ``limit`` seconds."""
    me = asyncio.current_task()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        rest = [t for t in asyncio.all_tasks() if t is not me and t not in background and not t.done()]
        if not rest:
            return
        await asyncio.wait(rest, timeout=max(0.0, deadline - time.monotonic()))


def _expected_requests(cfg: AgentConfig) -> float:
    """A first guess of one question's model requests (the dry run's default basis), until some are measured."""
    import math

    claims = 5 + 2.5 * math.log2(max(cfg.k, 1))
    if cfg.ledger == "full":
        return 1 + 2 * claims + cfg.k
    return 1 + cfg.budget / 4


def run_batch(config: BatchConfig, *, progress: ProgressView | None = None, api_key: str | None = None) -> BatchSummary:
    """Run one batch worker to the end (outside an event loop).

    SIGTERM stops it as Ctrl-C does (in the main thread): unfinished questions
    are cancelled, finished ones stored, held ones given back; then
    `boe.errors.Terminated` (a ``KeyboardInterrupt``) is raised. A second
    SIGTERM ends the process at once.
    """
    stop = _StopOnSignal(signal.SIGTERM)
    try:
        return asyncio.run(stop.run(BatchRunner(config, progress=progress, api_key=api_key).run()))
    except asyncio.CancelledError:
        if stop.fired:
            raise Terminated from None
        raise


class _StopOnSignal:
    """Cancels the running main task on a signal, once (asyncio cancels it the same way on SIGINT)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.fired = False

    async def run(self, work: Awaitable[T]) -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        previous = signal.getsignal(self.signum)
        try:
            loop.add_signal_handler(self.signum, self._fire, loop, task)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
            return await work
        try:
            return await work
        finally:
            loop.remove_signal_handler(self.signum)
            if previous is not None:
                signal.signal(self.signum, previous)

    def _fire(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None) -> None:
        self.fired = True
        loop.remove_signal_handler(self.signum)  # the default action again: a second signal ends the process
        if task is not None:
            task.cancel()
