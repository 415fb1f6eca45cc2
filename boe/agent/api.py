"""The agent's Python API: `ask` for one question, `Agent` for many.

    >>> import boe
    >>> result = boe.ask("scan.png", "what imaging modality was used?",
    ...                  base_url="http://127.0.0.1:8000/v1", model="my-vlm")   # doctest: +SKIP
    >>> result.answer, result.raw_answer, result.evidence                       # doctest: +SKIP

An `Agent` keeps its model clients, store, run and checkpointer open across
questions (``async with Agent(config) as agent: await agent.ask(...)``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from boe.agent.configuration import NEUTRAL, AgentConfig
from boe.agent.costs import CostMeter, QuestionCosts, cost_kinds, load_costs_file, measured_costs, model_kinds
from boe.agent.inputs import (
    MAX_FIGURES,
    ImageInput,
    QuestionFields,
    figure_paths,
    open_figures,
    parse_options,
    question_input,
)
from boe.agent.settings import make_config
from boe.agent.state import evidence_log
from boe.core.bayes import BAYES_KEY, with_prior_model
from boe.core.calibration import Calibration
from boe.core.policies import FittablePolicy, make_policy
from boe.core.prior import with_prior
from boe.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from boe.agent.state import AgentContext
    from boe.tools.images import LoadedImage

__all__ = [
    "MAX_FIGURES",
    "Agent",
    "AskResult",
    "ImageInput",
    "ask",
    "ask_async",
    "figure_paths",
    "open_figures",
    "parse_options",
    "plain_serializer",
    "question_input",
    "sqlite_saver",
]


@dataclass
class AskResult:
    """One answered question: the selection, the raw majority beside it, and the evidence log."""

    question_id: str
    question: str
    options: dict[str, str] | None
    reference: str | None
    selected: int
    raw_selected: int
    candidates: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    scores: list[float]
    cost: float
    budget: float
    policy: str
    transcript: dict[str, Any]
    record: dict[str, Any]
    calls: list[dict[str, Any]]
    run: str | None = None
    resumed: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def answer(self) -> str | None:
        """The selected candidate's canonical answer."""
        return self.candidates[self.selected]["answer"] if self.selected >= 0 else None

    @property
    def answer_text(self) -> str | None:
        return self.candidates[self.selected]["answer_text"] if self.selected >= 0 else None

    @property
    def raw_answer(self) -> str | None:
        """The raw-majority answer (zero evidence)."""
        return self.candidates[self.raw_selected]["answer"] if self.raw_selected >= 0 else None

    @property
    def correct(self) -> bool | None:
        u = self.candidates[self.selected].get("utility") if self.selected >= 0 else None
        return None if u is None else u >= 0.5

    @property
    def raw_correct(self) -> bool | None:
        u = self.candidates[self.raw_selected].get("utility") if self.raw_selected >= 0 else None
        return None if u is None else u >= 0.5

    def usage(self) -> dict[str, int]:
        """Model calls and tokens this question paid for (cache hits are not paid)."""
        paid = [c for c in self.calls if not c.get("cache_hit")]
        return {
            "calls": len(paid),
            "requests": sum(int(c.get("requests", 0)) for c in paid),
            "prompt_tokens": sum(int(c.get("prompt_tokens", 0)) for c in paid),
            "completion_tokens": sum(int(c.get("completion_tokens", 0)) for c in paid),
            "cached_calls": len(self.calls) - len(paid),
            "failed_calls": sum(1 for c in paid if c.get("error")),
        }

    def to_json(self) -> dict[str, Any]:
        """What `boe ask --json` prints."""
        return {
            "question_id": self.question_id,
            "question": self.question,
            "options": self.options,
            "answer": self.answer,
            "answer_text": self.answer_text,
            "selected": self.selected,
            "raw_majority": {"selected": self.raw_selected, "answer": self.raw_answer},
            "reference": self.reference,
            "correct": self.correct,
            "raw_correct": self.raw_correct,
            "policy": self.policy,
            "budget": self.budget,
            "cost": self.cost,
            "scores": self.scores,
            "candidates": [{k: c.get(k) for k in _CANDIDATE_KEYS} for c in self.candidates],
            "evidence": [{k: v for k, v in e.items() if k != "scores"} for e in self.evidence],
            "transcript": self.transcript,
            "usage": self.usage(),
            "run": self.run,
            "resumed": self.resumed,
            "notes": self.notes,
        }


