"""BoE vs raw majority on fresh simulator questions, live: the whole agent over real HTTP.

    python benchmarks/agent_accuracy.py                  # 100 questions, seed 202, K=16, budget 16, boe
    python benchmarks/agent_accuracy.py --n 200 --seed 7 --budget 8 --policy boe-factor
    python benchmarks/agent_accuracy.py --full           # also replay other policies on the full ledger
    python benchmarks/agent_accuracy.py --dicom          # the same scans as DICOM files (record checks read tags)
    python benchmarks/agent_accuracy.py --judge-model same   # the generator judges its own pool

The judge is the simulator's independent judge ``boe-sim-judge`` unless
``--judge-model same`` (the generator at T = 0, the same model).

The questions are generated with a seed that neither the shipped calibration
(seed 101) nor the demo set uses, so the calibration is held out. Every
question is answered online (only the bought checks are run); the raw
majority is the same pool's zero-evidence selection, so the comparison is
paired. With ``--full`` a second pass runs every check of every menu once
(full ledger) and replays raw / boe / boe-factor / random-factor / whole at
budgets 4, 8, 16 under the same calibration; its ``boe`` row at the run's
budget must equal the online run (one code path).

Prints the table and the model calls and tokens per question. It is a
simulator: the numbers say how the agent behaves against this simulated VLM,
not how a real model would do.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * p)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


async def answer(questions: list[dict[str, Any]], base_url: str, args: argparse.Namespace, db: str, ledger: str) -> Any:
    """Run the agent on the questions as run ``ledger`` ("online" or "full"); (results, config)."""
    from boe.agent.demo import run_questions
    from boe.agent.settings import make_config

    cfg = make_config(
        base_url=base_url,
        model="boe-sim",
        judge_model=None if args.judge_model == "same" else args.judge_model,
        dataset=args.dataset,
        k=args.k,
        budget=args.budget,
        policy=args.policy,
        calibration=args.calibration,
        root=str(args.data),
        ledger=ledger,
    )
    return await run_questions(cfg, questions, db=db, run_name=ledger, dicom=args.dicom), cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=202)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--budget", type=float, default=16)
    ap.add_argument("--policy", default="boe")
    ap.add_argument("--calibration", default=None, help="calibration file [the shipped one]")
    ap.add_argument("--full", action="store_true", help="also run the full ledger and replay other policies")
    ap.add_argument("--db", default=None, help="keep the runs in this SQLite file")
    ap.add_argument("--dicom", action="store_true", help="ask with the DICOM files (dataset boe-sim-dicom)")
    ap.add_argument("--judge-model", default="boe-sim-judge", help="boe-sim-judge (independent) or same")
    args = ap.parse_args(argv)
    args.dataset = "boe-sim-dicom" if args.dicom else "boe-sim"

    from boe.agent.demo import simulator
    from boe.sim.dataset import generate_dataset, load_sim_dataset

    with tempfile.TemporaryDirectory() as tmp:
        args.data = generate_dataset(Path(tmp) / "data", args.n, seed=args.seed, dicom=args.dicom)
        questions = load_sim_dataset(args.data)
        db = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        with simulator() as url:
            t0 = time.perf_counter()
            run, cfg = asyncio.run(answer(questions, url, args, db, "online"))
            t_online = time.perf_counter() - t0
            full_run = None
            if args.full:
                full_run, _ = asyncio.run(answer(questions, url, args, db, "full"))
        res = run.results
        n = len(res)
        raw_ok = sum(bool(r.raw_correct) for r in res)
        sel_ok = sum(bool(r.correct) for r in res)
        rescued = sum(1 for r in res if r.correct and not r.raw_correct)
        harmed = sum(1 for r in res if r.raw_correct and not r.correct)
        oracle = sum(1 for r in res if any((c.get("utility") or 0) >= 0.5 for c in r.candidates))
        use = run.per_question_usage()
        cal = cfg.load_calibration().source
        print(
            f"{n} simulator questions ({'DICOM' if args.dicom else 'PNG'}, seed {args.seed}), K={args.k}, "
            f"budget {args.budget:g}, policy {args.policy}, judge {args.judge_model}, calibration {cal}"
        )
        rows = [
            ["raw majority", f"{raw_ok / n:.3f}", f"{raw_ok}/{n}", "", "", "0.00"],
            [
                args.policy,
                f"{sel_ok / n:.3f}",
                f"{sel_ok}/{n}",
                str(rescued),
                str(harmed),
                f"{sum(r.cost for r in res) / n:.2f}",
            ],
        ]
        print(table(rows, ["selection", "accuracy", "right", "rescued", "harmed", "mean cost"]))
        print(
            f"Oracle@K {oracle / n:.3f}; paired exact McNemar p = {mcnemar(rescued, harmed):.3g}; "
            f"majority wrong on {n - raw_ok}, rescued {rescued}"
        )
        print(
            f"per question: {use['calls']:.2f} model calls ({use['requests']:.2f} HTTP requests), "
            f"{use['prompt_tokens']:.0f} prompt + {use['completion_tokens']:.0f} completion tokens; "
            f"{t_online / n:.2f} s"
        )
        if full_run is not None:
            replay_table(db, cfg, args, res)
    return 0


def replay_table(db: str, cfg: Any, args: argparse.Namespace, online_results: list[Any]) -> None:
    """Counterfactual policies on the full ledger, under the same calibration (held out)."""
    from boe.core.experiment import load_questions, run_experiment
    from boe.db import Store

    with Store(db) as store:
        records = list(store.iter_records("full", strict=True))
    questions, groups = load_questions(records)
    exp = run_experiment(
        questions,
        groups.keys,
        ["raw", "boe", "boe-factor", "random-factor", "whole"],
        [4, 8, 16],
        calibration=cfg.load_calibration(),
    )
    rows = [
        [r.policy, f"{r.budget:g}", f"{r.accuracy:.3f}", str(r.corrections), str(r.harms), f"{r.mean_cost:.2f}"]
        for r in exp.rows
    ]
    print("\nfull ledger, replayed offline under the same calibration:")
    print(table(rows, ["policy", "budget", "accuracy", "rescued", "harmed", "mean cost"]))
    boe_run = exp.run(args.policy, args.budget) if args.budget in (4, 8, 16) else None
    if boe_run is not None:
        same = sum(int(boe_run.selected[i]) == r.selected for i, r in enumerate(online_results))
        print(
            f"full-ledger replay of {args.policy} at {args.budget:g} selects the online choice on "
            f"{same}/{len(online_results)} questions (the judge is deterministic: seed 0, temperature 0)"
        )


if __name__ == "__main__":
    sys.exit(main())
