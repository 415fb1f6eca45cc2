"""The record check (cost 1): vocabulary, options and what the record states about a claim; no model call."""

from __future__ import annotations

from typing import Any

from boe.kinds import KindSpec, MenuContext, Prior, claim_group, record_states, register_kind

NAME = "structured"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per claim in a closed slot or naming an option; the ``record`` channel when the record states it."""
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
        ledger="boe-ledger/1",
        # the record channel's prior is of the order the shipped simulator fit gives its DICOM header checks (0.76-0.89
        # for the answer-bearing claim, 0.50-0.53 for supporting ones); a vocabulary check the record does not settle
        # settles nothing a canonicalised claim could be wrong about: "always unresolved", never bought
        priors={
            "record/answer": Prior(0.85, (0.50, 0.50, 0.00)),
            "record": Prior(0.55, (0.50, 0.50, 0.00)),
            "structured": Prior(0.50, (0.00, 0.00, 1.00)),
        },
        menu=menu,
        tool="boe.tools.structured:StructuredCheck",
        report_label="record check",
        description="vocabulary, option and record-metadata check of one claim (no model call)",
    )
)
