"""How few samples does a stopping rule on the EXACT posterior need (issue 26)? The simulator's own model as a bound.

    python benchmarks/pool_model_bound.py --n 3000 --seed 41                 # the exact model, every check bought
    python benchmarks/pool_model_bound.py --n 1000 --seed 26 --ours          # ... and `bayes` beside it

For every question of ``boe sim ledger --kind pool --profile P --n N --k 16 --seed S`` and every first k of its
candidates (k = 1..16), the exact posterior over the true answer under the generator's own `PoolSpec`: the Beta
prior on a question's P(correct), the Zipf law of the wrong answers under an unknown ranking, the slot channels of
correct and wrong candidates (a slot's values exclusive, the true one uniform), and every check the first k
candidates' claims and responses offer, bought (``--checks none``: none). No model reads these observations better
(an exact posterior is calibrated, and its pick is the likeliest answer); a stopping rule that stops a question at
the first k whose pick has posterior >= tau (one tau for every k, and per-k thresholds chosen in-sample on the
labels, an optimistic figure) shows what accuracy is reachable at what mean number of samples, however many checks
are paid for (their mean cost is printed).

``--ours`` runs, for every k, ``boe replay L --policy bayes --pool adaptive --pool-start k --sample-cost 300
--budget 300 k + 290`` (no draw affordable; the `bayes` controller buys checks until none is worth buying,
crossfit:5) and applies the same threshold rule to the posterior `bayes` gives its pick: what the deployable
model could stop on, beside the exact one, and the exact model reading only the checks `bayes` bought (the
gap between the two is the posterior's, the rest the checks left unbought). Labels are read only to score (and
to choose the in-sample thresholds).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from boe.sim.ledgers import SLOT_VALUES, PoolSpec, pool_ledger, pool_spec, write_jsonl

SLOTS4 = ("modality", "region", "plane", "finding")


def check_ll(outcome: str, truth: bool, acc: float) -> float:
    """log P(outcome | the latent read is ``truth``) of a channel right with probability ``acc`` when resolved (the
    unresolved rate does not depend on the truth)."""
    if outcome == "unresolved":
        return 0.0
    right = (outcome == "confirm") == truth
    return math.log(acc if right else 1.0 - acc)


def wrong_term(counts: list[int], w: np.ndarray) -> float:
    """log of E over rankings of prod w_rank^n for the observed wrong answers."""
    m = len(counts)
    nw = len(w)
    if m == 0:
        return 0.0
    tot = 0.0
    for ranks in itertools.permutations(range(nw), m):
        p = 1.0
        for r, n in zip(ranks, counts, strict=True):
            p *= w[r] ** n
        tot += p
    return math.log(tot) - math.log(math.perm(nw, m))


def posteriors(rec: dict[str, Any], spec: PoolSpec, checks: str) -> list[tuple[float, bool]]:
    """`posterior_at` every pool size k = 1..K."""
    return [posterior_at(rec, spec, checks, k) for k in range(1, len(rec["candidates"]) + 1)]


def posterior_at(rec: dict[str, Any], spec: PoolSpec, checks: str, k: int) -> tuple[float, bool]:
    """The exact posterior probability of the pick among the first k candidates (the likeliest answer drawn),
    reading the checks of ``rec``'s actions that those candidates offer, and whether the pick is right.
    Hypotheses: each answer drawn, and one not drawn yet (any of the others, alike by symmetry)."""
    a_n = spec.answers
    w = 1.0 / np.arange(1, a_n)
    w /= w.sum()
    al, be = spec.difficulty
    acts = {a["id"]: a for a in rec["actions"]}
    rev = [c for c in rec["candidates"][:k] if c["valid"]]
    answers = [c["answer"] for c in rev]
    seen = list(dict.fromkeys(answers))
    if not seen:
        return 0.0, False
    hyps: list[str | None] = list(seen) + ([None] if len(seen) < a_n else [])
    n = len(rev)
    ll = np.zeros(len(hyps))
    for h, a in enumerate(hyps):
        c = sum(1 for x in answers if x == a)
        ll[h] += math.lgamma(c + al) + math.lgamma(n - c + be) - math.lgamma(n + al + be)
        counts = [answers.count(x) for x in seen if x != a]
        ll[h] += wrong_term(counts, w)
    # slots: correctness of each revealed candidate under each hypothesis
    corr = np.array([[1.0 if c["answer"] == a else 0.0 for c in rev] for a in hyps])  # H x n
    g = corr * spec.slot_good + (1 - corr) * spec.slot_bad
    lg = np.log(g)
    for s in SLOTS4:
        vals = SLOT_VALUES[s]
        lb = np.log((1 - g) / (len(vals) - 1))  # a slot value that is not the truth: one of the rivals
        m = np.zeros((n, len(vals)))
        e = np.zeros(n)
        present = set()
        for i, c in enumerate(rev):
            v = c["slots"].get(s)
            if v is not None:
                m[i, vals.index(v)] = 1
                e[i] = 1
                present.add(v)
        lt = (lg - lb) @ m + (lb * e).sum(axis=1)[:, None]  # H x T
        if checks == "all":
            ct = np.zeros(len(vals))
            for v in present:
                for tag, ch in (("s", spec.structured), ("v", spec.vlm), ("g", spec.grounded)):
                    act = acts.get(f"{tag}:{s}={v}")
                    if act is None:
                        continue
                    for t, tv in enumerate(vals):
                        ct[t] += check_ll(act["outcome"], tv == v, ch.acc)
            lt = lt + ct[None, :]
        mx = lt.max(axis=1, keepdims=True)
        ll += (mx[:, 0] + np.log(np.exp(lt - mx).sum(axis=1))) - math.log(len(vals))
    if checks == "all":
        for h, a in enumerate(hyps):
            for x in seen:
                for tag, ch in (("v", spec.vlm), ("g", spec.grounded)):
                    act = acts.get(f"{tag}:attribute={x}")
                    if act is not None:
                        ll[h] += check_ll(act["outcome"], x == a, ch.acc)
            for c in rev:
                act = acts.get(f"w:{c['index']}")
                if act is not None:
                    ll[h] += check_ll(act["outcome"], c["answer"] == a, spec.whole.acc)
    prior = np.zeros(len(hyps))
    if hyps and hyps[-1] is None:
        prior[-1] = math.log(a_n - len(seen))
    lp = ll + prior
    lp -= lp.max()
    p = np.exp(lp)
    p /= p.sum()
    best = int(np.argmax(p[: len(seen)]))
    return float(p[best]), seen[best] == rec["reference"]


def all_checks_cost(rec: dict[str, Any], k: int) -> float:
    """Design units of every check the first k candidates offer."""
    rev = [c for c in rec["candidates"][:k] if c["valid"]]
    claims = {f"{s}={v}" for c in rev for s, v in c["slots"].items() if v is not None}
    idx = {c["index"] for c in rev}
    return float(
        sum(
            a["cost"]
            for a in rec["actions"]
            if (a["claim"] in claims) or (a["claim"] is None and a["candidate"] in idx)
        )
    )


def stop(pm: np.ndarray, ok: np.ndarray, tau: np.ndarray, start: int = 1) -> tuple[float, float]:
    """Accuracy and mean samples of stopping at the first k >= start whose pick has P >= tau[k] (16 at most)."""
    n, kmax = pm.shape
    hit = pm >= tau[None, :]
    hit[:, kmax - 1] = True
    hit[:, : start - 1] = False
    t = hit.argmax(axis=1)
    return float(ok[np.arange(n), t].mean()), float((t + 1).mean())


TAUS = (0.8, 0.9, 0.93, 0.95, 0.96, 0.97, 0.98, 0.99)
LAMBDAS = (0.004, 0.006, 0.008, 0.01, 0.015, 0.02)
GRID = np.array([0.0, 0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 1.01])


def in_sample(pm: np.ndarray, ok: np.ndarray, lam: float) -> tuple[float, float]:
    """Per-k thresholds maximising accuracy - lam * samples on these very questions (coordinate ascent)."""
    kmax = pm.shape[1]
    tau = np.full(kmax, 0.95)
    for _ in range(3):
        for k in range(kmax - 1):
            scores = []
            for g in GRID:
                tau[k] = g
                a, s = stop(pm, ok, tau)
                scores.append(a - lam * s)
            tau[k] = GRID[int(np.argmax(scores))]
    return stop(pm, ok, tau)


def frontier(name: str, pm: np.ndarray, ok: np.ndarray) -> None:
    print(f"\n{name}: accuracy @ mean samples")
    print("| rule | " + " | ".join(f"tau {t}" for t in TAUS) + " |")
    print("|---|" + "---|" * len(TAUS))
    cells = [stop(pm, ok, np.full(pm.shape[1], t)) for t in TAUS]
    print("| one threshold | " + " | ".join(f"{a:.3f} @ {s:.2f}" for a, s in cells) + " |")
    cells = [in_sample(pm, ok, lam) for lam in LAMBDAS]
    print("| per-k thresholds, in-sample (lambda " + ", ".join(map(str, LAMBDAS)) + ") | ", end="")
    print(" | ".join(f"{a:.3f} @ {s:.2f}" for a, s in cells) + " |")


def ours(ledger: Path, workdir: Path, kmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[set[str]]]]:
    """Per k, the `bayes` posterior of its pick, whether it is right, the design units of checks it bought, and
    which (see the docstring)."""
    pm, ok, spent, bought = [], [], [], []
    for k in range(1, kmax + 1):
        out = workdir / f"k{k}.jsonl"
        cmd = ["boe", "replay", str(ledger), "--policy", "bayes", "--pool", "adaptive", "--pool-start", str(k)]
        cmd += ["--sample-cost", "300", "--budget", str(300 * k + 290), "--transcripts", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        pm.append([max(r["scores"], default=0.0) for r in rows])
        ok.append([r["utility"] == 1.0 for r in rows])
        spent.append([r["cost"] - 300 * k for r in rows])
        bought.append([set(r["actions"]) for r in rows])
    return np.array(pm).T, np.array(ok, dtype=float).T, np.array(spent, dtype=float).T, bought


def exact_with(records: list[dict[str, Any]], spec: PoolSpec, bought: list[list[set[str]]]) -> tuple[Any, Any]:
    """The exact model at every k reading only the checks `bayes` bought there: which part of the gap is the
    checks left unbought, which the posterior."""
    pm = np.zeros((len(records), len(bought)))
    ok = np.zeros_like(pm)
    for i, rec in enumerate(records):
        for k, at_k in enumerate(bought, start=1):
            sub = {**rec, "actions": [a for a in rec["actions"] if a["id"] in at_k[i]]}
            pm[i, k - 1], ok[i, k - 1] = posterior_at(sub, spec, "all", k)
    return pm, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--checks", choices=("all", "none"), default="all")
    ap.add_argument("--ours", action="store_true", help="run `bayes` at every pool size beside the exact model")
    args = ap.parse_args()
    spec = pool_spec(args.profile, sample_cost=0.25)
    if spec.misread or spec.echo or spec.answer is not None or spec.misread_slot is not None:
        sys.exit(f"profile {args.profile!r}: the exact model here covers no misreading, echo or answer checks")
    records = list(pool_ledger(args.n, seed=args.seed, spec=spec))
    rows = [posteriors(rec, spec, args.checks) for rec in records]
    pm = np.array([[r[0] for r in q] for q in rows])
    ok = np.array([[r[1] for r in q] for q in rows], dtype=float)
    kmax = pm.shape[1]
    cost = np.array([[all_checks_cost(rec, k) for k in range(1, kmax + 1)] for rec in records])
    print(f"profile {args.profile}, {args.n} questions, seed {args.seed}, K_max {kmax}, checks: {args.checks}")
    print("\n| k | " + " | ".join(str(k) for k in range(1, kmax + 1)) + " |")
    print("|---|" + "---|" * kmax)
    print("| exact model, accuracy | " + " | ".join(f"{x:.3f}" for x in ok.mean(axis=0)) + " |")
    # a self-check: an exact posterior is calibrated, its mean probability of the pick is the accuracy
    print("| exact model, mean P(pick) | " + " | ".join(f"{x:.3f}" for x in pm.mean(axis=0)) + " |")
    if args.checks == "all":
        print("| every check, design units | " + " | ".join(f"{x:.0f}" for x in cost.mean(axis=0)) + " |")
    frontier("exact model (the simulator's own)", pm, ok)
    if args.ours:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pool.jsonl"
            with path.open("w") as fh:
                write_jsonl(iter(records), fh)
            opm, ook, spent, bought = ours(path, Path(tmp), kmax)
        epm, eok = exact_with(records, spec, bought)
        print("\n| k | " + " | ".join(str(k) for k in range(1, kmax + 1)) + " |")
        print("|---|" + "---|" * kmax)
        print("| bayes, accuracy | " + " | ".join(f"{x:.3f}" for x in ook.mean(axis=0)) + " |")
        print("| bayes, checks bought | " + " | ".join(f"{x:.0f}" for x in spent.mean(axis=0)) + " |")
        frontier("bayes (fitted, crossfit:5)", opm, ook)
        print(
            "| exact model, the checks bayes bought, accuracy | " + " | ".join(f"{x:.3f}" for x in eok.mean(0)) + " |"
        )
        frontier("the exact model reading only the checks bayes bought", epm, eok)


if __name__ == "__main__":
    main()
