"""Which features tell an adaptive pool when to stop drawing (issue 26)? Stopping rules compared on the held-out
picks of the `bayes` posterior of every pool of the first k candidates, before any check.

    python benchmarks/pool_stop_features.py --ledgers /tmp/orc --regimes default,misread-coherent

For each question and pool size k (start 1, rounds of 1 by default), the pick of the model fitted on the training
pools' first k candidates (crossfit:5, `AdaptivePool.fit_extra`, as replay fits it) and what a rule may read of it:
the probability the posterior gives its pick, the pick's vote share, the number of distinct answers, whether the
pick is the one of the pool before. A rule draws one more round while the measured gain in P(right) it predicts,
per unit cost of the samples, exceeds a price eta; the gains are mean changes in the correctness of the pick over
the training folds' pools, binned by the rule's features (shrunk to the size's mean like `GainTable`):

* ``conf``: the posterior's confidence in its pick (what `GainTable` bins by), the best over every larger size;
* ``conf+share``, ``conf+distinct``, ``conf+stable``: that, crossed with one more feature;
* ``chain``: optimal stopping at price eta over a Markov chain of (size, confidence bin) fitted on the training
  folds (stop where P(right | size, bin) beats the expected value of drawing on, less its price).

Printed per regime: accuracy and mean samples at each price, against the pick of all 16 without checks and the
label-guided stop (the first k whose pick is right; the fewest samples for within 0.5 pp of the 16). No checks
are bought: it isolates what a stopping rule can read from the pool drawn.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from boe.api import load_questions
from boe.core.bayes import BAYES_KEY, Bayes, BayesModel
from boe.core.pool import AdaptivePool, predictive_of, prefix_question, selected_confidence, sized_key
from boe.core.replay import plan_calibration
from boe.core.state import bind_questions

REGIMES = "default,weak-judge,misread-coherent,misread,flat-weak-judge"
EDGES = np.array([0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98])  # as `boe.core.pool.GAIN_EDGES`, inner edges
SHRINK = 20.0
RULES = ("conf", "conf+share", "conf+distinct", "conf+stable", "chain")


def picks(ledger: Path, start: int, step: int) -> dict[str, Any]:
    """Per pool size and question: right, confidence, vote share, distinct answers (per candidate) and the pick's
    answer, under the held-out pool-size model; and each question's fold."""
    loaded = load_questions([ledger])
    qs, keys = loaded.questions, loaded.groups.keys
    pol = AdaptivePool(Bayes(), step, start=start)
    plan = plan_calibration(qs, keys, "crossfit:5", extra_fit=lambda q, tr, cal: pol.fit_extra(q, tr, cal, keys))
    assert plan.of_question is not None
    sizes = predictive_of(plan.calibrations[0]).sizes or []
    out = np.zeros((len(sizes), len(qs), 5))
    for f, cal in enumerate(plan.calibrations):
        rows = np.nonzero(plan.of_question == f)[0]
        model = BayesModel.model_validate(predictive_of(cal).bayes)
        sized = cal.model_copy(update={"extra": {**cal.extra, BAYES_KEY: model}})
        for i, k in enumerate(sizes):
            sub = [prefix_question(qs[r], k, sized_key(qs[r].dataset, k)) for r in rows]
            state = bind_questions(sub, np.arange(len(sub)), [sized], None, list(keys), budget=1.0)
            bayes = Bayes()
            bayes.start(state)
            sel = np.maximum(bayes.select(state), 0)
            conf = selected_confidence(bayes, state)
            for j, (q, s) in enumerate(zip(sub, sel.tolist(), strict=True)):
                a = int(q.answer_id[s])
                drawn = q.answer_id[q.answer_id >= 0]
                share = float((q.answer_id == a).sum()) / q.k if a >= 0 else 0.0
                out[i, rows[j]] = (float(q.utility[s]) > 0, conf[j], share, np.unique(drawn).size / q.k, a)
    return {"sizes": sizes, "x": out, "fold": plan.of_question}


def _bins(data: dict[str, Any], rule: str) -> np.ndarray:
    x = data["x"]
    b = np.digitize(x[:, :, 1], EDGES)
    if rule == "conf+share":
        return b * 3 + np.digitize(x[:, :, 2], [0.5, 0.99])
    if rule == "conf+distinct":
        return b * 3 + np.digitize(x[:, :, 3], [0.34, 0.67])
    if rule == "conf+stable":
        stable = np.zeros(x.shape[:2], dtype=np.intp)
        stable[1:] = x[1:, :, 4] == x[:-1, :, 4]
        return b * 2 + stable
    return b


