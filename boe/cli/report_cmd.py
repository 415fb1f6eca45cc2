"""`boe report` and `boe show`: an HTML report of a run, and one question's page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from boe.cli.common import err_console, out_console, parse_budgets, parse_list, print_json, progress_bar

if TYPE_CHECKING:
    from rich.console import Console

    from boe.errors import RecordError

__all__ = ["register"]

_DB_HELP = "Store URL (sqlite:///file.db, a path, or postgresql+psycopg://...)."
_ROOT_HELP = (
    "Folder that relative image paths in the records are read from (default: the first ledger's folder, or the "
    "dataset folder a stored batch run read)."
)
_CAL_HELP = (
    "crossfit[:K] (fitted on the other folds of these questions: held out; the default, crossfit:5), run (the "
    "calibration the agent ran with; the default for an online agent run), fit (in-sample: the paper's protocol), "
    "or a calibration FILE.json."
)


def _pairs(compare: list[str] | None) -> list[tuple[str, str]] | None:
    from boe.errors import ConfigError

    if not compare:
        return None
    out = []
    for c in compare:
        a, sep, b = c.partition(":")
        if not sep or not a or not b:
            raise ConfigError(f"--compare expects A:B, got {c!r}")
        out.append((a, b))
    return out


def report_command(
    db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
    run: Optional[str] = typer.Option(
        None, "--run", help="Run name in --db (may be left out when the store holds one run)."
    ),
    ledger: Optional[list[Path]] = typer.Option(
        None, "--ledger", help="Ledger-v1 JSONL file instead of a store (repeatable)."
    ),
    out: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write."),
    compare: Optional[list[str]] = typer.Option(
        None,
        "--compare",
        help="A:B - paired interval and McNemar p of policy A vs B (repeatable) "
        "(default: the focus policy vs raw and random-factor).",
    ),
    policy: Optional[str] = typer.Option(
        None,
        "--policy",
        help="Comma-separated policies (default: raw,boe,random-factor,whole, and the policy of the agent that "
        "made a full-ledger run; an online agent run: raw and its policy).",
    ),
    budget: Optional[str] = typer.Option(
        None, "--budget", help="Comma-separated budgets (default: 1,2,4,8,16; an online agent run: its budget)."
    ),
    calibration: Optional[str] = typer.Option(None, "--calibration", help=_CAL_HELP),
    png: Optional[Path] = typer.Option(None, "--png", help="Also write every figure as a PNG into this folder."),
    title: Optional[str] = typer.Option(None, "--title", help="The report's title."),
    resamples: int = typer.Option(2000, "--resamples", min=0, help="Bootstrap resamples of the paired intervals."),
    seed: int = typer.Option(0, "--seed", help="Seed of random-factor, cross-fit folds and the bootstrap."),
    image_root: Optional[Path] = typer.Option(
        None,
        "--image-root",
        help=_ROOT_HELP,
    ),
    max_size: float = typer.Option(
        18.0, "--max-size", help="Size the report aims to stay under, in MB (images are shrunk to fit)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Also print the calibration, results and every question's selection as JSON."
    ),
) -> None:
    """Write one self-contained HTML report: figures, calibration, paired intervals, costs and every question's page."""
    from rich.markup import escape

    from boe.errors import ConfigError
    from boe.report import make_report

    if max_size <= 0:
        raise ConfigError("--max-size must be positive")
    from boe.cli.common import check_outputs

    check_outputs(("--out", out), ("--png", png), folders=("--png",))
    console = err_console()

    def on_error(err: RecordError) -> None:
        console.print(f"[yellow]skipped[/] {escape(err.describe())}", highlight=False, soft_wrap=True)

    with progress_bar(console, console.is_terminal) as prog:
        tasks: dict[str, Any] = {}

        def progress(stage: str, n: int, total: int | None) -> None:
            if stage not in tasks:
                tasks[stage] = prog.add_task(stage, total=total)
            if n:
                prog.advance(tasks[stage], n)

        files = make_report(
            out,
            db=db,
            run=run,
            ledgers=ledger or [],
            policies=parse_list(policy) if policy else None,
            budgets=parse_budgets(budget) if budget else None,
            calibration=calibration,
            compare=_pairs(compare),
            resamples=resamples,
            seed=seed,
            png_dir=png,
            title=title,
            image_root=image_root,
            size_budget=int(max_size * 2**20),
            on_error=on_error,
            progress=progress,
        )
    rep = files.report
    shown = sum(1 for e in rep.images.values() if e.src)
    result = console if as_json else out_console()  # standard output holds the JSON document alone
    result.print(f"[bold]calibration:[/] {escape(rep.settings.calibration_label)}", highlight=False, soft_wrap=True)
    for w in rep.settings.calibration_warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    if as_json:
        print_json("report", report_json(rep, str(files.html)))
    result.print(
        f"wrote {escape(str(files.html))}: {files.size / 2**20:.1f} MB, {len(rep.questions):,} questions, "
        f"{shown:,} image(s); policies {', '.join(rep.settings.policies)} at budgets "
        f"{', '.join(f'{b:g}' for b in rep.settings.budgets)}",
        highlight=False,
        soft_wrap=True,
    )
    _print_accuracy(rep, result)
    for p in files.pngs:
        result.print(f"wrote {escape(str(p))}", highlight=False, soft_wrap=True)
    for w in rep.warnings:
        if w not in rep.settings.calibration_warnings:
            console.print(f"[yellow]note[/] {escape(w)}", highlight=False, soft_wrap=True)


