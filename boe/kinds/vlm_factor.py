"""The judge on one claim over the whole figure it is about (cost 4)."""

from __future__ import annotations

from typing import Any

from boe.kinds import (
    KindSpec,
    MenuContext,
    Prior,
    TokenEstimate,
    claim_group,
    claims_per_question,
    judge_args,
    register_kind,
)

NAME = "vlm_factor"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per claim in a judged slot (``vlm`` channel)."""
    from boe.vocab import SLOTS

    return [
        ctx.action(kind, f"v:{c['id']}", claim=c["id"], candidate=None, group=claim_group("vlm", c, ctx.q))
        for c in ctx.claims
        if c["slot"] in SLOTS
    ]


SPEC = register_kind(
    KindSpec(
        name=NAME,
        target="claim",
        cost=4.0,
        label="judge, whole image",
        order=20,
        ledger="boe-ledger/1",
        priors={"vlm": Prior(0.53)},  # the paper's channel table: VLM 0.50-0.59
        menu=menu,
        tool="boe.tools.judges:VlmFactorJudge",
        tool_args=judge_args,
        prompt="factor_judge",
        estimate=TokenEstimate("factor_judge", 159, "figure", claims_per_question),
        report_label="VLM check",
        description="the judge on one claim over the whole figure",
    )
)
