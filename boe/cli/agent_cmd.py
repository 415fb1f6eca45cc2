"""`boe ask` (one image question through the agent) and `boe demo` (the agent against the built-in simulator)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from boe.cli.agent_options import AgentOptions, agent_options
from boe.cli.common import err_console, out_console, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from boe.agent.api import AskResult

__all__ = ["register", "render_result"]

_SLOT_COLS = (
    ("modality", "mod"),
    ("region", "region"),
    ("plane", "plane"),
    ("finding", "finding"),
    ("attribute", "attr"),
)


def _short(text: Any, n: int = 28) -> str:
    s = "" if text is None else str(text)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _label(result: AskResult, answer: str | None) -> str:
    """An answer as shown: multiple-choice letters with their option text."""
    if answer is None:
        return "-"
    if result.options and answer in result.options:
        return f"{answer} ({result.options[answer]})"
    return answer


def _moved(result: AskResult, ids: list[int]) -> str:
    """Moved candidates grouped by answer, e.g. ``chest×9 limb×2``."""
    counts: dict[str, int] = {}
    for i in ids:
        key = str(result.candidates[i]["answer"])
        counts[key] = counts.get(key, 0) + 1
    return " ".join(f"{k}×{n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _narration(result: AskResult) -> Any:
    """The evidence log in words (boe.report.narrate), or None when the record cannot be read as a ledger."""
    from boe.core.graph import GroupIndex, Question
    from boe.errors import BoeError
    from boe.report.narrate import narrate

    try:
        q = Question.from_dict(result.record, GroupIndex())
    except (BoeError, KeyError, TypeError, ValueError):
        return None
    steps = []
    for e in result.evidence:
        if e.get("id") not in q.action_ids:
            return None
        o = {"confirm": 1, "reject": -1}.get(str(e.get("outcome")), 0)
        steps.append((q.action_ids.index(e["id"]), o, float(e.get("kappa") or 0.5)))
    agent = result.record.get("agent") or {}
    cheap = agent.get("cheap_kappa")
    posteriors = None
    if not _scores_by_kappa(result.policy) and agent.get("prior_scores"):
        posteriors = [agent["prior_scores"], *(e.get("scores") or [] for e in result.evidence)]
    return narrate(q, steps, float(cheap) if cheap else 0.55, posteriors=posteriors, settled=_settled(result))


def _scores_by_kappa(policy: str) -> bool:
    """Whether a policy scores by the spec's kappa-weighted logits (the paper's policies) or by its own."""
    from boe.core.policies import POLICIES, ScorePolicy

    if policy not in POLICIES:  # an uninstalled plugin's policy: narrate by kappa, as the log records it
        return True
    factory = POLICIES.get_obj(policy)
    return isinstance(factory, type) and issubclass(factory, ScorePolicy)


def _settled(result: AskResult) -> int:
    """Proposals skipped because no outcome could change the answer, or -1 when the checks left within the
    budget could not change it (a policy that never proposes such a check), else 0."""
    from boe.core.relevance import IRRELEVANT

    actions = result.record.get("actions") or []
    skipped = sum(1 for a in actions if a.get("skipped") == IRRELEVANT)
    if skipped or _scores_by_kappa(result.policy) or result.record.get("ledger") == "full":
        return skipped
    bought = {e.get("id") for e in result.evidence}
    left = result.budget - result.cost
    open_ = [a for a in actions if a.get("id") not in bought and not a.get("skipped") and a.get("cost", 0) <= left]
    return -1 if open_ else 0


def _with_words(result: AskResult) -> dict[str, Any]:
    """``result.to_json()`` with the evidence log in words (each entry's ``words``, and ``closing``)."""
    data: dict[str, Any] = result.to_json()
    nar = _narration(result)
    if nar is not None and isinstance(data.get("evidence"), list):
        for entry, words, inert in zip(data["evidence"], nar.steps, nar.inert, strict=False):
            if isinstance(entry, dict):
                entry["words"], entry["could_change_choice"] = words, not inert
        data["closing"] = nar.closing
    return data


def render_result(result: AskResult, console: Console, *, title: str | None = None) -> None:
    """Print the candidates, the selection beside the raw majority, and the evidence log."""
    from rich.markup import escape

    prior = result.record.get("agent", {})
    head = title or f"question {result.question_id}"
    console.print(f"\n[bold]{escape(head)}[/]: {escape(result.question)}", highlight=False)
    console.print(f"[dim]calibration: {escape(str(prior.get('calibration')))}[/]", highlight=False)
    if result.options:
        console.print("  options: " + ", ".join(f"{k}={escape(v)}" for k, v in result.options.items()), highlight=False)
    multi = len(result.record.get("figures") or []) > 1
    console.print(_candidate_table(result, multi))
    short = [f"{c} {slot}" for slot, c in _SLOT_COLS if c != slot]
    console.print(
        f"[dim]{'; '.join(short)}; s0 score before any evidence, s score after"
        f"{'; ✓/✗ correct/wrong against the reference' if result.reference is not None else ''}[/]",
        highlight=False,
    )
    _print_evidence(result, console, multi)
    _print_outcome(result, console, prior)


def _candidate_table(result: AskResult, multi: bool) -> Any:
    """The candidates as a rich table: answer, figure, claims by slot, scores before and after, marks."""
    from rich.markup import escape
    from rich.table import Table

    cands = result.candidates
    t = Table(
        title=f"{len(cands)} candidates (canonical claims; ◀ selected, ◁ raw majority)",
        title_justify="left",
        pad_edge=False,
        box=None,
        header_style="bold",
        collapse_padding=True,
    )
    for col, just in (
        ("#", "right"),
        ("answer", "left"),
        *((("fig", "left"),) if multi else ()),
        *((c, "left") for _, c in _SLOT_COLS),
        ("s0", "right"),
        ("s", "right"),
        ("", "left"),
    ):
        t.add_column(col, justify=just, no_wrap=True, overflow="ellipsis")
    s0 = result.record.get("agent", {}).get("prior_scores") or []
    for c in cands:
        i = c["index"]
        if not c["valid"]:
            t.add_row(
                str(i),
                "[dim]invalid[/]",
                f"[dim]{escape(_short(c.get('error'), 40))}[/]",
                *[""] * (len(_SLOT_COLS) + 2 + multi),
            )
            continue
        claims = c.get("claims") or {}
        t.add_row(
            str(i),
            escape(_short(c["answer"], 14)),
            *((escape(_short(c.get("figure"), 6)),) if multi else ()),
            *(escape(_short(claims.get(slot, {}).get("value"), 9)) for slot, _ in _SLOT_COLS),
            f"{s0[i]:.2f}" if s0 else "",
            f"{result.scores[i]:.2f}",
            _marks(result, c),
        )
    return t


def _marks(result: AskResult, c: Mapping[str, Any]) -> str:
    """✓/✗ against the reference, ◀ selected, ◁ raw majority."""
    marks = ""
    if c.get("utility") is not None:
        marks += "[green]✓[/]" if c["utility"] >= 0.5 else "[red]✗[/]"
    if c["index"] == result.selected:
        marks += "[bold green]◀[/]"
    if c["index"] == result.raw_selected:
        marks += "[yellow]◁[/]"
    return marks


def _evidence_where(result: AskResult, e: Mapping[str, Any], spec: Any, multi: bool) -> tuple[str, str]:
    """(what checked, what it looked at) of one evidence entry, as the log line names them."""
    view = e.get("view") or {}
    kind = spec.label if spec is not None else e["kind"]
    if view.get("kind") in ("mask", "overlay"):
        kind = f"judge, {view['kind']}"
    where = ""
    if view.get("box"):
        x0, y0, x1, y1 = view["box"]
        words = " ".join(view.get("location") or []) or "body"
        seg = (view.get("segmentation") or {}).get("segmenter")
        where = f" of the {words} x{x0}-{x1} y{y0}-{y1}" + (f", {seg}" if seg else "")
    if spec is not None and spec.target == "answer" and e.get("candidate") is not None:
        rep, cands = e["candidate"], result.candidates
        answer = cands[rep].get("answer") if 0 <= rep < len(cands) else None
        where = f" on answer {_short(answer, 24)!r}: every candidate giving it, shown as #{rep}"
    if multi and view.get("figures"):
        where += f" on figures {','.join(view['figures'])}"
    elif multi and view.get("figure") is not None:
        where += f" on figure {view['figure']}"
    if view.get("tag"):
        where += f" ({view.get('source')} {view['tag']})"
    return kind, where


def _print_evidence(result: AskResult, console: Console, multi: bool) -> None:
    """The evidence log: one line per bought check, what it moved or why, the vetoes and the closing words."""
    from rich.markup import escape

    from boe.kinds import KINDS

    console.print(
        f"[bold]evidence log[/] (policy {escape(result.policy)}, budget {_num(result.budget)}, "
        f"spent {_num(result.cost)})",
        highlight=False,
    )
    _print_draws(result, console)
    colours = {"confirm": "green", "reject": "red", "unresolved": "dim"}
    narration = _narration(result)
    by_kappa = _scores_by_kappa(result.policy)  # a posterior policy's weights are its channel tables, not kappa
    for n, e in enumerate(result.evidence):
        kind, where = _evidence_where(result, e, KINDS.get(e["kind"]), multi)
        kappa = f", κ {e['kappa']:.3f}" if by_kappa else ""
        console.print(
            f" {e['step']:>2}. [bold]{escape(e['id'])}[/] ({escape(kind)}{escape(where)}) "
            f"cost {_num(e['cost'])}{_cost_note(e)}{kappa} → [{colours[e['outcome']]}]{e['outcome']}[/]",
            highlight=False,
        )
        if narration is not None and n < len(narration.steps):
            console.print(f"     {escape(narration.steps[n])}", highlight=False)
        else:
            up, down = _moved(result, e["moved_up"]), _moved(result, e["moved_down"])
            if up or down:
                console.print(f"     up: {escape(up) or '-'}   down: {escape(down) or '-'}", highlight=False)
        if e.get("error"):
            console.print(f"     [red]error:[/] {escape(_short(e['error'], 160))}", highlight=False)
        elif e.get("rationale"):
            console.print(f"     [dim]{escape(_short(e['rationale'], 160))}[/]", highlight=False)
    _print_vetoes(result, console)
    if narration is not None:
        console.print(f"  [bold]{escape(narration.closing)}[/]", highlight=False)
    elif not result.evidence:
        console.print("  [dim](nothing bought)[/]", highlight=False)


def _print_draws(result: AskResult, console: Console) -> None:
    """An adaptive pool's line: the candidates drawn, in which rounds, at what cost each (nothing otherwise)."""
    draws = (result.transcript or {}).get("draws")
    if not draws:
        return
    pool = (result.record.get("agent") or {}).get("pool") or {}
    rounds = " + ".join(
        str(b - a) for a, b in zip([0] + [d[1] for d in draws[:-1]], [d[1] for d in draws], strict=True)
    )
    cost = (result.record.get("candidates") or [{}])[0].get("cost")
    console.print(
        f"  drew {draws[-1][1]} of at most {pool.get('limit', '?')} candidates in rounds of {rounds}"
        + (f", {_num(cost)} each" if cost is not None else "")
        + "; each step drew or checked, whichever was worth more per unit cost",
        highlight=False,
    )


def _print_vetoes(result: AskResult, console: Console) -> None:
    """The proposals a veto refused (not those skipped as irrelevant to the answer)."""
    from rich.markup import escape

    from boe.core.relevance import IRRELEVANT

    irrelevant = {a.get("id") for a in result.record.get("actions") or [] if a.get("skipped") == IRRELEVANT}
    skipped = [a for a in (result.transcript or {}).get("skipped") or [] if a not in irrelevant]
    if skipped:
        shown = ", ".join(skipped[:6]) + (f" and {len(skipped) - 6} more" if len(skipped) > 6 else "")
        console.print(f"  [yellow]vetoed (not bought):[/] {escape(shown)}", highlight=False)


def _print_outcome(result: AskResult, console: Console, prior: Mapping[str, Any]) -> None:
    """The selection beside the raw majority (and the reference), what it took, the costs used and the notes."""
    from rich.markup import escape

    verdict = ""
    if result.reference is not None:
        verdict = (
            f"   reference: {escape(_label(result, _ref_label(result)))} "
            f"(BoE {_tick(result.correct)}, raw {_tick(result.raw_correct)})"
        )
    console.print(
        f"[bold]selected:[/] [bold green]{escape(_label(result, result.answer))}[/]   "
        f"[bold]raw majority:[/] [yellow]{escape(_label(result, result.raw_answer))}[/]{verdict}",
        highlight=False,
    )
    u = result.usage()
    console.print(
        f"[dim]model calls {u['calls']} ({u['requests']} HTTP requests, {u['cached_calls']} from cache, "
        f"{u['failed_calls']} failed), tokens {u['prompt_tokens']} prompt + {u['completion_tokens']} completion; "
        f"calibration: {escape(str(prior.get('calibration')))}[/]",
        highlight=False,
    )
    costs = result.record.get("costs") or {}
    if costs.get("used") and costs.get("used") != costs.get("design"):
        used, design = costs["used"], costs.get("design") or {}
        table = ", ".join(f"{k} {_num(used[k])} (design {_num(design.get(k, used[k]))})" for k in used)
        console.print(f"[dim]costs {escape(str(costs.get('source')))}: {escape(table)}[/]", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _cost_note(e: dict[str, Any]) -> str:
    """`` (design 4; 812 tok, 0.41 s)``: the design cost beside the one planned with, and what the action took."""
    parts = []
    design = e.get("design_cost")
    if design is not None and float(design) != float(e["cost"]):
        parts.append(f"design {_num(design)}")
    measured = []
    if e.get("tokens") is not None:
        measured.append(f"{int(e['tokens'])} tok")
    if e.get("seconds") is not None:
        measured.append(f"{float(e['seconds']):.2f} s")
    if measured:
        parts.append(", ".join(measured))
    return f" ({'; '.join(parts)})" if parts else ""


def _ref_label(result: AskResult) -> str | None:
    """The reference as an option letter when the question has options."""
    if result.options and result.reference is not None:
        from boe.agent.claims import answer_of

        letter, _ = answer_of(result.reference, result.record.get("analysis", {}))
        return letter
    return result.reference


def _tick(v: bool | None) -> str:
    return "?" if v is None else ("[green]correct[/]" if v else "[red]wrong[/]")  # "right" reads as an answer


def _mark(v: bool | None) -> str:
    return "?" if v is None else ("[green]✓[/]" if v else "[red]✗[/]")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@agent_options()
def ask_command(
    image: Path = typer.Argument(..., help="The image (PNG, JPEG, BMP, TIFF, WebP or DICOM).", show_default=False),
    question: str = typer.Argument(..., help="The question about the image.", show_default=False),
    more_images: Optional[list[Path]] = typer.Option(
        None, "--image", help="Another figure of the same question (repeat, up to 6 images in all)."
    ),
    figures: Optional[str] = typer.Option(
        None,
        "--figures",
        help="Figure ids of IMAGE and each --image, comma-separated.",
        show_default="the file stems",
    ),
    options: Optional[str] = typer.Option(None, "--options", help="Multiple choice: A=text,B=text,..."),
    reference: Optional[str] = typer.Option(
        None, "--reference", help="The known answer (evaluation only; the policy never reads it)."
    ),
    db: Optional[str] = typer.Option(
        None, "--db", help="Store the run here (sqlite:///file.db, a path, or postgresql+psycopg://...)."
    ),
    run: Optional[str] = typer.Option(None, "--run", help="Run name in --db.", show_default="ask-TIMESTAMP"),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help="SQLite checkpoint file: an interrupted question resumes without paying again."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    *,
    agent: AgentOptions,
) -> None:
    """Answer one image question: sample K candidates, buy evidence, select, print the evidence log."""
    from boe.api import ask
    from boe.cli.common import check_outputs, check_store

    images = _images(image, more_images or [], figures)  # a wrong path is named before a missing endpoint
    cfg = agent.build()
    check_outputs(("--checkpoint", checkpoint))
    check_store("--db", db)
    result = ask(
        images,
        question,
        config=cfg,
        options=options,
        reference=reference,
        db=db,
        run_name=run,
        checkpoint=checkpoint,
        approver=terminal_approver if cfg.approve else None,
    )
    if as_json:
        print_json("ask", _with_words(result))
    else:
        render_result(result, out_console())
        if db is not None:
            err_console().print(f"[dim]stored as run {result.run!r} in {_safe(db)}[/]", highlight=False)
    _require_usable(result, cfg.model)


def _require_usable(result: AskResult, model: str) -> None:
    """`ModelError` (exit 1) when no candidate is usable: the question has no answer, which is not success."""
    from collections import Counter

    from boe.errors import ModelError

    if any(c.get("valid") for c in result.candidates):
        return
    why = Counter(" ".join(str(c.get("error") or "no answer").split())[:120] for c in result.candidates)
    reasons = "; ".join(f"{text} ×{n}" for text, n in why.most_common())
    raise ModelError(
        f"no usable candidate: all {len(result.candidates)} replies of {model!r} were unusable ({reasons})"
    )


_TERMINAL = {"closed": False}


def terminal_approver(request: dict[str, Any]) -> dict[str, Any]:
    """`boe ask --approve`: show the proposed purchase on standard error and read the answer from standard input.

    Enter (or y) buys it; ``n`` or ``n: reason`` vetoes it; the end of input vetoes what is left.
    """
    if _TERMINAL["closed"]:
        return {"approve": False, "reason": "no answer on standard input"}
    act = request["action"]
    sys.stderr.write(
        f"step {request['step']}: {act['kind']} on {request['target']} "
        f"(cost {act['cost']:g}; spent {request['spent']:g} of {request['budget']:g}) - buy it? [Y/n[: reason]] "
    )
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        _TERMINAL["closed"] = True
        sys.stderr.write("\nno more answers on standard input: the remaining purchases are vetoed\n")
        return {"approve": False, "reason": "no answer on standard input"}
    answer, _, reason = line.strip().partition(":")
    if answer.strip().lower() in ("", "y", "yes"):
        return {"approve": True}
    if answer.strip().lower() in ("n", "no"):
        return {"approve": False, "reason": reason.strip() or "vetoed at the terminal"}
    sys.stderr.write(f"  (read {line.strip()!r} as a veto; answer y or n)\n")
    return {"approve": False, "reason": f"vetoed at the terminal: {line.strip()[:200]}"}


@agent_options(
    exclude=("base_url", "model", "judge_base_url", "dataset", "root", "approve"),
    defaults={"judge_model": "boe-sim-judge"},
    help_defaults={"judge_model": "boe-sim-judge, the simulator's independent judge; same: the generator"},
)
def demo_command(
    db: Path = typer.Option(Path("boe-demo.db"), "--db", help="SQLite file the run is stored in."),
    questions: Optional[str] = typer.Option(
        None,
        "--questions",
        help="Comma-separated question ids.",
        show_default="the curated few of the shipped set",
    ),
    data: Optional[Path] = typer.Option(
        None, "--data", help="Another boe-sim dataset folder (boe sim dataset).", show_default="the shipped demo set"
    ),
    same_model: bool = typer.Option(
        True, "--same-model/--no-same-model", help="Also run with the generator as its own judge and report it."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON document."),
    *,
    agent: AgentOptions,
) -> None:
    """Run the agent against the built-in simulator on a few shipped questions; store the run in ./boe-demo.db."""
    import asyncio

    from rich.markup import escape

    from boe.agent.demo import (
        DEMO_QUESTIONS,
        SIM_MODEL,
        db_url,
        default_run_name,
        demo_questions,
        run_questions,
        simulator,
    )
    from boe.cli.common import check_store, parse_list
    from boe.errors import ConfigError

    check_store("--db", db)
    cfg = agent.build(  # checked before the simulator starts; its URL is filled in below
        base_url="http://127.0.0.1:1/v1", model=SIM_MODEL, dataset="boe-sim", root=_demo_root(data)
    )
    if cfg.judge_model in ("same", SIM_MODEL):  # the generator judges itself
        cfg = cfg.model_copy(update={"judge_model": None})
    ids = parse_list(questions) if questions else ([] if data is not None else list(DEMO_QUESTIONS))
    try:
        qs = demo_questions(ids, data)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    console = out_console()
    url = db_url(db)
    if not as_json:
        console.print(
            "[bold]boe demo[/]: the agent against the built-in [bold]simulator[/] of an OpenAI-compatible VLM "
            "(synthetic scans, answers computed from their pixels; not a real model)",
            highlight=False,
        )

    def show(res: AskResult) -> None:
        if not as_json:
            render_result(res, console, title=res.question_id)

    with simulator() as base_url:
        cfg = cfg.model_copy(update={"base_url": base_url})
        if not as_json:
            console.print(
                f"[dim]simulator at {base_url}; K={cfg.k}, budget {_num(cfg.budget)}, policy {escape(cfg.policy)}[/]",
                highlight=False,
            )
        run = asyncio.run(run_questions(cfg, qs, db=url, run_name=default_run_name("demo"), on_result=show))
        same = None
        if same_model and cfg.judge_model is not None:
            same_cfg = cfg.model_copy(update={"judge_model": None})
            same = asyncio.run(run_questions(same_cfg, qs, db=url, run_name=default_run_name("demo-same-judge")))
    raw_acc, sel_acc = run.accuracy()
    use = run.per_question_usage()
    summary = {
        "questions": len(run.results),
        "raw_majority_accuracy": raw_acc,
        "selected_accuracy": sel_acc,
        "rescued": sum(1 for r in run.results if r.correct and not r.raw_correct),
        "harmed": sum(1 for r in run.results if r.raw_correct and not r.correct),
        "per_question": use,
        "seconds": run.seconds,
        "run": run.run,
        "db": str(db),
        "calibration": cfg.load_calibration().source,
        "judge": cfg.judge,
    }
    if same is not None:
        summary["same_model_judge"] = {
            "selected_accuracy": same.accuracy()[1],
            "rescued": sum(1 for r in same.results if r.correct and not r.raw_correct),
            "harmed": sum(1 for r in same.results if r.raw_correct and not r.correct),
            "run": same.run,
        }
    if as_json:
        out = {"summary": summary, "results": [_with_words(r) for r in run.results]}
        print_json("demo", out)
        return
    _render_summary(console, run, summary, cfg)


def _demo_root(data: Path | None) -> str:
    """The demo's dataset folder: --data (a folder, else a `ConfigError` naming it) or the bundled questions."""
    from boe.agent.demo import demo_data
    from boe.errors import ConfigError

    if data is not None and not Path(data).is_dir():
        raise ConfigError(f"--data: {data} is not a folder (a boe-sim dataset: boe sim dataset --out DIR)")
    return str(Path(data if data is not None else demo_data()).resolve())


def _render_summary(console: Console, run: Any, summary: dict[str, Any], cfg: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="demo summary", title_justify="left", pad_edge=False)
    for col in ("question", "reference", "raw majority", "selected", "cost", "calls", "tokens"):
        t.add_column(
            col, justify="right" if col in ("cost", "calls", "tokens") else "left", no_wrap=col == "question"
        )  # a cut question id cannot be passed to boe show
    for r in run.results:
        u = r.usage()
        t.add_row(
            escape(r.question_id),
            escape(_label(r, _ref_label(r))),
            f"{escape(_label(r, r.raw_answer))} {_mark(r.raw_correct)}",
            f"{escape(_label(r, r.answer))} {_mark(r.correct)}",
            _num(r.cost),
            str(u["calls"]),
            str(u["prompt_tokens"] + u["completion_tokens"]),
        )
    console.print(t)
    console.print("[dim]✓ correct, ✗ wrong (against the reference); cost in design units[/]", highlight=False)
    pq = summary["per_question"]
    n = summary["questions"]
    raw_right = round(summary["raw_majority_accuracy"] * n)
    sel_right = round(summary["selected_accuracy"] * n)
    tokens = pq.get("prompt_tokens", 0) + pq.get("completion_tokens", 0)
    console.print(
        f"raw majority right on {raw_right}/{n}, BoE on {sel_right}/{n} (rescued {summary['rescued']}, "
        f"harmed {summary['harmed']}); per question {pq.get('calls', 0):.1f} model calls, {tokens:.0f} tokens; "
        f"{summary['seconds']:.1f} s",
        highlight=False,
    )
    console.print(f"judged by {escape(str(summary['judge']))}", highlight=False)
    same = summary.get("same_model_judge")
    if same is not None:
        right = round(same["selected_accuracy"] * n)
        console.print(
            f"with the generator as its own judge (the same model): BoE on {right}/{n} "
            f"(rescued {same['rescued']}, harmed {same['harmed']}; run {escape(str(same['run']))})",
            highlight=False,
        )
    console.print(
        "[dim]The demo questions were chosen to show a rescue; this is a demonstration, not a measurement "
        "(python benchmarks/agent_accuracy.py measures 100 fresh simulator questions).[/]",
        highlight=False,
    )
    console.print(
        f"stored as run [bold]{escape(str(summary['run']))}[/] in {escape(summary['db'])}; replay it offline "
        "(under the calibration it ran with) with\n"
        f"  boe replay --db {escape(summary['db'])} --run {escape(str(summary['run']))} --policy {cfg.policy} "
        f"--budget {_num(cfg.budget)} --calibration run --transcripts replay.jsonl",
        highlight=False,
        soft_wrap=True,
    )


def _images(image: Path, more: list[Path], figures: str | None) -> Any:
    """IMAGE and the --image figures as `Agent.ask` takes them (with the --figures ids when given); `InputError`
    naming the first that is not an existing file."""
    from boe.errors import ConfigError
    from boe.tools.images import check_path

    paths = [image, *more]
    for p in paths:
        check_path(p)
    if figures is None:
        return image if len(paths) == 1 else [str(p) for p in paths]
    ids = [f.strip() for f in figures.split(",")]
    if len(ids) != len(paths) or not all(ids):
        raise ConfigError(f"--figures: {len(paths)} ids for IMAGE and each --image, got {figures!r}")
    return [(f, str(p)) for f, p in zip(ids, paths, strict=True)]


def costs_command(
    db: str = typer.Option(..., "--db", help="The store holding the run (sqlite:///file.db, a path, postgresql...)."),
    run: str = typer.Option(..., "--run", help="The agent run to measure (a full-ledger run measures every kind)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the measurement FILE for --costs FILE."),
    basis: str = typer.Option("tokens", "--basis", help="tokens or seconds: what measured costs follow."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Measure a stored agent run: tokens and seconds per action kind, and the costs they give beside design."""
    from rich.markup import escape
    from rich.table import Table

    from boe.agent.configuration import Costs
    from boe.agent.costs import cost_kinds, measure_run, measured_costs
    from boe.db import Store
    from boe.errors import ConfigError

    if basis not in ("tokens", "seconds"):
        raise ConfigError(f"--basis must be tokens or seconds, got {basis!r}")
    from boe.cli.common import check_outputs

    check_outputs(("--out", out))
    with Store(db, create=False) as store:  # measuring reads: a mistyped --db is an error, not a new store
        meter = measure_run(store, run)
    if not meter.sums:
        raise ConfigError(f"run {run!r} holds no measured actions (it was stored before actions recorded them)")
    kinds = cost_kinds()
    design = {k: Costs().of(k) for k in kinds}
    used = measured_costs(design, meter, basis)  # type: ignore[arg-type]
    design["sample"] = Costs().of("sample")
    kinds = (*kinds, "sample")
    data = meter.to_json(basis)  # type: ignore[arg-type]
    if out is not None:
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if as_json:
        print_json("costs", {**data, "design": design, "measured_costs": used})
        return
    table = meter.table()
    t = Table(title=f"measured costs of run {escape(run)} (basis {basis})", title_justify="left", pad_edge=False)
    for col in ("action kind", "actions", "tokens", "seconds", "design", "measured"):
        t.add_column(col, justify="left" if col == "action kind" else "right", no_wrap=True)
    for k in kinds:
        row = table.get(k)
        t.add_row(
            k,
            str(row["actions"]) if row else "0",
            f"{row['tokens']:.0f}" if row else "-",
            f"{row['seconds']:.3f}" if row else "-",
            _num(design[k]),
            _num(used.get(k, design[k])),
        )
    console = out_console()
    console.print(t)
    console.print(
        f"[dim]tokens, seconds: mean per action; design: the paper's cost; measured cost: the measured model "
        f"kinds share their design total by mean {basis} (record checks and unmeasured kinds keep design); "
        f"sample: one generated candidate (completion {basis} per sample), priced at the measured judges' rate[/]",
        highlight=False,
    )
    if out is not None:
        console.print(f"wrote {escape(str(out))}; use it with boe ask --costs {escape(str(out))}", highlight=False)


def _safe(url: str) -> str:
    from boe.util import redact_url

    return redact_url(url)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask_command)
    app.command("demo")(demo_command)
    app.command("costs")(costs_command)
