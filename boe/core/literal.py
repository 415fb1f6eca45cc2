"""A literal, per-question, pure-Python reading of spec/ledger-v1.md.

Slow on purpose: it works on the validated records with dicts, lists and
`math`, one question and one action at a time, and exists to check the
vectorised engine (tests) and to measure it (benchmarks). It shares no code
with `boe.core.replay` beyond the record models.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from boe.core.ledger import OUTCOMES, LedgerRecord, kind_targets


def _target(rec: LedgerRecord, kind: str) -> str:
    """claim, response or answer: the core kinds' targets and those the record declares (spec sections 1, 8, 9)."""
    return kind_targets(None if rec.kinds is None else {k: d.target for k, d in rec.kinds.items()})[kind]


__all__ = ["literal_calibration", "literal_replay"]

TOL = 1e-12


def _wt(k: float) -> float:
    return math.log(k / (1 - k))


def _s(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _alpha(rec: LedgerRecord, action_pos: int, outcome: str) -> list[int]:
    act = rec.actions[action_pos]
    k = len(rec.candidates)
    out = [0] * k
    if outcome == "unresolved":
        return out
    flip = 1 if outcome == "confirm" else -1
    target = _target(rec, act.kind)
    if target == "claim":
        for e in rec.edges:
            if e.claim == act.claim:
                out[e.candidate] = flip * e.sign
    elif target == "answer":
        # spec section 8: every valid candidate whose normalised answer equals the representative's
        rep = rec.candidates[act.candidate]  # type: ignore[index]
        assert rep.valid and rep.answer is not None
        key = rep.answer.strip().lower()
        for i, c in enumerate(rec.candidates):
            if c.valid and c.answer is not None and c.answer.strip().lower() == key:
                out[i] = flip
    else:
        out[act.candidate] = flip  # type: ignore[index]
    return out


def literal_calibration(records: Iterable[LedgerRecord], cheap_kappa: float = 0.55) -> dict[str, object]:
    """Spec section 4 on the given records, as a calibration-file dict."""
    pos: dict[str, list[float]] = {}
    neg: dict[str, list[float]] = {}
    outs: dict[str, dict[str, int]] = {}
    for rec in records:
        for a, act in enumerate(rec.actions):
            if act.failed:  # spec section 1: calibration never counts a failed check
                continue
            g = f"{rec.dataset}/{act.group}"
            pos.setdefault(g, [])
            neg.setdefault(g, [])
            outs.setdefault(g, {o: 0 for o in OUTCOMES})[act.outcome] += 1
            for i, al in enumerate(_alpha(rec, a, act.outcome)):
                u = rec.candidates[i].utility
                if u is None:
                    continue
                if al == 1:
                    pos[g].append(u)
                elif al == -1:
                    neg[g].append(u)
    groups = {}
    for g, counts in outs.items():
        if pos[g] and neg[g]:
            kappa = 0.5 + 0.5 * (sum(pos[g]) / len(pos[g]) - sum(neg[g]) / len(neg[g]))
        else:
            kappa = 0.5
        kappa = min(max(kappa, 0.001), 0.999)
        total = sum(counts.values())
        groups[g] = {"kappa": kappa, "p": {o: counts[o] / total for o in OUTCOMES}}
    return {"cheap_kappa": cheap_kappa, "groups": groups}


def _first_max(values: list[float]) -> int:
    top = max(values)
    for i, v in enumerate(values):
        if v >= top - TOL:
            return i
    raise AssertionError("unreachable")


def literal_replay(
    rec: LedgerRecord,
    calibration: dict[str, object],
    policy: str,
    budget: float,
    eta: float = 0.0,
    rng: random.Random | None = None,
) -> dict[str, object]:
    """Replay one question under one policy; returns the spec section 7 transcript fields."""
    groups: dict[str, dict[str, object]] = calibration["groups"]  # type: ignore[assignment]
    cheap = float(calibration.get("cheap_kappa", 0.55))  # type: ignore[arg-type]
    k = len(rec.candidates)
    keys = [c.answer.strip().lower() if (c.valid and c.answer is not None) else None for c in rec.candidates]
    n = [sum(1 for kk in keys if kk is not None and kk == key) if key is not None else 0 for key in keys]
    logit = [_wt(cheap) * (n[i] - k / 2) for i in range(k)]
    bought: list[int] = []
    refused: list[int] = []  # skipped actions the policy proposed (spec section 10)
    spent = 0.0
    while policy != "raw":
        feasible = _feasible(rec, policy, budget - spent, bought + refused)
        choice = _choose(rec, groups, policy, feasible, logit, eta, rng) if feasible else None
        if choice is None:
            break
        if rec.actions[choice].skipped is not None:  # refused: not bought, and the policy proposes again
            refused.append(choice)
            continue
        bought.append(choice)
        spent += rec.actions[choice].cost
        logit = _updated(rec, groups, logit, choice, rec.actions[choice].outcome)
    sel = _select(logit)
    out: dict[str, object] = {
        "question_id": rec.question_id,
        "policy": policy,
        "budget": budget,
        "selected": sel,
        "actions": [rec.actions[a].id for a in bought],
        "cost": spent,
        "scores": [_s(x) for x in logit],
        "utility": rec.candidates[sel].utility,
    }
    if refused:
        out["skipped"] = [rec.actions[a].id for a in sorted(refused)]
    return out


Groups = dict[str, dict[str, object]]


def _params(rec: LedgerRecord, groups: Groups, a: int) -> tuple[float, dict[str, float]]:
    """(kappa, outcome probabilities) of action ``a``'s group; kappa 0.5 and uniform outcomes when unfitted."""
    g = groups.get(f"{rec.dataset}/{rec.actions[a].group}")
    if g is None:
        return 0.5, {"confirm": 1 / 3, "reject": 1 / 3, "unresolved": 1 / 3}
    return float(g["kappa"]), dict(g["p"])  # type: ignore[call-overload, arg-type]


def _updated(rec: LedgerRecord, groups: Groups, cur: list[float], a: int, o: str) -> list[float]:
    """The logits after action ``a`` revealed outcome ``o``."""
    kappa, _ = _params(rec, groups, a)
    w = _wt(kappa)
    al = _alpha(rec, a, o)
    return [cur[i] + al[i] * w for i in range(len(cur))]


def _select(cur: list[float]) -> int:
    return _first_max([_s(x) for x in cur])


def _evsi(rec: LedgerRecord, groups: Groups, cur: list[float], a: int) -> float:
    """The expected gain in the top score from revealing action ``a``."""
    _, p = _params(rec, groups, a)
    total = 0.0
    for o in OUTCOMES:
        total += p[o] * max(_s(x) for x in _updated(rec, groups, cur, a, o))
    return total - max(_s(x) for x in cur)


def _feasible(rec: LedgerRecord, policy: str, left: float, proposed: list[int]) -> list[int]:
    """The actions the policy may still propose: not failed, not proposed before, within the budget ``left``,
    of the targets the policy buys."""
    feasible = [a for a, act in enumerate(rec.actions) if not act.failed and a not in proposed and act.cost <= left]
    if policy in ("boe-factor", "random-factor", "label-guided"):
        return [a for a in feasible if _target(rec, rec.actions[a].kind) == "claim"]
    if policy == "whole":
        return [a for a in feasible if _target(rec, rec.actions[a].kind) != "claim"]
    return feasible


def _choose(
    rec: LedgerRecord,
    groups: Groups,
    policy: str,
    feasible: list[int],
    logit: list[float],
    eta: float,
    rng: random.Random | None,
) -> int | None:
    """The policy's proposal among ``feasible`` (None: it stops)."""
    if policy in ("boe", "boe-factor"):
        values = [_evsi(rec, groups, logit, a) / rec.actions[a].cost for a in feasible]
        j = _first_max(values)
        return None if values[j] <= eta + TOL else feasible[j]
    if policy == "random-factor":
        assert rng is not None
        return rng.choice(feasible)
    if policy == "whole":
        s = [_s(x) for x in logit]
        sc = [s[rec.actions[a].candidate] for a in feasible]  # type: ignore[index]
        top = max(sc)
        tied = [a for a, v in zip(feasible, sc, strict=True) if v >= top - TOL]
        return min(tied, key=lambda a: (rec.actions[a].candidate, a))
    if policy == "label-guided":
        utils = []
        for a in feasible:
            sel = _select(_updated(rec, groups, logit, a, rec.actions[a].outcome))
            utils.append(float(rec.candidates[sel].utility))  # type: ignore[arg-type]
        return feasible[_first_max(utils)]
    raise ValueError(policy)