_CANDIDATE_KEYS = ("index", "answer", "answer_text", "figure", "valid", "slots", "error", "utility")


def prior_note(channels: Mapping[str, tuple[float, Any]], dataset: str) -> str:
    """The one message that says an uncovered dataset is scored under the prior, and how to fit a real one."""
    chans = ", ".join(f"{ch} {k:.2f}" for ch, (k, _) in channels.items() if k != 0.5)  # kappa 0.5: never bought
    return (
        f"the calibration does not cover dataset {dataset!r}: its checks are weighted by the PRIOR calibration "
        f"(channel kappa {chans}, and for bayes channels of that accuracy with the raw majority as its prior; "
        f"of the order the paper reports, not fitted on your data). Fit one on a "
        f"labelled full-ledger run (boe batch DATA --ledger full --db runs.db --run NAME): boe calibrate --db "
        f"runs.db --run NAME --out {dataset}-calibration.json, then pass --calibration {dataset}-calibration.json"
    )


def plain_serializer() -> Any:
    """A checkpoint serialiser that rebuilds no class beyond LangGraph's safe list (strict msgpack, whatever the
    environment says): the agent's state is plain data, so nothing in a checkpoint file can run code on load."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=None)


@asynccontextmanager
async def sqlite_saver(path: str | Path) -> AsyncIterator[Any]:
    """LangGraph's `AsyncSqliteSaver` on a file, with the strict serialiser (`plain_serializer`)."""
    try:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    except ImportError as exc:
        from boe.errors import MissingExtraError

        raise MissingExtraError("agent", "langgraph-checkpoint-sqlite", "checkpointing") from exc
    async with aiosqlite.connect(str(path)) as conn:
        yield AsyncSqliteSaver(conn, serde=plain_serializer())


