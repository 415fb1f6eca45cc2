"""Evidence that changes the decision, on the simulator: full ledgers judged by an independent judge and by
the generator itself, replayed offline by policy x budget with Oracle@K and the share of the gap closed.

    python benchmarks/sim_evidence.py                    # 400 fresh questions, seed 404, K=16
    python benchmarks/sim_evidence.py --n 100 --keep /tmp/ev   # keep the dataset and the store

What it runs is what a user runs, through the installed console script:

1. ``boe sim dataset --n N --seed S`` (fresh questions: neither the shipped
   calibration, seed 101/102, nor the demo set, seed 0, uses this seed);
2. ``boe sim serve`` on a free loopback port (it serves the generator
   ``boe-sim-vlm`` and the independent judge ``boe-sim-judge``);
3. ``boe batch --ledger full --k 16`` twice into one store: run ``judge``
   with ``--judge-model boe-sim-judge``, run ``same`` with the generator as
   its own judge. The generation request is the same in both runs (same
   seed), so both judge the same pools (the second run reads them from the
   store's request cache): the comparison is paired;
4. ``boe replay --calibration crossfit:5 --policy raw,boe,bayes,whole,label-guided
   --budget 4,8,16 --json`` per run (more policies with ``--policies``).

Printed per run: accuracy by policy and budget, the share of the raw ->
Oracle@K gap it closes, corrections / harms against raw, and the fitted
kappa of every calibration group (from ``boe replay --calibration fit``;
the answer and whole-response groups are what the judge's error rates were
set against, see `boe.sim.judge`). `label-guided` reads the labels: it is a
diagnostic, not a deployable policy. It is a simulator: the numbers say how
the agent behaves against this simulated VLM, not how a real model would do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

POLICIES = "raw,boe,bayes,whole,label-guided"
DEPLOYABLE_EXCLUDE = ("label-guided", "raw")


def _boe() -> list[str]:
    exe = Path(sys.executable).with_name("boe")
    return [str(exe)] if exe.is_file() else [sys.executable, "-c", "from boe.cli import main; main()"]


def _run(args: list[str], **kw: Any) -> str:
    proc = subprocess.run([*_boe(), *args], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"boe {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*_boe(), "sim", "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(200):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the simulator did not start")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _replay(db: str, run: str, policies: str, budgets: str, calibration: str) -> dict[str, Any]:
    names = [p for p in policies.split(",") if p]
    compare = [f"{p}:raw" for p in names if p != "raw"]
    if "bayes" in names and "boe" in names:
        compare.append("bayes:boe")
    out = _run(
        [
            "replay",
            "--db",
            db,
            "--run",
            run,
            "--policy",
            policies,
            "--budget",
            budgets,
            "--calibration",
            calibration,
            "--json",
            *(x for c in compare for x in ("--compare", c)),
        ]
    )
    data: dict[str, Any] = json.loads(out)
    return data


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    return list(data.get("results") or [])


def report(name: str, data: dict[str, Any], groups: dict[str, Any]) -> dict[str, Any]:
    """Print one run's table; returns the figures the summary lines need."""
    rows = _rows(data)
    raw = next(r["accuracy"] for r in rows if r["policy"] == "raw")
    oracle = next(r["oracle_at_k"] for r in rows if r.get("oracle_at_k") is not None)
    gap = oracle - raw
    cmp = {(c["a"], c["b"], c["budget"]): c for c in data.get("comparisons") or []}
    out_rows = []
    for r in rows:
        closed = (r["accuracy"] - raw) / gap if gap else float("nan")
        ci = (cmp.get((r["policy"], "raw", r["budget"])) or {}).get("ci95")
        out_rows.append(
            [
                r["policy"],
                f"{r['budget']:g}",
                f"{r['accuracy']:.3f}",
                f"{100 * closed:+.1f}%",
                str(r.get("corrections", "")),
                str(r.get("harms", "")),
                f"{r.get('mean_cost', 0.0):.2f}",
                "" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]",
            ]
        )
    n = data.get("questions")
    print(f"\n== {name}: {n} questions, raw {raw:.3f}, Oracle@K {oracle:.3f} (gap {gap:.3f})")
    print(
        table(
            out_rows,
            ["policy", "budget", "accuracy", "gap closed", "corr", "harm", "mean cost", "paired 95% CI vs raw"],
        )
    )
    for (a, b, budget), c in sorted(cmp.items()):
        if b != "raw":
            print(
                f"{a} - {b} at budget {budget:g}: {c['diff']:+.3f} [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}], "
                f"{a} only right {c['a_only_correct']}, {b} only right {c['b_only_correct']}, "
                f"McNemar p {c['mcnemar_p']:.3g}"
            )
    fits = [
        [k, f"{g['kappa']:.3f}", f"{(g.get('pairs') or {}).get('actions', 0):.0f}"] for k, g in sorted(groups.items())
    ]
    if fits:
        print("fitted kappa per calibration group (in-sample fit, for reading the channels):")
        print(table(fits, ["group", "kappa", "actions"]))
    best = {}
    for b in sorted({r["budget"] for r in rows}):
        dep = [r for r in rows if r["budget"] == b and r["policy"] not in DEPLOYABLE_EXCLUDE]
        top = max(dep, key=lambda r: r["accuracy"]) if dep else None
        acc = {r["policy"]: r["accuracy"] for r in rows if r["budget"] == b}
        best[b] = {
            "best": top["policy"] if top else None,
            "best_acc": top["accuracy"] if top else None,
            "gap_closed": (top["accuracy"] - raw) / gap if top and gap else None,
            **acc,
        }
    return {"raw": raw, "oracle": oracle, "by_budget": best}


