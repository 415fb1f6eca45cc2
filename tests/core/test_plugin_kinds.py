"""Revision 1.2: plugin kinds in ledgers are declared, refused when not installed, and replayed by their target."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.ledger import dump_record, parse_record, parse_record_dict
from boe.core.literal import literal_calibration, literal_replay
from boe.core.registry import source_scope
from boe.errors import RecordError
from boe.kinds import KindSpec, register_kind, unregister_kind
from tests.core.strategies import PLUGIN, as_plugin_kinds, ledgers
from tests.core.test_replay import DETERMINISTIC, _engine, _same


@pytest.fixture(autouse=True, scope="module")
def _plugin_kinds():
    """The test kinds, as a plugin registers them, for this module only."""
    with source_scope("boe-test-plugin"):
        for n, (target, name) in enumerate(PLUGIN.items()):
            register_kind(
                KindSpec(name, target, 1.0, name, 900 + n, lambda _kind, _ctx: [], "x:y", default_on=False)  # type: ignore[arg-type]
            )
    yield
    for name in PLUGIN.values():
        unregister_kind(name)


POLICIES = [*DETERMINISTIC, "random-factor"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(), st.data(), st.sampled_from([0, 2, 4, 8, 16]))
def test_a_plugin_kind_replays_exactly_like_the_core_kind_of_its_target(recs, data, budget):
    """claim-targeted = a factor check (boe-factor and random-factor may buy it), response = whole, answer = answer."""
    picks = [data.draw(st.lists(st.booleans(), min_size=len(r["actions"]), max_size=len(r["actions"]))) for r in recs]
    plugged = [as_plugin_kinds(r, p) for r, p in zip(recs, picks, strict=True)]
    core = _engine(recs, POLICIES, [budget], seed=2)
    got = _engine(plugged, POLICIES, [budget], seed=2)
    assert core == got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(), st.data(), st.sampled_from([0, 1, 4, 16]))
def test_the_literal_reference_reads_plugin_kinds_by_their_target(recs, data, budget):
    picks = [data.draw(st.lists(st.booleans(), min_size=len(r["actions"]), max_size=len(r["actions"]))) for r in recs]
    plugged = [as_plugin_kinds(r, p) for r, p in zip(recs, picks, strict=True)]
    models = [parse_record(r) for r in plugged]
    cal = literal_calibration(models)
    got = _engine(plugged, DETERMINISTIC, [budget])
    for pol in DETERMINISTIC:
        for rec, x in zip(models, got[pol, float(budget)], strict=True):
            _same(x, literal_replay(rec, cal, pol, budget))


def _record(kind: str = "chart_value", fmt: str = "boe-ledger/1.2", declare: bool = True) -> dict:
    rec = {
        "format": fmt,
        "question_id": "q1",
        "dataset": "d",
        "candidates": [{"index": 0, "answer": "4"}, {"index": 1, "answer": "7"}],
        "claims": [{"id": "c0", "slot": "value", "value": "4"}],
        "edges": [{"candidate": 0, "claim": "c0", "sign": 1}],
        "actions": [{"id": "x:c0", "kind": kind, "claim": "c0", "cost": 2.0, "group": "chart", "outcome": "confirm"}],
    }
    if declare:
        rec["kinds"] = {kind: {"target": "claim", "plugin": "boe-chartqa"}}
    return rec


@pytest.mark.parametrize("parse", [parse_record, parse_record_dict], ids=["model", "fast"])
def test_a_kind_whose_plugin_is_not_installed_is_refused_naming_it(parse, monkeypatch):
    monkeypatch.setenv("BOE_DISABLE_PLUGINS", "all")
    with pytest.raises(RecordError) as exc:
        parse(json.dumps(_record()))
    msg = str(exc.value)
    assert "action kind 'chart_value' needs plugin 'boe-chartqa' (pip install boe-chartqa); it is not installed" in msg
    assert "kinds.chart_value" in msg and "'q1'" in msg


@pytest.mark.parametrize("package", ["best-of-evidence", "boe"])
def test_a_kind_built_into_a_later_version_names_this_package_never_the_pypi_project_boe(package):
    rec = _record(kind="later_kind")
    rec["kinds"]["later_kind"]["plugin"] = package  # "boe": what records of a sixth built-in kind once said
    with pytest.raises(RecordError) as exc:
        parse_record(json.dumps(rec))
    msg = str(exc.value)
    assert (
        "'later_kind' is built into a later best-of-evidence" in msg and "pip install --upgrade best-of-evidence" in msg
    )
    assert "pip install boe" not in msg and "plugin 'boe'" not in msg


@pytest.mark.parametrize(
    ("rec", "field", "why"),
    [
        (_record(kind="test_claim_kind", declare=False), "actions[0].kind", "unknown action kind 'test_claim_kind'"),
        (_record(kind="test_claim_kind", fmt="boe-ledger/1.1"), "kinds", "need format 'boe-ledger/1.2'"),
        (_record(kind="vlm_factor"), "kinds.vlm_factor", "is a kind the ledger format names"),
    ],
    ids=["undeclared", "wrong-format", "redeclared-core-kind"],
)
def test_declarations_are_checked(rec, field, why):
    with pytest.raises(RecordError) as exc:
        parse_record(json.dumps(rec))
    assert field in str(exc.value) and why in str(exc.value)


def test_a_declared_target_must_match_the_installed_kind():
    rec = _record(kind="test_response_kind")
    with pytest.raises(
        RecordError, match="the installed 'test_response_kind' .from boe-test-plugin. targets 'response'"
    ):
        parse_record(json.dumps(rec))


def test_records_of_formats_1_and_1_1_dump_byte_identical_and_1_2_keeps_its_declaration():
    line = json.dumps(_record(kind="vlm_factor", fmt="boe-ledger/1", declare=False), separators=(",", ":"))
    assert dump_record(parse_record(line)) == line
    plugged = json.dumps(_record(kind="test_claim_kind"), separators=(",", ":"))
    plugged = plugged.replace('"chart_value"', '"test_claim_kind"')
    out = json.loads(dump_record(parse_record(plugged)))
    assert out["format"] == "boe-ledger/1.2" and out["kinds"] == {
        "test_claim_kind": {"target": "claim", "plugin": "boe-chartqa"}
    }
