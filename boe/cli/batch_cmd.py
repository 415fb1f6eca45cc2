"""`boe batch`: a whole dataset through the agent, resumable, shared by many workers through one store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from boe.cli.agent_options import AgentOptions, agent_options
from boe.cli.common import Interrupted, alert_console, err_console, out_console, print_json, quiet, registered
from boe.datasets._registry import FORMATS

if TYPE_CHECKING:
    from rich.console import Console

    from boe.batch import BatchSummary, Estimate

__all__ = ["batch_command", "register"]


@agent_options(exclude=("dataset", "root", "approve"), defaults={"ledger": "full", "concurrency": 64})
def batch_command(
    dataset: Path = typer.Argument(..., help="The dataset folder or file.", show_default=False),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        help=f"{registered(FORMATS)}, or a plugin's (hf: parquet, arrow, save_to_disk, imagefolder).",
        show_default="detected",
    ),
    columns: Optional[str] = typer.Option(
        None,
        "--columns",
        help="hf: which column holds each field, e.g. question=query,answer=label,image=img (also id, answer_type).",
        show_default="question, answer, image, ...",
    ),
    split: Optional[str] = typer.Option(
        None,
        "--split",
        help="The published split to run (train, test, val...; all: every split). A folder with several splits "
        "needs it.",
    ),
    db: str = typer.Option(..., "--db", help="The store: sqlite:///file.db, a path, or postgresql+psycopg://..."),
    run: str = typer.Option(..., "--run", help="Run name; the same command again continues it."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N questions (file order)."),
    resume: bool = typer.Option(False, "--resume", help="Continue a run that must exist already."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Estimate model calls and tokens; call nothing."),
    estimate_from: Optional[str] = typer.Option(
        None, "--estimate-from", help="--dry-run: measure per-question calls and tokens on this stored run."
    ),
    semantic_grader: bool = typer.Option(
        False, "--semantic-grader", help="Grade open answers the rules leave undecided with the judge model (an LLM)."
    ),
    namespace: Optional[str] = typer.Option(
        None,
        "--namespace",
        help="Calibration namespace and stored dataset name.",
        show_default="the dataset's name",
    ),
    worker: Optional[str] = typer.Option(
        None, "--worker", help="This worker's name.", show_default="the first free slot here"
    ),
    lease: float = typer.Option(120.0, "--lease", min=2.0, help="Seconds a claimed question is this worker's."),
    cpu_workers: int = typer.Option(0, "--cpu-workers", min=0, max=64, help="Processes decoding figures (0: none)."),
    max_failures: int = typer.Option(20, "--max-failures", min=0, help="Stop after N failed questions (0: never)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait for questions other workers still hold."),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="Progress bar.", show_default="on a terminal"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (or estimate) as JSON."),
    write_requests: Optional[Path] = typer.Option(
        None,
        "--write-requests",
        help="Batch files: write the requests this stage needs to FILE (OpenAI batch JSONL) instead of sending them.",
        metavar="FILE",
    ),
    read_replies: Optional[list[Path]] = typer.Option(
        None,
        "--read-replies",
        help="Batch files: store a batch runner's results FILE (repeatable) in the request cache first, then continue.",
        metavar="FILE",
    ),
    *,
    agent: AgentOptions,
) -> None:
    """Answer every question of a dataset with the agent and store the run (resumable; many workers may share it)."""
    from boe.batch import BatchConfig
    from boe.batch.files import check_files
    from boe.cli.common import check_store
    from boe.datasets import detect_format
    from boe.datasets._hf import parse_columns
    from boe.errors import ConfigError

    agent_config = agent.build()
    check_store("--db", db)
    try:
        mapping = parse_columns(columns) or None
    except ConfigError as exc:
        raise ConfigError(f"--{exc}") from None
    check_files(None if write_requests is None else str(write_requests), [str(p) for p in read_replies or ()])
    fmt = fmt or detect_format(dataset, option="--format")
    config = BatchConfig(
        dataset=str(dataset),
        format=fmt,
        split=split,
        columns=mapping,
        namespace=namespace,
        agent=agent_config,
        db=_db_url(db),
        run=run,
        limit=limit,
        resume=resume,
        semantic_grader=semantic_grader,
        worker=worker,
        lease_seconds=lease,
        cpu_workers=cpu_workers,
        max_failures=max_failures,
        wait=wait,
        write_requests=None if write_requests is None else str(write_requests),
        read_replies=tuple(str(p) for p in read_replies or ()),
    )
    if dry_run:
        est = dry_run_estimate(config, estimate_from)
        if as_json:
            print_json("batch.dry-run", est.as_dict())
        else:
            render_estimate(est, config, out_console())
        return
    try:
        show_progress = progress if progress is not None else sys.stderr.isatty()
        summary = _run(config, show_progress and not quiet())
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): the held questions were given back
        from boe.errors import Terminated

        term = isinstance(exc, Terminated)
        alert_console().print(
            f"\n[yellow]{'terminated (SIGTERM)' if term else 'interrupted'}[/]: every question already stored is "
            "kept. Resume with the same command:\n  " + _resume_command(),
            highlight=False,
            soft_wrap=True,
        )
        raise Interrupted(143 if term else 130) from None
    evaluation = _evaluate(summary, config) if summary.complete else None
    if as_json:
        data = summary.as_dict()
        data["evaluation"] = evaluation
        data["next"] = _next_commands(summary, config)
        print_json("batch", data)
    else:
        render_summary(summary, out_console(), evaluation, _next_commands(summary, config))
    if summary.failed:
        raise typer.Exit(1)


def _resume_command() -> str:
    """This command line again (URLs without credentials), for the interrupted message."""
    import shlex

    from boe.util import redact_url

    args = [redact_url(a) if "@" in a and "://" in a else a for a in sys.argv[1:]]  # credentials only
    return shlex.join(["boe", *args])


def _evaluate(summary: Any, config: Any) -> dict[str, Any] | None:
    """Accuracy of the raw majority and of the policy's selection on the stored run, where labels exist.

    A full ledger is replayed under crossfit:5 fitted on the run (held out; the agent itself scored with the
    calibration it was given, which may not cover this dataset); an online run under its own calibration.
    """
    from boe.api import load_questions, replay

    loaded = load_questions(db=config.db, run=config.run)
    questions = loaded.questions
    labelled = [q for q in questions if q.labelled]
    if not labelled:
        return None
    policy, budget = config.agent.policy, config.agent.budget
    result = replay(loaded, policies=["raw", policy], budgets=[budget], resamples=0)
    choice = result.calibration
    rows = [r for r in result.rows if r.policy == policy]
    raw_rows = [r for r in result.rows if r.policy == "raw"]
    if not rows or not raw_rows:
        return None
    return {
        "questions": len(questions),
        "labelled": len(labelled),
        "calibration": choice.label,
        "policy": policy,
        "budget": budget,
        "raw_accuracy": raw_rows[0].accuracy,
        "selected_accuracy": rows[0].accuracy,
        "oracle_at_k": rows[0].oracle_at_k,
        "corrections": rows[0].corrections,
        "harms": rows[0].harms,
        "warnings": choice.warnings,
    }


def _next_commands(summary: Any, config: Any) -> list[str]:
    """What to run after this batch."""
    db, run = summary.store, summary.run
    if summary.files.get("written"):
        return _next_stage(summary, config)
    if not summary.complete:
        return [_resume_command()]
    a = config.agent
    # a full ledger replays under any policy: the run's own beside the paper's; an online run holds only what its
    # policy bought
    full = ("raw", a.policy, "boe", "random-factor", "whole")
    policies, budgets = (
        (",".join(dict.fromkeys(full)), "1,4,16") if a.ledger == "full" else (f"raw,{a.policy}", f"{a.budget:g}")
    )
    out = [
        f"boe replay --db {db} --run {run} --policy {policies} --budget {budgets}",
        f"boe report --db {db} --run {run} --out {run}-report.html",
    ]
    if config.agent.ledger == "full":
        name = config.namespace or Path(config.dataset).name or "dataset"
        out.append(f"boe calibrate --db {db} --run {run} --out {name}-calibration.json")
    return out


def _next_stage(summary: Any, config: Any) -> list[str]:
    """Batch files: how to run the written requests and read their results back."""
    import shlex

    from boe.util import redact_url

    written = summary.files["written"]
    results = [str(Path(w["path"]).with_name(Path(w["path"]).stem + "-results.jsonl")) for w in written]
    runs = [
        f"vllm run-batch -i {shlex.quote(w['path'])} -o {shlex.quote(r)} --model {shlex.quote(w['model'])}"
        for w, r in zip(written, results, strict=True)
    ]
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("--read-replies", "--write-requests"):
            skip = True
            continue
        if not a.startswith(("--read-replies=", "--write-requests=")):
            args.append(redact_url(a) if "@" in a and "://" in a else a)
    reads = [x for r in results for x in ("--read-replies", r)]
    again = ["boe", *args, *reads, "--write-requests", str(config.write_requests)]  # the next stage, same name
    return [*runs, shlex.join(again)]


def _db_url(text: str) -> str:
    return text if "://" in text else f"sqlite:///{Path(text).expanduser()}"


def _run(config: Any, show_progress: bool) -> BatchSummary:
    from boe.api import run_batch
    from boe.batch import RichProgress

    return run_batch(config, progress=RichProgress(err_console()) if show_progress else None)


def dry_run_estimate(config: Any, estimate_from: str | None) -> Estimate:
    """The estimate for a batch: calls and tokens of the questions not stored yet; nothing is called."""
    from boe.batch import estimate, measure_records, select_items
    from boe.batch.plan import load_batch_dataset
    from boe.batch.runner import _agent_config
    from boe.db import Store
    from boe.errors import InputError, StoreError, StoreNotFoundError

    ds = load_batch_dataset(config.dataset, config.format, config.split, config.columns)
    namespace = config.namespace or ds.name
    items, skipped = select_items(ds, namespace, config.limit)
    if not items:  # what the real run would say
        raise InputError(f"no question of {config.dataset} can run ({ds.summary()})")
    notes = []
    if ds.issues:
        notes.append(f"{len(ds.issues)} record(s) of the dataset could not be loaded ({ds.summary()})")
    if skipped:
        notes.append(f"{len(skipped)} question(s) cannot run (first: {skipped[0][0]}: {skipped[0][1]})")
    agent = _agent_config(config.agent, root=str(ds.root), dataset=namespace)
    stored, measured = 0, None
    try:
        store = Store(config.db, create=False)
    except StoreError:
        store = None  # no store yet: nothing stored, nothing to measure
    if store is not None:
        with store:
            names = {r.name for r in store.list_runs()}
            if config.run in names:
                stored = len(store.done_question_ids(config.run) & {it.key for it in items})
            source = estimate_from or (config.run if stored else None)
            if source is not None:
                if source not in names:
                    raise StoreNotFoundError(f"--estimate-from: no run named {source!r} in {store.url}")
                measured = measure_records(store.iter_record_dicts(source), f"run {source!r}")
    elif estimate_from is not None:
        raise StoreNotFoundError(f"--estimate-from: there is no store at {config.db}")
    est = estimate(items, stored, agent, measured=measured, semantic_grader=config.semantic_grader)
    est.notes[:0] = notes
    return est


def render_estimate(est: Estimate, config: Any, console: Console) -> None:
    """The dry-run table."""
    from rich.markup import escape
    from rich.table import Table

    from boe.batch.progress import human

    agent = config.agent
    console.print(
        f"[bold]boe batch --dry-run[/]: {est.questions} questions, {est.stored} stored, [bold]{est.todo} to do[/]; "
        f"K={agent.k}, ledger {agent.ledger}, policy {escape(agent.policy)}, budget {agent.budget:g}",
        highlight=False,
    )
    t = Table(title="expected model calls", title_justify="left", pad_edge=False)
    t.add_column("purpose")
    t.add_column("calls", justify="right")
    t.add_column("per question", justify="right")
    for purpose, n in est.calls.items():
        t.add_row(purpose, human(n), f"{n / est.todo:.1f}" if est.todo else "-")
    per_q = f"{est.total_calls / est.todo:.1f}" if est.todo else "-"
    t.add_row("[bold]total[/]", f"[bold]{human(est.total_calls)}[/]", per_q)
    console.print(t)
    console.print(
        f"tokens: {human(est.prompt_tokens)} prompt + {human(est.completion_tokens)} completion; "
        f"at most {human(est.upper_calls)} calls",
        highlight=False,
    )
    costs = ", ".join(f"{k} {v:g}" for k, v in est.costs.items())
    console.print(f"costs (design units) of every check on the menu: {escape(costs)}", highlight=False)
    console.print(f"[dim]basis: {escape(est.basis)}[/]", highlight=False)
    for note in est.notes:
        console.print(f"[dim]note: {escape(note)}[/]", highlight=False)


def render_summary(
    s: BatchSummary,
    console: Console,
    evaluation: dict[str, Any] | None = None,
    next_commands: list[str] | None = None,
) -> None:
    """What the worker did, and how to replay the run."""
    from rich.markup import escape

    from boe.batch.progress import human

    rate = f"{s.per_minute:.1f} questions/min" if s.stored else "-"
    seg = s.segmentation_ms_per_question
    cpu = (
        f"{s.cpu_ms_per_question:.0f} ms CPU per question (framework {s.cpu_ms_per_question - seg:.0f}, "
        f"segmentation {seg:.0f})"
        if s.stored
        else ""
    )
    console.print(
        f"[bold]{escape(s.run)}[/] [{escape(s.worker)}]: stored {s.stored} this session "
        f"({s.stored_before} before; {s.selected} selected), {len(s.failed)} failed, {s.lost} lost; "
        f"{s.seconds:.1f} s, {rate}, {cpu}",
        highlight=False,
    )
    console.print(
        f"model calls {human(s.calls_paid)} paid ({human(s.requests)} requests, {s.call_errors} with errors), "
        f"{human(s.calls_cached)} from the cache; tokens {human(s.prompt_tokens)} prompt + "
        f"{human(s.completion_tokens)} completion; peak {s.peak_in_flight} requests in flight",
        highlight=False,
    )
    if len(s.servers) > 1:
        shares = "; ".join(
            f"{escape(x['base_url'])} {human(x['requests'])} requests, {x['errors']} errors"
            + (f", down {x['down']}x" if x["down"] else "")
            for x in s.servers
        )
        console.print(f"servers: {shares}", highlight=False)
    left = s.remaining
    state = "complete" if s.complete else f"{left.get('pending', 0)} pending, {left.get('claimed', 0)} held by workers"
    console.print(f"run queue: {left.get('done', 0)} done, {state}", highlight=False)
    if s.files:
        _render_files(s, console)
    for qid, err in s.failed[:5]:
        console.print(f"[red]failed[/] {escape(qid)}: {escape(err)}", highlight=False)
    if len(s.failed) > 5:
        console.print(f"[red]... and {len(s.failed) - 5} more failed[/] (run the command again to retry them)")
    for note in s.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if evaluation is not None:
        e = evaluation
        console.print(
            f"[bold]accuracy[/] on {e['labelled']} labelled questions: raw majority {e['raw_accuracy']:.3f}, "
            f"{escape(e['policy'])} at budget {e['budget']:g} [bold]{e['selected_accuracy']:.3f}[/] "
            f"({e['corrections']} corrected, {e['harms']} harmed; Oracle@K {e['oracle_at_k']:.3f})\n"
            f"  calibration: {escape(e['calibration'])}",
            highlight=False,
        )
        for w in e["warnings"]:
            console.print(f"  [yellow]warning:[/] {escape(w)}", highlight=False)
    if next_commands:
        console.print(  # soft wrap: a command broken across lines would paste as two broken ones
            "[bold]next:[/]\n" + "\n".join(f"  {escape(c)}" for c in next_commands), highlight=False, soft_wrap=True
        )


def register(app: typer.Typer) -> None:
    app.command("batch")(batch_command)


def _render_files(s: BatchSummary, console: Console) -> None:
    """Batch files: what was read, what was written, and each failed result line."""
    from rich.markup import escape

    f = s.files
    read = f.get("read")
    if read:
        console.print(
            f"read {read['lines']} result line(s) from {len(read['files'])} file(s): {read['stored']} replies stored, "
            f"{len(read['errors'])} failed ({read['expired']} expired), {len(read['unreadable'])} unreadable",
            highlight=False,
        )
        for e in read["errors"][:10]:
            why = f"{e['code'] or e['status']}: {e['message']}"
            console.print(
                f"[red]result failed[/] {escape(e['where'])} {escape(e['custom_id'])}: {escape(why)} (written again)",
                highlight=False,
            )
    if f.get("written"):
        console.print(
            f"[bold]{f['requests']} request(s)[/] for {s.parked} waiting question(s) written to "
            + ", ".join(f"{escape(w['path'])} ({w['requests']}, {escape(w['model'])})" for w in f["written"]),
            highlight=False,
        )
    elif s.complete:
        console.print("no requests left to write: the run is complete", highlight=False)
