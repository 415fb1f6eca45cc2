"""`boe batch`: a dataset through the agent, many workers sharing one store, resumable after any crash.

    from boe.agent import make_config
    from boe.batch import BatchConfig, run_batch
    agent = make_config(base_url="http://127.0.0.1:8000/v1", model="my-vlm", k=16, ledger="full", concurrency=64)
    summary = run_batch(BatchConfig(dataset="data/vqa-rad", agent=agent, db="sqlite:///runs.db", run="rad-full"))

Modules: `plan` (which questions; the ``--dry-run`` estimate), `runner`
(claims, answers, stores), `cache` (gathered request-cache writes), `http`
(one bound on the requests in flight), `identity` (a worker's name across
restarts), `grading` (utilities from the dataset's evaluator), `progress`,
`files` (the run's requests as OpenAI batch files, their results read back).
The agent, LangGraph, openai and SQLAlchemy load when a batch runs.
"""

from __future__ import annotations

from boe.batch.plan import BatchItem, Estimate, Measured, estimate, measure_records, select_items
from boe.batch.progress import BatchStats, NullProgress, ProgressView, RichProgress
from boe.batch.runner import BatchConfig, BatchRunner, BatchSummary, run_batch

__all__ = [
    "BatchConfig",
    "BatchItem",
    "BatchRunner",
    "BatchStats",
    "BatchSummary",
    "Estimate",
    "Measured",
    "NullProgress",
    "ProgressView",
    "RichProgress",
    "estimate",
    "measure_records",
    "run_batch",
    "select_items",
]
