"""Fixtures of the report tests: a real agent run against the simulator, pool ledgers, a browser."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def agent_db(tmp_path_factory) -> tuple[str, str]:
    """A store with the demo's four questions answered by the agent over real HTTP (as `boe demo` runs them)."""
    from boe.agent.demo import DEMO_QUESTIONS, demo_config, demo_questions, run_questions, simulator

    path = tmp_path_factory.mktemp("agent") / "runs.db"
    with simulator() as url:
        done = asyncio.run(
            run_questions(demo_config(url), demo_questions(DEMO_QUESTIONS), db=str(path), run_name="demo")
        )
    assert len(done.results) == len(DEMO_QUESTIONS)
    return f"sqlite:///{path}", "demo"


@pytest.fixture(scope="session")
def pool_ledger(tmp_path_factory) -> Path:
    from boe.sim.ledgers import pool_ledger as make
    from boe.sim.ledgers import write_jsonl

    path = tmp_path_factory.mktemp("pool") / "pool.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        write_jsonl(make(150, seed=11), fh)
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium the page tests use; missing, they skip (under BOE_CI=1 they fail)."""
    from boe.report.browser import find_chromium

    exe = find_chromium()
    if exe is None:
        if os.environ.get("BOE_CI") == "1":
            pytest.fail("chromium is required under BOE_CI=1 (apt-get install chromium)")
        pytest.skip("no chromium (apt-get install chromium)")
    return exe
