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


__all__ = ["literal_calibration", "literal_pool_replay", "literal_prefix", "literal_replay"]

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


def literal_prefix(rec: LedgerRecord, k: int) -> LedgerRecord:
    """The record of the first ``k`` candidates (spec section 12): the claims one of them asserts, their edges to
    those claims, and the actions those claims and candidates make available, in file order (all of the record
    at k = K: a claim nobody asserts needs the whole pool)."""
    if k >= len(rec.candidates):
        return rec
    cands = rec.candidates[:k]
    asserted = {e.claim for e in rec.edges if e.candidate < k and e.sign == 1}
    claims = [c for c in rec.claims if c.id in asserted]
    edges = [e for e in rec.edges if e.candidate < k and e.claim in asserted]
    actions = []
    for a in rec.actions:
        target = _target(rec, a.kind)
        if (target == "claim" and a.claim in asserted) or (
            target != "claim" and a.candidate is not None and a.candidate < k
        ):
            actions.append(a)
    return rec.model_copy(update={"candidates": cands, "claims": claims, "edges": edges, "actions": actions})


class _Literal:
    """One question's scores and its policy's next proposal, read off the spec term by term."""

    def __init__(self, rec: LedgerRecord, calibration: dict[str, object]) -> None:
        self.rec = rec
        self.groups: dict[str, dict[str, object]] = calibration["groups"]  # type: ignore[assignment]
        self.cheap = float(calibration.get("cheap_kappa", 0.55))  # type: ignore[arg-type]
        self.k = len(rec.candidates)
        self.pos = {a.id: i for i, a in enumerate(rec.actions)}

    def prior(self) -> list[float]:
        rec, k = self.rec, self.k
        keys = [c.answer.strip().lower() if (c.valid and c.answer is not None) else None for c in rec.candidates]
        n = [sum(1 for kk in keys if kk is not None and kk == key) if key is not None else 0 for key in keys]
        return [_wt(self.cheap) * (n[i] - k / 2) for i in range(k)]

    def params(self, a: int) -> tuple[float, dict[str, float]]:
        g = self.groups.get(f"{self.rec.dataset}/{self.rec.actions[a].group}")
        if g is None:
            return 0.5, {"confirm": 1 / 3, "reject": 1 / 3, "unresolved": 1 / 3}
        return float(g["kappa"]), dict(g["p"])  # type: ignore[call-overload, arg-type]

    def updated(self, cur: list[float], a: int, o: str) -> list[float]:
        kappa, _ = self.params(a)
        w = _wt(kappa)
        al = _alpha(self.rec, a, o)
        return [cur[i] + al[i] * w for i in range(self.k)]

    def scores(self, bought: list[str]) -> list[float]:
        """The cheap prior, then each bought action's update in purchase order (by id)."""
        logit = self.prior()
        for aid in bought:
            a = self.pos[aid]
            logit = self.updated(logit, a, self.rec.actions[a].outcome)
        return logit

    def evsi(self, cur: list[float], a: int) -> float:
        _, p = self.params(a)
        total = 0.0
        for o in OUTCOMES:
            total += p[o] * max(_s(x) for x in self.updated(cur, a, o))
        return total - max(_s(x) for x in cur)

    def feasible(self, policy: str, taken: set[str], room: float) -> list[int]:
        """The actions (positions) the policy may still propose: not failed, not ``taken`` (bought or refused
        ids), within the budget ``room``, of the targets the policy buys."""
        rec = self.rec
        feasible = [
            a for a, act in enumerate(rec.actions) if not act.failed and act.id not in taken and act.cost <= room
        ]
        if policy in ("boe-factor", "random-factor", "label-guided"):
            return [a for a in feasible if _target(rec, rec.actions[a].kind) == "claim"]
        if policy == "whole":
            return [a for a in feasible if _target(rec, rec.actions[a].kind) != "claim"]
        return feasible

    def propose(
        self, policy: str, logit: list[float], taken: set[str], room: float, eta: float, rng: random.Random | None
    ) -> int | None:
        """The next action (its position) the policy proposes, or None to stop; ``taken`` bought or refused ids."""
        feasible = [] if policy == "raw" else self.feasible(policy, taken, room)
        return self.choose(policy, feasible, logit, eta, rng) if feasible else None

    def choose(
        self, policy: str, feasible: list[int], logit: list[float], eta: float, rng: random.Random | None
    ) -> int | None:
        """The policy's proposal among the (non-empty) ``feasible`` actions (None: it stops)."""
        rec = self.rec
        if policy in ("boe", "boe-factor"):
            values = [self.evsi(logit, a) / rec.actions[a].cost for a in feasible]
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
                sel = _first_max([_s(x) for x in self.updated(logit, a, rec.actions[a].outcome)])
                utils.append(float(rec.candidates[sel].utility))  # type: ignore[arg-type]
            return feasible[_first_max(utils)]
        raise ValueError(policy)


