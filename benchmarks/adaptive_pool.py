"""Sample and verify under one budget (issue 26): accuracy against mean total cost, fixed pools against the adaptive
pool, per simulator regime, replayed offline from one full ledger of K_max candidates in sampling order.

    python benchmarks/adaptive_pool.py                       # 3,000 questions per regime, K_max 16, seed 26
    python benchmarks/adaptive_pool.py --n 600 --regimes default --budgets 8,12

What it runs is what a user runs, through the installed console script:

1. ``boe sim ledger --kind pool --profile R --n N --k 16 --sample-cost 0.25`` per regime R (format 1.3: each
   candidate carries its sample cost, so the first k replay as a pool of k);
2. ``boe replay L --policy P --budget 16 --pool fixed:K --json`` for K in 4, 8, 16 and every policy P (``boe``, the
   default controller, and ``bayes``): k samples up front, then a check budget of 16;
3. ``boe replay L --policy bayes --pool adaptive --budget C --json`` for each C: samples and checks from one budget C.

Every replay is calibrated crossfit:5 (held out by question). Printed per regime and row: accuracy, samples drawn
per question, mean total cost in design units (samples at 0.25 each plus checks) and in tokens. Tokens are the design
units converted at measured rates (``--sample-tokens``: completion tokens of one simulator sample, ``--unit-tokens``:
tokens of one design unit of a judge check, 450 tokens for a check of cost 4; ``boe costs`` measures both on a
stored run). It is a simulator: the numbers say how the controllers behave against it, not how a real model would.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REGIMES = "default,hard,weak-judge"


def _boe() -> list[str]:
    exe = Path(sys.executable).with_name("boe")
    return [str(exe)] if exe.is_file() else [sys.executable, "-c", "from boe.cli import main; main()"]


def _run(args: list[str], out: Path | None = None) -> str:
    with open(out, "w") if out is not None else tempfile.TemporaryFile("w+") as fh:
        proc = subprocess.run([*_boe(), *args], stdout=fh, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"boe {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        if out is not None:
            return ""
        fh.seek(0)
        return fh.read()


def _replay(ledger: Path, policies: str, budgets: str, pool: str) -> list[dict[str, Any]]:
    data = json.loads(
        _run(["replay", str(ledger), "--policy", policies, "--budget", budgets, "--pool", pool, "--json"])
    )
    return [{**r, "pool": pool} for r in data["results"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--regimes", default=REGIMES)
    ap.add_argument("--policies", default="boe,bayes", help="controllers of the fixed pools")
    ap.add_argument("--budgets", default="8,12,16,20", help="one budget of the adaptive pool: samples and checks")
    ap.add_argument("--sample-cost", type=float, default=0.25)
    ap.add_argument("--sample-tokens", type=float, default=16.6)
    ap.add_argument("--unit-tokens", type=float, default=450 / 4)
    ap.add_argument("--keep", type=Path, default=None, help="keep the ledgers and the JSON rows in this folder")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="boe-pool-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for regime in args.regimes.split(","):
        ledger = folder / f"{regime}.jsonl"
        _run(
            ["sim", "ledger", "--kind", "pool", "--profile", regime, "--n", str(args.n), "--k", "16"]
            + ["--seed", str(args.seed), "--sample-cost", str(args.sample_cost)],
            out=ledger,
        )
        found = [r for k in (4, 8) for r in _replay(ledger, args.policies, "16", f"fixed:{k}")]
        found += _replay(ledger, args.policies, "16", "fixed")
        found += _replay(ledger, "bayes", args.budgets, "adaptive")
        for r in found:
            checks = r["total_cost"] - r["sample_cost"]
            tokens = r["samples"] * args.sample_tokens + checks * args.unit_tokens
            rows.append({"regime": regime, **r, "checks": checks, "tokens": tokens})
            print(
                f"{regime:<11} {r['pool']:<9} {r['policy']:<6} budget {r['budget']:>4g}  accuracy {r['accuracy']:.4f}"
                f"  samples {r['samples']:5.2f}  total {r['total_cost']:6.2f}  tokens {tokens:7.0f}"
                f"  (Oracle@16 {r['oracle_at_k']:.4f})",
                flush=True,
            )
    (folder / "adaptive_pool.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(f"rows: {folder / 'adaptive_pool.json'}")


if __name__ == "__main__":
    main()
