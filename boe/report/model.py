"""Everything a report shows, computed once: the replay experiment, costs, calibration, question views, images.

`build_report` runs `boe.core.experiment.run_experiment` over the source's
questions (the same code path as `boe replay`), walks the records once for
model-call costs and the per-question views, and encodes the images.
`build_question` does the same for one question's standalone page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from boe.calibrations import choose_calibration
from boe.core.calibration import Calibration
from boe.core.experiment import Experiment, run_experiment
from boe.errors import ConfigError
from boe.report.costs import CallCosts, CostRow, call_costs, cost_rows
from boe.report.images import MAX_SIDE, EncodedImage, encode_images
from boe.report.questions import ViewContext, anchor, how_of, question_view
from boe.report.source import Source

if TYPE_CHECKING:
    from boe.db.types import RunInfo

__all__ = [
    "CalibrationRow",
    "ChannelRow",
    "QuestionRow",
    "Report",
    "Settings",
    "build_question",
    "build_report",
    "resolve_settings",
]

DEFAULT_POLICIES = ("raw", "boe", "random-factor", "whole")
DEFAULT_BUDGETS = (1.0, 2.0, 4.0, 8.0, 16.0)
#: Size a report aims to stay under (bytes); the images get what the rest leaves (issue #9: < 20 MB).
REPORT_BUDGET = 18 * 2**20
#: Bytes of a report besides question data and images: figures, tables, style and script, and per question
#: its table row and page element.
FIXED_BYTES = 600_000
PER_QUESTION_BYTES = 500


@dataclass(frozen=True)
class Settings:
    """The policies, budgets and calibration of a report, after defaults."""

    policies: list[str]
    budgets: list[float]
    calibration: str | Calibration
    compare: list[tuple[str, str]]
    focus: str  # the policy whose evidence the question pages show when the record has no log of its own
    main_budget: float
    online: bool  # the records hold only the outcomes an online agent bought
    resamples: int = 2000
    seed: int = 0
    calibration_text: str | None = None  # what the calibration is, in words (boe.calibrations)
    calibration_warnings: tuple[str, ...] = ()
    agent_log: bool = True  # question pages show an online agent's own evidence log (replayed as it ran)

    @property
    def calibration_label(self) -> str:
        if self.calibration_text:
            return self.calibration_text
        if isinstance(self.calibration, Calibration):
            return str(self.calibration.source or "given")
        return {"fit": "fit on these questions (in-sample, the paper's protocol)"}.get(
            self.calibration, f"{self.calibration} (each fold replayed under a fit on the other folds)"
        )


@dataclass(frozen=True)
class CalibrationRow:
    group: str
    kappa: float
    kappa_range: tuple[float, float] | None  # over cross-fit folds
    p: tuple[float, float, float]  # confirm, reject, unresolved
    support: float | None
    contradict: float | None
    actions: int  # actions of this group in the report's questions
    bought: int  # of them bought by the focus policy at the main budget


@dataclass(frozen=True)
class ChannelRow:
    """The `bayes` observation model of one group: P(outcome | latent true) and P(outcome | latent false)."""

    group: str
    kind: str  # "factor" (claim truth) or "whole" (verdict on the judged answer)
    given_true: tuple[float, float, float]
    given_false: tuple[float, float, float]
    actions: float


@dataclass(frozen=True)
class QuestionRow:
    """One row of the report's question table."""

    anchor: str
    dataset: str
    question_id: str
    text: str
    reference: str
    raw: str
    raw_ok: bool | None
    selected: str
    selected_ok: bool | None
    spent: float
    steps: int
    tags: tuple[str, ...]
    image: str | None