def _transcript(
    rec: LedgerRecord, policy: str, budget: float, logit: list[float], actions: list[str], cost: float
) -> dict[str, object]:
    """The spec section 7 fields every replay of one question reports: its selection under the final scores."""
    scores = [_s(x) for x in logit]
    sel = _first_max(scores)
    return {
        "question_id": rec.question_id,
        "policy": policy,
        "budget": budget,
        "selected": sel,
        "actions": actions,
        "cost": cost,
        "scores": scores,
        "utility": rec.candidates[sel].utility,
    }


def literal_replay(
    rec: LedgerRecord,
    calibration: dict[str, object],
    policy: str,
    budget: float,
    eta: float = 0.0,
    rng: random.Random | None = None,
) -> dict[str, object]:
    """Replay one question under one policy; returns the spec section 7 transcript fields."""
    q = _Literal(rec, calibration)
    logit = q.prior()
    bought: list[int] = []
    refused: list[int] = []  # skipped actions the policy proposed (spec section 10)
    spent = 0.0
    while True:
        taken = {rec.actions[a].id for a in bought + refused}
        choice = q.propose(policy, logit, taken, budget - spent, eta, rng)
        if choice is None:
            break
        if rec.actions[choice].skipped is not None:  # refused: not bought, and the policy proposes again
            refused.append(choice)
            continue
        bought.append(choice)
        spent += rec.actions[choice].cost
        logit = q.updated(logit, choice, rec.actions[choice].outcome)
    out = _transcript(rec, policy, budget, logit, [rec.actions[a].id for a in bought], spent)
    if refused:
        out["skipped"] = [rec.actions[a].id for a in sorted(refused)]
    return out


def literal_pool_replay(
    rec: LedgerRecord,
    calibration: dict[str, object],
    policy: str,
    budget: float,
    *,
    start: int,
    step: int,
    sample_cost: float,
    charge: bool = True,
    greedy: bool = True,
    eta: float = 0.0,
    rng: random.Random | None = None,
) -> dict[str, object]:
    """Spec section 12 on one question: the pool starts with ``start`` candidates (as many as the budget pays
    for), and whenever the policy stops a round of up to ``step`` more is drawn while candidates remain and
    the budget pays (``greedy``; otherwise never: ``fixed:start``). A candidate costs its recorded ``cost``,
    else ``sample_cost``; ``charge=False`` pays nothing for samples (a fixed pool of the first K)."""
    costs = [float(c.cost) if c.cost is not None else sample_cost for c in rec.candidates]
    if not charge:
        costs = [0.0] * len(costs)
    total = len(costs)

    def s_of(k: int) -> float:  # the first k candidates' costs summed in index order
        acc = 0.0
        for c in costs[:k]:
            acc += c
        return acc

    if s_of(1) > budget:
        raise ValueError("the budget cannot pay for the first sample")
    k = 1
    while k < min(max(start, 1), total) and s_of(k + 1) <= budget:
        k += 1
    bought: list[str] = []
    refused: list[str] = []
    checks = 0.0  # the checks' costs in purchase order
    draws = [[0, k]]
    while True:
        q = _Literal(literal_prefix(rec, k), calibration)
        logit = q.scores(bought)
        spent = s_of(k) + checks
        choice = q.propose(policy, logit, set(bought) | set(refused), budget - spent, eta, rng)
        if choice is not None:
            act = q.rec.actions[choice]
            if act.skipped is not None:
                refused.append(act.id)
            else:
                bought.append(act.id)
                checks += act.cost
            continue
        m = min(step, total - k) if greedy else 0
        while m > 0 and s_of(k + m) + checks > budget:
            m -= 1
        if m == 0:
            break
        k += m
        draws.append([len(bought), k])
    out = _transcript(rec, policy, budget, logit, bought, s_of(k) + checks if charge else checks)
    if refused:
        out["skipped"] = sorted(refused, key=[a.id for a in rec.actions].index)
    out["samples"] = k
    out["draws"] = draws
    return out
