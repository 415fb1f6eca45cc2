"""Synthetic ledger-v1 generators.

* `factor_code_ledger`: the paper's Appendix construction. K = 2^M candidates,
  one per assignment of M binary claims; utility 1 for the true assignment.
  Factor checks read one coordinate through an exact or binary-symmetric
  channel; candidate checks say whether a whole assignment is the truth.
* `pool_ledger`: a noisy medical-VQA-like pool. A true answer, K sampled
  answers (plurality can be wrong), five slots whose values are exclusive
  (+1 for the asserted value, -1 for the rivals a candidate asserts
  against), and four channels (structured, VLM, grounded, whole response)
  with configurable accuracy, unresolved rate and cost. Optionally
  answer-level checks (one per distinct valid answer, ledger format 1.1),
  *systematic* errors (``misread``: wrong candidates that repeat one
  coherent misreading of the question, the same wrong answer and the same
  wrong slot values, so the wrong answers agree with each other) and
  an *echoing* judge: with probability ``echo`` a model channel (VLM,
  grounded, whole response, answer check) does not look and reports what
  most candidates say (a claim asserted by more candidates than deny it, an
  answer with the largest count), the way a judge that shares the
  generator's view behaves.

Both are deterministic functions of their parameters and seed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from boe.core.ledger import ANSWER_KIND, FACTOR_KINDS, WHOLE_KIND, format_for

# the ledger's kind names, from the schema (each kind is named once, in boe.kinds and the core's ledger schema)
STRUCTURED, VLM_FACTOR, GROUNDED_FACTOR = FACTOR_KINDS

__all__ = ["POOL_PROFILES", "ChannelSpec", "PoolSpec", "factor_code_ledger", "pool_ledger", "write_jsonl"]

SLOTS = ("modality", "region", "plane", "finding", "attribute")
SLOT_VALUES: dict[str, tuple[str, ...]] = {
    "modality": ("ct", "mr", "xr", "us", "angiography", "pet"),
    "region": ("head", "chest", "abdomen", "pelvis", "spine", "limb"),
    "plane": ("axial", "coronal", "sagittal", "pa", "ap", "lateral"),
    "finding": ("mass", "nodule", "effusion", "fracture", "hemorrhage", "normal"),
}


def _outcome(
    rng: np.random.Generator, truth: bool, acc: float, unresolved: float, echo: float = 0.0, pool: bool = False
) -> str:
    if rng.random() < unresolved:
        return "unresolved"
    if echo > 0 and rng.random() < echo:  # drawn only for echoing channels: echo 0 keeps the old stream
        return "confirm" if pool else "reject"
    correct = rng.random() < acc
    return "confirm" if truth == correct else "reject"


def factor_code_ledger(
    n: int,
    *,
    m: int = 6,
    seed: int = 0,
    rho: float = 1.0,
    whole_rho: float = 1.0,
    factor_cost: float = 4,
    whole_cost: float = 8,
    factor_kind: str = VLM_FACTOR,
    with_whole: bool = True,
    with_factors: bool = True,
    dataset: str = "factor-code",
) -> Iterator[dict[str, Any]]:
    """The factor-code construction; ``rho = 1`` is the exact channel, ``rho < 1`` binary-symmetric."""
    if m < 1 or m > 12:
        raise ValueError("m must be in 1..12")
    rng = np.random.default_rng(seed)
    k = 2**m
    codes = [format(c, f"0{m}b") for c in range(k)]
    for q in range(n):
        theta = rng.integers(0, 2, size=m)
        truth = "".join(str(b) for b in theta)
        # candidates in a random order so that index does not reveal the code
        order = rng.permutation(k)
        cands = [codes[c] for c in order]
        candidates = [
            {"index": i, "answer": code, "valid": True, "utility": 1.0 if code == truth else 0.0}
            for i, code in enumerate(cands)
        ]
        claims = [{"id": f"bit{j}=1", "slot": f"bit{j}", "value": "1", "figure": None} for j in range(m)]
        edges = [
            {"candidate": i, "claim": f"bit{j}=1", "sign": 1 if code[j] == "1" else -1}
            for j in range(m)
            for i, code in enumerate(cands)
        ]
        actions: list[dict[str, Any]] = []
        if with_factors:
            for j in range(m):
                bit = bool(theta[j])
                seen = bit if rng.random() < rho else not bit
                actions.append(
                    {
                        "id": f"f:bit{j}",
                        "kind": factor_kind,
                        "claim": f"bit{j}=1",
                        "candidate": None,
                        "cost": factor_cost,
                        "group": "factor",
                        "outcome": "confirm" if seen else "reject",
                    }
                )
        if with_whole:
            for i, code in enumerate(cands):
                right = code == truth
                seen = right if rng.random() < whole_rho else not right
                actions.append(
                    {
                        "id": f"w:{i}",
                        "kind": WHOLE_KIND,
                        "claim": None,
                        "candidate": i,
                        "cost": whole_cost,
                        "group": "whole",
                        "outcome": "confirm" if seen else "reject",
                    }
                )
        yield {
            "format": "boe-ledger/1",
            "question_id": f"{dataset}-{seed}-{q:06d}",
            "dataset": dataset,
            "task": {"question": "which code is the true assignment?", "image": None, "options": None},
            "reference": truth,
            "candidates": candidates,
            "claims": claims,
            "edges": edges,
            "actions": actions,
        }


@dataclass(frozen=True)
class ChannelSpec:
    """One evidence channel: accuracy of a resolved verdict, unresolved rate, cost."""

    acc: float
    unresolved: float
    cost: float


@dataclass(frozen=True)
class PoolSpec:
    """Parameters of the noisy medical-VQA-like pool."""

    k: int = 16
    answers: int = 6  # size of the answer vocabulary of a question
    difficulty: tuple[float, float] = (2.0, 2.0)  # Beta prior of a question's P(candidate correct)
    slot_good: float = 0.85  # P(slot value true | candidate correct)
    slot_bad: float = 0.45  # P(slot value true | candidate wrong)
    invalid: float = 0.05
    empty_slot: float = 0.1  # P(a candidate leaves a slot empty)
    structured_slots: tuple[str, ...] = ("modality", "region", "plane")
    structured: ChannelSpec = ChannelSpec(0.9, 0.3, 1)
    vlm: ChannelSpec = ChannelSpec(0.7, 0.15, 4)
    grounded: ChannelSpec = ChannelSpec(0.78, 0.2, 4)
    whole: ChannelSpec = ChannelSpec(0.72, 0.1, 8)
    answer: ChannelSpec | None = None  # answer-level checks, one per distinct valid answer (format 1.1)
    echo: float = 0.0  # P(a model channel reports the pool's view instead of looking)
    misread: float = 0.0  # P(a wrong candidate repeats the question's one coherent misreading)
    misread_slot: float | None = None  # P(a misreading candidate's slot holds the misread value) [slot_good]
    echo_kinds: tuple[str, ...] = (VLM_FACTOR, GROUNDED_FACTOR, WHOLE_KIND, ANSWER_KIND)
    dataset: str = "pool"
    extra: dict[str, Any] = field(default_factory=dict)
    sample_cost: float | None = None  # each candidate's sample cost: records of format 1.3 (spec section 12)


POOL_PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "easy": {"difficulty": (4.0, 2.0), "vlm": ChannelSpec(0.8, 0.1, 4), "grounded": ChannelSpec(0.85, 0.1, 4)},
    "hard": {"difficulty": (1.5, 3.0), "slot_good": 0.75, "slot_bad": 0.5},
    "weak-judge": {
        "vlm": ChannelSpec(0.58, 0.2, 4),
        "grounded": ChannelSpec(0.62, 0.2, 4),
        "whole": ChannelSpec(0.6, 0.1, 8),
    },
    "strong-structured": {"structured": ChannelSpec(0.97, 0.1, 1), "slot_bad": 0.35},
    "whole-strong": {"whole": ChannelSpec(0.9, 0.05, 8), "vlm": ChannelSpec(0.6, 0.2, 4)},
    # issue 18: answer-level checks, and model channels that echo the pool part of the time
    "answers": {"answer": ChannelSpec(0.8, 0.05, 8)},
    "echo": {"echo": 0.35},
    "echo-answers": {"echo": 0.35, "answer": ChannelSpec(0.8, 0.05, 8)},
    # issue 25: systematic errors, the wrong candidates agreeing on one misreading of the image
    "misread": {"misread": 0.7},
    # ... and misreadings more coherent than the correct readings: the pool's agreement points the wrong way
    "misread-coherent": {"misread": 0.9, "slot_good": 0.6, "misread_slot": 0.95},
    # ... and candidates whose other claims say nothing about whether their answer is right
    "flat": {"slot_good": 0.5, "slot_bad": 0.5},
    "flat-weak-judge": {
        "slot_good": 0.5,
        "slot_bad": 0.5,
        "vlm": ChannelSpec(0.58, 0.2, 4),
        "grounded": ChannelSpec(0.62, 0.2, 4),
        "whole": ChannelSpec(0.6, 0.1, 8),
    },
}


def pool_spec(profile: str = "default", **overrides: Any) -> PoolSpec:
    """A `PoolSpec` from a named profile plus overrides."""
    if profile not in POOL_PROFILES:
        raise ValueError(f"unknown pool profile {profile!r}; known: {', '.join(POOL_PROFILES)}")
    params = {**POOL_PROFILES[profile], **{k: v for k, v in overrides.items() if v is not None}}
    if "dataset" not in params:
        params["dataset"] = f"pool-{profile}" if profile != "default" else "pool"
    return PoolSpec(**params)


def pool_ledger(n: int, *, seed: int = 0, spec: PoolSpec | None = None) -> Iterator[dict[str, Any]]:
    """Noisy medical-VQA-like ledgers (see module docstring)."""
    spec = spec or PoolSpec()
    rng = np.random.default_rng(seed)
    answer_pool = [f"answer-{i}" for i in range(spec.answers)]
    for q in range(n):
        truth_slots = {s: str(rng.choice(SLOT_VALUES[s])) for s in SLOTS if s != "attribute"}
        answers = list(rng.permutation(answer_pool))
        true_answer = answers[0]
        truth_slots["attribute"] = true_answer
        candidates, slots_of = _pool_candidates(rng, spec, answers, truth_slots)
        claims, edges = _pool_graph(slots_of)
        actions = _pool_actions(rng, spec, candidates, claims, edges, truth_slots)
        if spec.sample_cost is not None:  # sampling order is index order: the first k are a pool of k
            for c in candidates:
                c["cost"] = spec.sample_cost
        yield {
            "format": format_for((a["kind"] for a in actions), sampled=spec.sample_cost is not None),
            "question_id": f"{spec.dataset}-{seed}-{q:06d}",
            "dataset": spec.dataset,
            "task": {"question": "what is shown?", "image": None, "options": None},
            "reference": true_answer,
            "candidates": candidates,
            "claims": claims,
            "edges": edges,
            "actions": actions,
        }


def _pool_candidates(
    rng: np.random.Generator, spec: PoolSpec, answers: list[str], truth_slots: dict[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, str | None]]]:
    """K candidates of one question (``answers[0]`` is the true one) and each one's slot values."""
    true_answer = answers[0]
    p_correct = float(rng.beta(*spec.difficulty))
    # wrong answers follow a skewed distribution so that a wrong plurality happens
    wrong_w = 1.0 / np.arange(1, len(answers))
    wrong_w /= wrong_w.sum()
    # the misreading: the likeliest wrong answer and one rival value per slot (drawn only when used,
    # so misread 0 keeps the old stream)
    misread_slots = (
        {s: str(rng.choice([v for v in SLOT_VALUES[s] if v != truth_slots[s]])) for s in SLOT_VALUES}
        if spec.misread > 0
        else {}
    )
    candidates: list[dict[str, Any]] = []
    slots_of: list[dict[str, str | None]] = []
    for i in range(spec.k):
        if rng.random() < spec.invalid:
            candidates.append({"index": i, "answer": None, "valid": False, "utility": 0.0})
            slots_of.append({})
            continue
        correct = rng.random() < p_correct
        misreads = not correct and spec.misread > 0 and rng.random() < spec.misread
        if misreads:
            ans = str(answers[1])
        else:
            ans = true_answer if correct else str(answers[1 + rng.choice(len(answers) - 1, p=wrong_w)])
        slots = _pool_slots(rng, spec, ans, correct, truth_slots, misread_slots if misreads else None)
        candidates.append(
            {
                "index": i,
                "answer": ans,
                "valid": True,
                "utility": 1.0 if ans == true_answer else 0.0,
                "slots": slots,
            }
        )
        slots_of.append(slots)
    return candidates, slots_of


