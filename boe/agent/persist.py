"""Storing agent runs in `boe.db.Store`, and the store-backed request cache.

One question is written in one transaction: its ledger record (the full
menu; the outcomes this run observed, ``observed: false`` on the others),
every model call, the transcript with its evidence log, and the image
reference (content hash and path, not the pixels).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boe.core.ledger import LedgerRecord
from boe.errors import ConfigError

if TYPE_CHECKING:
    from boe.agent.configuration import AgentConfig
    from boe.agent.state import AgentContext
    from boe.core.calibration import Calibration
    from boe.db import QuestionData

__all__ = ["StoreCache", "open_store", "question_data", "save_question"]


class StoreCache:
    """The request cache of a `boe.db.Store` behind the client's `RequestCache` protocol."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def key(self, endpoint: str, model: str, messages: Any, params: dict[str, Any], seed: int | None) -> str:
        from boe.core.calls import request_key

        return request_key(endpoint, model, messages, params, seed)

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self.store.cache_get(key)
        if hit is None or not isinstance(hit.response, dict):
            return None
        return dict(hit.response)

    def put(self, key: str, value: dict[str, Any]) -> None:
        usage = value.get("usage", {})
        self.store.cache_put(
            key,
            value,
            endpoint=str(value.get("endpoint", "")),
            model=str(value.get("model", "")),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )


def open_store(
    store: Any, config: AgentConfig, calibration: Calibration, run_name: str | None
) -> tuple[Any, Any, str, StoreCache]:
    """Open (or take) a store, create the run with the configuration and calibration, and its cache."""
    from boe.db import Store

    st = Store(store) if isinstance(store, (str, Path)) else store
    name = run_name or f"ask-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    cal = {"source": calibration.source, **calibration.model_dump(mode="json", exclude_none=True, exclude={"source"})}
    run = st.create_run(name, {"kind": "agent", "agent": config.public(), "calibration": cal}, exist_ok=True)
    stored = run.config.get("agent")
    mine = json.loads(json.dumps(config.public()))
    if stored is not None and _selection_settings(stored, stored) != _selection_settings(mine, stored):
        if isinstance(store, (str, Path)):
            st.close()
        raise ConfigError(
            f"run {name!r} already exists with another configuration "
            f"({_difference(stored, mine)}); choose another --run name"
        )
    return st, run, name, StoreCache(st)


#: Settings that decide what a stored question means; a run never mixes two of them.
_RUN_KEYS = (
    "model",
    "judge_model",
    "k",
    "temperature",
    "judge_temperature",
    "budget",
    "policy",
    "eta",
    "policy_seed",
    "costs",
    "cost_mode",
    "cost_basis",
    "cost_file",
    "kinds",
    "calibration",
    "dataset",
    "ledger",
    "seed",
    "segmenter",
    "sam_checkpoint",
    "sam_model",
    "grounded_view",
    "dicom_frame",
    "top_p",
    "top_k",
    "min_p",
    "max_pixels",
)


def _selection_settings(cfg: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """The settings to compare (those the stored run records: a run stored before a setting existed has none)."""
    return {k: cfg.get(k) for k in _RUN_KEYS if k in stored}


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    diff = [k for k in _RUN_KEYS if a.get(k) != b.get(k)]
    return ", ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} here" for k in diff[:3])


def save_question(
    ctx: AgentContext,
    record: LedgerRecord | dict[str, Any],
    calls: list[dict[str, Any]],
    transcript: dict[str, Any],
    image_ref: dict[str, Any] | list[dict[str, Any]],
) -> bool:
    """Write one answered question to the run's store (one transaction); ``image_ref``: one figure or all."""
    item = question_data(record, calls, transcript, image_ref)
    return bool(
        ctx.store.save_question(
            ctx.run_id,
            item.record,
            model_calls=item.model_calls,
            transcripts=item.transcripts,
            images=item.images,
            replace=True,
        )
    )


def question_data(
    record: LedgerRecord | dict[str, Any],
    calls: list[dict[str, Any]],
    transcript: dict[str, Any],
    image_ref: dict[str, Any] | list[dict[str, Any]],
) -> QuestionData:
    """One answered question as the store takes it: the record, its model calls, transcript and images.

    A record dict (the agent's) is validated by the store as it writes it, once; a `LedgerRecord` is taken as it is.
    """
    from boe.core.calls import ModelCall
    from boe.db import ImageRecord, QuestionData, TranscriptRecord

    model_calls = [ModelCall.from_dict(c) for c in calls]
    extra = record if isinstance(record, dict) else record.model_extra or {}
    evidence = extra.get("evidence_log") or []
    tr = TranscriptRecord.from_dict({**transcript, "evidence": evidence})
    refs = image_ref if isinstance(image_ref, list) else [image_ref]
    images = [
        ImageRecord.from_file(
            Path(ref["path"]),
            width=ref.get("width"),
            height=ref.get("height"),
            format=(ref.get("mime") or "").removeprefix("image/") or None,
        )
        for ref in refs
    ]
    return QuestionData(record, model_calls=model_calls, transcripts=[tr], images=images)