@dataclass(eq=False)
class Report:
    title: str
    source: str
    created: str
    settings: Settings
    experiment: Experiment
    costs: list[CostRow]
    calibration: list[CalibrationRow]
    cheap_kappa: float
    channels: list[ChannelRow]
    questions: list[dict[str, Any]]
    strings: list[str]
    slots: list[str]
    images: dict[str, EncodedImage]
    table: list[QuestionRow]
    warnings: list[str] = field(default_factory=list)
    run: RunInfo | None = None
    db: str | None = None

    def payload(self) -> dict[str, Any]:
        """The JSON the page script draws question pages from."""
        return {
            "strings": self.strings,
            "slots": self.slots,
            "policies": self.settings.policies,
            "focus": self.settings.focus,
            "budget": self.settings.main_budget,
            "questions": self.questions,
            "db": self.db,
            "run": self.run.name if self.run is not None else None,
        }


def _agent_block(source: Source) -> dict[str, Any]:
    if source.run is not None and isinstance(source.run.config.get("agent"), dict):
        return dict(source.run.config["agent"])
    for _, rec in source.records():
        return dict(rec.get("agent") or {}) if isinstance(rec.get("agent"), dict) else {}
    return {}


def _is_online(source: Source) -> bool:
    """Whether the records hold only the outcomes an online agent bought (actions marked ``observed: false``)."""
    return any(q.unobserved is not None for q in source.questions)


