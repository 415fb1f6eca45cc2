"""Behaviour pinned across refactors: replays and agent runs equal the golden files made before the change."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import make_golden as golden  # noqa: E402
from compare import difference  # noqa: E402

pytestmark = pytest.mark.slow  # more than a few seconds in all (tests/conftest.py starts such files first)


@pytest.mark.parametrize("calibration", golden.CALIBRATIONS)
@pytest.mark.parametrize("name", golden.LEDGERS)
def test_replay_transcripts_match_the_golden_ones(tmp_path: Path, name: str, calibration: str) -> None:
    """Decisions exactly, scores to a relative 1e-9 (the last bit of a float is not a contract)."""
    out = tmp_path / "t.jsonl"
    golden.replay_transcripts(golden.DATA / f"{name}.jsonl", calibration, out)
    expected = golden.DATA / f"{name}.{calibration.replace(':', '')}.transcripts"
    got, want = out.read_text().splitlines(), expected.read_text().splitlines()
    assert len(got) == len(want), f"{name} ({calibration}): {len(got)} transcript lines, golden {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        found = difference(json.loads(g), json.loads(w))
        if found:
            pytest.fail(f"{name} ({calibration}): transcript line {i + 1} differs at {found}\n{g[:400]!r}")


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
                found = difference(g["agent"], w["agent"], "$.agent")
                assert found is None, f"{run} {g['question_id']}: the agent chose differently: {found}"
                found = difference(g, w)
                assert found is None, f"{run} {g['question_id']}: the stored ledger line differs: {found}"
    finally:
        handle.close()


def test_the_comparison_tolerates_the_last_bit_and_nothing_a_policy_decides() -> None:
    golden_line = {"selected": 1, "cost": 4, "actions": [2], "scores": [0.04270238495859526, 0.5], "utility": 1.0}
    assert difference({**golden_line, "scores": [0.042702384958595276, 0.5]}, golden_line) is None
    assert difference({**golden_line, "scores": [0.0427024, 0.5]}, golden_line) is not None
    assert difference({**golden_line, "selected": 0}, golden_line) == "$.selected: 0 != golden 1"
    assert difference({**golden_line, "actions": [3]}, golden_line) is not None
    assert difference({**golden_line, "cost": 4.0000000001}, golden_line) is not None
    assert difference({**golden_line, "extra": 1}, golden_line) is not None