def _print_accuracy(rep: Any, console: Console) -> None:
    """The report's accuracy table at its main budget, on the terminal (80 columns; the HTML has every budget)."""
    from rich import box
    from rich.table import Table

    b = rep.settings.main_budget
    rows = [r for r in rep.experiment.rows if r.budget == b]
    if not rows:
        return
    several = len({r.dataset for r in rows}) > 1
    only = "" if several else f"{rows[0].dataset}: "
    t = Table(
        title=f"{only}accuracy at budget {b:g} (the HTML report has every budget)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
    )
    cols = ("dataset",) * several + ("policy", "N", "acc", "Oracle@K", "rescue", "corr/harm", "ΔAcc pp")
    for col in cols:
        t.add_column(col, justify="left" if col in ("dataset", "policy") else "right", no_wrap=True)
    for r in rows:
        t.add_row(
            *(r.dataset,) * several,
            r.policy,
            str(r.n),
            _num(r.accuracy, "{:.3f}"),
            _num(r.oracle_at_k, "{:.3f}"),
            _num(r.rescue_rate, "{:.3f}"),  # None where no question has a wrong majority
            f"{r.corrections}/{r.harms}",
            _num(None if r.delta_acc is None else 100 * r.delta_acc, "{:+.2f}"),
        )
    console.print(t)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def report_json(rep: Any, html: str) -> dict[str, Any]:
    """`boe report --json`: the replay's figures, its calibration and each question's raw and selected answer."""
    data = rep.experiment.to_json()
    data["calibration"]["label"] = rep.settings.calibration_label
    data["report"] = html
    data["warnings"] = list(rep.warnings)
    data["selections"] = {
        "policy": rep.settings.focus,
        "budget": rep.settings.main_budget,
        "questions": [
            {
                "dataset": row.dataset,
                "question_id": row.question_id,
                "selected_index": view["sel"],
                "raw": row.raw,
                "raw_correct": row.raw_ok,
                "selected": row.selected,
                "selected_correct": row.selected_ok,
                "spent": row.spent,
            }
            for row, view in zip(rep.table, rep.questions, strict=True)
        ],
    }
    out: dict[str, Any] = data
    return out