def resolve_settings(
    source: Source,
    *,
    policies: Sequence[str] | None = None,
    budgets: Sequence[float] | None = None,
    calibration: str | None = None,
    compare: Sequence[tuple[str, str]] | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> Settings:
    """Defaults from the source: an online agent run is replayed as it ran (raw and its policy at its budget
    under its calibration); a full ledger under the paper's policies and budgets, cross-fitted on itself."""
    online = _is_online(source)
    agent = _agent_block(source)
    choice = choose_calibration(
        calibration,
        source.questions,
        run_calibration=source.run.config.get("calibration") if source.run is not None else None,
        online=online,
    )
    cal = choice.value
    agent_policy = agent.get("policy") if isinstance(agent.get("policy"), str) else None
    if policies is None:
        policies = ["raw", agent_policy] if online and agent_policy else list(DEFAULT_POLICIES)
        if agent_policy and agent_policy not in policies:
            policies.append(agent_policy)
    pols = list(dict.fromkeys(policies))
    if not pols:
        raise ConfigError("--policy: give at least one policy")
    if budgets is None:
        agent_budget = agent.get("budget")
        budgets = [float(agent_budget)] if online and agent_budget is not None else list(DEFAULT_BUDGETS)
    buds = sorted({float(b) for b in budgets})
    if not buds:
        raise ConfigError("--budget: give at least one budget")
    non_raw = [p for p in pols if p != "raw"]
    focus = agent_policy if agent_policy in non_raw else (non_raw[0] if non_raw else pols[0])
    if compare is None:
        compare = [(focus, "raw")] if focus != "raw" and "raw" in pols else []
        if "random-factor" in pols and focus != "random-factor":
            compare.append((focus, "random-factor"))
    return Settings(
        policies=pols,
        budgets=buds,
        calibration=cal,
        compare=list(compare),
        focus=focus,
        main_budget=buds[-1],
        online=online,
        resamples=resamples,
        seed=seed,
        calibration_text=choice.label,
        calibration_warnings=tuple(choice.warnings),
        agent_log=online and choice.from_run,
    )


def _experiment(source: Source, settings: Settings, progress: Callable[[int], None] | None) -> Experiment:
    policies = settings.policies if "raw" in settings.policies else [*settings.policies, "raw"]
    exp = run_experiment(
        source.questions,
        source.group_keys,
        policies,
        settings.budgets,
        calibration=settings.calibration,
        seed=settings.seed,
        compare_pairs=settings.compare,
        resamples=settings.resamples,
        progress=progress,
    )
    exp.settings["inputs"] = source.label
    return exp


def _context(source: Source, settings: Settings, exp: Experiment) -> ViewContext:
    runs = {p: exp.run(p, settings.main_budget) for p in settings.policies}
    runs.setdefault("raw", exp.raw)
    return ViewContext(
        policies=settings.policies,
        runs=runs,
        focus=settings.focus,
        budget=settings.main_budget,
        group_keys=source.group_keys,
        calibration_of=exp.plan.for_question,
        agent_log=settings.agent_log,
        base_dir=source.base_dir,
        stored_images=source.stored_images,
    )


def build_report(
    source: Source,
    settings: Settings,
    *,
    title: str | None = None,
    max_side: int = MAX_SIDE,
    size_budget: int | None = REPORT_BUDGET,
    progress: Callable[[str, int, int | None], None] | None = None,
    experiment: Experiment | None = None,
    max_pages: int | None = None,
) -> Report:
    """Replay, costs, calibration tables, every question's view and the images of one report.

    Question pages are made while the report's estimated size fits ``size_budget`` (None: no limit), at
    most ``max_pages`` of them; images are shrunk to fit. ``experiment`` reuses a replay already made.
    """
    n = len(source.questions)
    if progress is not None and experiment is None:
        progress("replaying", 0, n)
    exp = experiment or _experiment(source, settings, (lambda k: progress("replaying", k, None)) if progress else None)
    ctx = _context(source, settings, exp)
    views, costs, trimmed = _question_pages(source, ctx, size_budget, max_pages, progress)
    missing = [source.questions[r].question_id for r, c in enumerate(costs) if c is None]
    if missing:
        raise ConfigError(f"{len(missing)} record(s) could not be read again (first: {missing[0]!r})")
    done_views = [v for v in views if v is not None]
    done_costs = [c for c in costs if c is not None]
    if progress is not None:
        progress("images", 0, len(ctx.images))
    budget = None if size_budget is None else _image_budget(size_budget, done_views, ctx.strings.items)
    images = encode_images(ctx.images, max_side=max_side, budget=budget)
    report = Report(
        title=title or _title(source),
        source=source.label,
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        settings=settings,
        experiment=exp,
        costs=cost_rows(
            source.questions, [exp.run(p, b) for p in settings.policies for b in settings.budgets], done_costs
        ),
        calibration=_calibration_rows(source, settings, exp),
        cheap_kappa=exp.plan.calibrations[0].cheap_kappa,
        channels=_channel_rows(exp, source.group_keys),
        questions=done_views,
        strings=ctx.strings.items,
        slots=ctx.slots,
        images=images,
        table=[_table_row(v, ctx.strings.items) for v in done_views],
        run=source.run,
        db=source.db,
    )
    report.warnings = _warnings(source, report)
    if trimmed:
        report.warnings.insert(
            0,
            f"{trimmed:,} of {n:,} question pages were left out to keep the report under --max-size "
            f"({(size_budget or 0) / 2**20:.1f} MB; the figures and tables cover every question): "
            "`boe show DATASET/ID` shows any question, a larger --max-size keeps more pages.",
        )
    return report


def _question_pages(
    source: Source,
    ctx: ViewContext,
    size_budget: int | None,
    max_pages: int | None,
    progress: Callable[[str, int, int | None], None] | None,
) -> tuple[list[dict[str, Any] | None], list[CallCosts | None], int]:
    """Every question's costs, and its page (view) while the pages fit ``size_budget`` and ``max_pages``; the
    number of pages left out."""
    n = len(source.questions)
    views: list[dict[str, Any] | None] = [None] * n
    costs: list[CallCosts | None] = [None] * n
    if progress is not None:
        progress("questions", 0, n)
    # Question pages are made in order while they fit the size budget (1 MB left for images once there are
    # any); the rest are left out, with a note: the figures and tables still cover every question.
    used, trimmed, kept = 0, 0, 0

    def room() -> int:
        return (size_budget or 0) - FIXED_BYTES - (2**20 if ctx.images else 0)

    for r, rec in source.records():
        q = source.questions[r]
        costs[r] = call_costs(rec, q)
        if (size_budget is not None and trimmed) or (max_pages is not None and kept >= max_pages):
            trimmed += 1
        else:
            before = ctx.strings.bytes
            views[r] = view = question_view(rec, q, r, ctx)
            used += ctx.strings.bytes - before + PER_QUESTION_BYTES + _json_size(view)
            if size_budget is not None and used > room():  # this page does not fit: take it back
                views[r] = None
                trimmed += 1
            else:
                kept += 1
        if progress is not None:
            progress("questions", 1, None)
    return views, costs, trimmed


def _json_size(view: dict[str, Any]) -> int:
    import json

    return len(json.dumps(view, ensure_ascii=False, separators=(",", ":")))


def _image_budget(total: int, views: list[dict[str, Any]], strings: list[str]) -> int:
    """What a report of ``total`` bytes leaves its images, after the question data and the rest (at least 1 MB)."""
    import json

    data = json.dumps({"strings": strings, "questions": views}, ensure_ascii=False, separators=(",", ":"))
    rest = len(data.encode()) + FIXED_BYTES + PER_QUESTION_BYTES * len(views)
    return max(2**20, total - rest)


def build_question(
    source: Source, index: int, settings: Settings, *, max_side: int = 1024
) -> tuple[dict[str, Any], list[str], list[str], dict[str, EncodedImage], str]:
    """One question's view with details (raw replies, the whole menu, model calls) and its images at ``max_side``.

    Returns (view, strings, slots, images, how the scores were obtained).
    """
    one = Settings(
        policies=settings.policies,
        budgets=[settings.main_budget],
        calibration=settings.calibration,
        compare=[],
        focus=settings.focus,
        main_budget=settings.main_budget,
        online=settings.online,
        resamples=0,
        seed=settings.seed,
        calibration_text=settings.calibration_text,
        calibration_warnings=settings.calibration_warnings,
        agent_log=settings.agent_log,
    )
    exp = _experiment(source, one, None)
    ctx = _context(source, one, exp)
    rec = source.record(index)
    view = question_view(rec, source.questions[index], index, ctx, detail=True)
    images = encode_images(ctx.images, max_side=max_side, budget=None, quality=85)
    return view, ctx.strings.items, ctx.slots, images, how_of(view, ctx.strings.items)


def _title(source: Source) -> str:
    if source.run is not None:
        return f"boe report: run {source.run.name}"
    return f"boe report: {source.label}"


def _table_row(v: dict[str, Any], strings: list[str]) -> QuestionRow:
    cand = v["cand"]

    def answer(i: int) -> tuple[str, bool | None]:
        if not 0 <= i < len(cand):
            return "-", None
        a, _, u = cand[i][0], cand[i][1], cand[i][2]
        return (strings[a] if a >= 0 else "(invalid)"), (None if u is None else u >= 0.5)

    raw, raw_ok = answer(v["raw"])
    sel, sel_ok = answer(v["sel"])
    utils = [c[2] for c in cand]
    tags = []
    if raw_ok is False:
        tags.append("majority-wrong")
        if sel_ok:
            tags.append("rescued")
    if raw_ok and sel_ok is False:
        tags.append("harmed")
    if utils and all(u is not None for u in utils) and max(utils) < 0.5:
        tags.append("no-correct-candidate")
    if v["sel"] != v["raw"] and raw != sel:
        tags.append("changed")
    return QuestionRow(
        anchor=anchor(v["ds"], v["id"]),
        dataset=v["ds"],
        question_id=v["id"],
        text=strings[v["text"]] if v.get("text", -1) >= 0 else "",
        reference=str(v.get("ref") or ""),
        raw=raw,
        raw_ok=raw_ok,
        selected=sel,
        selected_ok=sel_ok,
        spent=float(v.get("spent") or 0.0),
        steps=len(v["log"]),
        tags=tuple(tags),
        image=v["img"][0] if v["img"] else None,
    )


def _calibration_rows(source: Source, settings: Settings, exp: Experiment) -> list[CalibrationRow]:
    cals = exp.plan.calibrations
    keys = source.group_keys
    n_actions = np.zeros(len(keys), dtype=np.int64)
    n_bought = np.zeros(len(keys), dtype=np.int64)
    focus = exp.run(settings.focus, settings.main_budget)
    for r, q in enumerate(source.questions):
        if q.n_actions:
            n_actions += np.bincount(q.group, minlength=len(keys))
            acts = focus.actions_of(r)
            if len(acts):
                n_bought += np.bincount(q.group[acts], minlength=len(keys))
    rows = []
    for g, key in enumerate(keys):
        fits = [c.groups[key] for c in cals if key in c.groups]
        if fits:
            kappas = [f.kappa for f in fits]
            p = tuple(float(np.mean([f.masses()[o] for f in fits])) for o in range(3))
            pairs = [f.pairs for f in fits if f.pairs]
            support = float(np.mean([x.get("support", 0.0) for x in pairs])) if pairs else None
            contra = float(np.mean([x.get("contradict", 0.0) for x in pairs])) if pairs else None
        else:  # a group the calibration does not hold: the neutral default
            d = cals[0].group(key)
            kappas, p, support, contra = [d.kappa], d.masses(), None, None
        rows.append(
            CalibrationRow(
                group=key,
                kappa=float(np.mean(kappas)),
                kappa_range=(min(kappas), max(kappas)) if len(kappas) > 1 else None,
                p=(float(p[0]), float(p[1]), float(p[2])),
                support=support,
                contradict=contra,
                actions=int(n_actions[g]),
                bought=int(n_bought[g]),
            )
        )
    return rows


def _channel_rows(exp: Experiment, group_keys: list[str]) -> list[ChannelRow]:
    from boe.core.bayes import model_of
    from boe.errors import CalibrationError

    models = []
    for cal in exp.plan.calibrations:
        try:
            models.append(model_of(cal))
        except CalibrationError:
            continue
    rows = []
    for kind in ("factor", "whole"):
        for key in group_keys:
            tabs = [getattr(m, f"{kind}_channels")[key] for m in models if key in getattr(m, f"{kind}_channels")]
            if not tabs:
                continue
            true = tuple(float(np.mean([t.given_true[o] for t in tabs])) for o in range(3))
            false = tuple(float(np.mean([t.given_false[o] for t in tabs])) for o in range(3))
            rows.append(ChannelRow(key, kind, true, false, float(np.mean([t.actions for t in tabs]))))  # type: ignore[arg-type]
    return rows


def _warnings(source: Source, report: Report) -> list[str]:
    out = []
    s = report.settings
    out += report.experiment.warnings()  # replays that bought checks an online run never ran
    if source.bad:
        out.append(f"{len(source.bad)} record(s) could not be read and were left out (first: {source.bad[0]}).")
    unlabelled = sum(1 for q in source.questions if not q.labelled)
    if unlabelled:
        out.append(f"{unlabelled} question(s) have no utilities (no reference): they are shown but not scored.")
    failed = [e for e in report.images.values() if e.src is None]
    refused = [e for e in failed if e.error and " not read: " in e.error]
    if refused:
        out.append(
            f"{len(refused)} image path(s) were not read because they lie outside the image root "
            f"(first: {refused[0].error}); --image-root names the folder images are read from."
        )
        failed = [e for e in failed if e not in refused]
    if failed:
        out.append(
            f"{len(failed)} image(s) could not be read and are drawn as empty frames (first: {failed[0].error})."
        )
    if not report.images:
        out.append("The records name no images (ledger input): question pages show the evidence without pixels.")
    out += list(s.calibration_warnings)
    if any(math.isnan(r.accuracy) for r in report.experiment.rows):
        out.append("Some accuracies are undefined (no labelled questions in a dataset).")
    return out
