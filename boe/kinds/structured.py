"""The record check (cost 1): vocabulary, options and what the record states about a claim; no model call."""

from __future__ import annotations

from typing import Any

from boe.kinds import KindSpec, MenuContext, register_kind

NAME = "structured"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per claim in a closed slot or naming an option; the ``record`` channel when the record states it."""
    from boe.agent.claims import claim_group, record_states
    from boe.vocab import CLOSED_SLOTS

    out = []
    for c in ctx.claims:
        if c["slot"] in CLOSED_SLOTS or c["slot"] == "option":
            channel = "record" if record_states(ctx.q, c) else "structured"
            out.append(
                ctx.action(kind, f"s:{c['id']}", claim=c["id"], candidate=None, group=claim_group(channel, c, ctx.q))
            )
    return out


SPEC = register_kind(
    KindSpec(
        name=NAME,
        target="claim",
        cost=1.0,
        label="record check",
        order=10,
        menu=menu,
        tool="boe.tools.structured:StructuredCheck",
        report_label="record check",
        description="vocabulary, option and record-metadata check of one claim (no model call)",
    )
)