def _binned_mean(value: np.ndarray, b: np.ndarray, n_b: int) -> np.ndarray:
    times = np.bincount(b, minlength=n_b)
    return (np.bincount(b, weights=value, minlength=n_b) + SHRINK * value.mean()) / (times + SHRINK)


def _go(data: dict[str, Any], rule: str, train: np.ndarray, eta: float, cost: float) -> np.ndarray:
    """(sizes, bins): draw on from this size and bin."""
    sizes, right = data["sizes"], data["x"][:, :, 0]
    bins = _bins(data, rule)
    n_s, n_b = len(sizes), int(bins.max()) + 1
    go = np.zeros((n_s, n_b), dtype=bool)
    if rule == "chain":
        value = _binned_mean(right[-1, train], bins[-1, train], n_b)
        for i in range(n_s - 2, -1, -1):
            b, b2 = bins[i, train], bins[i + 1, train]
            moves = np.zeros((n_b, n_b))
            np.add.at(moves, (b, b2), 1.0)
            moves = (moves + SHRINK * np.bincount(b2, minlength=n_b) / b2.size) / (moves.sum(1, keepdims=True) + SHRINK)
            on = moves @ value - eta * cost * (sizes[i + 1] - sizes[i])
            now = _binned_mean(right[i, train], b, n_b)
            go[i] = on > now
            value = np.maximum(now, on)
        return go
    for i in range(n_s - 1):
        b = bins[i, train]
        best = np.full(n_b, -np.inf)
        for j in range(i + 1, n_s):
            gain = _binned_mean(right[j, train] - right[i, train], b, n_b)
            best = np.maximum(best, gain / ((sizes[j] - sizes[i]) * cost))
        go[i] = best > eta
    return go


def stop(data: dict[str, Any], rule: str, eta: float, cost: float) -> tuple[float, float]:
    """Accuracy and mean samples of ``rule`` at price ``eta``, every fold's rule fitted on the other folds."""
    sizes, right, fold = data["sizes"], data["x"][:, :, 0], data["fold"]
    bins = _bins(data, rule)
    at = np.zeros(fold.size, dtype=np.intp)
    for f in np.unique(fold).tolist():
        go = _go(data, rule, fold != f, eta, cost)
        for q in np.nonzero(fold == f)[0].tolist():
            i = 0
            while i < len(sizes) - 1 and go[i, bins[i, q]]:
                i += 1
            at[q] = i
    return float(right[at, np.arange(fold.size)].mean()), float(np.asarray(sizes)[at].mean())


def label_stop(data: dict[str, Any]) -> tuple[float, float]:
    """The label-guided stop: accuracy, and the fewest mean samples within 0.5 pp of the pick of all K."""
    sizes, right = np.asarray(data["sizes"]), data["x"][:, :, 0] > 0
    n = right.shape[1]
    first = np.where(right.any(axis=0), sizes[np.argmax(right, axis=0)], np.inf)
    need = math.ceil((right[-1].mean() - 0.005) * n)
    drawn = np.sort(first)[:need]
    return float(right.any(axis=0).mean()), float((drawn.sum() + (n - need) * sizes[0]) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=Path, required=True, help="folder of R.jsonl per regime (K_max 16)")
    ap.add_argument("--regimes", default=REGIMES)
    ap.add_argument("--start", type=int, default=1)
    ap.add_argument("--round", type=int, default=1)
    ap.add_argument("--sample-cost", type=float, default=0.25)
    ap.add_argument("--etas", default="0.005,0.01,0.02,0.04,0.08")
    args = ap.parse_args()
    etas = [float(e) for e in args.etas.split(",")]
    for regime in args.regimes.split(","):
        data = picks(args.ledgers / f"{regime}.jsonl", args.start, args.round)
        acc, within = label_stop(data)
        print(
            f"Regime `{regime}`: all {data['sizes'][-1]} without checks {data['x'][-1, :, 0].mean():.3f}; "
            f"label-guided stop {acc:.3f}, {within:.2f} samples within 0.5 pp\n"
        )
        print("| rule | " + " | ".join(f"eta {e:g}" for e in etas) + " |")
        print("|---|" + "---|" * len(etas))
        for rule in RULES:
            cells = [stop(data, rule, e, args.sample_cost) for e in etas]
            print(f"| {rule} | " + " | ".join(f"{a:.3f} @ {s:.2f}" for a, s in cells) + " |", flush=True)
        print()


if __name__ == "__main__":
    main()
