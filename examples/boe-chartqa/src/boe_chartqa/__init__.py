"""boe-chartqa: a chart-value lookup check for boe, from outside the medical domain.

`register()` (the ``boe.plugins`` entry point) adds

* the action kind ``chart_value``: a claim-targeted check (policies treat it
  as a factor check) that asks the judge whether the chart shows the value a
  candidate's answer claims, with its own prompt template;
* its tool `ChartValueJudge`;
* the dataset format ``chartqa``: a folder with ``chartqa.json`` (questions
  about bar charts, each with its chart's data table as metadata).
"""

from __future__ import annotations

from typing import Any

__all__ = ["KIND", "register"]

KIND = "chart_value"


def _menu(kind: str, ctx: Any) -> list[dict[str, Any]]:
    """One chart lookup per claim that carries the answer (the value the question asks the chart for)."""
    from boe.kinds import answer_slot

    slot = answer_slot(ctx.q)
    return [
        ctx.action(kind, f"c:{c['id']}", claim=c["id"], candidate=None, group="chart/answer")
        for c in ctx.claims
        if c["slot"] == slot
    ]


def _calls(k: int, _targets: Any) -> float:
    """One lookup per distinct answer claim: about as many as answer-level checks."""
    import math

    return min(float(k), 1.0 + 0.3 * math.log2(k))


def register() -> None:
    """Register the chart_value kind, its tool and the chartqa dataset format."""
    from boe.kinds import KindSpec, TokenEstimate, judge_args, register_kind

    register_kind(
        KindSpec(
            name=KIND,
            target="claim",
            cost=2.0,
            label="chart lookup",
            order=60,
            menu=_menu,
            tool="boe_chartqa.tool:ChartValueJudge",
            tool_args=judge_args,
            prompt="chart_value_judge",
            estimate=TokenEstimate("chart_value_judge", 150, "figure", _calls),
            description="the judge reads the value the question asks for off the chart and checks the claim",
        )
    )
    from boe_chartqa import dataset  # noqa: F401  (registers the chartqa format)