def show_command(
    question_id: str = typer.Argument(..., help="Question id (DATASET/ID when the id is in several datasets)."),
    db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
    run: Optional[str] = typer.Option(
        None,
        "--run",
        help="Run name in --db (default: the most recent run holding the question; a note names the others).",
    ),
    ledger: Optional[list[Path]] = typer.Option(
        None, "--ledger", help="Ledger-v1 JSONL file instead of a store (repeatable)."
    ),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Dataset of the question."),
    html: Optional[Path] = typer.Option(
        None, "--html", help="Write the question's page (self-contained HTML) here instead of printing it."
    ),
    policy: Optional[str] = typer.Option(
        None,
        "--policy",
        help="Policies whose selections are shown; the first that is not raw gives the evidence of records "
        "without their own log.",
    ),
    budget: Optional[float] = typer.Option(
        None, "--budget", min=0, help="Budget of the replay (default: the run's, or 16)."
    ),
    calibration: Optional[str] = typer.Option(None, "--calibration", help=_CAL_HELP),
    image_root: Optional[Path] = typer.Option(None, "--image-root", help=_ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the question (selection, evidence in words) as JSON."),
) -> None:
    """Show one question: its image with the crops and masks used, candidates, signed graph, evidence log."""
    from rich.markup import escape

    from boe.cli.common import check_outputs
    from boe.report import make_question_page

    check_outputs(("--html", html))
    page = make_question_page(
        question_id,
        db=db,
        run=run,
        ledgers=ledger or [],
        dataset=dataset,
        policies=parse_list(policy) if policy else None,
        budget=budget,
        calibration=calibration,
        image_root=image_root,
    )
    if page.also_in:  # the store holds several runs and --run was left out: say which one this is
        err_console().print(
            f"note: showing run {escape(str(page.run))}, the most recent holding {escape(question_id)}; also in "
            f"{escape(', '.join(page.also_in))} (--run NAME shows another)",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        print_json("show", show_json(page))
        return
    if html is not None:
        html.write_text(page.html, encoding="utf-8")
        out_console().print(f"wrote {escape(str(html))} ({len(page.html.encode()) / 1024:.0f} KB)", highlight=False)
        return
    _print_question(page)


def show_json(page: Any) -> dict[str, Any]:
    """`boe show --json`: the question's calibration, selection, candidates and evidence log in words."""
    view, strings = page.view, page.strings

    def s(i: Any) -> Any:
        return strings[i] if isinstance(i, int) and i >= 0 else None

    cand = view["cand"]

    def answer(i: int) -> Any:
        return s(cand[i][0]) if 0 <= i < len(cand) else None

    nar = page.narration
    return {
        "dataset": view["ds"],
        "question_id": view["id"],
        "run": page.run,
        "also_in": page.also_in,
        "question": s(view["text"]),
        "reference": view.get("ref"),
        "calibration": page.calibration,
        "how": s(view["how"]),
        "selected": {"index": view["sel"], "answer": answer(view["sel"])},
        "raw": {"index": view["raw"], "answer": answer(view["raw"])},
        "candidates": [
            {"answer": s(c[0]), "valid": bool(c[1]), "utility": c[2], "before": c[3], "after": c[4]} for c in cand
        ],
        "evidence": [
            {
                "action": s(step[0]),
                "kind": s(step[1]),
                "outcome": {"c": "confirm", "r": "reject", "u": "unresolved"}[step[5]],
                "cost": step[4],
                "kappa": step[7],
                "words": nar.steps[n] if nar is not None and n < len(nar.steps) else None,
                "could_change_choice": (not nar.inert[n]) if nar is not None and n < len(nar.inert) else None,
            }
            for n, step in enumerate(view["log"])
        ],
        "closing": nar.closing if nar is not None else None,
        "warnings": page.warnings,
    }


def _print_question(page: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from boe.core.ledger import ANSWER_KIND

    out = out_console()
    view, strings = page.view, page.strings

    def s(i: int) -> str:
        return strings[i] if i is not None and i >= 0 else "-"

    cand = view["cand"]

    def answer(i: int) -> str:
        if not 0 <= i < len(cand):
            return "-"
        u = cand[i][2]
        mark = (
            "" if u is None else (" [green](correct)[/]" if u >= 0.5 else " [red](wrong)[/]")
        )  # "right" reads as a side
        return f"#{i} {escape(s(cand[i][0]))}{mark}"

    out.print(f"[bold]calibration:[/] {escape(page.calibration)}", highlight=False)
    for w in page.warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    out.print(f"[bold]{escape(view['ds'])} / {escape(view['id'])}[/]: {escape(s(view['text']))}", highlight=False)
    out.print(
        f"selected {answer(view['sel'])}   raw majority {answer(view['raw'])}   reference "
        f"{escape(str(view.get('ref')))}   ({escape(s(view['how']))})",
        highlight=False,
    )
    t = Table(title="candidates")
    for col in ("#", "answer", "valid", "correct", "before", "after"):
        t.add_column(col, justify="left" if col == "answer" else "right")
    for i in view["co"]:
        a, valid, u, before, after, _ = cand[i]
        t.add_row(
            str(i),
            escape(s(a)),
            "yes" if valid else "no",
            "-" if u is None else ("yes" if u >= 0.5 else "no"),
            "-" if before is None else f"{before:.3f}",
            "-" if after is None else f"{after:.3f}",
        )
    out.print(t)
    claims = view["claims"]
    nar = page.narration
    for n, step in enumerate(view["log"], 1):
        action, kind, cl, ca, cost, o = step[0], step[1], step[2], step[3], step[4], step[5]
        target = s(claims[cl]) if cl >= 0 else (f"candidate #{ca}" if ca >= 0 else "")
        if s(kind) == ANSWER_KIND and 0 <= ca < len(cand):
            target = f"answer {s(cand[ca][0])!r} (every candidate giving it; shown as #{ca})"
        why = s(step[6])
        kappa = "" if step[7] is None else f", κ {step[7]:.3f}"
        words = nar.steps[n - 1] if nar is not None and n - 1 < len(nar.steps) else None
        out.print(
            f"{n:>2}. {escape(s(action))} ({escape(s(kind))}) {escape(target)}  cost {cost:g}{kappa} -> "
            f"{ {'c': '[green]confirm[/]', 'r': '[red]reject[/]', 'u': 'unresolved'}[o] }"
            + (f"\n    {escape(words)}" if words else "")
            + (f"\n    [dim]judge: {escape(why)}[/]" if why != "-" else ""),
            highlight=False,
        )
    if nar is not None:
        out.print(f"[bold]{escape(nar.closing)}[/]", highlight=False)
    elif not view["log"]:
        out.print("no evidence was bought")


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
    app.command("show")(show_command)
