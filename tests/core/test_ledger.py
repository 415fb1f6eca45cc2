"""Ledger-v1 models and the streaming loader: validation names file, line, question and field."""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from boe.core.graph import GroupIndex, Question
from boe.core.ledger import dump_record, iter_ledger, parse_record, parse_record_dict, read_ledger
from boe.core.loading import load_ledgers, load_lines
from boe.core.structs import decode_record
from boe.errors import RecordError
from tests.core.strategies import records

GOOD = {
    "format": "boe-ledger/1",
    "question_id": "q1",
    "dataset": "vqa-med",
    "task": {"question": "what imaging modality was used?", "image": "images/1.jpg", "options": None},
    "reference": "ct",
    "candidates": [
        {"index": 0, "answer": "ct", "valid": True, "utility": 1.0, "raw": "CT, axial"},
        {"index": 1, "answer": "mr", "valid": True, "utility": 0.0},
        {"index": 2, "answer": None, "valid": False, "utility": 0.0},
    ],
    "claims": [
        {"id": "modality=ct", "slot": "modality", "value": "ct", "figure": None},
        {"id": "modality=mr", "slot": "modality", "value": "mr", "figure": None},
    ],
    "edges": [
        {"candidate": 0, "claim": "modality=ct", "sign": 1},
        {"candidate": 1, "claim": "modality=ct", "sign": -1},
        {"candidate": 1, "claim": "modality=mr", "sign": 1},
        {"candidate": 0, "claim": "modality=mr", "sign": -1},
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
        },
        {
            "id": "v:modality=mr",
            "kind": "vlm_factor",
            "claim": "modality=mr",
            "candidate": None,
            "cost": 4,
            "group": "vlm",
            "outcome": "reject",
        },
        {
            "id": "w:1",
            "kind": "whole_response",
            "claim": None,
            "candidate": 1,
            "cost": 8,
            "group": "whole",
            "outcome": "unresolved",
            "view": {"kind": "whole"},
        },
    ],
}


def mutate(path: str, value):
    rec = copy.deepcopy(GOOD)
    *head, last = path.split(".")
    obj = rec
    for part in head:
        obj = obj[int(part)] if part.isdigit() else obj[part]
    if value is KeyError:
        del obj[int(last) if last.isdigit() else last]
    else:
        obj[int(last) if last.isdigit() else last] = value
    return rec


def test_good_record_parses_both_ways():
    rec = parse_record(json.dumps(GOOD))
    d = parse_record_dict(json.dumps(GOOD))
    assert rec.k == 3 and rec.actions[2].is_factor is False
    assert d["candidates"][0]["raw"] == "CT, axial"  # unknown keys are kept
    assert json.loads(dump_record(rec)) == GOOD  # round trip, extras included


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param("actions.1.outcome", "maybe", "actions[1].outcome", id="bad-outcome"),
        pytest.param("actions.0.kind", "oracle", "actions[0].kind", id="bad-kind"),
        pytest.param("actions.0.cost", 0, "actions[0].cost", id="zero-cost"),
        pytest.param("actions.0.cost", -1, "actions[0].cost", id="negative-cost"),
        pytest.param("actions.0.claim", "modality=us", "actions[0].claim", id="unknown-claim"),
        pytest.param("actions.2.candidate", 3, "actions[2].candidate", id="whole-out-of-range"),
        pytest.param("actions.2.claim", "modality=ct", "actions[2].claim", id="whole-with-claim"),
        pytest.param("actions.1.id", "s:modality=ct", "actions[1].id", id="duplicate-action"),
        pytest.param("edges.1.sign", 0, "edges[1].sign", id="zero-sign"),
        pytest.param("edges.2.claim", "nope", "edges[2].claim", id="edge-unknown-claim"),
        pytest.param("edges.2.candidate", 7, "edges[2].candidate", id="edge-bad-candidate"),
        pytest.param("edges.3.candidate", 0, "edges[3]", id="edge-duplicate-after-change"),
        pytest.param("candidates.1.index", 5, "candidates[1].index", id="index-order"),
        pytest.param("candidates.0.utility", 1.5, "candidates[0].utility", id="utility-range"),
        pytest.param("claims.1.id", "modality=ct", "claims[1].id", id="duplicate-claim"),
        pytest.param("format", "boe-ledger/2", "format", id="unknown-version"),
        pytest.param("candidates", [], "candidates", id="empty-pool"),
        pytest.param("dataset", KeyError, "dataset", id="missing-dataset"),
    ],
)
def test_bad_record_names_the_field(path, value, field):
    rec = mutate(path, value)
    if path == "edges.3.candidate":  # make edge 3 duplicate edge 0's (candidate, claim)
        rec["edges"][3] = {"candidate": 0, "claim": "modality=ct", "sign": 1}
    for parse in (parse_record, parse_record_dict):
        with pytest.raises(RecordError) as info:
            parse(json.dumps(rec), source="x.jsonl", line=7)
        err = info.value
        assert err.field == field, (parse.__name__, err.describe())
        assert err.line == 7 and err.source == "x.jsonl"
        assert "x.jsonl:7" in str(err) and field in str(err)
        if path != "format":
            assert err.question_id == "q1"


