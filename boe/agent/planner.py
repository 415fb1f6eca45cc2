"""The agent's side of the one policy loop: a question's menu as a ledger record, driven by a core `Session`.

The agent never scores or chooses on its own. It builds the ledger record of
the question (candidates, claims, edges, the menu with placeholder outcomes)
and holds a `boe.core.session.Session` on it: the same `PolicySession` that
`boe.core.loop.run_policy` drives offline, answered here by the tools (and
by a person or program that vetoes a purchase) instead of stored outcomes.

Graph state keeps the events only (the evidence log's purchases, and the
``skipped`` entries between them), so a restored checkpoint rebuilds the
session from them; `events_of` reads them back in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from boe.core.ledger import format_for
from boe.core.session import Draw, Event, Reveal, Skip, Step
from boe.kinds import declare_kinds

if TYPE_CHECKING:
    from boe.agent.state import MenuAction

__all__ = ["PLACEHOLDER", "Step", "draw_entry", "events_of", "record_dict", "skip_entry"]

#: Outcome stored for an action the online run did not buy (never read: a policy reads only bought outcomes).
PLACEHOLDER = "unresolved"


def record_dict(
    *,
    question_id: str,
    dataset: str,
    question: str,
    image: str,
    options: Mapping[str, str] | None,
    reference: str | None,
    candidates: Sequence[Mapping[str, Any]],
    claims: Sequence[Mapping[str, Any]],
    edges: Sequence[Mapping[str, Any]],
    actions: Sequence[Mapping[str, Any]],
    outcomes: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
    sampled: bool = False,
) -> dict[str, Any]:
    """A ledger record as a plain dict, not validated (the store validates what it stores); actions without an
    entry in ``outcomes`` carry the placeholder outcome.

    The format is ``boe-ledger/1.3`` for a ``sampled`` pool (candidates carry their sample ``cost``),
    ``boe-ledger/1.1`` when the menu holds an answer-level check, else ``boe-ledger/1``.
    """
    outcomes = outcomes or {}
    data: dict[str, Any] = {
        "format": format_for((a.get("kind", "") for a in actions), sampled=sampled),
        "question_id": question_id,
        "dataset": dataset,
        "task": {"question": question, "image": image, "options": dict(options) if options else None},
        "reference": reference,
        "candidates": [dict(c) for c in candidates],
        "claims": [dict(c) for c in claims],
        "edges": [dict(e) for e in edges],
        "actions": [{**a, "outcome": outcomes.get(a["id"], PLACEHOLDER)} for a in actions],
    }
    declared = declare_kinds(a.get("kind", "") for a in actions)
    if declared:  # a plugin's kind: the record says which plugin it needs (format 1.2)
        data["kinds"] = declared
    data.update(extra or {})
    return data


def skip_entry(action: Mapping[str, Any] | MenuAction, index: int, reason: str, after: int) -> dict[str, Any]:
    """The graph-state entry of a skipped purchase: menu ``index``, its id, why, and how many purchases preceded it."""
    aid = action["id"] if isinstance(action, Mapping) else action.id
    return {"action": index, "id": aid, "reason": reason, "after": after}


def draw_entry(m: int, after: int, skips: int) -> dict[str, Any]:
    """The graph-state entry of a draw of ``m`` candidates made after ``after`` purchases and ``skips`` skips."""
    return {"m": m, "after": after, "skips": skips}


def events_of(
    bought: Sequence[Mapping[str, Any]],
    skipped: Sequence[Mapping[str, Any]] = (),
    draws: Sequence[Mapping[str, Any]] = (),
) -> list[Event]:
    """A question's session events in order: its purchases, with each skip placed after ``after`` purchases and
    each draw after ``after`` purchases and ``skips`` skips."""
    out: list[Event] = []
    skips = list(skipped)
    pending = list(draws)
    j = 0

    def flush_draws(n: int) -> None:
        while pending and pending[0]["after"] <= n and pending[0]["skips"] <= j:
            out.append(Draw(int(pending.pop(0)["m"])))

    for n, b in enumerate(bought):
        flush_draws(n)
        while j < len(skips) and skips[j]["after"] <= n:
            out.append(Skip(int(skips[j]["action"]), str(skips[j]["reason"])))
            j += 1
            flush_draws(n)
        out.append(Reveal(int(b["action"]), str(b["outcome"])))
    n = len(bought)
    flush_draws(n)
    while j < len(skips):
        out.append(Skip(int(skips[j]["action"]), str(skips[j]["reason"])))
        j += 1
        flush_draws(n)
    out.extend(Draw(int(d["m"])) for d in pending)
    return out
