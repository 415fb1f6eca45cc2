"""From replies to a signed candidate–claim graph and an action menu (pure functions, no I/O).

* `analyse_question`: the question's VQA-RAD type, the slot its answer fills,
  and what the record itself states (modality / region / plane named in the
  question text or in DICOM tags) for the record check.
* `parse_candidate`: one generation reply -> answer + five slots; a reply
  that is not readable JSON is kept as an *invalid* candidate.
* `canonicalise`: slot values and the answer through the vocabularies; the
  answer fills the asked slot (the answer to "which modality?" *is* a
  modality claim); multiple-choice answers become option letters.
* `build_graph`: canonical claims, +1 edges to the candidates asserting a
  claim and -1 edges to those asserting a rival value of an exclusive slot.
* `build_menu`: each enabled action kind's menu rule (`boe.kinds`): record
  checks, judge checks per claim, answer-level checks per distinct short
  answer, response checks per valid candidate whose answer has none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from boe.agent.state import Candidate, CanonClaim, Edge
from boe.tools.crop import LOCATION_WORDS
from boe.tools.parse import ReplyError, read_generation
from boe.vocab import CLOSED_SLOTS, SLOTS, Canon, normalise, vocabulary

__all__ = [
    "analyse_question",
    "answer_of",
    "build_graph",
    "build_menu",
    "canonicalise",
    "claim_figure",
    "claim_id",
    "grade",
    "parse_candidate",
    "sampled_order",
]

_LETTER = re.compile(r"^\(?(?:option\s+)?([a-z])\s*[).:\-]?(?:\s|$)", re.IGNORECASE)
#: Slots whose claims carry location words for the grounded view.
_LOCATED = ("finding", "attribute")


def analyse_question(
    question: str,
    options: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
    *,
    tags: Mapping[str, str] | None = None,
    figure_metadata: Mapping[str, tuple[Mapping[str, str], Mapping[str, str]]] | None = None,
) -> dict[str, Any]:
    """Question type, asked slot, and the slot values the record states (JSON-ready).

    ``metadata`` (slot -> value) and ``tags`` (slot -> DICOM tag) describe the
    one image of a single-figure question and join its ``context``. For a
    question with several figures, ``figure_metadata`` maps each figure to its
    (metadata, tags): a figure's header only settles claims about that figure,
    so it goes to ``figure_context[figure]``, never to the shared context.
    """
    vocab = vocabulary()
    qt = vocab.question_type(question)
    context: dict[str, str] = {}
    for slot in sorted(CLOSED_SLOTS):
        if slot == qt.slot or qt.closed:
            continue  # a yes/no question only proposes; a slot it asks about is not stated by its text
        named = vocab.mentions(slot, question)
        if len(named) == 1:
            context[slot] = named[0]
            context[f"{slot}:source"] = "question"
    context.update(_header_context(metadata or {}, tags or {}))
    out: dict[str, Any] = {
        "type": qt.name,
        "slot": qt.slot,
        "closed": qt.closed and not options,
        "options": dict(options) if options else None,
        "context": context,
    }
    if figure_metadata:
        out["figure_context"] = {fig: _header_context(meta, tg) for fig, (meta, tg) in figure_metadata.items()}
    return out


def _header_context(metadata: Mapping[str, str], tags: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for slot, value in metadata.items():
        if slot in SLOTS:
            out[slot] = value
            out[f"{slot}:source"] = "dicom"
            if slot in tags:
                out[f"{slot}:tag"] = tags[slot]
    return out


def parse_candidate(index: int, raw: str | None) -> Candidate:
    """One generation reply as a candidate dict; unreadable replies become invalid candidates."""
    try:
        answer, slots, present = read_generation(raw)
    except ReplyError as exc:
        return {
            "index": index,
            "raw_text": raw,
            "valid": False,
            "answer_text": None,
            "slots": dict.fromkeys(SLOTS),
            "slots_present": False,
            "error": str(exc),
        }
    return {
        "index": index,
        "raw_text": raw,
        "valid": True,
        "answer_text": answer,
        "slots": slots,
        "slots_present": present,
        "error": None,
    }


def answer_of(text: str | None, q: Mapping[str, Any]) -> tuple[str | None, Canon | None]:
    """The canonical answer (the cheap prior's key) and the asked-slot claim it makes."""
    if text is None:
        return None, None
    vocab = vocabulary()
    options = q.get("options")
    slot = q["slot"]
    if options:
        letter = _option_letter(text, options, slot)
        if letter is None:
            return normalise(text), None
        canon = vocab.canonical(slot, options[letter]) if slot in SLOTS else None
        return letter, canon if canon is not None and canon.known else None
    if q.get("closed"):
        canon = vocab.canonical("attribute", text)
        if canon is not None and canon.family == "yesno":
            return canon.value, canon
        return normalise(text), None
    canon = vocab.canonical(slot, text)
    if canon is None:
        return normalise(text) or None, None
    # free-text attributes ("left upper lobe") keep their words as the answer; the claim is still canonical
    if canon.known and (slot != "attribute" or vocab.lookup(slot, text) is not None):
        return canon.value, canon
    return normalise(text), canon if canon.known else None


def _option_letter(text: str, options: Mapping[str, str], slot: str) -> str | None:
    letters = {k.strip().upper(): k for k in options}
    m = _LETTER.match(text.strip())
    if m and m.group(1).upper() in letters:
        return letters[m.group(1).upper()]
    norm = normalise(text)
    for key, opt in options.items():
        if normalise(opt) == norm:
            return key
    if slot in SLOTS:
        canon = vocabulary().canonical(slot, text)
        if canon is not None and canon.known:
            hits = [
                k
                for k, opt in options.items()
                if (c := vocabulary().canonical(slot, opt)) is not None and c.value == canon.value
            ]
            if len(hits) == 1:
                return hits[0]
    return None


def canonicalise(cand: Candidate, q: Mapping[str, Any]) -> Candidate:
    """Add the canonical answer and the canonical slot claims (``claims``: slot -> Canon dict) to a candidate."""
    out = cand.copy()
    if not cand["valid"]:
        out["answer"], out["claims"] = None, {}
        return out
    vocab = vocabulary()
    claims: dict[str, CanonClaim] = {}
    for slot in SLOTS:
        c = vocab.canonical(slot, cand["slots"].get(slot))
        if c is not None:
            claims[slot] = _canon_dict(c)
    answer, asked = answer_of(cand["answer_text"], q)
    if asked is not None:
        claims[asked.slot] = _canon_dict(asked)
    if q.get("options") and answer is not None and answer in (q.get("options") or {}):
        claims["option"] = {"slot": "option", "value": answer, "known": True, "family": "option"}
    out["answer"], out["claims"] = answer, claims
    if answer is None:
        out["valid"] = False
        out["error"] = "empty answer"
    return out


def _canon_dict(c: Canon) -> CanonClaim:
    return {"slot": c.slot, "value": c.value, "known": c.known, "family": c.family}


def _rivals(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a["slot"] == b["slot"] and a["family"] is not None and a["family"] == b["family"] and a["value"] != b["value"]
    )


def claim_figure(slot: str, cand: Mapping[str, Any], figure: str | None, multi: bool) -> str | None:
    """The figure a candidate's claim is about: the question's one figure, else the figure the candidate
    named (an option claim is about the question, not a figure)."""
    if not multi:
        return figure
    return None if slot == "option" else cand.get("figure")


def claim_id(slot: str, value: str, figure: str | None, multi: bool) -> str:
    """``slot=value``, with ``@figure`` when the question has several figures."""
    return f"{slot}={value}@{figure}" if multi and figure is not None else f"{slot}={value}"


def build_graph(
    cands: Sequence[Candidate], figure: str | None = "0", *, multi: bool = False, sampled: bool = False
) -> tuple[list[dict[str, Any]], list[Edge]]:
    """Canonical claims (with figure and location words) and signed edges of a canonicalised pool.

    With several figures (``multi``) a claim is about the figure its
    candidate named: the same value on two figures makes two claims, and
    only claims about the same figure are rivals. A fixed pool orders claims
    by slot, then support; a ``sampled`` pool (spec section 12) by the first
    candidate asserting them, then slot and value, and takes a claim's
    location words from that candidate, so the graph of the first k
    candidates is the graph of the pool of k (prefix-consistent).
    """
    order = {s: i for i, s in enumerate((*SLOTS, "option"))}
    found: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}  # claim id -> the first candidate asserting it
    for cand in cands:
        if not cand["valid"]:
            continue
        for slot, c in cand["claims"].items():
            fig = claim_figure(slot, cand, figure, multi)
            cid = claim_id(slot, c["value"], fig, multi)
            if cid not in found:
                found[cid] = {
                    "id": cid,
                    "slot": slot,
                    "value": c["value"],
                    "figure": fig,
                    "known": c["known"],
                    "family": c["family"],
                    "support": 0,
                }
                first[cid] = int(cand["index"])
            found[cid]["support"] += 1
    if sampled:
        claims = sorted(
            found.values(), key=lambda c: (first[c["id"]], order[c["slot"]], c["value"], str(c["figure"] or ""))
        )
    else:
        claims = sorted(
            found.values(), key=lambda c: (order[c["slot"]], -c["support"], c["value"], str(c["figure"] or ""))
        )
    edges: list[Edge] = []
    supporters: dict[str, list[Mapping[str, Any]]] = {}
    for claim in claims:
        for cand in cands:
            if not cand["valid"]:
                continue
            mine = cand["claims"].get(claim["slot"])
            if mine is None or claim_figure(claim["slot"], cand, figure, multi) != claim["figure"]:
                continue
            if mine["value"] == claim["value"]:
                edges.append({"candidate": cand["index"], "claim": claim["id"], "sign": 1})
                supporters.setdefault(claim["id"], []).append(cand)
            elif _rivals(mine, claim):
                edges.append({"candidate": cand["index"], "claim": claim["id"], "sign": -1})
    for claim in claims:
        backers = supporters.get(claim["id"], [])
        if sampled:
            backers = backers[:1]  # the first candidate asserting it: what any pool holding the claim has
        claim["location"] = _location(claim, backers) if claim["slot"] in _LOCATED else []
    return claims, edges