def test_not_json_and_not_utf8():
    with pytest.raises(RecordError, match="not valid JSON"):
        parse_record('{"format": "boe-ledger/1", ', source="f", line=2)
    with pytest.raises(RecordError, match="not UTF-8"):
        parse_record(b'{"question_id": "\xff"}', source="f", line=3)
    with pytest.raises(RecordError, match="JSON object"):
        parse_record("[1, 2]")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_loader_skips_and_reports_bad_lines(tmp_path):
    good2 = dict(copy.deepcopy(GOOD), question_id="q2")
    dup = dict(copy.deepcopy(GOOD), question_id="q2")
    path = _write(
        tmp_path / "l.jsonl",
        [
            json.dumps(GOOD),
            "",
            "{broken",
            json.dumps(mutate("actions.0.outcome", "?")),
            json.dumps(good2),
            json.dumps(dup),
        ],
    )
    for reader in (read_ledger, iter_ledger):
        errors: list[RecordError] = []
        got = list(reader(path, on_error=errors.append))
        ids = [r.question_id if hasattr(r, "question_id") else r["question_id"] for r in got]
        assert ids == ["q1", "q2"]
        assert [e.line for e in errors] == [3, 4, 6]
        assert errors[1].field == "actions[0].outcome" and errors[1].question_id == "q1"
        assert errors[2].field == "question_id"
        with pytest.raises(RecordError) as info:
            list(reader(path, strict=True))
        assert info.value.line == 3


def test_parallel_loader_matches_sequential(tmp_path, monkeypatch):
    import importlib

    loading = importlib.import_module("boe.core.loading")
    from boe.sim.ledgers import pool_ledger

    lines = [json.dumps(r) for r in pool_ledger(300, seed=2)]
    lines[150] = lines[150][:-40]  # truncated line in the middle
    lines[201] = json.dumps(mutate("edges.0.sign", 2))
    _write(tmp_path / "big.jsonl", lines)
    monkeypatch.chdir(tmp_path)
    path = "./big.jsonl"  # named as given, by both paths (the parallel one wrote "big.jsonl")
    seq_err: list[RecordError] = []
    seq, g1 = load_ledgers([path], on_error=seq_err.append, workers=1)
    monkeypatch.setattr(loading, "PARALLEL_BYTES", 1000)
    monkeypatch.setattr(loading, "CHUNK_BYTES", 200_000)
    par_err: list[RecordError] = []
    par, g2 = load_ledgers([path], on_error=par_err.append, workers=2)
    assert [e.line for e in seq_err] == [e.line for e in par_err] == [151, 202]
    assert [e.describe() for e in par_err] == [e.describe() for e in seq_err]
    assert par_err[0].describe().startswith("./big.jsonl:151")
    assert [q.question_id for q in seq] == [q.question_id for q in par]
    assert len(seq) == 298
    for a, b in zip(seq, par, strict=True):
        assert [g1.keys[i] for i in a.group] == [g2.keys[i] for i in b.group]
        assert (a.alpha == b.alpha).all() and (a.outcome == b.outcome).all()


