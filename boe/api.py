"""The Python API: what the `boe` commands do, as functions with typed results.

Ask one question (`ask`), run a dataset (`run_batch`), load and replay ledgers
or a stored run (`load_questions`, `replay`), fit and save a calibration
(`fit_calibration`, `save_calibration`), read and write ledgers
(`read_ledger`, `write_ledger`), and register a policy, a tool or a dataset
format in-process. The commands are thin wrappers over these functions.
Heavy libraries (LangGraph, openai, SQLAlchemy) load only in the function
that needs them: replaying ledger files needs none of them.

The registration functions (`register_policy`, `register_tool`,
`register_format`) front the registry of `boe.registry` (entry points,
action kinds: see `boe plugins` and docs/extending); their names may still
change with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from boe.errors import ConfigError
from boe.logs import get_logger

if TYPE_CHECKING:
    from boe.agent.api import AskResult
    from boe.agent.configuration import AgentConfig
    from boe.batch import BatchConfig, BatchSummary
    from boe.calibrations import CalibrationChoice
    from boe.core.calibration import Calibration
    from boe.core.experiment import Experiment
    from boe.core.graph import GroupIndex, Question
    from boe.core.ledger import LedgerRecord
    from boe.core.metrics import Comparison, MetricRow
    from boe.errors import RecordError

__all__ = [
    "LoadedQuestions",
    "ReplayResult",
    "ask",
    "fit_calibration",
    "load_calibration",
    "load_config",
    "load_questions",
    "read_ledger",
    "register_format",
    "register_kind",
    "register_policy",
    "register_segmenter",
    "register_store_backend",
    "register_tool",
    "replay",
    "run_batch",
    "save_calibration",
    "write_ledger",
]

_log = get_logger("api")

PathLike = str | Path


# ---- the agent


def load_config(path: PathLike | None = None, /, **overrides: Any) -> AgentConfig:
    """An `AgentConfig` from a TOML or JSON file of its fields (optional), with ``overrides`` on top."""
    from boe.agent.settings import load_config as load

    return load(path, **overrides)


def ask(image: Any, question: str, *, config: AgentConfig | None = None, **kwargs: Any) -> AskResult:
    """Answer one image question: K candidates, evidence bought under the budget, the selection and its log.

    ``config`` is an `AgentConfig` (see `load_config`); other keyword arguments are `AgentConfig` fields
    (``base_url``, ``model``, ``k``, ``budget``, ``policy``...) and ``options``, ``reference``, ``api_key``,
    ``db``, ``run_name``, ``checkpoint``, ``approver``. Not inside a running event loop (use `boe.agent.ask_async`
    there).
    """
    from boe.agent.api import ask as agent_ask

    return agent_ask(image, question, config=config, **kwargs)


def run_batch(
    dataset: PathLike | BatchConfig,
    *,
    db: str | None = None,
    run: str | None = None,
    agent: AgentConfig | None = None,
    progress: Any = None,
    **options: Any,
) -> BatchSummary:
    """Answer every question of a dataset with the agent and store the run (resumable; workers may share it).

    ``db`` is a store URL or a SQLite path; ``options`` are `boe.batch.BatchConfig` fields (``format``,
    ``split``, ``columns``, ``namespace``, ``limit``, ``resume``, ``worker``, ...), or pass a whole `BatchConfig` as
    ``dataset``. ``progress`` receives the batch's progress events (`boe.batch.RichProgress` draws a bar).
    """
    from boe.batch import BatchConfig
    from boe.batch import run_batch as batch_run

    if isinstance(dataset, BatchConfig):
        config = dataset
    else:
        if db is None or run is None or agent is None:
            raise ConfigError("run_batch needs db, run and agent (an AgentConfig)")
        config = BatchConfig(dataset=str(dataset), agent=agent, db=_db_url(db), run=run, **options)
    return batch_run(config, progress=progress)


# ---- ledgers and stored runs


def read_ledger(
    sources: PathLike | Iterable[PathLike] | IO[str] | IO[bytes],
    *,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
) -> list[LedgerRecord]:
    """The valid records of ledger-v1 JSONL files (bad ones go to ``on_error``, or raise with ``strict``)."""
    from boe.core.ledger import read_ledger as read

    return list(read(sources, strict=strict, on_error=on_error))


def write_ledger(records: Iterable[LedgerRecord | dict[str, Any]], path: PathLike | IO[str]) -> int:
    """Write records as ledger-v1 JSONL (each validated first); the number written."""
    from boe.core.ledger import LedgerRecord, dump_record, parse_record

    def lines() -> Iterator[str]:
        for i, rec in enumerate(records, 1):
            model = rec if isinstance(rec, LedgerRecord) else parse_record(rec, source="write_ledger", line=i)
            yield dump_record(model) + "\n"

    n = 0
    if isinstance(path, (str, Path)):
        with Path(path).open("w", encoding="utf-8") as fh:
            for line in lines():
                fh.write(line)
                n += 1
        return n
    for line in lines():
        path.write(line)
        n += 1
    return n


@dataclass
class LoadedQuestions:
    """Replay-ready questions of ledger files or stored runs, with their group index."""

    questions: list[Question]
    groups: GroupIndex
    #: the calibration the stored run's agent scored with (one run only)
    run_calibration: dict[str, Any] | None = None
    #: what was read, as `boe replay --json` reports it (files, or the run with its store's URL redacted)
    inputs: Any = None
    #: the files and runs read (credential-free), as a fitted calibration names them
    sources: list[str] = field(default_factory=list)
    #: bad records skipped (their descriptions)
    bad: list[str] = field(default_factory=list)

    @property
    def online(self) -> bool:
        """Whether any question comes from an online run (its record holds only what its policy bought)."""
        return any(q.unobserved is not None for q in self.questions)


def load_questions(
    ledgers: PathLike | Sequence[PathLike] = (),
    *,
    db: str | None = None,
    run: str | Sequence[str] | None = None,
    strict: bool = False,
    on_error: Callable[[RecordError], None] | None = None,
) -> LoadedQuestions:
    """Load ledger files and/or stored runs (``db`` and ``run`` names) as replay-ready questions.

    A bad record is skipped and passed to ``on_error`` (and listed in ``bad``); with ``strict`` it raises.
    """
    from boe.util import redact_url

    paths = [ledgers] if isinstance(ledgers, (str, Path)) else list(ledgers)
    runs = [] if run is None else [run] if isinstance(run, str) else list(run)
    if db is not None and not runs:
        runs = [_only_run(db)]  # as `boe report` and `boe show`: the store's one run
    if runs and db is None:
        raise ConfigError("--run needs --db (the store holding the run)")
    if not paths and not runs:
        raise ConfigError("give ledger files or a stored run (--db URL --run NAME)")
    bad: list[str] = []

    def skipped(err: RecordError) -> None:
        bad.append(err.describe())
        _log.debug("skipped a bad record: %s", bad[-1])
        if on_error is not None:
            on_error(err)

    if runs and not paths and len(runs) == 1:  # one stored run: the store's fast loader
        assert db is not None
        return _load_run(db, runs[0], strict, skipped, bad)
    from boe.core.experiment import load_questions as from_records
    from boe.core.graph import GroupIndex
    from boe.core.loading import load_ledgers

    groups = GroupIndex()
    questions: list[Question] = []
    sources: list[str] = []
    if paths:
        from boe.ledger_cache import default_ledger_cache

        questions, groups = load_ledgers(
            paths, strict=strict, on_error=skipped, groups=groups, cache=default_ledger_cache()
        )
        sources += [str(p) for p in paths]
    if runs:
        from boe.db import Store

        assert db is not None
        with Store(_db_url(db), create=False) as store:
            for name in runs:
                qs, groups = from_records(store.iter_record_dicts(name), groups)
                if not qs:
                    raise ConfigError(f"run {name!r} in {redact_url(_db_url(db))} holds no question")
                questions += qs
                sources.append(f"{redact_url(db) if '@' in db else db}#{name}")
    inputs: Any = [str(p) for p in paths] if not runs else {"db": redact_url(db or ""), "runs": runs}
    return LoadedQuestions(questions, groups, None, inputs, sources, bad)


def _only_run(db: str) -> str:
    """The name of the one run in store ``db`` (`Store.only_run`)."""
    from boe.db import Store

    with Store(_db_url(db), create=False) as store:
        return store.only_run()


def _load_run(
    db: str, run: str, strict: bool, on_error: Callable[[RecordError], None], bad: list[str]
) -> LoadedQuestions:
    from boe.db import Store
    from boe.db.loading import load_questions as from_store
    from boe.util import redact_url

    with Store(_db_url(db), create=False) as store:
        questions, groups = from_store(store, run, strict=strict, on_error=on_error)
        stored = store.get_run(run).config.get("calibration")
    source = f"{redact_url(db) if '@' in db else db}#{run}"
    return LoadedQuestions(questions, groups, stored, {"db": redact_url(db), "run": run}, [source], bad)


# ---- replay


@dataclass
class ReplayResult:
    """Policies x budgets replayed on stored ledgers: metric rows, comparisons, transcripts, the calibration."""

    experiment: Experiment
    calibration: CalibrationChoice
    loaded: LoadedQuestions

    @property
    def rows(self) -> list[MetricRow]:
        """One row per dataset x policy x budget (accuracy, rescues, cost, Sharp...)."""
        return self.experiment.rows

    @property
    def comparisons(self) -> list[Comparison]:
        """The paired comparisons asked for (``compare``)."""
        return self.experiment.comparisons

    @property
    def warnings(self) -> list[str]:
        """Reasons to distrust some figures (the calibration's coverage, unobserved purchases)."""
        return self.calibration.warnings + self.experiment.warnings()

    def to_records(self) -> list[dict[str, Any]]:
        """The metric rows as plain dicts (one per dataset x policy x budget), ready for a DataFrame."""
        return [r.as_dict() for r in self.rows]

    def to_pandas(self) -> Any:
        """The metric rows as a pandas DataFrame (pandas is not a dependency: install it to use this)."""
        try:
            import pandas as pd  # type: ignore[import-untyped]
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas (to_records() needs nothing)") from None
        return pd.DataFrame.from_records(self.to_records())

    def to_json(self) -> dict[str, Any]:
        """The document `boe replay --json` prints."""
        data = self.experiment.to_json()
        data["calibration"]["label"] = self.calibration.label
        data["calibration"]["default"] = self.calibration.default
        data["warnings"] = self.warnings
        return data

    def transcripts(self) -> Iterator[dict[str, Any]]:
        """One transcript per question x policy x budget (what was bought, in order, and the selection)."""
        from boe.core.replay import transcripts

        for r in self.experiment.runs:
            yield from transcripts(r, self.loaded.questions)

    def write_transcripts(self, path: PathLike) -> int:
        """Write the transcripts as JSONL; the number written."""
        import json

        n = 0
        with Path(path).open("w", encoding="utf-8") as fh:
            for line in self.transcripts():
                fh.write(json.dumps(line, separators=(",", ":")) + "\n")
                n += 1
        return n

    def deployable_calibration(self) -> Calibration:
        """The calibration to deploy: the file replayed under, or the plug-in fit on every question."""
        from boe.calibrations import utc_now

        return self.experiment.deployable_calibration(created=utc_now())

    def save_calibration(self, path: PathLike) -> Calibration:
        """Write `deployable_calibration` to ``path`` (what ``boe replay --save-calibration`` writes)."""
        from boe.core.calibration import save_calibration as save

        cal = self.deployable_calibration()
        save(cal, path)
        return cal


def replay(
    source: LoadedQuestions | PathLike | Sequence[PathLike] | None = None,
    *,
    db: str | None = None,
    run: str | None = None,
    policies: str | Sequence[str] = ("bayes",),
    budgets: float | Sequence[float] = (16.0,),
    calibration: str | None = None,
    cheap_kappa: float | None = None,
    eta: float = 0.0,
    seed: int = 0,
    compare: Sequence[tuple[str, str]] = (),
    resamples: int = 2000,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
    pool: str = "fixed",
    pool_start: int | None = None,
    pool_round: int | None = None,
    sample_cost: float | None = None,
) -> ReplayResult:
    """Replay ledgers (files, a stored run, or questions already loaded) under policies and budgets.

    ``calibration`` is ``crossfit[:K]``, ``fit``, ``run`` (the stored run's own) or a file path; None picks
    the default (`boe.calibrations.choose_calibration`: crossfit:5, or the run's for an online run).
    ``pool`` is ``fixed`` (every candidate), ``fixed:K`` (the first K), ``adaptive`` (sample and verify under
    one budget: start with ``pool_start`` candidates, draw ``pool_round`` at a time) or ``greedy`` (draw a
    round whenever the policy stops). ``sample_cost`` reprices samples: given, every candidate costs that in the
    budget's units, whatever its record says (the records are not changed); None: each record's own cost, 0.25 for
    records that carry none (formats before 1.3; spec section 12).
    """
    from boe.calibrations import choose_calibration
    from boe.core.experiment import run_experiment
    from boe.core.policies import POLICIES, _load_plugins
    from boe.core.pool import DEFAULT_SAMPLE_COST, DEFAULT_START, DEFAULT_STEP, parse_pool

    loaded = (
        source if isinstance(source, LoadedQuestions) else load_questions(source or (), db=db, run=run, strict=strict)
    )
    names = [policies] if isinstance(policies, str) else list(policies)
    if not names:
        raise ConfigError("give at least one policy")
    _load_plugins()
    for p in names:
        if p not in POLICIES:
            raise ConfigError(f"unknown policy {p!r}; known: {', '.join(sorted(POLICIES))}")
    if cheap_kappa is not None and not 0 < cheap_kappa < 1:
        raise ConfigError(f"cheap_kappa must lie in (0, 1), got {cheap_kappa}")
    amounts = [float(budgets)] if isinstance(budgets, (int, float)) else [float(b) for b in budgets]
    if not amounts or not all(0 <= b < float("inf") for b in amounts):
        raise ConfigError(f"budgets must be one or more finite numbers >= 0, got {amounts}")
    spec = parse_pool(
        pool,
        start=DEFAULT_START if pool_start is None else pool_start,
        step=DEFAULT_STEP if pool_round is None else pool_round,
        sample_cost=DEFAULT_SAMPLE_COST if sample_cost is None else sample_cost,
    )
    if sample_cost is not None:
        from boe.core.pool import repriced

        loaded = replace(loaded, questions=repriced(loaded.questions, sample_cost))
    choice = choose_calibration(
        calibration, loaded.questions, run_calibration=loaded.run_calibration, online=loaded.online
    )
    exp = run_experiment(
        loaded.questions,
        loaded.groups.keys,
        names,
        amounts,
        calibration=choice.value,
        cheap_kappa=cheap_kappa,
        eta=eta,
        seed=seed,
        compare_pairs=list(compare),
        resamples=resamples,
        progress=progress,
        pool=spec,
    )
    exp.settings["inputs"] = loaded.inputs
    exp.settings["bad_records"] = len(loaded.bad)
    return ReplayResult(exp, choice, loaded)


# ---- calibration


def fit_calibration(
    source: LoadedQuestions | PathLike | Sequence[PathLike] | None = None,
    *,
    db: str | None = None,
    runs: str | Sequence[str] | None = None,
    cheap_kappa: float | None = None,
    command: str | None = None,
) -> Calibration:
    """Fit the deployable calibration (kappa and p per group, and the bayes model) on labelled full ledgers:
    files, stored runs, or questions already loaded. What `boe calibrate` writes."""
    from boe.calibrations import fit_calibration as fit

    if cheap_kappa is not None and not 0 < cheap_kappa < 1:
        raise ConfigError(f"cheap_kappa must lie in (0, 1), got {cheap_kappa}")
    loaded = source if isinstance(source, LoadedQuestions) else load_questions(source or (), db=db, run=runs)
    if not loaded.questions:
        raise ConfigError("nothing to fit on: the runs or files hold no valid record")
    online = [q for q in loaded.questions if q.unobserved is not None]
    if online:
        raise ConfigError(
            f"{len(online)} question(s) come from an online run (their records hold only the checks its policy "
            "bought, a biased sample of outcomes): fit on a run made with --ledger full"
        )
    if not any(q.labelled for q in loaded.questions):
        raise ConfigError("no question has a reference answer: a calibration is fitted on labelled questions")
    return fit(loaded.questions, loaded.groups.keys, cheap_kappa, fitted_on=loaded.sources, command=command)


def load_calibration(path: PathLike) -> Calibration:
    """Read a calibration file (a `CalibrationError` names what is wrong)."""
    from boe.core.calibration import load_calibration as load

    return load(path)


def save_calibration(calibration: Calibration, path: PathLike) -> None:
    """Write a calibration file that `load_calibration` reads back identically."""
    from boe.core.calibration import save_calibration as save

    save(calibration, path)


# ---- plugins, in-process


def register_policy(name: str, *, override: bool = False) -> Callable[[type], type]:
    """Class decorator: a selection policy by name, for `replay`, `ask` and the commands (a taken name is refused
    unless ``override``)."""
    from boe.core.policies import register_policy as register

    return register(name, override=override)


def register_tool(kind: str, *, override: bool = False) -> Callable[[type], type]:
    """Class decorator: the tool that runs actions of ``kind`` in the agent (a built-in kind's tool is replaced
    only with ``override``)."""
    from boe.kinds import register_tool as register

    return register(kind, override=override)


def register_format(name: str, **kwargs: Any) -> Callable[..., Any]:
    """Decorator: a dataset format by name, for `run_batch` (see `boe.datasets.register_format`)."""
    from boe.datasets import register_format as register

    return register(name, **kwargs)


def register_kind(spec: Any, *, override: bool = False) -> Any:
    """An action kind (a `boe.kinds.KindSpec`: target, cost, menu rule, tool, prompt) for the agent and replay."""
    from boe.kinds import register_kind as register

    return register(spec, override=override)


def register_segmenter(name: str, *, override: bool = False) -> Callable[[Any], Any]:
    """Decorator: a segmenter factory by name, for grounded views (``segmenter=NAME`` in the agent's config)."""
    from boe.tools.segment import register_segmenter as register

    return register(name, override=override)


def register_store_backend(backend: Any, *, override: bool = False) -> Any:
    """A store backend (a `boe.db.backends.StoreBackend`) for a URL scheme, used by ``db=`` everywhere."""
    from boe.db.backends import register_store_backend as register

    return register(backend, override=override)


def _db_url(text: str) -> str:
    return text if "://" in text else f"sqlite:///{Path(text).expanduser()}"