def _groups(db: str, run: str, tmp: Path) -> dict[str, Any]:
    path = tmp / f"{run}-fit.json"
    _run(
        [
            "replay",
            "--db",
            db,
            "--run",
            run,
            "--policy",
            "raw",
            "--budget",
            "0",
            "--calibration",
            "fit",
            "--save-calibration",
            str(path),
            "--json",
        ]
    )
    data = json.loads(path.read_text())
    groups: dict[str, Any] = data.get("groups") or {}
    return groups


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=404)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--budgets", default="4,8,16")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--calibration", default="crossfit:5")
    ap.add_argument("--keep", type=Path, default=None, help="keep the dataset and the store in this folder")
    ap.add_argument("--runs", default="judge,same", help="judge (independent), same (the generator), or both")
    ap.add_argument("--prefix", default="", help="prefix of the run names (a new pair of runs in a kept store)")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="sim-evidence-"))
    work = args.keep or tmp
    work.mkdir(parents=True, exist_ok=True)
    data_dir = work / f"data-n{args.n}-seed{args.seed}"
    db = f"sqlite:///{work / f'evidence-n{args.n}-seed{args.seed}-k{args.k}.db'}"
    try:
        if not (data_dir / "dataset.json").is_file():
            _run(["sim", "dataset", "--n", str(args.n), "--seed", str(args.seed), "--out", str(data_dir)])
        port = _free_port()
        server = _serve(port)
        runs = [r.strip() for r in args.runs.split(",") if r.strip()]
        summaries: dict[str, Any] = {}
        try:
            for run in runs:
                judge = ["--judge-model", "boe-sim-judge"] if run == "judge" else []
                t0 = time.perf_counter()
                _run(
                    [
                        "batch",
                        str(data_dir),
                        "--base-url",
                        f"http://127.0.0.1:{port}/v1",
                        "--model",
                        "boe-sim",
                        *judge,
                        "--db",
                        db,
                        "--run",
                        args.prefix + run,
                        "--ledger",
                        "full",
                        "--k",
                        str(args.k),
                        "--no-progress",
                        "--json",
                    ],
                    env={**os.environ, "NO_COLOR": "1"},
                )
                print(f"[{run}] full ledger of {args.n} questions in {time.perf_counter() - t0:.0f} s", flush=True)
        finally:
            server.terminate()
            server.wait(10)
        print(
            f"boe replay --db {db} --run {args.prefix}RUN --policy {args.policies} --budget {args.budgets} "
            f"--calibration {args.calibration}"
        )
        for run in runs:
            data = _replay(db, args.prefix + run, args.policies, args.budgets, args.calibration)
            title = "independent judge (boe-sim-judge)" if run == "judge" else "same-model judge (boe-sim-vlm)"
            summaries[run] = report(title, data, _groups(db, args.prefix + run, tmp))
        top = max(float(b) for b in args.budgets.split(","))
        print(f"\nat budget {top:g}:")
        for run, s in summaries.items():
            b = s["by_budget"][top]
            print(
                f"  {run:6s} best deployable {b['best']} {b['best_acc']:.3f} "
                f"(closes {100 * (b['gap_closed'] or 0):.1f}% of raw->Oracle@K); "
                f"bayes {b.get('bayes', float('nan')):.3f} vs boe {b.get('boe', float('nan')):.3f}"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
