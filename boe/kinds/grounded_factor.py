"""The judge on one claim over a segmented view of the region it names (cost 4)."""

from __future__ import annotations

from typing import Any

from boe.kinds import (
    KindSpec,
    MenuContext,
    Prior,
    TokenEstimate,
    ToolContext,
    claim_group,
    claims_per_question,
    judge_args,
    register_kind,
)

NAME = "grounded_factor"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per claim in a judged slot that is bound to a figure (a view needs one to look at)."""
    from boe.vocab import SLOTS

    return [
        ctx.action(kind, f"g:{c['id']}", claim=c["id"], candidate=None, group=claim_group("grounded", c, ctx.q))
        for c in ctx.claims
        if c["slot"] in SLOTS and c.get("figure") is not None
    ]


def tool_args(ctx: ToolContext) -> dict[str, Any]:
    """The judge plus the view: crop padding, minimum crop, the run's segmenter and the view shown."""
    cfg = ctx.config
    return {
        **judge_args(ctx),
        "pad": cfg.crop_pad,
        "min_frac": cfg.crop_min,
        "segmenter": ctx.get_segmenter(),
        "view": cfg.grounded_view,
    }


SPEC = register_kind(
    KindSpec(
        name=NAME,
        target="claim",
        cost=4.0,
        label="judge, crop",
        order=30,
        ledger="boe-ledger/1",
        priors={"grounded": Prior(0.53)},  # the paper's channel table: grounded 0.51-0.61
        menu=menu,
        tool="boe.tools.judges:GroundedFactorJudge",
        tool_args=tool_args,
        prompt="grounded_factor_judge",
        estimate=TokenEstimate("grounded_factor_judge", 159, "half", claims_per_question),
        report_label="grounded check",
        description="the judge on one claim over a segmented view of the region it names",
    )
)
