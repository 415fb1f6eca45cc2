"""Several base URLs behind one client: load spreading, limits learnt per server, a server going away, one cache.

httpx2 mock transports stand in for the servers (one transport answers by host); the batch-level test with
real simulators, one killed mid-run, is tests/batch/test_several_endpoints.py."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import httpx2
import pytest
from replies import chat_reply

from boe.errors import ModelError
from boe.prompts import load_prompt, options_block
from boe.tools.client import MemoryCache, ModelClient, Servers

IMG = "data:image/png;base64,AAAA"
A, B = "http://a.test/v1", "http://b.test/v1"


class Fleet:
    """Servers by host: ``down`` hosts refuse connections, ``refuse`` maps a host to a field it refuses."""

    def __init__(self, down: set[str] = frozenset(), refuse: dict[str, str] | None = None, delay: float = 0.0):
        self.down = set(down)
        self.refuse = refuse or {}
        self.delay = delay
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        host = request.url.host
        if host in self.down:
            raise httpx2.ConnectError("connection refused", request=request)
        if request.method == "GET":
            return httpx2.Response(200, json={"data": [{"id": "m", "owned_by": "someone"}]})
        body = json.loads(request.content)
        self.bodies.append((host, body))
        field = self.refuse.get(host)
        if field is not None and field in body:
            return httpx2.Response(400, json={"error": {"message": f"Extra inputs are not permitted: {field}"}})
        self.in_flight[host] += 1
        self.peak[host] = max(self.peak[host], self.in_flight[host])
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight[host] -= 1
        return chat_reply(body, [json.dumps({"answer": host})] * body.get("n", 1))

    def client(self, urls: Any = (A, B), **kw: Any) -> ModelClient:
        kw.setdefault("backoff", 0.001)
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        return ModelClient(base_url=urls, model="m", http_client=http, **kw)


def _prompt() -> Any:
    return load_prompt("generation").render(question="what modality?", options_block=options_block(None))


def test_requests_go_to_the_least_loaded_server() -> None:
    fleet = Fleet(delay=0.02)

    async def go() -> list[Any]:
        cl = fleet.client(concurrency=16)
        return await asyncio.gather(*(cl.complete(_prompt(), [IMG], seed=i) for i in range(16)))

    comps = asyncio.run(go())
    hosts = Counter(h for h, _ in fleet.bodies)
    assert hosts == {"a.test": 8, "b.test": 8}  # in flight at once: each server holds half
    assert {c.call.base_url for c in comps} == {A, B}  # each call records the server that answered it


def test_each_server_learns_what_it_refuses_on_its_own() -> None:
    fleet = Fleet(refuse={"b.test": "top_k"})

    async def go() -> ModelClient:
        cl = fleet.client()
        for i in range(6):
            await cl.complete(_prompt(), [IMG], seed=i)
        return cl

    cl = asyncio.run(go())
    assert cl.servers.state(B, "m").dropped == ["top_k"] and cl.servers.state(A, "m").dropped == []
    assert all("top_k" in body for host, body in fleet.bodies if host == "a.test")
    refused = [body for host, body in fleet.bodies if host == "b.test" and "top_k" in body]
    assert len(refused) == 1  # refused once, then never sent to b again
    assert len(cl.describe()["endpoints"]) == 2


def test_a_server_that_goes_away_is_marked_down_and_its_requests_go_to_the_other() -> None:
    fleet = Fleet()
    servers = Servers()

    async def go() -> list[Any]:
        cl = fleet.client(endpoints=servers)
        first = [await cl.complete(_prompt(), [IMG], seed=i) for i in range(4)]
        fleet.down.add("b.test")
        rest = [await cl.complete(_prompt(), [IMG], seed=10 + i) for i in range(8)]
        return first + rest

    comps = asyncio.run(go())
    assert all(c.call.error is None and c.texts for c in comps)
    shares = {s["base_url"]: s for s in servers.shares()}
    assert shares[B]["down"] == 1 and shares[B]["errors"] == 1  # one failed request, then routed around
    assert [c.call.base_url for c in comps[4:]] == [A] * 8
    assert sum(c.call.requests for c in comps[4:]) == 9


def test_when_every_server_is_down_the_call_fails_after_its_retries() -> None:
    fleet = Fleet(down={"a.test", "b.test"})
    with pytest.raises(ModelError, match="connection failed after 3 attempt"):
        asyncio.run(fleet.client(max_retries=2).complete(_prompt(), [IMG]))


def test_a_down_server_gets_one_probe_after_its_backoff_and_is_back_when_it_answers() -> None:
    now = [0.0]
    servers = Servers(backoff=1.0, clock=lambda: now[0])
    a, b = servers.server(A), servers.server(B)
    servers.unreachable(b)
    servers.unreachable(b)  # a request in flight when it went away: the same outage
    assert b.downs == 1 and servers.pick([A, B]) is a
    a.in_flight = 3  # a busy
    assert servers.pick([A, B]) is a
    now[0] = 1.5  # the backoff is over: b takes one probe
    assert servers.pick([A, B]) is b
    b.in_flight = 1
    assert servers.pick([A, B]) is a  # only one probe at a time
    b.in_flight = 0
    servers.unreachable(b)  # the probe failed: twice the backoff
    assert b.down_until == pytest.approx(3.5)
    servers.answered(b)
    b.in_flight = 1
    assert servers.pick([A, B]) is b and b.failures == 0  # back: it takes requests as its load allows
    a.down_until = b.down_until = 10.0  # every server down: the one back soonest
    a.down_until = 9.0
    assert servers.pick([A, B]) is a


def test_the_cache_key_is_the_same_whichever_server_answered() -> None:
    cache = MemoryCache()
    fleet = Fleet(down={"a.test"})

    async def go() -> tuple[Any, Any]:
        first = await fleet.client(cache=cache).complete(_prompt(), [IMG], n=2, temperature=1.0, seed=5)
        fleet.down.clear()
        again = await fleet.client(urls=A, cache=cache).complete(_prompt(), [IMG], n=2, temperature=1.0, seed=5)
        return first, again

    first, again = asyncio.run(go())
    assert first.call.base_url == B and not first.call.cache_hit  # b answered it
    assert again.call.cache_hit and again.texts == first.texts  # a client of a alone: the same key, no request
    assert first.call.request_key == again.call.request_key
    assert len([h for h, _ in fleet.bodies]) == 1


def test_several_urls_in_one_text_and_repeats() -> None:
    cl = Fleet().client(urls=f"{A}, {B}  {A}/")
    assert cl.urls == [A, B] and cl.base_url == A and cl.describe()["base_urls"] == [A, B]
