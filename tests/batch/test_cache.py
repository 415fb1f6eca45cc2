"""Gathered request-cache writes: answered from memory until written, from the store after."""

from __future__ import annotations

from boe.batch.cache import WriteBehindCache
from boe.db import Store


def test_replies_are_readable_before_during_and_after_the_write(tmp_path) -> None:
    with Store(tmp_path / "s.db") as store:
        cache = WriteBehindCache(store)
        key = cache.key("http://h/v1", "m", [{"role": "user", "content": "q"}], {"n": 1}, 0)
        reply = {
            "texts": ["a"],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            "model": "m",
            "endpoint": "http://h/v1",
        }
        assert cache.get(key) is None
        cache.put(key, reply)
        assert cache.pending == 1 and cache.get(key) == reply and store.cache_get(key) is None
        entries = cache.take()
        assert cache.pending == 0 and cache.get(key) == reply  # being written: still answered
        assert store.cache_put_many(entries) == 1
        cache.mark_written(entries)
        assert cache.get(key) == reply and cache.written == 1  # now from the store
        hit = store.cache_get(key)
        assert hit is not None and (hit.prompt_tokens, hit.completion_tokens) == (3, 1)
        assert cache.lookups == 4 and cache.hits == 3 and cache.read_cpu > 0


def test_a_request_never_stored_is_a_miss_without_a_read_and_a_stored_one_is_found(tmp_path) -> None:
    with Store(tmp_path / "s.db") as store:
        reply = {"texts": ["a"], "usage": {}, "model": "m", "endpoint": "http://h/v1"}
        store.cache_put("old", reply, endpoint="http://h/v1", model="m")  # a reply of an earlier batch
        cache = WriteBehindCache(store)
        assert cache.get("new") is None and cache.read_cpu == 0.0  # not in the store when the batch began
        assert cache.get("old") == reply and cache.read_cpu > 0
