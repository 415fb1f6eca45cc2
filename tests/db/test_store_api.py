"""The `Store` API on both back ends: runs, questions, transcripts, calls, images, calibrations."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from boe.core.calibration import Calibration, GroupCalibration
from boe.core.ledger import dump_record, parse_record
from boe.db import ImageRecord, ModelCall, QuestionData, Store, TranscriptRecord
from boe.db import models as m
from boe.db.rows import pack_record
from boe.errors import RecordError, StoreError

from .conftest import factor_records, pool_records


def agent_record(qid: str = "q1", answer0: str = "ct") -> dict[str, Any]:
    """A record as the agent writes it: ledger-v1 plus raw text, slots, views, rationales and a tool error."""
    return {
        "format": "boe-ledger/1",
        "question_id": qid,
        "dataset": "vqa-rad",
        "task": {"question": "what modality?", "image": "img/1.png", "options": ["ct", "mr"]},
        "reference": "ct",
        "candidates": [
            {
                "index": 0,
                "answer": answer0,
                "valid": True,
                "utility": 1.0,
                "raw_text": '{"answer": "CT"}',
                "slots": {"modality": "ct", "region": None},
            },
            {"index": 1, "answer": "mr", "valid": True, "utility": 0.0, "raw_text": "MRI", "slots": {"modality": "mr"}},
            {"index": 2, "answer": None, "valid": False, "utility": 0.0, "raw_text": "I cannot tell"},
        ],
        "claims": [
            {"id": "modality=ct", "slot": "modality", "value": "ct", "figure": 0},
            {"id": "modality=mr", "slot": "modality", "value": "mr", "figure": None},
        ],
        "edges": [
            {"candidate": 0, "claim": "modality=ct", "sign": 1},
            {"candidate": 1, "claim": "modality=ct", "sign": -1},
            {"candidate": 1, "claim": "modality=mr", "sign": 1},
        ],
        "actions": [
            {
                "id": "s:modality=ct",
                "kind": "structured",
                "claim": "modality=ct",
                "candidate": None,
                "cost": 1,
                "group": "structured/modality",
                "outcome": "confirm",
                "view": {"field": "Modality"},
                "rationale": "DICOM tag says CT",
            },
            {
                "id": "g:modality=mr",
                "kind": "grounded_factor",
                "claim": "modality=mr",
                "candidate": None,
                "cost": 4,
                "group": "grounded",
                "outcome": "unresolved",
                "view": {"crop": [10, 20, 110, 140]},
                "error": "segmenter timed out",
            },
            {
                "id": "w:1",
                "kind": "whole_response",
                "claim": None,
                "candidate": 1,
                "cost": 8,
                "group": "whole",
                "outcome": "reject",
                "rationale": "contradicts the image",
                "raw_reply": '{"verdict": "reject"}',
            },
            {
                "id": "v:modality=ct",
                "kind": "vlm_factor",
                "claim": "modality=ct",
                "candidate": None,
                "cost": 4,
                "group": "vlm",
                "outcome": "unresolved",
                "observed": False,
            },  # on the menu, never run
        ],
    }


def test_runs(store_url: str) -> None:
    with Store(store_url) as store:
        cfg = {
            "model": "m",
            "endpoint": "http://user:pw@host:8000/v1?api_key=SECRET",
            "api_key": "SECRET",
            "nested": {"hf_token": "T0K", "budget": 16, "max_tokens": 64, "keys": ["a"]},
            "path": Path("/x"),
        }
        run = store.create_run("r1", cfg, git_revision="abc123")
        assert run.name == "r1" and run.git_revision == "abc123" and run.boe_version
        assert "SECRET" not in json.dumps(run.config) and "pw" not in json.dumps(run.config)
        assert run.config["api_key"] == "***"
        assert run.config["nested"] == {"hf_token": "***", "budget": 16, "max_tokens": 64, "keys": ["a"]}
        assert run.config["endpoint"].startswith("http://host:8000/v1") and run.config["path"] == "/x"
        with pytest.raises(StoreError, match="already exists"):
            store.create_run("r1")
        assert store.create_run("r1", exist_ok=True).id == run.id
        store.create_run("r2")
        assert [r.name for r in store.list_runs()] == ["r1", "r2"]
        with pytest.raises(StoreError, match="no run named 'nope'.*r1, r2"):
            store.get_run("nope")
        store.save_question("r2", parse_record(agent_record()))
        store.delete_run("r2")
        assert [r.name for r in store.list_runs()] == ["r1"]
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(m.Question.__table__)).scalar() == 0
            assert conn.execute(select(func.count()).select_from(m.Edge.__table__)).scalar() == 0


def test_save_question_is_idempotent_or_replaces(store_url: str) -> None:
    with Store(store_url) as store:
        store.create_run("r")
        first = parse_record(agent_record(answer0="ct"))
        assert store.save_question("r", first) is True
        assert store.save_question("r", parse_record(agent_record(answer0="xr"))) is False
        assert [r.candidates[0].answer for r in store.iter_records("r")] == ["ct"]
        assert store.save_question("r", parse_record(agent_record(answer0="xr")), replace=True) is True
        assert [r.candidates[0].answer for r in store.iter_records("r")] == ["xr"]
        assert store.count_questions("r") == 1
        assert store.has_question("r", "vqa-rad", "q1") and not store.has_question("r", "other", "q1")
        assert store.done_question_ids("r") == {("vqa-rad", "q1")}
        # several in one call: duplicates inside the call are stored once
        items = [QuestionData(parse_record(agent_record(qid=f"q{i}"))) for i in (2, 3, 2)]
        assert store.save_questions("r", items) == 2
        assert store.count_questions("r") == 3


def test_normalised_tables_match_the_record(store_url: str) -> None:
    rec = parse_record(agent_record())
    with Store(store_url) as store:
        store.create_run("r")
        store.save_question("r", rec)
        with Session(store.engine) as s:
            q = s.scalars(select(m.Question)).one()
            assert (q.dataset, q.source_id, q.question_text, q.options, q.image, q.reference, q.n_candidates) == (
                "vqa-rad",
                "q1",
                "what modality?",
                ["ct", "mr"],
                "img/1.png",
                "ct",
                3,
            )
            assert [(c.idx, c.answer, c.valid, c.utility, c.raw_text) for c in q.candidates] == [
                (0, "ct", True, 1.0, '{"answer": "CT"}'),
                (1, "mr", True, 0.0, "MRI"),
                (2, None, False, 0.0, "I cannot tell"),
            ]
            assert q.candidates[0].slots == {"modality": "ct", "region": None} and q.candidates[2].slots is None
            assert [(c.pos, c.claim_id, c.slot, c.value, c.figure) for c in q.claims] == [
                (0, "modality=ct", "modality", "ct", "0"),
                (1, "modality=mr", "modality", "mr", None),
            ]
            assert [(e.claim_pos, e.candidate_idx, e.sign) for e in q.edges] == [(0, 0, 1), (0, 1, -1), (1, 1, 1)]
            acts = [
                (a.pos, a.action_id, a.kind, a.claim_pos, a.candidate_idx, a.cost, a.group_name, a.view)
                for a in q.actions
            ]
            assert acts == [
                (0, "s:modality=ct", "structured", 0, None, 1.0, "structured/modality", {"field": "Modality"}),
                (1, "g:modality=mr", "grounded_factor", 1, None, 4.0, "grounded", {"crop": [10, 20, 110, 140]}),
                (2, "w:1", "whole_response", None, 1, 8.0, "whole", None),
                (3, "v:modality=ct", "vlm_factor", 0, None, 4.0, "vlm", None),
            ]
            outs = [
                (a.outcome.outcome, a.outcome.rationale, a.outcome.raw_reply, a.outcome.error) if a.outcome else None
                for a in q.actions
            ]
            assert outs == [
                ("confirm", "DICOM tag says CT", None, None),
                ("unresolved", None, None, "segmenter timed out"),
                ("reject", "contradicts the image", '{"verdict": "reject"}', None),
                None,
            ]
        # the stored JSON is the record: export / replay read it back identically
        assert list(store.iter_ledger_lines("r")) == [dump_record(rec)]
        assert m.EVALUATION_COLUMNS == ("questions.reference", "candidates.utility", "transcripts.utility")


def test_foreign_keys_are_enforced(store_url: str) -> None:
    with Store(store_url) as store:
        store.create_run("r")
        store.save_question("r", parse_record(agent_record()))
        with store.engine.connect() as conn:
            pk = conn.execute(select(m.Question.id)).scalar_one()
        with pytest.raises(Exception, match="(?i)foreign key"), store.engine.begin() as conn:
            conn.execute(m.Edge.__table__.insert().values(question_pk=pk, claim_pos=9, candidate_idx=0, sign=1))


def test_iter_records_order_and_bad_stored_records(store_url: str) -> None:
    recs = pool_records(5, seed=1) + factor_records(3)
    with Store(store_url) as store:
        store.create_run("r")
        for r in recs:
            store.save_question("r", parse_record(r))
        got = list(store.iter_records("r"))
        assert [r.question_id for r in got] == [r["question_id"] for r in recs]
        assert [json.loads(dump_record(r)) for r in got] == recs
        dicts = list(store.iter_record_dicts("r"))
        assert dicts == recs
        # corrupt one stored record behind the store's back
        with store.engine.begin() as conn:
            conn.execute(
                update(m.Question.__table__)
                .where(m.Question.__table__.c.source_id == recs[2]["question_id"])
                .values(record=pack_record(json.dumps({**recs[2], "candidates": []})))
            )
        errors: list[RecordError] = []
        assert len(list(store.iter_records("r", on_error=errors.append))) == len(recs) - 1
        assert len(errors) == 1 and errors[0].line == 3 and errors[0].question_id == recs[2]["question_id"]
        assert errors[0].field == "candidates" and "#r" in (errors[0].source or "")
        assert len(list(store.iter_record_dicts("r", on_error=errors.append))) == len(recs) - 1
        with pytest.raises(RecordError):
            list(store.iter_records("r", strict=True))


def test_transcripts_model_calls_and_images(store_url: str, tmp_path: Path) -> None:
    img_path = tmp_path / "scan.png"
    img_path.write_bytes(b"\x89PNG fake bytes")
    img = ImageRecord.from_file(img_path, width=64, height=48)
    embedded = ImageRecord.from_bytes(b"other", path="b.png", width=1, height=1, format="png", embed=True)
    t = TranscriptRecord(
        dataset="vqa-rad",
        question_id="q1",
        policy="boe",
        budget=16,
        selected=0,
        actions=["s:modality=ct"],
        scores=[0.7, 0.2, 0.1],
        cost=1,
        utility=1.0,
        evidence=[{"action": "s:modality=ct", "outcome": "confirm", "rationale": "DICOM tag says CT"}],
    )
    call = ModelCall(
        call_id="c1",
        role="judge",
        purpose="factor_judge",
        prompt_version="factor_judge@1",
        model="m",
        base_url="https://user:secret@api.example/v1?key=abc",
        n=1,
        temperature=0.0,
        request_key="h" * 64,
        started_at="2026-01-02T03:04:05.678+00:00",
        requests=2,
        prompt_tokens=100,
        completion_tokens=20,
        latency_ms=500.0,
    )
    with Store(store_url) as store:
        store.create_run("r")
        store.save_question(
            "r", parse_record(agent_record()), transcripts=[t], model_calls=[call], images=[img, embedded]
        )
        store.save_question("r", parse_record(agent_record(qid="q2")), images=[img])  # the same image, stored once
        assert list(store.iter_transcripts("r")) == [t]
        assert t.to_dict()["budget"] == 16 and t.to_dict()["evidence"][0]["outcome"] == "confirm"
        # transcripts of stored questions can be added later (e.g. by a replay)
        t2 = TranscriptRecord.from_dict(
            {
                "question_id": "q2",
                "dataset": "vqa-rad",
                "policy": "raw",
                "budget": 0,
                "selected": 1,
                "actions": [],
                "cost": 0,
                "scores": [0.5, 0.4, 0.1],
                "utility": 0.0,
            }
        )
        assert store.save_transcripts("r", [t2]) == 1
        assert list(store.iter_transcripts("r", policy="raw")) == [t2]
        assert len(list(store.iter_transcripts("r"))) == 2
        with pytest.raises(StoreError, match="no question 'q9'"):
            store.save_transcripts("r", [TranscriptRecord.from_dict({**t2.to_dict(), "question_id": "q9"})])
        store.save_model_calls("r", [call])
        calls = list(store.iter_model_calls("r"))
        assert len(calls) == 2 and {c.base_url for c in calls} == {"https://api.example/v1?key=***"}
        assert (calls[0].prompt_tokens, calls[0].completion_tokens, calls[0].retries) == (100, 20, 1)
        # the columns the table has come back; the prompt, role and tags live in the ledger record
        back = calls[0]
        assert (back.request_key, back.requests, back.latency_ms, back.status) == ("h" * 64, 2, 500.0, "ok")
        assert back.created is not None and back.created.replace(tzinfo=None) == datetime(2026, 1, 2, 3, 4, 5, 678000)
        with store.engine.connect() as conn:
            stmt = select(m.Image.sha256, m.Image.path, m.Image.width, m.Image.data).order_by(m.Image.id)
            rows = conn.execute(stmt).all()
            assert rows == [(img.sha256, str(img_path), 64, None), (embedded.sha256, "b.png", 1, b"other")]
            assert conn.execute(select(func.count()).select_from(m.QuestionImage.__table__)).scalar() == 3


def test_calibrations(store_url: str) -> None:
    group = GroupCalibration(kappa=0.7, p={"confirm": 0.5, "reject": 0.3, "unresolved": 0.2})
    cal = Calibration(cheap_kappa=0.6, groups={"vqa/vlm": group})
    with Store(store_url) as store:
        run = store.create_run("r")
        store.save_calibration("fit-1", cal, run=run)
        got = store.load_calibration("fit-1")
        assert got.groups == cal.groups and got.cheap_kappa == 0.6 and got.source and "fit-1" in got.source
        store.save_calibration("fit-1", cal.model_copy(update={"cheap_kappa": 0.55}))
        assert store.load_calibration("fit-1").cheap_kappa == 0.55
        assert store.list_calibrations() == ["fit-1"]
        with pytest.raises(StoreError, match="no calibration named 'x'"):
            store.load_calibration("x")


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "absent.db", create=False)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="not a database"):
        Store(junk)
    with pytest.raises(StoreError, match="unsupported database"):
        Store("mysql://localhost/x")
    with Store(tmp_path / "plain.db") as store:  # a bare path is an SQLite file
        assert store.dialect == "sqlite" and store.url.endswith("plain.db")
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM boe_schema")).scalar() == 1