def _pool_slots(
    rng: np.random.Generator,
    spec: PoolSpec,
    ans: str,
    correct: bool,
    truth_slots: dict[str, str],
    misread: dict[str, str] | None = None,
) -> dict[str, str | None]:
    """The slot values of one valid candidate: the answer's attribute, the others true, rival or empty (or, for
    a candidate repeating the question's ``misread``ing, mostly its values)."""
    slots: dict[str, str | None] = {}
    for s in SLOTS:
        if s == "attribute":
            slots[s] = ans
            continue
        if rng.random() < spec.empty_slot:
            slots[s] = None
            continue
        if misread is not None:  # by default as consistent with the misreading as a correct one is with the truth
            keep = spec.slot_good if spec.misread_slot is None else spec.misread_slot
            slots[s] = misread[s] if rng.random() < keep else truth_slots[s]
            continue
        good = rng.random() < (spec.slot_good if correct else spec.slot_bad)
        if good:
            slots[s] = truth_slots[s]
        else:
            rivals = [v for v in SLOT_VALUES[s] if v != truth_slots[s]]
            slots[s] = str(rivals[rng.integers(len(rivals))])
    return slots


def _pool_graph(slots_of: list[dict[str, str | None]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Canonical claims in first-seen order, and the edges: +1 to assertions, -1 to rival values of the slot."""
    claims: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], str] = {}
    for slots in slots_of:
        for s in SLOTS:
            v = slots.get(s)
            if v is not None and (s, v) not in seen:
                cid = f"{s}={v}"
                seen[s, v] = cid
                claims.append({"id": cid, "slot": s, "value": v, "figure": None})
    edges = []
    for i, slots in enumerate(slots_of):
        for claim in claims:
            v = slots.get(claim["slot"])
            if v is None:
                continue
            edges.append({"candidate": i, "claim": claim["id"], "sign": 1 if v == claim["value"] else -1})
    return claims, edges


def _pool_actions(
    rng: np.random.Generator,
    spec: PoolSpec,
    candidates: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    truth_slots: dict[str, str],
) -> list[dict[str, Any]]:
    """Every action of the menu with its outcome: claim checks, whole-response checks, answer-level checks."""
    actions: list[dict[str, Any]] = []
    # what the pool says, for an echoing judge
    n_pos: dict[str, int] = {}
    n_neg: dict[str, int] = {}
    for e in edges:
        tally = n_pos if e["sign"] == 1 else n_neg
        tally[e["claim"]] = tally.get(e["claim"], 0) + 1
    answer_count: dict[str, int] = {}
    for c in candidates:
        if c["valid"]:
            answer_count[c["answer"]] = answer_count.get(c["answer"], 0) + 1
    top_count = max(answer_count.values(), default=0)

    def echo_of(kind: str) -> float:
        return spec.echo if kind in spec.echo_kinds else 0.0

    def action(
        aid: str, kind: str, claim: str | None, candidate: int | None, ch: ChannelSpec, group: str, outcome: str
    ) -> dict[str, Any]:
        return {
            "id": aid,
            "kind": kind,
            "claim": claim,
            "candidate": candidate,
            "cost": ch.cost,
            "group": group,
            "outcome": outcome,
        }

    for claim in claims:
        true = truth_slots[claim["slot"]] == claim["value"]
        pool_says = n_pos.get(claim["id"], 0) > n_neg.get(claim["id"], 0)
        if claim["slot"] in spec.structured_slots:
            ch = spec.structured
            outcome = _outcome(rng, true, ch.acc, ch.unresolved)
            actions.append(
                action(f"s:{claim['id']}", STRUCTURED, claim["id"], None, ch, f"structured/{claim['slot']}", outcome)
            )
        for kind, tag, ch in ((VLM_FACTOR, "v", spec.vlm), (GROUNDED_FACTOR, "g", spec.grounded)):
            outcome = _outcome(rng, true, ch.acc, ch.unresolved, echo_of(kind), pool_says)
            group = "vlm" if tag == "v" else "grounded"
            actions.append(action(f"{tag}:{claim['id']}", kind, claim["id"], None, ch, group, outcome))
    for i, c in enumerate(candidates):
        if not c["valid"]:
            continue
        ch = spec.whole
        top = answer_count[c["answer"]] == top_count
        outcome = _outcome(rng, c["utility"] == 1.0, ch.acc, ch.unresolved, echo_of(WHOLE_KIND), top)
        actions.append(action(f"w:{i}", WHOLE_KIND, None, i, ch, "whole", outcome))
    if spec.answer is not None:
        ch = spec.answer
        first: dict[str, int] = {}
        for i, c in enumerate(candidates):
            if c["valid"]:
                first.setdefault(c["answer"], i)
        true_answer = truth_slots["attribute"]
        for ans, rep_i in first.items():
            top = answer_count[ans] == top_count
            outcome = _outcome(rng, ans == true_answer, ch.acc, ch.unresolved, echo_of(ANSWER_KIND), top)
            actions.append(action(f"a:{rep_i}", ANSWER_KIND, None, rep_i, ch, "answer", outcome))
    return actions


def spec_dict(spec: PoolSpec) -> dict[str, Any]:
    """The parameters of a pool spec as plain JSON."""
    return asdict(spec)


def write_jsonl(records: Iterator[dict[str, Any]], out: Any) -> int:
    """Write records as JSON lines; returns the count."""
    n = 0
    for rec in records:
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        n += 1
    return n
