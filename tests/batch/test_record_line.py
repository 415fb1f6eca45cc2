"""A batch's records are validated once, as the store takes them, and stored byte for byte as before.

The agent hands the store a plain record dict (no model built, nothing dumped on the way); the store validates it
and writes it in one pass. The stored line must be exactly what the earlier path wrote for the same record:
`LedgerRecord.model_validate`, then ``model_dump(mode="json")``, then the JSON line.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from boe.agent import make_config
from boe.batch import BatchConfig, run_batch
from boe.core.ledger import LedgerRecord, dump_record, record_data, record_line
from boe.db import Store
from boe.errors import RecordError

pytestmark = pytest.mark.slow


def old_line(raw: dict[str, Any]) -> str:
    """The line the store wrote before: the record validated into the model, dumped, then written."""
    return dump_record(record_data(LedgerRecord.model_validate(raw)))


def stored_batch(data: Path, url: str, db: str, monkeypatch: pytest.MonkeyPatch, **agent: Any) -> dict[str, Any]:
    """Run a real batch; the record dicts the store was handed (copied before it saw them), by question id."""
    handed: dict[str, Any] = {}
    save = Store.save_questions

    def spy(self: Store, run: Any, items: Any, **kw: Any) -> int:
        items = list(items)
        for it in items:
            assert isinstance(it.record, dict)  # the agent's record reaches the store unvalidated
            handed[it.record["question_id"]] = copy.deepcopy(it.record)
        return save(self, run, items, **kw)

    monkeypatch.setattr(Store, "save_questions", spy)
    cfg = make_config(base_url=url, model="boe-sim", judge_model="boe-sim-judge", concurrency=8, **agent)
    s = run_batch(BatchConfig(dataset=str(data), agent=cfg, db=db, run="r", limit=8))
    assert s.stored == 8
    return handed


@pytest.mark.parametrize(
    "agent",
    [
        {"k": 6, "ledger": "full"},
        # an adaptive pool: each candidate's sample cost is added last, and the model orders it after `utility`
        {"k": 6, "ledger": "online", "pool": "adaptive", "budget": 12},
    ],
    ids=["full", "adaptive"],
)
def test_a_batch_stores_each_record_byte_for_byte_as_the_model_path_wrote_it(
    agent, sim_data, sim, locks, tmp_path, monkeypatch
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    handed = stored_batch(sim_data, sim.base_url, db, monkeypatch, **agent)
    with Store(db) as store:
        lines = {json.loads(line)["question_id"]: line for line in store.iter_ledger_lines("r")}
    assert sorted(lines) == sorted(handed) and len(lines) == 8
    for qid, raw in handed.items():
        assert lines[qid] == old_line(raw), qid
    if agent.get("pool") == "adaptive":
        raw = next(iter(handed.values()))
        assert list(raw["candidates"][0]).index("cost") > 4  # after the candidate's other keys
        assert list(json.loads(lines[raw["question_id"]])["candidates"][0]).index("cost") == 4  # after `utility`


def test_what_json_does_not_hold_is_written_as_the_model_wrote_it(sim_data, sim, locks, tmp_path, monkeypatch):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    raw = next(iter(stored_batch(sim_data, sim.base_url, db, monkeypatch, k=4, ledger="full").values()))
    odd = copy.deepcopy(raw)
    odd["agent"]["scores"][0] = float("-inf")  # the model's dump writes null
    odd["analysis"] = {"where": Path("/data/x.png"), "pair": (1, 2.5)}  # a path as text, a tuple as a list
    odd["actions"][0]["cost"] = 2  # an int cost is stored as the float the model makes of it
    data, line = record_line(odd)
    assert line == old_line(odd) and '"scores":[null,' in line and '"cost":2.0' in line
    assert data["actions"][0]["cost"] == 2.0 and isinstance(data["actions"][0]["cost"], float)
    assert record_line(LedgerRecord.model_validate(raw))[1] == record_line(raw)[1] == old_line(raw)


def test_a_bad_record_dict_is_refused_where_the_store_takes_it(sim_data, sim, locks, tmp_path, monkeypatch):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    raw = next(iter(stored_batch(sim_data, sim.base_url, db, monkeypatch, k=4, ledger="full").values()))
    bad = copy.deepcopy(raw)
    bad["question_id"] = "q-bad"
    bad["actions"][1]["cost"] = -1.0
    with Store(db) as store, pytest.raises(RecordError, match=r"actions\[1\]\.cost") as err:
        store.save_question("r", bad)
    assert err.value.question_id == "q-bad"
    with Store(db) as store:
        assert not store.has_question("r", bad["dataset"], "q-bad")
