"""Writing a report or a question page: the steps `boe report` and `boe show` run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from boe.errors import ConfigError, RecordError
from boe.report.html import question_html, report_html
from boe.report.images import MAX_SIDE
from boe.report.model import REPORT_BUDGET, Report, build_question, build_report, resolve_settings
from boe.report.narrate import Narration
from boe.report.plots import make_plots, save_png
from boe.report.source import open_source

__all__ = ["QuestionPage", "ReportFiles", "make_question_page", "make_report"]


@dataclass
class ReportFiles:
    """What `make_report` wrote."""

    html: Path
    size: int
    report: Report
    pngs: list[Path] = field(default_factory=list)


@dataclass
class QuestionPage:
    """One question's page (HTML text) and what it shows."""

    html: str
    view: dict[str, object]
    strings: list[str]
    source: str
    narration: Narration | None = None
    calibration: str = ""
    warnings: list[str] = field(default_factory=list)
    run: str | None = None  # the stored run shown (None: ledger files)
    also_in: list[str] = field(default_factory=list)  # other runs holding the question, most recent first


def make_report(
    out: str | Path,
    *,
    db: str | None = None,
    run: str | None = None,
    ledgers: Sequence[str | Path] = (),
    policies: Sequence[str] | None = None,
    budgets: Sequence[float] | None = None,
    calibration: str | None = None,
    compare: Sequence[tuple[str, str]] | None = None,
    resamples: int = 2000,
    seed: int = 0,
    png_dir: str | Path | None = None,
    title: str | None = None,
    image_root: str | Path | None = None,
    max_side: int = MAX_SIDE,
    size_budget: int | None = REPORT_BUDGET,
    on_error: Callable[[RecordError], None] | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> ReportFiles:
    """Replay a stored run or ledger files and write the self-contained HTML report (and PNG figures)."""
    out_path = Path(out)
    if not out_path.parent.is_dir():
        raise ConfigError(f"--out: the folder {out_path.parent} does not exist")
    with open_source(db=db, run=run, ledgers=ledgers, on_error=on_error, image_root=image_root) as source:
        if not source.questions:
            raise ConfigError(f"no question could be read from {source.label}")
        settings = resolve_settings(
            source,
            policies=policies,
            budgets=budgets,
            calibration=calibration,
            compare=compare,
            resamples=resamples,
            seed=seed,
        )
        report = build_report(
            source, settings, title=title, max_side=max_side, size_budget=size_budget, progress=progress
        )
        exp = report.experiment
        plots = make_plots(
            exp.rows, exp.comparisons, report.costs, settings.policies, settings.focus, settings.main_budget
        )
        text = report_html(report, plots)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size_budget is not None and size > size_budget and report.questions:
            # the page estimate was short: measure the part without pages, keep the share of pages that fits
            bare = replace(report, questions=[], table=[], strings=[], images={})
            fixed = len(report_html(bare, plots).encode("utf-8", "surrogatepass"))
            share = max(0, size_budget - fixed) / max(1, size - fixed)
            keep = int(len(report.questions) * share * 0.97)
            report = build_report(
                source,
                settings,
                title=title,
                max_side=max_side,
                size_budget=size_budget,
                experiment=exp,
                max_pages=keep,
            )
            text = report_html(report, plots)
    out_path.write_text(text, encoding="utf-8")
    size = out_path.stat().st_size
    if size_budget is not None and size > size_budget:
        report.warnings.insert(
            0,
            f"the report is {size / 2**20:.1f} MB, over --max-size {size_budget / 2**20:.1f} MB: its summary, "
            f"figures and tables alone need about that much ({len(report.questions):,} question pages left); "
            "give a larger --max-size or fewer questions.",
        )
    pngs = []
    if png_dir is not None:
        folder = Path(png_dir)
        folder.mkdir(parents=True, exist_ok=True)
        pngs = [save_png(p.figure, folder / f"{p.name}.png") for p in plots]
    return ReportFiles(out_path, out_path.stat().st_size, report, pngs)


def make_question_page(
    question_id: str,
    *,
    db: str | None = None,
    run: str | None = None,
    ledgers: Sequence[str | Path] = (),
    dataset: str | None = None,
    policies: Sequence[str] | None = None,
    budget: float | None = None,
    calibration: str | None = None,
    image_root: str | Path | None = None,
    max_side: int = 1024,
) -> QuestionPage:
    """One question's standalone page: full-size image with the views, candidates, graph, evidence log, calls."""
    with open_source(db=db, run=run, ledgers=ledgers, image_root=image_root, question=(question_id, dataset)) as source:
        index = source.find(question_id, dataset)
        settings = resolve_settings(
            source,
            policies=policies,
            budgets=None if budget is None else [budget],
            calibration=calibration,
            compare=[],
            resamples=0,
        )
        view, strings, slots, images, _ = build_question(source, index, settings, max_side=max_side)
        label = source.label
        narration = _narration(view, strings)
        run_name = source.run.name if source.run is not None else None
        also_in = source.also_in
    text = question_html(
        view,
        strings,
        slots,
        images,
        source=label,
        policies=settings.policies,
        focus=settings.focus,
        budget=settings.main_budget,
    )
    return QuestionPage(
        text,
        view,
        strings,
        label,
        narration,
        settings.calibration_label,
        list(settings.calibration_warnings),
        run_name,
        also_in,
    )


def _narration(view: dict[str, Any], strings: list[str]) -> Narration | None:
    """The view's evidence log in words (computed with the view: boe.report.questions)."""
    if "close" not in view:
        return None
    words = [strings[i] for i in view.get("words") or []]
    return Narration(words, [bool(x) for x in view.get("inert") or []], strings[view["close"]])
