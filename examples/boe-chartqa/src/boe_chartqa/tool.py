"""The chart_value tool: the judge model on one claimed value, shown the chart, with this plugin's prompt."""

from __future__ import annotations

from importlib import resources
from typing import Any

from boe.prompts import parse_template
from boe.tools.client import ModelClient
from boe.tools.judges import VlmFactorJudge


class ChartValueJudge(VlmFactorJudge):
    """Asks the judge whether the chart shows the claimed value (the factor-verdict protocol, so any judge
    that speaks boe's protocol, the built-in simulator included, can answer it)."""

    prompt_name = "chart_value_judge"

    def __init__(self, client: ModelClient, temperature: float = 0.0) -> None:
        self.client = client
        self.temperature = float(temperature)
        text = (resources.files("boe_chartqa") / "chart_value_judge.tmpl").read_text(encoding="utf-8")
        self.prompt = parse_template(self.prompt_name, text)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["plugin"] = "boe-chartqa"
        return out