def _location(claim: Mapping[str, Any], supporters: Sequence[Mapping[str, Any]]) -> list[str]:
    """Location words of a claim: its own value if it is one, else the majority of its supporters' attributes."""
    if claim["value"] in LOCATION_WORDS:
        return [claim["value"]]
    vocab = vocabulary()
    side: Counter[str] = Counter()
    vertical: Counter[str] = Counter()
    for cand in supporters:
        text = " ".join(str(cand["slots"].get(s) or "") for s in ("attribute", "finding"))
        for w in vocab.mentions("attribute", text):
            if w in ("left", "right"):
                side[w] += 1
            elif w in ("upper", "lower"):
                vertical[w] += 1
    out = []
    for counter in (side, vertical):
        if counter:
            (top, n), *rest = counter.most_common()
            if not rest or rest[0][1] < n:
                out.append(top)
    return out


def build_menu(
    claims: Sequence[Mapping[str, Any]],
    cands: Sequence[Mapping[str, Any]],
    costs: Mapping[str, float],
    kinds: Sequence[str],
    q: Mapping[str, Any],
    design: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The action menu in tie-breaking order: each enabled kind's menu rule (`boe.kinds`), in the kinds' order.

    ``costs`` are what the policy plans with (each action's ``cost``);
    ``design`` (default: the same) is recorded beside them as ``design_cost``.
    With answer-level checks on the menu, a candidate whose (short) answer has
    one gets no response check of its own: a response verdict judges the
    answer, and one verdict on it moves every candidate giving it, where a
    verdict on one response would leave its many twins on top.
    """
    from boe.kinds import MenuContext, kind_spec

    specs = sorted((kind_spec(k) for k in kinds), key=lambda s: s.order)
    ctx = MenuContext(claims, cands, costs, design or costs, q)
    made = {s.name: s.menu(s.name, ctx) for s in specs if s.target == "answer"}
    covered = frozenset(str(a["answer"]) for acts in made.values() for a in acts if a.get("answer") is not None)
    ctx = MenuContext(claims, cands, costs, design or costs, q, covered)
    menu: list[dict[str, Any]] = []
    for s in specs:
        menu.extend(made[s.name] if s.name in made else s.menu(s.name, ctx))
    return menu


def sampled_order(menu: Sequence[Mapping[str, Any]], edges: Sequence[Edge]) -> list[dict[str, Any]]:
    """A menu in the order of a sampled pool (spec section 12): by the first candidate that makes each action
    available (a claim's first asserting candidate, a response's candidate, an answer's representative), then
    as `build_menu` made it (kind, claim). Drawing more candidates then only adds actions at the end."""
    first: dict[str, int] = {}
    for e in edges:
        if e["sign"] == 1:
            first[e["claim"]] = min(first.get(e["claim"], e["candidate"]), int(e["candidate"]))
    big = 1 << 30

    def need(a: Mapping[str, Any]) -> int:
        if a.get("claim") is not None:
            return first.get(str(a["claim"]), big)
        return int(a["candidate"]) if a.get("candidate") is not None else big

    return [dict(a) for a in sorted(menu, key=need)]


def grade(answer: str | None, reference: str | None, q: Mapping[str, Any]) -> float | None:
    """Utility 1/0 of a canonical answer against a reference (canonicalised the same way); None without a reference."""
    if reference is None:
        return None
    if answer is None:
        return 0.0
    ref, _ = answer_of(reference, q)
    return 1.0 if ref is not None and ref == answer else 0.0
