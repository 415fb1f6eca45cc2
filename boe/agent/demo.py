"""`boe demo`: the whole agent against the built-in simulator on a few shipped questions.

The simulator (``boe sim serve``) is started in this process on a free
loopback port; the agent talks to it over real HTTP with the ``openai``
client, runs its LangGraph graph, and stores the run in a SQLite file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from boe.agent.api import Agent, AskResult
from boe.agent.configuration import AgentConfig
from boe.agent.settings import make_config

__all__ = ["DEMO_QUESTIONS", "DemoRun", "demo_questions", "run_questions", "simulator"]

#: The demo questions, in order (``ID:dicom`` asks with the question's DICOM file,
#: whose tags the cost-1 record check reads; calibration namespace ``boe-sim-dicom``).
#: Picked from the 30 shipped questions (and their DICOM files) to show what the
#: default controller (`bayes`, the shipped calibration) does, not to measure it:
#: ``sim-0-00003`` is a rescue of a clear wrong majority (ct 10 against us 5; the
#: judge rejects ct and confirms us); ``sim-0-00016:dicom`` overturns a 13 against 3
#: majority; ``sim-0-00026`` is a pool with one answer, on which no check could change
#: anything and nothing is bought; ``sim-0-00020:dicom`` shows the record checks of
#: the DICOM ``BodyPartExamined`` tag settling a 6 against 6 tie. On all 30 PNG
#: questions `bayes` rescues 4 wrong majorities and harms none (a demonstration:
#: benchmarks/agent_accuracy.py measures).
DEMO_QUESTIONS: tuple[str, ...] = ("sim-0-00003", "sim-0-00016:dicom", "sim-0-00026", "sim-0-00020:dicom")

SIM_MODEL = "boe-sim"
#: The demo's judge: the simulator's second model, which looks for itself (`boe.sim.judge`); the generator's own
#: name (or "same") judges with the generator instead.
SIM_JUDGE = "boe-sim-judge"


@contextmanager
def simulator(**options: Any) -> Iterator[str]:
    """Start the simulated VLM endpoint on a free loopback port; yield its base URL."""
    from boe.sim.server import serve_in_thread

    server = serve_in_thread(host="127.0.0.1", port=0, **options)
    try:
        yield server.base_url
    finally:
        server.close()


def demo_questions(ids: Sequence[str] | None = None, data: str | Path | None = None) -> list[dict[str, Any]]:
    """Questions of the demo set (or of the boe-sim dataset ``data``) by id, in order; all when ``ids`` is empty."""
    from boe.sim.dataset import load_sim_dataset

    rows = load_sim_dataset(demo_data() if data is None else data)
    if not ids:
        return rows
    by_id = {r["id"]: r for r in rows}
    out = []
    for spec in ids:
        qid, _, how = spec.partition(":")
        if qid not in by_id or how not in ("", "dicom") or (how and not by_id[qid].get("dicom")):
            raise KeyError(f"demo question {spec!r} is not in the demo set (ID or ID:dicom)")
        out.append({**by_id[qid], "use_dicom": how == "dicom"})
    return out


@dataclass
class DemoRun:
    """The results of a demo (or benchmark) run and what it cost."""

    results: list[AskResult] = field(default_factory=list)
    seconds: float = 0.0
    run: str | None = None
    db: str | None = None

    def accuracy(self) -> tuple[float, float]:
        """(raw majority, selected) accuracy over the questions with a reference."""
        graded = [r for r in self.results if r.correct is not None]
        if not graded:
            return float("nan"), float("nan")
        n = len(graded)
        return sum(bool(r.raw_correct) for r in graded) / n, sum(bool(r.correct) for r in graded) / n

    def per_question_usage(self) -> dict[str, float]:
        """Mean model calls, HTTP requests and tokens per question."""
        n = max(len(self.results), 1)
        tot: dict[str, float] = {}
        for r in self.results:
            for k, v in r.usage().items():
                tot[k] = tot.get(k, 0.0) + v
        return {k: v / n for k, v in tot.items()}


async def run_questions(
    config: AgentConfig,
    questions: Sequence[dict[str, Any]],
    *,
    db: str | None = None,
    run_name: str | None = None,
    on_result: Any = None,
    http_client: Any = None,
    dicom: bool = False,
) -> DemoRun:
    """Answer dataset questions one after another with one agent (one store run); ``dicom`` sends the DICOM files."""
    out = DemoRun(db=db)
    t0 = time.perf_counter()
    async with Agent(config, store=db, run_name=run_name, http_client=http_client) as agent:
        out.run = agent.run_name
        for q in questions:
            as_dicom = dicom or bool(q.get("use_dicom"))
            image = q["dicom"] if as_dicom else q["images"][0]
            mixed = as_dicom and not dicom  # a DICOM question in a PNG run: its own id and calibration namespace
            res = await agent.ask(
                image,
                q["question"],
                options=q.get("options"),
                reference=q.get("answer"),
                question_id=f"{q['id']}-dicom" if mixed else q["id"],
                dataset=f"{config.dataset}-dicom" if mixed else None,
            )
            out.results.append(res)
            if on_result is not None:
                on_result(res)
    out.seconds = time.perf_counter() - t0
    return out


def demo_data() -> Path:
    """The demo dataset folder shipped with `boe.sim` (30 questions about 10 synthetic scans, seed 0)."""
    from boe.errors import InputError
    from boe.sim.dataset import demo_dir

    root = demo_dir()
    if not (root / "dataset.json").is_file():
        raise InputError(f"the demo set is missing from {root}; reinstall best-of-evidence")
    return root


def demo_config(base_url: str, **overrides: Any) -> AgentConfig:
    """The demo's configuration: K=16, budget 16, `bayes`, the independent judge, the shipped calibration, the demo
    folder as root (``judge_model="same"`` judges with the generator)."""
    values: dict[str, Any] = {
        "base_url": base_url,
        "model": SIM_MODEL,
        "judge_model": SIM_JUDGE,
        "dataset": "boe-sim",
        "root": str(demo_data()),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values["judge_model"] in ("same", values["model"]):
        values["judge_model"] = None
    values["root"] = str(Path(values["root"]).resolve())
    return make_config(**values)


def default_run_name(prefix: str = "demo") -> str:
    return f"{prefix}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def db_url(path: str | Path) -> str:
    """A SQLite URL for a file path (URLs pass through)."""
    text = str(path)
    return text if "://" in text else f"sqlite:///{Path(text).expanduser()}"
