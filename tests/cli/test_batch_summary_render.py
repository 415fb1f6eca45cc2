"""The batch summary's next commands stay copyable at 80 columns."""

from __future__ import annotations

import io

from rich.console import Console

from boe.batch.runner import BatchSummary
from boe.cli.batch_cmd import render_summary


def _summary() -> BatchSummary:
    return BatchSummary(
        run="rad", worker="w", store="sqlite:///runs.db", selected=30, skipped=[], stored_before=0, stored=30,
        failed=[], lost=0, reclaimed=0, remaining={"done": 30}, calls_paid=1020, calls_cached=0, call_errors=0,
        requests=1020, prompt_tokens=1_810_000, completion_tokens=24_700, seconds=22.4, startup_seconds=1.0,
        cpu_seconds=8.0, pool_cpu_seconds=0.0, store_seconds=0.5, cpu_breakdown={}, segmentation_seconds=0.0,
        peak_in_flight=64,
    )  # fmt: skip


def test_next_commands_are_printed_whole_on_one_line_each_at_80_columns():
    out = io.StringIO()
    commands = [
        "boe replay --db sqlite:///runs.db --run rad --policy raw,boe,random-factor,whole --budget 1,4,16",
        "boe calibrate --db sqlite:///runs.db --run rad --out vqa-rad-calibration.json",
    ]
    render_summary(_summary(), Console(file=out, width=80, color_system=None), None, commands)
    lines = [line.strip() for line in out.getvalue().splitlines()]
    for command in commands:
        assert command in lines, out.getvalue()  # a wrapped command pastes as two broken ones