@settings(max_examples=60, deadline=None)
@given(records())
def test_models_and_dicts_agree(rec):
    text = json.dumps(rec)
    model = parse_record(text)
    d = parse_record_dict(text)
    assert json.loads(dump_record(model)) == json.loads(json.dumps(d))


# --------------------------------------------------------------------------- revision 1.1: answer-level checks


def _with_answer_check(candidate: int = 0, fmt: str = "boe-ledger/1.1") -> dict:
    rec = copy.deepcopy(GOOD)
    rec["format"] = fmt
    rec["candidates"].append({"index": 3, "answer": " CT ", "valid": True, "utility": 1.0})
    rec["actions"].append(
        {
            "id": "a:ct",
            "kind": "answer_response",
            "claim": None,
            "candidate": candidate,
            "cost": 8,
            "group": "answer",
            "outcome": "confirm",
        }
    )
    return rec


def test_answer_check_parses_in_format_1_1():
    rec = _with_answer_check()
    model = parse_record(json.dumps(rec))
    d = parse_record_dict(json.dumps(rec))
    assert model.format == "boe-ledger/1.1" and d["format"] == "boe-ledger/1.1"
    assert model.actions[3].is_factor is False
    assert json.loads(dump_record(model)) == rec


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        pytest.param({"fmt": "boe-ledger/1"}, "actions[3].kind", "boe-ledger/1.1", id="kind-needs-1.1"),
        pytest.param({"candidate": 2}, "actions[3].candidate", "valid representative", id="invalid-representative"),
        pytest.param({"candidate": 4}, "actions[3].candidate", "0..3", id="representative-out-of-range"),
    ],
)
def test_bad_answer_check_names_the_field(change, field, words):
    rec = _with_answer_check(**change)
    for parse in (parse_record, parse_record_dict):
        with pytest.raises(RecordError) as info:
            parse(json.dumps(rec), source="x.jsonl", line=3)
        assert info.value.field == field and words in str(info.value), info.value.describe()
        assert info.value.question_id == "q1"


def test_answer_check_with_a_claim_or_a_null_answer_is_rejected():
    rec = _with_answer_check()
    rec["actions"][3]["claim"] = "modality=ct"
    with pytest.raises(RecordError) as info:
        parse_record_dict(json.dumps(rec))
    assert info.value.field == "actions[3].claim"
    rec = _with_answer_check()
    rec["candidates"][0]["answer"] = None  # valid flag but no answer: not a valid representative
    with pytest.raises(RecordError) as info:
        parse_record(json.dumps(rec))
    assert info.value.field == "actions[3].candidate"


def test_format_1_1_without_answer_checks_reads_like_format_1():
    rec = copy.deepcopy(GOOD)
    rec["format"] = "boe-ledger/1.1"
    assert parse_record_dict(json.dumps(rec))["actions"] == parse_record_dict(json.dumps(GOOD))["actions"]


def test_format_for():
    from boe.core.ledger import format_for

    assert format_for(["structured", "whole_response"]) == "boe-ledger/1"
    assert format_for(["structured", "answer_response"]) == "boe-ledger/1.1"


