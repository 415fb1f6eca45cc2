"""The model request cache: keys without credentials, round trips, off switch."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from boe.db import Store, request_key
from boe.util import redact_url

MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "what modality?"},
        ],
    },
]


def test_key_depends_on_the_request_not_on_credentials() -> None:
    base = request_key("http://host:8000/v1", "m", MESSAGES, {"temperature": 0.7, "n": 8}, seed=1)
    same = [
        request_key("http://user:secret@host:8000/v1/", "m", MESSAGES, {"n": 8, "temperature": 0.7}, seed=1),
        request_key(
            "http://host:8000/v1",
            "m",
            MESSAGES,
            {"temperature": 0.7, "n": 8, "api_key": "k2", "timeout": 30, "extra_headers": {"Authorization": "x"}},
            1,
        ),
        request_key("http://host:8000/v1", "m", MESSAGES, {"temperature": 0.7, "n": 8, "seed": 1}),
    ]
    assert all(k == base for k in same)
    different = [
        request_key("http://other:8000/v1", "m", MESSAGES, {"temperature": 0.7, "n": 8}, seed=1),
        request_key("http://host:8000/v1", "m2", MESSAGES, {"temperature": 0.7, "n": 8}, seed=1),
        request_key("http://host:8000/v1", "m", MESSAGES[:0], {"temperature": 0.7, "n": 8}, seed=1),
        request_key("http://host:8000/v1", "m", MESSAGES, {"temperature": 0.0, "n": 8}, seed=1),
        request_key("http://host:8000/v1", "m", MESSAGES, {"temperature": 0.7, "n": 8}, seed=2),
    ]
    assert len({base, *different}) == 6
    assert len(base) == 64 and "secret" not in base


def test_cache_round_trip_and_off_switch(store_url: str) -> None:
    key = request_key("http://u:p@host/v1", "m", MESSAGES, {"n": 2}, seed=0)
    reply = {"choices": [{"message": {"content": '{"answer": "ct"}'}}], "usage": {"prompt_tokens": 10}}
    with Store(store_url) as store:
        assert store.cache_get(key) is None
        store.cache_put(key, reply, endpoint="http://u:p@host/v1", model="m", prompt_tokens=10, completion_tokens=5)
        store.cache_put(key, {"other": 1}, endpoint="http://host/v1", model="m")  # the first reply stays
        hit = store.cache_get(key)
        assert hit is not None and hit.response == reply and (hit.prompt_tokens, hit.completion_tokens) == (10, 5)
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT endpoint FROM request_cache").scalar() == "http://host/v1"
    with Store(store_url, cache=False) as store:
        assert store.cache_get(key) is None
        store.cache_put("0" * 64, reply, endpoint="http://host/v1", model="m")
    with Store(store_url) as store:
        assert store.cache_get("0" * 64) is None and store.cache_get(key) is not None


def test_many_replies_cached_in_one_write(store_url: str) -> None:
    entries = [
        {
            "key": f"{i:064x}",
            "response": {"texts": [f"r{i}"]},
            "endpoint": "http://u:p@host/v1",
            "model": "m",
            "prompt_tokens": i,
            "completion_tokens": 1,
        }
        for i in range(3)
    ]
    with Store(store_url) as store:
        store.cache_put(entries[0]["key"], {"texts": ["first"]}, endpoint="http://host/v1", model="m")
        assert store.cache_put_many(entries) == 3
        assert store.cache_put_many([]) == 0
        assert store.cache_get(entries[0]["key"]).response == {"texts": ["first"]}  # a cached reply stays
        hit = store.cache_get(entries[2]["key"])
        assert hit is not None and hit.response == {"texts": ["r2"]} and hit.prompt_tokens == 2
    with Store(store_url, cache=False) as store:
        assert store.cache_put_many(entries) == 0


def _old_client_key(endpoint: str, model: str, messages: Any, params: dict[str, Any], seed: int | None) -> str:
    """The key `boe.tools.client.request_key` computed before it became the store's key (commit 025b0dc)."""
    blob = json.dumps(
        {
            "endpoint": redact_url(endpoint).rstrip("/"),
            "model": model,
            "messages": messages,
            "params": params,
            "seed": seed,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def test_the_client_and_the_store_share_one_key_function() -> None:
    from boe.agent.persist import StoreCache
    from boe.tools.client import MemoryCache
    from boe.tools.client import request_key as client_key

    assert client_key is request_key
    args = ("http://h/v1", "m", MESSAGES, {"n": 2, "temperature": 1.0}, 4)
    assert MemoryCache().key(*args) == StoreCache(None).key(*args) == request_key(*args)


def test_a_cache_written_by_an_earlier_version_still_answers(tmp_path: Path) -> None:
    """`data/old-cache.db` was written by boe 025b0dc (see `old_cache`): its entry answers today's request."""
    from boe.tools.client import build_messages

    from . import old_cache

    db = tmp_path / "old-cache.db"
    shutil.copyfile(Path(__file__).parent / "data" / "old-cache.db", db)
    with sqlite3.connect(db) as conn:
        (stored_key,) = conn.execute("SELECT key FROM request_cache").fetchone()
    sent: list[Any] = []

    def server(request: Any) -> Any:
        sent.append(request)
        raise AssertionError("the cached request went to the server")

    with Store(f"sqlite:///{db}") as store:
        client = old_cache.client(store, server)
        prompt = old_cache.prompt()
        n = len(old_cache.REPLIES)
        comp = asyncio.run(client.complete(prompt, [old_cache.IMG], n=n, temperature=1.0, seed=old_cache.SEED))
    assert sent == [] and comp.call.cache_hit and comp.texts == old_cache.REPLIES
    assert comp.call.request_key == stored_key
    # the decision this test guards: the key kept is the store's; the client's old key (never persisted) differed
    params = {"n": n, "temperature": 1.0, "max_tokens": client.max_tokens, "schema": prompt.schema_name}
    messages = build_messages(prompt, [old_cache.IMG])
    old = _old_client_key(old_cache.BASE_URL, old_cache.MODEL, messages, params, old_cache.SEED)
    assert old != stored_key == request_key(old_cache.BASE_URL, old_cache.MODEL, messages, params, old_cache.SEED)
