"""One registry for policies, kinds, tools, segmenters, dataset formats and store backends."""

from __future__ import annotations

import pytest

from boe.core.registry import Registry, source_scope
from boe.errors import ConfigError


def test_a_duplicate_is_refused_naming_who_holds_it_unless_overridden():
    reg: Registry[object] = Registry("test-things", "test thing")
    first, second = object(), object()
    reg.add("a", first)
    refused = r"test thing 'a' is already registered by 'boe'.*override=True"
    with pytest.raises(ConfigError, match=refused), source_scope("some-plugin"):
        reg.add("a", second)
    assert reg["a"] is first
    with source_scope("some-plugin"):
        reg.add("a", second, override=True)
    assert reg["a"] is second and reg.entry("a").source == "some-plugin"


def test_a_lazy_entry_is_imported_on_first_use_and_its_module_may_register_itself():
    reg: Registry[object] = Registry("test-lazy", "test lazy")
    reg.add("dumps", "json:dumps")
    assert not reg.entry("dumps").loaded
    import json

    assert reg["dumps"] is json.dumps and reg.entry("dumps").loaded
    reg.add("dumps", json.dumps)  # the module registering the same object: no duplicate
    with pytest.raises(ConfigError, match="unknown test lazy 'nope'; known: dumps"):
        reg.get_obj("nope")


def test_a_user_tool_for_a_built_in_kind_is_refused_not_silently_replaced():
    from boe.kinds import TOOLS, make_tool, register_tool

    with pytest.raises(ConfigError, match="evidence tool 'vlm_factor' is already registered by 'boe'"):

        @register_tool("vlm_factor")
        class Mine:
            kind = "vlm_factor"

    assert TOOLS.entry("vlm_factor").spec() == "boe.tools.judges:VlmFactorJudge"
    assert make_tool("structured").kind == "structured"


def test_policies_and_segmenters_refuse_duplicates_and_list_their_sources():
    from boe.core.policies import POLICIES, register_policy
    from boe.tools.segment import SEGMENTERS, register_segmenter

    with pytest.raises(ConfigError, match="policy 'boe' is already registered"):
        register_policy("boe")(type("Mine", (), {}))
    with pytest.raises(ConfigError, match="segmenter 'opencv' is already registered"):
        register_segmenter("opencv")(lambda **kw: None)
    assert {"bayes", "boe", "whole"} <= set(POLICIES)
    assert SEGMENTERS.entry("sam").spec() == "boe.tools.segment_sam:_sam_factory"


def test_fittable_policies_are_recognised_by_protocol():
    from boe.core.policies import FittablePolicy, make_policy

    assert isinstance(make_policy("bayes"), FittablePolicy)
    assert not isinstance(make_policy("boe"), FittablePolicy)


def test_store_backends_are_registered_and_unknown_schemes_refused():
    from boe.db.engine import to_url
    from boe.errors import StoreError

    assert to_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert to_url("sqlite+pysqlite:///x.db").drivername == "sqlite+pysqlite"
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        to_url("mysql://u@h/db")
    with pytest.raises(StoreError, match=r"use sqlite:///path.db, not sqlite\+foo://"):
        to_url("sqlite+foo:///x.db")


def test_listing_names_every_registry_and_source():
    from boe.registry import listing

    found = listing()
    assert set(found) >= {"policies", "kinds", "tools", "segmenters", "formats", "stores"}
    kinds = {e["name"]: e for e in found["kinds"]}
    assert set(kinds) >= {"structured", "vlm_factor", "grounded_factor", "whole_response", "answer_response"}
    assert all(e["source"] == "boe" for e in kinds.values())
