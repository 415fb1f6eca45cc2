"""The judge on one complete candidate response, shown every figure (cost 8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boe.kinds import KindSpec, MenuContext, Prior, TokenEstimate, answer_key, judge_args, register_kind

NAME = "whole_response"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per valid candidate whose answer no answer-level check on the menu judges already."""

    return [
        ctx.action(kind, f"w:{cand['index']}", claim=None, candidate=cand["index"], group="whole")
        for cand in ctx.cands
        if cand["valid"] and answer_key(cand) not in ctx.covered
    ]


def calls(k: int, targets: Mapping[str, str]) -> float | None:
    """One call per candidate, unless answer-level checks judge the (assumed short) answers instead."""
    return None if "answer" in targets.values() else float(k)


def note(targets: Mapping[str, str]) -> str | None:
    """Long answers get no answer-level check: they fall back to this one (not counted)."""
    if "answer" in targets.values():
        return "long free-text answers get a whole-response call per candidate instead (not counted)"
    return None


SPEC = register_kind(
    KindSpec(
        name=NAME,
        target="response",
        cost=8.0,
        label="judge, whole response",
        order=40,
        ledger="boe-ledger/1",
        priors={"whole": Prior(0.64, (0.50, 0.45, 0.05))},  # the paper's channel table: whole 0.61-0.72
        menu=menu,
        tool="boe.tools.judges:WholeResponseJudge",
        tool_args=judge_args,
        prompt="whole_judge",
        estimate=TokenEstimate("whole_judge", 174, "figures", calls, note),
        report_label="whole-response check",
        description="the judge on one complete candidate response",
    )
)