class Agent:
    """Answers questions with one configuration, one pair of model clients, one store run."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        api_key: str | None = None,
        store: Any = None,
        run_name: str | None = None,
        checkpoint: str | Path | None = None,
        calibration: Calibration | None = None,
        http_client: Any = None,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        cache: Any = None,
        approver: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.approver = approver
        self.config = config
        self._api_key = api_key
        self._store_arg = store
        self.run_name = run_name
        self.checkpoint = None if checkpoint is None else str(checkpoint)
        self.calibration = calibration if calibration is not None else config.load_calibration()
        self._http_client = http_client
        self.on_step = on_step
        self._cache_arg = cache
        self.notes: list[str] = []
        self._stack: AsyncExitStack | None = None
        self.store: Any = None
        self.run_id: Any = None
        self.segmenter: Any = None
        self.meter = CostMeter()  # measurements of this run's questions (cost_mode "measured")
        self._file_meter: CostMeter | None = None
        if config.cost_file is not None:
            fixed, file_meter, _ = load_costs_file(config.cost_file)
            if file_meter is None:
                raise ConfigError(
                    f"cost file {config.cost_file!r} holds fixed costs: pass them as the design costs "
                    "(boe ask --costs FILE does this)"
                )
            self._file_meter = file_meter
        if config.calibration != NEUTRAL:
            self._add_priors(config)

    def _add_priors(self, config: AgentConfig) -> None:
        """Each kind's declared prior where the calibration says nothing of its checks (and the prior `bayes`
        model where it has none), a note saying so, and the channels the calibration says are weak or reversed."""
        from boe.kinds import kind_priors, kind_spec, prior_channels

        channels = prior_channels(config.kinds)
        priors = kind_priors(config.kinds)
        new = [ch for ch, (kind, _) in priors.items() if kind_spec(kind).ledger is None]  # kinds a fit may not know
        before = self.calibration
        had_model = BAYES_KEY in before.extra
        self.calibration, uncovered = with_prior(before, config.dataset, channels, new)
        if uncovered:
            self.notes.append(prior_note(channels, config.dataset))
            return
        fittable = isinstance(make_policy(config.policy), FittablePolicy)
        if not had_model and fittable:
            extra = with_prior_model(self.calibration.extra, channels)
            self.calibration = self.calibration.model_copy(update={"extra": extra})
            self.notes.append(
                f"the calibration {self.calibration.source} has no {config.policy} observation model "
                "(extra.bayes): its checks are weighted by the PRIOR model (channels of the accuracy the paper "
                "reports, not fitted on your data); refit the file with boe calibrate"
            )
        for ch in (ch for ch in new if ch in self.calibration.defaults and ch not in before.defaults):
            kind, prior = priors[ch]
            self.notes.append(
                f"kind {kind!r} has no calibration group in {before.source or 'the calibration'}: its checks (channel "
                f"{ch}) carry the kind's declared prior kappa {prior.kappa:.2f}, not fitted on your data, until boe "
                "calibrate fits one on a full-ledger run that includes it"
            )
        from boe.core.channels import calibration_warnings

        self.notes += [
            f"calibration channels of {config.dataset!r}: {w}"
            for w in calibration_warnings(
                self.calibration, datasets=[config.dataset], reader="bayes" if fittable else "kappa"
            )
        ]

    async def __aenter__(self) -> Agent:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Create the clients, tools, store run and checkpointer."""
        try:
            import langgraph.graph  # noqa: F401  (the graph's library: missing, fail before connecting)
        except ImportError as exc:
            raise MissingExtraError("agent", exc.name or "langgraph", "the agent") from exc
        if self.config.approve and self.approver is None:
            raise ConfigError(
                "approve is on: pass approver=callable(request) -> True/False/{'approve': bool, 'reason': str}, "
                "or run the graph yourself (boe.agent.make_graph) and resume its interrupts"
            )
        self.connect()
        assert self._stack is not None
        saver: Any = None
        if self.checkpoint is not None:
            saver = await self._stack.enter_async_context(sqlite_saver(self.checkpoint))
        elif self.config.approve:
            from langgraph.checkpoint.memory import InMemorySaver

            saver = InMemorySaver(serde=plain_serializer())  # an interrupt needs a checkpointer to resume from
        self.compile(saver)

    def compile(self, checkpointer: Any = None) -> Any:
        """Compile this agent's graph with ``checkpointer`` (None: questions do not resume) and return it."""
        from boe.agent.nodes import build_graph

        self.graph = build_graph(checkpointer)
        self._saver = checkpointer
        return self.graph

    def connect(self) -> None:
        """Create the clients, tools and store run (`open` without the checkpointer; `make_graph` calls it)."""
        try:
            from boe.tools.client import ModelClient, Servers
        except ImportError as exc:
            raise MissingExtraError("agent", exc.name or "langgraph", "the agent") from exc
        cfg = self.config
        self._stack = AsyncExitStack()
        cache = self._cache_arg
        self.servers = Servers()  # the run's servers: their load and health, what each was found to accept
        if self._store_arg is not None:
            from boe.agent.persist import open_store

            self.store, self.run_id, self.run_name, store_cache = open_store(
                self._store_arg, cfg, self.calibration, self.run_name
            )
            self._stack.callback(self.store.close)
            if cache is None:
                cache = store_cache
        common = {
            "api_key": self._api_key,
            "timeout": cfg.timeout,
            "max_retries": cfg.max_retries,
            "backoff": cfg.backoff,
            "concurrency": cfg.concurrency,
            "cache": cache,
            "use_n": cfg.use_n,
            "json_schema": cfg.json_schema,
            "max_tokens": cfg.max_tokens,
            "http_client": self._http_client,
            "server": cfg.server,
            "top_p": cfg.top_p,
            "top_k": cfg.top_k,
            "min_p": cfg.min_p,
            "endpoints": self.servers,  # what each server accepts is learnt once for both clients
        }
        self.generator = ModelClient(
            base_url=cfg.base_url, model=cfg.model, role="generator", extra_body=cfg.extra_body, **common
        )
        self.judge = ModelClient(
            base_url=cfg.judge_url, model=cfg.judge, role="judge", extra_body=cfg.judge_extra_body, **common
        )
        self._stack.push_async_callback(self.generator.aclose)
        self._stack.push_async_callback(self.judge.aclose)
        self.tools = {}
        from boe.kinds import ToolContext, kind_spec

        tool_ctx = ToolContext(cfg, self.judge)
        for kind in cfg.kinds:
            self.tools[kind] = kind_spec(kind).build_tool(tool_ctx)
        self.segmenter = tool_ctx.segmenter

    def context(self, images: Sequence[LoadedImage] = ()) -> AgentContext:
        """The graph's run context: this agent's clients, tools, store run and calibration (live, not saved)."""
        from boe.agent.state import AgentContext

        return AgentContext(
            config=self.config,
            calibration=self.calibration,
            generator=self.generator,
            judge=self.judge,
            tools=self.tools,
            images={i.ref.image_id: i for i in images},
            store=self.store,
            run_id=self.run_id,
            on_step=self.on_step,
            question_costs=self.question_costs,
        )

    async def aclose(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    def describe(self) -> dict[str, Any]:
        """The run's configuration as stored: tools and clients by name and arguments, no secrets."""
        return {
            "config": self.config.public(),
            "calibration": self.calibration.source,
            "tools": {k: t.describe() for k, t in self.tools.items()},
            "segmenter": None if self.segmenter is None else self.segmenter.describe(),
            "endpoints": {c.role: c.describe()["endpoint"] for c in self._clients()},
        }

    def _clients(self) -> list[Any]:
        return [c for c in (getattr(self, "generator", None), getattr(self, "judge", None)) if c is not None]

    def endpoint_notes(self) -> list[str]:
        """What the endpoints were found to accept, when it differs from what was asked (one line each)."""
        from boe.util import redact_url

        out: list[str] = []
        servers = getattr(self, "servers", None)
        for url, model, ep in servers.states() if servers is not None else []:
            where = f"{redact_url(url)} ({model})"
            if ep.n is False:
                out.append(f"{where} does not take n > 1: K samples are K requests ({ep.n_reason})")
            out.extend(f"{where}: {note}" for note in ep.notes)
        return out

    def server_shares(self) -> list[dict[str, Any]]:
        """Each server's share of the requests sent so far (requests, errors, times marked down)."""
        servers = getattr(self, "servers", None)
        return servers.shares() if servers is not None else []

    def question_costs(self) -> QuestionCosts:
        """The costs the next question is planned with: the design costs, or costs measured so far (see
        `boe.agent.costs`), with the design costs and the measurements beside them."""
        cfg = self.config
        design = {k: cfg.costs.of(k) for k in cost_kinds()}
        if cfg.cost_mode == "design":
            return QuestionCosts(design, design, "design")
        meter = self._file_meter if self._file_meter is not None else self.meter
        used = measured_costs(design, meter, cfg.cost_basis)
        where = f"file {cfg.cost_file}" if self._file_meter is not None else "this run's earlier questions"
        measured = [k for k in model_kinds() if k in meter.sums]
        source = (
            f"measured ({cfg.cost_basis}, {where}: {', '.join(measured)})"
            if measured
            else f"design (nothing measured yet from {where})"
        )
        return QuestionCosts(used, design, source, meter.table())

    def run_config(self, state_in: Mapping[str, Any], thread_id: str | None = None) -> dict[str, Any]:
        """The LangGraph run configuration of a question: its checkpoint thread and recursion limit."""
        costs = (state_in.get("costs") or {}).get("used")
        thread = thread_id or self._thread(f"{state_in['dataset']}/{state_in['question_id']}")
        return {"configurable": {"thread_id": thread}, "recursion_limit": self._recursion_limit(costs)}

    def _thread(self, question_id: str) -> str:
        return f"{question_id}:{self._settings_hash()}"

    def _settings_hash(self) -> str:
        """A hash of the configuration and calibration (computed once per pair, not per question)."""
        pair = (self.config, self.calibration)
        memo = getattr(self, "_settings_memo", None)
        if memo is None or memo[0] is not pair[0] or memo[1] is not pair[1]:
            blob = json.dumps(
                [self.config.public(), self.calibration.model_dump(mode="json", exclude={"source"})],
                sort_keys=True,
                default=str,
            )
            memo = self._settings_memo = (*pair, hashlib.sha256(blob.encode()).hexdigest()[:16])
        return str(memo[2])

    def _recursion_limit(self, costs: dict[str, float] | None = None) -> int:
        from boe.agent.nodes import recursion_limit

        cfg = self.config
        min_cost = min(((costs or {}).get(k, cfg.costs.of(k)) for k in cfg.kinds), default=1.0)
        if math.isinf(cfg.budget) or cfg.approve:  # vetoes take steps the budget does not bound
            return 100_000
        rounds = cfg.k if cfg.pool == "adaptive" else 0  # a draw takes generate, parse, claims, menu, plan
        return recursion_limit(10**9, cfg.budget, min_cost) + 5 * rounds

    async def ask(self, image: ImageInput, question: str, **fields: Unpack[QuestionFields]) -> AskResult:
        """Answer one question about one image or several; the record is stored when the agent has a store.

        ``image`` is a path, or a list of paths or ``(figure id, path)`` pairs
        for a question with several figures (MedXpertQA-MM style, up to six):
        every claim then names the figure it is about, grounded checks look
        at that figure only and the whole-response judge sees them all.
        Figure ids default to the file stems (``"0"`` for a single image).
        ``options`` make it multiple choice; ``reference`` is stored for
        scoring; ``question_id`` defaults to a hash of figures, question and
        options (`QuestionFields`). ``dataset`` names the question's calibration namespace when it differs
        from the run's (say, a DICOM question in a PNG run: ``boe-sim-dicom``).
        ``opened``: the figures already read by `open_figures` (a batch decodes
        them in worker processes ahead of time).
        """
        if self._stack is None:
            raise RuntimeError("the agent is not open: use 'async with Agent(...)' or await agent.open()")
        state_in, imgs = question_input(self.config, image, question, costs=self.question_costs(), **fields)
        qid = state_in["question_id"]
        ctx = self.context(imgs)
        run_config = self.run_config(state_in)
        resumed = False
        out: dict[str, Any] | None = None
        if self._saver is not None:
            snap = await self.graph.aget_state(run_config)
            if snap.next:
                resumed = True
                out = await self._run(None, run_config, ctx)
            elif snap.values.get("record"):
                resumed = True
                out = dict(snap.values)
        if out is None:
            out = await self._run(state_in, run_config, ctx)
        if self.config.cost_mode == "measured" and self._file_meter is None and not resumed:
            self.meter.add_actions(a for a in out["record"]["actions"] if a.get("observed"))
        return AskResult(
            question_id=qid,
            question=out["question"],
            options=out.get("options"),
            reference=out.get("reference"),
            selected=out["selected"],
            raw_selected=out["raw_selected"],
            candidates=out["candidates"],
            evidence=[e.model_dump() for e in evidence_log(out)],
            scores=out["scores"],
            cost=out["cost"],
            budget=self.config.budget,
            policy=self.config.policy,
            transcript=out["transcript"],
            record=out["record"],
            calls=out.get("calls") or [],
            run=self.run_name,
            resumed=resumed,
            notes=list(self.notes),
        )

    async def _run(self, state_in: dict[str, Any] | None, run_config: dict[str, Any], ctx: Any) -> dict[str, Any]:
        """Run (or resume) the graph to the end, answering each approval request with ``approver``."""
        from langgraph.types import Command

        pending: Any = state_in
        while True:
            # a checkpoint file is for crashes: each step is saved before the next starts
            durability = "sync" if self.checkpoint is not None else None
            out = dict(await self.graph.ainvoke(pending, run_config, context=ctx, durability=durability))
            asked = out.get("__interrupt__")
            if not asked:
                return out
            if self.approver is None:
                raise ConfigError("the graph asked for an approval, but this agent has no approver")
            pending = Command(resume=self.approver(asked[0].value))


async def ask_async(
    image: ImageInput,
    question: str,
    *,
    options: Mapping[str, str] | str | None = None,
    reference: str | None = None,
    config: AgentConfig | None = None,
    api_key: str | None = None,
    db: str | None = None,
    run_name: str | None = None,
    checkpoint: str | Path | None = None,
    approver: Callable[[dict[str, Any]], Any] | None = None,
    **settings: Any,
) -> AskResult:
    """`ask` inside a running event loop (``approver`` answers each approval request when ``approve`` is on)."""
    cfg = config if config is not None else make_config(**settings)
    if config is not None and settings:
        cfg = make_config(**{**config.model_dump(), **settings})
    from boe.tools.images import check_path

    for _, path in figure_paths(image):
        check_path(path, cfg.root)  # a bad path fails before anything is opened or paid for
    async with Agent(
        cfg, api_key=api_key, store=db, run_name=run_name, checkpoint=checkpoint, approver=approver
    ) as agent:
        return await agent.ask(image, question, options=options, reference=reference)


def ask(image: ImageInput, question: str, **kwargs: Any) -> AskResult:
    """Answer one image question: K candidates, evidence bought under the budget, the selection and its log.

    Keyword arguments are `AgentConfig` fields (``base_url``, ``model``,
    ``judge_model``, ``k``, ``budget``, ``policy``, ...) plus ``options``,
    ``reference``, ``api_key``, ``db``, ``run_name``, ``checkpoint`` and ``approver``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(ask_async(image, question, **kwargs))
    raise RuntimeError("boe.ask() was called inside a running event loop; use 'await boe.agent.ask_async(...)'")
