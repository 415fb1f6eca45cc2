"""`boe sim ...`: synthetic ledgers (and, from the simulator package, datasets and the endpoint)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

if TYPE_CHECKING:
    from boe.sim.ledgers import ChannelSpec, PoolSpec

__all__ = ["register", "sim_app"]

sim_app = typer.Typer(
    help="The built-in simulator: synthetic ledgers, synthetic scans, a simulated VLM endpoint.", no_args_is_help=True
)


@sim_app.command("ledger")
def ledger_command(
    kind: str = typer.Option(..., "--kind", help="factor-code | pool"),
    n: int = typer.Option(100, "--n", min=0, help="Number of questions."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated ledger."),
    m: int = typer.Option(6, "--m", help="factor-code: number of binary factors (K = 2^m)."),
    rho: float = typer.Option(
        1.0, "--rho", help="factor-code: factor channel accuracy (1 = exact, <1 binary-symmetric)."
    ),
    whole_rho: float = typer.Option(1.0, "--whole-rho", help="factor-code: candidate-check accuracy."),
    factor_cost: float = typer.Option(4, "--factor-cost", help="factor-code: cost of a factor check."),
    whole_cost: float = typer.Option(8, "--whole-cost", help="factor-code: cost of a candidate check."),
    no_whole: bool = typer.Option(False, "--no-whole", help="factor-code: no candidate checks."),
    profile: str = typer.Option(
        "default",
        "--profile",
        help="pool: default | easy | hard | weak-judge | strong-structured | whole-strong | answers | echo | "
        "echo-answers | misread | misread-coherent | flat | flat-weak-judge",
    ),
    k: Optional[int] = typer.Option(None, "--k", min=1, help="pool: candidates per question [16]."),
    structured_acc: Optional[float] = typer.Option(
        None, "--structured-acc", help="pool: accuracy of the structured channel.", show_default="the profile's"
    ),
    vlm_acc: Optional[float] = typer.Option(
        None, "--vlm-acc", help="pool: accuracy of the vlm channel.", show_default="the profile's"
    ),
    grounded_acc: Optional[float] = typer.Option(
        None, "--grounded-acc", help="pool: accuracy of the grounded channel.", show_default="the profile's"
    ),
    whole_acc: Optional[float] = typer.Option(
        None, "--whole-acc", help="pool: accuracy of the whole channel.", show_default="the profile's"
    ),
    answer_acc: Optional[float] = typer.Option(
        None,
        "--answer-acc",
        help="pool: add answer-level checks (format 1.1) of this accuracy.",
        show_default="the profile's",
    ),
    answer_cost: Optional[float] = typer.Option(None, "--answer-cost", help="pool: cost of an answer-level check [8]."),
    echo: Optional[float] = typer.Option(
        None, "--echo", help="pool: P(a model channel reports what most candidates say instead of looking) [0]."
    ),
    misread: Optional[float] = typer.Option(
        None,
        "--misread",
        help="pool: P(a wrong candidate repeats the question's one coherent misreading: the same wrong answer and "
        "wrong slot values) [0].",
    ),
    unresolved: Optional[float] = typer.Option(None, "--unresolved", help="pool: unresolved rate of every channel."),
    costs: Optional[str] = typer.Option(None, "--costs", help="pool: structured,vlm,grounded,whole costs [1,4,4,8]."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Dataset name written in each record."),
    sample_cost: Optional[float] = typer.Option(
        None,
        "--sample-cost",
        help="pool: write each candidate's sample cost (format 1.3: the first k candidates replay as a pool of k, "
        "for --pool adaptive).",
    ),
) -> None:
    """Write a synthetic ledger to stdout (JSONL; 1.1 where a record has answer checks, 1.3 with --sample-cost)."""
    from boe.errors import ConfigError
    from boe.sim.ledgers import factor_code_ledger, pool_ledger, write_jsonl

    if kind == "factor-code":
        if not 1 <= m <= 12:
            raise ConfigError("--m must lie in 1..12")
        for name, v in (("--rho", rho), ("--whole-rho", whole_rho)):
            if not 0 <= v <= 1:
                raise ConfigError(f"{name} must lie in [0, 1]")
        for name, v in (("--factor-cost", factor_cost), ("--whole-cost", whole_cost)):
            if not 0 < v < float("inf"):
                raise ConfigError(f"{name} must be a finite number > 0, got {v:g}")  # the reader refuses others
        recs = factor_code_ledger(
            n,
            m=m,
            seed=seed,
            rho=rho,
            whole_rho=whole_rho,
            factor_cost=factor_cost,
            whole_cost=whole_cost,
            with_whole=not no_whole,
            dataset=dataset or "factor-code",
        )
    elif kind == "pool":
        accs = {"structured": structured_acc, "vlm": vlm_acc, "grounded": grounded_acc, "whole": whole_acc}
        spec = _pool_spec(profile, k, dataset, costs, accs, unresolved, answer_acc, answer_cost)
        spec = _pool_shape(spec, {"echo": echo, "misread": misread}, sample_cost)
        recs = pool_ledger(n, seed=seed, spec=spec)
    else:
        raise ConfigError(f"--kind must be factor-code or pool, got {kind!r}")
    write_jsonl(recs, sys.stdout)


def _pool_spec(
    profile: str,
    k: int | None,
    dataset: str | None,
    costs: str | None,
    accs: dict[str, float | None],
    unresolved: float | None,
    answer_acc: float | None,
    answer_cost: float | None,
) -> PoolSpec:
    """The `PoolSpec` of ``boe sim ledger --kind pool``: the profile with the channel options given over it."""
    from dataclasses import replace

    from boe.errors import ConfigError
    from boe.sim.ledgers import ChannelSpec, pool_spec

    try:
        spec = pool_spec(profile, k=k, dataset=dataset)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        cost_list = [float(x) for x in costs.split(",")] if costs else None
    except ValueError:
        cost_list = []  # a word among the numbers: the same error as a wrong count
    if cost_list is not None and len(cost_list) != 4:
        raise ConfigError(f"--costs expects four numbers: structured,vlm,grounded,whole; got {costs!r}")
    for i, (name, acc) in enumerate(accs.items()):
        cost = None if cost_list is None else cost_list[i]
        changed: dict[str, Any] = {name: _channel(name, getattr(spec, name), acc, unresolved, cost)}
        spec = replace(spec, **changed)
    if answer_acc is not None or answer_cost is not None or (unresolved is not None and spec.answer):
        base = spec.answer or ChannelSpec(0.8, 0.05, 8)
        spec = replace(spec, answer=_channel("answer", base, answer_acc, unresolved, answer_cost))
    return spec


def _pool_shape(spec: PoolSpec, rates: dict[str, float | None], sample_cost: float | None) -> PoolSpec:
    """The pool with the ``rates`` given (``echo``, ``misread``: probabilities; None keeps the profile's) and
    each candidate's ``sample_cost`` (format 1.3) when given."""
    from dataclasses import replace

    from boe.errors import ConfigError

    for name, value in rates.items():
        if value is not None and not 0 <= value <= 1:
            raise ConfigError(f"--{name} must lie in [0, 1]")
    changed: dict[str, Any] = {name: value for name, value in rates.items() if value is not None}
    if sample_cost is not None:
        if not (sample_cost >= 0 and sample_cost < float("inf")):
            raise ConfigError("--sample-cost must be a finite number >= 0")
        changed["sample_cost"] = sample_cost
    return replace(spec, **changed)


def _channel(
    name: str, ch: ChannelSpec, acc: float | None, unresolved: float | None, cost: float | None
) -> ChannelSpec:
    """A pool channel with the accuracy, unresolved rate and cost given (None: the profile's)."""
    from dataclasses import replace

    from boe.errors import ConfigError

    ch = replace(
        ch,
        acc=ch.acc if acc is None else acc,
        unresolved=ch.unresolved if unresolved is None else unresolved,
        cost=ch.cost if cost is None else cost,
    )
    if not (0 <= ch.acc <= 1 and 0 <= ch.unresolved <= 1 and ch.cost > 0):
        raise ConfigError(
            f"{name} channel: --{name}-acc and --unresolved must lie in [0, 1] and its cost be > 0; got accuracy "
            f"{ch.acc:g}, unresolved {ch.unresolved:g}, cost {ch.cost:g}"
        )
    return ch


@sim_app.command("dataset")
def dataset_command(
    out: str = typer.Option(..., "--out", help="New (or empty) directory to write the dataset into."),
    n: int = typer.Option(300, "--n", min=1, help="Number of questions."),
    seed: int = typer.Option(0, "--seed"),
    size: int = typer.Option(384, "--size", min=64, max=2048, help="Image width and height in pixels."),
    per_image: int = typer.Option(1, "--per-image", min=1, help="Questions asked about each image."),
    dicom: bool = typer.Option(
        False, "--dicom", help="Also write each image as DICOM (Modality, BodyPartExamined, ViewPosition)."
    ),
) -> None:
    """Generate synthetic scans and questions in the boe-sim layout (see boe/sim/README.md)."""
    from boe.cli.common import check_outputs, out_console
    from boe.sim.dataset import generate_dataset

    check_outputs(("--out", out), folders=("--out",))
    root = generate_dataset(out, n, seed, size=size, per_image=per_image, dicom=dicom)
    out_console().print(f"wrote {n} questions to {root}", highlight=False)


@sim_app.command("serve")
def serve_command(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    latency_ms: float = typer.Option(0.0, "--latency-ms", min=0, help="Added latency per chat request."),
    latency_jitter: float = typer.Option(
        0.0, "--latency-jitter", min=0, max=1, help="Latency varies by +- this fraction."
    ),
    fault_429: float = typer.Option(0.0, "--fault-429", help="Rate of 429 rate-limit replies."),
    fault_500: float = typer.Option(0.0, "--fault-500", help="Rate of 500 server errors."),
    fault_timeout: float = typer.Option(0.0, "--fault-timeout", help="Rate of replies delayed by --timeout-sleep."),
    fault_malformed: float = typer.Option(0.0, "--fault-malformed", help="Rate of replies that are not valid JSON."),
    fault_truncated: float = typer.Option(0.0, "--fault-truncated", help="Rate of replies cut short (length)."),
    timeout_sleep: float = typer.Option(30.0, "--timeout-sleep", min=0, help="Seconds a timeout fault waits."),
    fault_seed: int = typer.Option(0, "--fault-seed", help="Seed of the fault schedule."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request."),
    generation_config: Optional[str] = typer.Option(
        None, "--generation-config", help="A model's generation_config.json: fills absent sampling fields (as vLLM)."
    ),
    max_model_len: Optional[int] = typer.Option(
        None, "--max-model-len", min=16, help="Refuse prompt + reply tokens above this (vLLM's wording)."
    ),
    limit_mm_per_prompt: Optional[str] = typer.Option(
        None, "--limit-mm-per-prompt", help="Images per prompt at most: N, image=N or '{\"image\": N}'."
    ),
    reject_greedy_n: bool = typer.Option(
        False, "--reject-greedy-n", help="Refuse n > 1 at temperature 0 (as vLLM does)."
    ),
    pixel_limit: int = typer.Option(
        100_000_000, "--pixel-limit", min=1, help="Refuse images declaring more pixels (read from the header)."
    ),
) -> None:
    """Serve the simulated VLM `boe-sim-vlm` and its judge `boe-sim-judge` over OpenAI-compatible HTTP (a simulator)."""
    from boe.cli.common import err_console
    from boe.errors import ConfigError
    from boe.sim.faults import FaultPlan
    from boe.sim.server import SimOptions, load_generation_config, make_server

    try:
        gen = load_generation_config(generation_config) if generation_config else {}
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    options = SimOptions(
        generation_config=gen,
        reject_greedy_n=reject_greedy_n,
        max_model_len=max_model_len,
        limit_images=_image_limit(limit_mm_per_prompt),
        pixel_limit=pixel_limit,
    )

    plan = FaultPlan(
        fault_429,
        fault_500,
        fault_timeout,
        fault_malformed,
        fault_truncated,
        latency_ms,
        latency_jitter,
        timeout_sleep,
        fault_seed,
    )
    try:
        server = make_server(host, port, faults=plan, verbose=verbose, options=options)
    except OSError as exc:
        from boe.errors import ConfigError

        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    bound = server.server_address[1]
    err_console().print(
        f"boe-sim-vlm (a simulator) serving on http://{host}:{bound}/v1 — Ctrl-C to stop", highlight=False
    )
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def _image_limit(text: str | None) -> int | None:
    """Images per prompt from ``N``, ``image=N`` or ``{"image": N}`` (vLLM's --limit-mm-per-prompt forms)."""
    import json

    from boe.errors import ConfigError

    if text is None:
        return None
    value: object = text.strip()
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value).get("image")
        except (json.JSONDecodeError, AttributeError):
            value = None
    elif isinstance(value, str) and "=" in value:
        key, _, value = value.partition("=")
        value = value if key.strip() == "image" else None
    try:
        n = int(str(value))
    except (TypeError, ValueError):
        n = -1
    if n < 0:
        raise ConfigError(f"--limit-mm-per-prompt must be N, image=N or '{{\"image\": N}}', got {text!r}")
    return n


@sim_app.command("calibrate")
def calibrate_command(
    out: Path = typer.Option(..., "--out", help="The calibration file to write."),
    n: int = typer.Option(400, "--n", min=1, help="Simulator questions with PNG images."),
    seed: int = typer.Option(101, "--seed", help="Dataset seed (the DICOM questions use seed + 1)."),
    dicom_n: int = typer.Option(0, "--dicom-n", min=0, help="Also DICOM questions (dataset boe-sim-dicom)."),
    judge_model: str = typer.Option(
        "boe-sim-judge", "--judge-model", help="The judge: boe-sim-judge, or same (the generator judges itself)."
    ),
    db: Optional[str] = typer.Option(
        None, "--db", help="Keep the full ledger in this store (a complete one is reused).", show_default="a temp file"
    ),
) -> None:
    """Fit the shipped simulator calibration: the agent's full ledger on fresh simulator questions, then the fit."""
    from boe.agent.sim_calibration import simulator_calibration
    from boe.cli.common import check_outputs
    from boe.core.calibration import save_calibration

    check_outputs(("--out", out))
    command = f"boe sim calibrate --n {n} --seed {seed} --dicom-n {dicom_n} --judge-model {judge_model} --out {out}"
    cal = simulator_calibration(n, seed, dicom_n=dicom_n, judge_model=judge_model, db=db, command=command)
    save_calibration(cal, out)
    questions = cal.info.questions if cal.info is not None else 0
    typer.echo(f"fitted {len(cal.groups)} groups on {questions} questions -> {out}")
    for key, g in sorted(cal.groups.items()):
        typer.echo(
            f"  {key:40s} kappa {g.kappa:.3f}  p {g.p['confirm']:.2f}/{g.p['reject']:.2f}/{g.p['unresolved']:.2f}"
        )


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="sim")