def test_loader_checks_answer_checks_like_the_model(tmp_path):
    good = _with_answer_check()
    bad = _with_answer_check(candidate=2)
    bad["question_id"] = "q2"
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    errors: list[RecordError] = []
    qs, _ = load_ledgers([path], on_error=errors.append)
    assert [q.question_id for q in qs] == ["q1"]
    assert len(errors) == 1 and errors[0].field == "actions[3].candidate" and errors[0].question_id == "q2"
    # the answer check moves every valid candidate answering "ct" after strip().lower(): 0 and 3
    q = qs[0]
    assert q.alpha[3].tolist() == [1, 0, 0, 1]
    assert q.is_answer.tolist() == [False, False, False, True]
    assert q.is_factor.tolist() == [True, True, False, False]


# --------------------------------------------------------------------------- the loader's msgspec Structs


def _same_question(a: Question, b: Question) -> bool:
    for f in fields(Question):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
                return False
        elif x != y:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(records())
def test_structs_build_what_the_model_builds(rec):
    text = json.dumps(rec).encode()
    line = decode_record(text)
    assert line is not None
    groups_a, groups_b = GroupIndex(), GroupIndex()
    a = Question.from_record(line, groups_a, check=True)
    b = Question.from_record(parse_record(text), groups_b)
    assert _same_question(a, b) and groups_a.keys == groups_b.keys


def _outcome(raw: bytes) -> tuple[str, object]:
    try:
        return "ok", parse_record(raw, source="f", line=1).question_id
    except RecordError as exc:
        return "error", exc.message


def _deep(key: str, depth: int) -> bytes:
    return json.dumps(GOOD)[:-1].encode() + f', "{key}": '.encode() + b"[" * depth + b"]" * depth + b"}"


def _deep_in_candidate(depth: int) -> bytes:
    text = json.dumps(GOOD).replace('"raw": "CT, axial"', '"raw": ' + "[" * depth + "]" * depth)
    return text.encode()


@pytest.mark.parametrize(
    "raw, structs_take_it",
    [
        (json.dumps(GOOD).encode(), True),
        (_deep("extra", 399), True),  # the record's own object is the 400th level
        (_deep("extra", 400), False),  # 401 levels, in a key replay skips
        (_deep("reference", 700), False),
        (_deep_in_candidate(397), True),  # the record, its candidates and the candidate are three levels
        (_deep_in_candidate(398), False),
        (json.dumps(GOOD).replace('"ct"}', '"ct", "note": "\\"[[["}').encode(), True),  # brackets in a string
        (json.dumps(GOOD)[:-1].encode() + b', "note": "caf\xe9"}', False),  # not UTF-8, in a key replay skips
        (json.dumps(GOOD)[:-1].encode() + b', "note": "caf\xc3\xa9"}', True),
        (json.dumps({**GOOD, "note": "\ud800"}).encode(), False),  # a lone surrogate: the model decides
        (json.dumps(GOOD).replace('"cost": 1,', '"cost": "1",').encode(), False),  # pydantic's lax number
        (json.dumps(GOOD).replace('"index": 1,', '"index": 1.0,').encode(), False),
        (json.dumps(GOOD).replace('"valid": true', '"valid": 1', 1).encode(), False),
        (json.dumps(GOOD).replace('"utility": 1.0', '"utility": NaN', 1).encode(), False),
        (json.dumps(GOOD).replace('"cost": 1,', '"cost": 1e999,').encode(), False),
        (json.dumps({**GOOD, "kinds": None}).encode(), True),
        (json.dumps({**GOOD, "task": None}).encode(), False),
    ],
)
def test_loader_reads_a_line_exactly_as_the_model(raw, structs_take_it):
    """The Structs take a subset of what the model takes; the rest goes to the model, which decides and names."""
    assert (decode_record(raw) is not None) == structs_take_it
    want = _outcome(raw)
    errors: list[RecordError] = []
    qs, groups = load_lines([raw], "f", on_error=errors.append)
    got = ("ok", qs[0].question_id) if qs else ("error", errors[0].message)
    assert got == want
    if qs:
        assert _same_question(qs[0], Question.from_record(parse_record(raw), GroupIndex()))
