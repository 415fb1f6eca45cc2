"""`boe.ledger_cache`: a loaded ledger kept packed on disk, keyed by content, never changing a replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from boe.core.loading import load_ledgers
from boe.core.replay import plan_calibration, replay, transcripts
from boe.ledger_cache import ENV, FileLedgerCache, content_key, default_ledger_cache
from boe.sim.ledgers import pool_ledger, write_jsonl
from tests.core.strategies import as_plugin_kinds, ledgers
from tests.core.test_packing import assert_same_questions

POLICIES = ["raw", "boe", "boe-factor", "random-factor", "whole", "label-guided"]


def write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def sweep(paths: list[Path], cache: FileLedgerCache | None) -> tuple[list[list[dict]], list[str]]:
    """Transcripts of every policy at three budgets (calibration fitted in-sample), and the group keys."""
    qs, groups = load_ledgers(paths, cache=cache, workers=1)
    plan = plan_calibration(qs, groups.keys, "fit")
    runs = replay(qs, groups.keys, POLICIES, [0.0, 2.0, 16.0], plan, workers=1)
    return [transcripts(r, qs) for r in runs], groups.keys


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(ledgers(max_size=5), ledgers(max_size=4))
def test_cached_and_uncached_loads_give_identical_transcripts(tmp_path_factory, first, second):
    """Cold (stored), warm (unpacked) and uncached loads of two files replay identically, groups included."""
    tmp = tmp_path_factory.mktemp("c")
    paths = [write(tmp / "a.jsonl", first), write(tmp / "b.jsonl", [{**r, "dataset": "b"} for r in second])]
    cache = FileLedgerCache(tmp / "cache")
    want = sweep(paths, None)
    assert sweep(paths, cache) == want
    assert len(list((tmp / "cache").glob("*.npz"))) == 2
    assert sweep(paths, FileLedgerCache(tmp / "cache")) == want
    plain, _ = load_ledgers(paths, workers=1)
    warm, _ = load_ledgers(paths, cache=cache, workers=1)
    assert_same_questions(warm, plain)


def pool_file(path: Path, n: int = 6, seed: int = 3) -> Path:
    with path.open("w") as fh:
        write_jsonl(pool_ledger(n, seed=seed), fh)
    return path


def test_an_edit_that_keeps_size_and_time_is_a_miss(tmp_path):
    """The key is the content: same size, same modification time, other bytes, other load."""
    path = pool_file(tmp_path / "pool.jsonl")
    cache = FileLedgerCache(tmp_path / "cache")
    before, _ = load_ledgers([path], cache=cache, workers=1)
    st_ = path.stat()
    data = path.read_bytes()
    edited = data.replace(b'"outcome":"confirm"', b'"outcome":"reject" ', 1)
    assert len(edited) == len(data) and edited != data
    path.write_bytes(edited)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    after, _ = load_ledgers([path], cache=cache, workers=1)
    plain, _ = load_ledgers([path], workers=1)
    assert_same_questions(after, plain)
    assert sum(int(q.outcome.sum()) for q in after) != sum(int(q.outcome.sum()) for q in before)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_entry_is_loaded_afresh_and_replaced(tmp_path, damage):
    path = pool_file(tmp_path / "pool.jsonl")
    cache = FileLedgerCache(tmp_path / "cache")
    want, _ = load_ledgers([path], workers=1)
    load_ledgers([path], cache=cache, workers=1)
    (entry,) = (tmp_path / "cache").glob("*.npz")
    good = entry.read_bytes()
    entry.write_bytes(good[: len(good) // 2] if damage is None else damage)
    got, _ = load_ledgers([path], cache=cache, workers=1)
    assert_same_questions(got, want)
    assert entry.read_bytes() == good  # stored again, whole


def test_an_unwritable_folder_only_means_no_cache(tmp_path):
    path = pool_file(tmp_path / "pool.jsonl")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    want, _ = load_ledgers([path], workers=1)
    got, _ = load_ledgers([path], cache=FileLedgerCache(blocker / "cache"), workers=1)
    assert_same_questions(got, want)


def test_a_file_with_bad_records_or_plugin_kinds_is_not_stored(tmp_path):
    recs = list(pool_ledger(4, seed=2))
    bad = write(tmp_path / "bad.jsonl", [*recs[:2], {"question_id": "broken"}])
    plugin = write(tmp_path / "plugin.jsonl", [as_plugin_kinds(recs[0], [True] * len(recs[0]["actions"]))])
    cache = FileLedgerCache(tmp_path / "cache")
    load_ledgers([bad, plugin], cache=cache, workers=1, on_error=lambda err: None)
    assert not list((tmp_path / "cache").glob("*.npz"))


def test_a_file_rewritten_while_it_loads_is_not_stored(tmp_path):
    path = pool_file(tmp_path / "pool.jsonl")
    cache = FileLedgerCache(tmp_path / "cache")
    assert cache.get(path) is None
    pool_file(path, seed=9)  # rewritten after its bytes were hashed
    cache.put(path, b"a load of the old bytes")
    assert not list((tmp_path / "cache").glob("*.npz"))


def test_the_least_recently_used_go_beyond_the_limit(tmp_path):
    paths = [pool_file(tmp_path / f"p{i}.jsonl", seed=i) for i in range(3)]
    cache = FileLedgerCache(tmp_path / "cache", limit_bytes=1)
    for p in paths:
        load_ledgers([p], cache=cache, workers=1)
    assert [e.stem for e in (tmp_path / "cache").glob("*.npz")] == [content_key(paths[-1])]


@pytest.mark.parametrize(("value", "where"), [("off", None), ("", "xdg"), ("{tmp}/mine", "mine")])
def test_where_the_cache_lives(tmp_path, monkeypatch, value, where):
    monkeypatch.setenv(ENV, value.format(tmp=tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = default_ledger_cache()
    if where is None:
        assert got is None
    else:
        assert got is not None and got.folder.is_relative_to(tmp_path / where)


def test_boe_replay_prints_the_same_with_a_cold_warm_or_damaged_cache(tmp_path):
    """The real command, three times over one cache folder, once with every entry damaged, and with none."""
    path = pool_file(tmp_path / "pool.jsonl", n=30)
    folder = tmp_path / "cache"
    args = [sys.executable, "-m", "boe", "replay", str(path), "--policy", "raw,boe,whole", "--budget", "4,16", "--json"]

    def run(cache: str) -> str:
        env = {**os.environ, ENV: cache}
        out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout

    want = run("off")
    assert run(str(folder)) == want
    (entry,) = folder.glob("*.npz")
    assert run(str(folder)) == want
    entry.write_bytes(b"\0" * 100)
    assert run(str(folder)) == want
    assert entry.stat().st_size > 100


def test_the_parallel_loader_stores_what_the_sequential_one_loads(tmp_path, monkeypatch):
    import boe.core.loading as loading

    path = pool_file(tmp_path / "big.jsonl", n=120, seed=4)
    want, g_want = load_ledgers([path], workers=1)
    monkeypatch.setattr(loading, "PARALLEL_BYTES", 1000)
    monkeypatch.setattr(loading, "CHUNK_BYTES", 100_000)
    cache = FileLedgerCache(tmp_path / "cache")
    for _ in range(2):  # stored by the forked workers' packs, then read back
        got, g_got = load_ledgers([path], cache=cache, workers=2)
        assert g_got.keys == g_want.keys
        assert_same_questions(got, want)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
