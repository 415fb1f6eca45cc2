"""Behaviour pinned across refactors: replays and agent runs equal the golden files made before the change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import make_golden as golden  # noqa: E402


@pytest.mark.parametrize("calibration", golden.CALIBRATIONS)
@pytest.mark.parametrize("name", golden.LEDGERS)
def test_replay_transcripts_are_byte_identical(tmp_path: Path, name: str, calibration: str) -> None:
    out = tmp_path / "t.jsonl"
    golden.replay_transcripts(golden.DATA / f"{name}.jsonl", calibration, out)
    expected = golden.DATA / f"{name}.{calibration.replace(':', '')}.transcripts"
    got, want = out.read_bytes(), expected.read_bytes()
    if got != want:
        bad = next(i for i, (a, b) in enumerate(zip(got.splitlines(), want.splitlines(), strict=False)) if a != b)
        pytest.fail(f"{name} ({calibration}): transcript line {bad + 1} differs:\n{got.splitlines()[bad][:400]!r}\n"
                    f"golden:\n{want.splitlines()[bad][:400]!r}")  # fmt: skip


def test_agent_runs_store_the_golden_ledgers(tmp_path: Path) -> None:
    from boe.sim import serve_in_thread

    data = golden.sim_dataset(tmp_path / "data")
    handle = serve_in_thread()
    try:
        for run, extra in golden.AGENT_RUNS.items():
            got = golden.agent_ledger(data, handle.base_url, tmp_path / f"{run}.db", run, extra)
            path = golden.DATA / f"agent-{run}.normalised.jsonl"
            want = [json.loads(line) for line in path.read_text().splitlines()]
            assert [r["question_id"] for r in got] == [r["question_id"] for r in want]
            for g, w in zip(got, want, strict=True):
                assert g["agent"] == w["agent"], f"{run} {g['question_id']}: the agent chose differently"
                assert g == w, f"{run} {g['question_id']}: the stored ledger line differs"
    finally:
        handle.close()
