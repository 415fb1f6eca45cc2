"""How few samples could an adaptive pool draw (issue 26)? A label-guided STOPPING diagnostic with the real
`bayes` selection and checks: the adaptive pool's own steps (draw or check, whichever its rule values more per
unit cost), but a question stops at the first step at which the selected answer is right (read off the labels).

    python benchmarks/pool_ceiling.py --ledgers /tmp/orc          # the seed-26 ledgers R.jsonl, one per regime
    python benchmarks/pool_ceiling.py --n 300 --regimes default --starts 1,2,4 --etas 0.01,0.02

Per regime and start (``--starts``, rounds of ``--round``), printed beside fixed K=16 with `bayes` at budget 16
(the reference, replayed in the same run): the accuracy, mean samples and mean total cost of the label-guided
stop at budget ``--budget``, and the mean samples it needs to be within 0.5 pp of the reference -- the questions
it got right with the fewest samples, as many as that accuracy takes, the others charged the start only; then,
under the same cross-fitted calibration, the deployable rule (`AdaptivePool`) at each price of ``--etas``, with
its mean samples where it is within 0.5 pp of the reference. A deployable rule cannot stop better than the
label-guided stop with the same steps: it is the ceiling the stopping rule is measured against (`bound.py`-style
figures that draw until the first correct sample assume a perfect selector; this one selects with the posterior
and checks that replay uses). Calibrated crossfit:5 (held out by question), like `benchmarks/adaptive_pool.py`.
Labels are read only to stop; the steps, fits and selection never read them.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from boe.api import load_questions
from boe.core.bayes import Bayes
from boe.core.policies import IntArr
from boe.core.pool import AdaptivePool, PoolSpec
from boe.core.replay import plan_calibration, replay
from boe.core.state import EvidenceState

REGIMES = "default,weak-judge,misread-coherent,misread,flat-weak-judge"


class LabelStop(AdaptivePool):
    """The adaptive pool's steps, stopping as soon as the selected answer is right (non-deployable)."""

    deployable: ClassVar[bool] = False
    reads_labels: ClassVar[bool] = True

    def __init__(self, step: int, start: int) -> None:
        super().__init__(Bayes(), step, start=start)
        self.deployable = False  # type: ignore[misc]
        self.reads_labels = True  # type: ignore[misc]
        self.name = "label-stop"

    def choose(self, state: EvidenceState) -> IntArr:
        step = super().choose(state)
        assert state.labels is not None
        sel = np.maximum(self.select(state), 0)
        right = state.labels.utility[np.arange(state.n), sel] > 0
        return np.where(right, -1, step)


def _plan(questions: list[Any], keys: list[str], policy: Any) -> Any:
    return plan_calibration(
        questions, keys, "crossfit:5", extra_fit=lambda qs, train, cal: policy.fit_extra(qs, train, cal, keys)
    )


def _right(questions: list[Any], selected: IntArr) -> np.ndarray:
    return np.array([float(q.utility[s]) > 0 if s >= 0 else False for q, s in zip(questions, selected, strict=True)])


def _within(right: np.ndarray, samples: np.ndarray, start: int, reference: float) -> float:
    """Mean samples if only the questions answered right with the fewest samples, as many as ``reference`` - 0.5 pp
    takes, drew what they drew and every other question stopped at ``start``."""
    need = math.ceil((reference - 0.005) * right.size)
    drawn = np.sort(samples[right])[:need]
    return float((drawn.sum() + (right.size - drawn.size) * start) / right.size) if drawn.size >= need else math.inf


def measure(ledger: Path, start: int, step: int, budget: float, etas: list[float]) -> list[dict[str, Any]]:
    """The label-guided stop and the deployable rule at each price, under one cross-fitted calibration."""
    loaded = load_questions([ledger])
    qs, keys = loaded.questions, loaded.groups.keys
    ceiling = LabelStop(step, start)
    rules = [AdaptivePool(Bayes(), step, eta=eta, start=start) for eta in etas]
    spec = PoolSpec("adaptive", start=start, step=step)
    runs = replay(qs, keys, [ceiling, *rules], [budget], _plan(qs, keys, ceiling), pool=spec)
    out = []
    for name, r in zip(["label-stop"] + [f"adaptive eta={e:g}" for e in etas], runs, strict=True):
        assert r.samples is not None
        right = _right(qs, r.selected)
        out.append({"row": name, "right": right, "samples": r.samples.astype(np.float64), "total": r.cost})
    return out


def reference(ledger: Path) -> float:
    """Accuracy of `bayes` on the whole pool at budget 16 (the issue's reference: fixed K=16)."""
    loaded = load_questions([ledger])
    qs, keys = loaded.questions, loaded.groups.keys
    pol = Bayes()
    run = replay(qs, keys, [pol], [16.0], _plan(qs, keys, pol))
    return float(_right(qs, run[0].selected).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=Path, default=None, help="folder of R.jsonl per regime (else simulated)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--regimes", default=REGIMES)
    ap.add_argument("--starts", default="1,2,4", help="--pool-start values")
    ap.add_argument("--round", type=int, default=1, help="candidates per draw")
    ap.add_argument("--budget", type=float, default=16.0, help="the adaptive pool's one budget")
    ap.add_argument("--etas", default="0.005,0.01,0.02,0.04", help="prices of the deployable rule (--eta)")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="boe-ceiling-"))
    etas = [float(e) for e in args.etas.split(",") if e]
    print("| regime | fixed:16 @16 | start | stop rule | accuracy | samples | total | within 0.5 pp, samples |")
    print("|---|---|---|---|---|---|---|---|")
    for regime in args.regimes.split(","):
        ledger = (args.ledgers / f"{regime}.jsonl") if args.ledgers else folder / f"{regime}.jsonl"
        if args.ledgers is None:
            exe = Path(sys.executable).with_name("boe")
            cmd = [str(exe), "sim", "ledger", "--kind", "pool", "--profile", regime, "--n", str(args.n)]
            cmd += ["--k", "16", "--seed", str(args.seed), "--sample-cost", "0.25"]
            with open(ledger, "w") as fh:
                subprocess.run(cmd, stdout=fh, check=True)
        ref = reference(ledger)
        for start in (int(s) for s in args.starts.split(",")):
            for row in measure(ledger, start, args.round, args.budget, etas):
                right, samples = row["right"], row["samples"]
                within = (
                    f"{_within(right, samples, start, ref):.2f} (easiest)"
                    if row["row"] == "label-stop"
                    else f"{samples.mean():.2f}"
                    if right.mean() >= ref - 0.005
                    else "no"
                )
                print(
                    f"| `{regime}` | {ref:.3f} | {start} | {row['row']} | {right.mean():.3f} | {samples.mean():.2f} "
                    f"| {row['total'].mean():.2f} | {within} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
