"""`boe.core.packing`: many questions as flat arrays and back, exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from boe.core.experiment import load_questions
from boe.core.graph import GroupIndex, Question
from boe.core.ledger import parse_record_dict
from boe.core.packing import from_bytes, pack_questions, to_bytes, unpack_questions
from tests.core.strategies import ledgers


def assert_same_questions(got: list[Question], want: list[Question]) -> None:
    """Every field equal: arrays by value and dtype, strings and the None flags exactly."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for f in dataclasses.fields(Question):
            a, b = getattr(g, f.name), getattr(w, f.name)
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray) and a.dtype == b.dtype, f.name
                np.testing.assert_array_equal(a, b, err_msg=f.name)
            else:
                assert a == b, f.name


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers(max_size=5), ledgers(max_size=3))
def test_round_trip_through_bytes_is_exact(first, second):
    """Packed, written, read and unpacked into an index that already knows other groups: the same questions."""
    qs, groups = load_questions([parse_record_dict(r) for r in first])
    packed = from_bytes(to_bytes(pack_questions(qs, groups.keys)))
    other, into = load_questions([parse_record_dict({**r, "dataset": "other"}) for r in second])
    back = unpack_questions(packed, into)
    # the same keys, whatever ids the receiving index gives them
    for g, w in zip(back, qs, strict=True):
        assert [into.keys[i] for i in g.group.tolist()] == [groups.keys[i] for i in w.group.tolist()]
        g.group = w.group
    assert_same_questions(back, qs)
    assert len(into.keys) >= len({k for q in other for k in q.group.tolist()})


def test_groups_register_in_the_order_a_sequential_load_meets_them():
    qs, groups = load_questions([parse_record_dict(r) for r in _two_group_records()])
    fresh = GroupIndex()
    unpack_questions(pack_questions(qs, groups.keys), fresh)
    assert fresh.keys == groups.keys


@pytest.mark.parametrize("data", [b"", b"not a zip", b"PK\x03\x04" + b"\0" * 40])
def test_damaged_bytes_are_a_value_error(data):
    with pytest.raises(ValueError, match="not packed questions"):
        from_bytes(data)


def test_another_format_is_a_value_error(monkeypatch):
    import boe.core.packing

    qs, groups = load_questions([parse_record_dict(r) for r in _two_group_records()])
    monkeypatch.setattr(boe.core.packing, "_FORMAT", 9)
    data = to_bytes(pack_questions(qs, groups.keys))
    monkeypatch.undo()
    with pytest.raises(ValueError, match="format 9, not 1"):
        from_bytes(data)


def _two_group_records():
    from boe.sim.ledgers import pool_ledger

    return list(pool_ledger(3, seed=5))


def test_sample_costs_of_format_1_3_survive_the_round_trip():
    """A sampled pool's candidates keep their sample costs (an adaptive replay of a cached ledger pays them)."""
    from boe.sim.ledgers import pool_ledger, pool_spec

    recs = list(pool_ledger(6, seed=3, spec=pool_spec("default", sample_cost=0.5)))
    qs, groups = load_questions([parse_record_dict(r) for r in recs])
    assert all(q.sample_cost is not None and (q.sample_cost == 0.5).all() for q in qs)
    back = unpack_questions(from_bytes(to_bytes(pack_questions(qs, groups.keys))), GroupIndex())
    for g, w in zip(back, qs, strict=True):
        g.group = w.group
    assert_same_questions(back, qs)


def test_a_lone_surrogate_in_an_answer_survives_the_cache_and_the_workers():
    """The model accepts an answer with a lone surrogate (the Structs leave it to the model); packing for the
    ledger cache wrote it as strict UTF-8 and failed, and the workers' msgpack blob cannot hold it either."""
    import json
    import pickle

    from boe.core.graph import Question
    from boe.core.ledger import parse_record

    rec = _two_group_records()[0]
    rec["candidates"][0]["answer"] = "\ud800x"
    q = Question.from_record(parse_record(json.dumps(rec)), groups := GroupIndex())
    assert q.answers[0] == "\ud800x"
    packed = pack_questions([q], groups.keys)
    for back in (from_bytes(to_bytes(packed)), pickle.loads(pickle.dumps(packed))):
        assert back.answers == packed.answers and back.action_ids == packed.action_ids
        assert_same_questions(unpack_questions(back, GroupIndex()), [q])
