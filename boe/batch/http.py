"""One bound on the model calls in flight, shared by the generator and the judge clients.

Each `ModelClient` has its own semaphore; the batch hands both clients one
HTTP client whose transport admits at most ``limit`` requests at a time, so
``--concurrency`` bounds every request of the worker (retries included). A
request waiting for a slot is not yet on the wire, so it cannot time out.

Plain ``http://`` endpoints (a local vLLM, the simulator) are spoken to by
`boe.batch.http11.Http11Transport` (HTTP/1.1 over asyncio streams, about a
tenth of httpx's CPU per request). Other URLs go through httpx's transport,
its connections split over small pools (`SHARD` connections each), a request
going to the pool with the fewest in flight: an HTTP connection pool checks
every idle connection of its own (a socket probe each) whenever it assigns a
request, so one pool of 64 connections spent more CPU on that than on the
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from boe.batch.http11 import Reply

__all__ = ["bounded_http_client"]

#: Connections per pool.
SHARD = 8


def bounded_http_client(limit: int) -> Any:
    """An ``httpx2.AsyncClient`` (openai's defaults) that sends at most ``limit`` requests at once."""
    import httpx2
    import openai

    from boe.batch.http11 import Http11Transport

    class BoundedTransport(httpx2.AsyncBaseTransport):
        """Admits ``limit`` requests at a time; a slot is held until the reply has been read."""

        def __init__(self) -> None:
            pools = -(-limit // SHARD)
            size = -(-limit // pools)
            self.pools = [
                httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_connections=size, max_keepalive_connections=size))
                for _ in range(pools)
            ]
            self.busy = [0] * pools
            self.plain = Http11Transport(max_idle=limit)
            self.slots = asyncio.Semaphore(limit)
            self.in_flight = 0
            self.peak = 0
            self.sent = 0  # requests that got a slot
            self.slot_seconds = 0.0  # their time on the wire: from the slot to the reply read

        @contextlib.asynccontextmanager
        async def _slot(self) -> AsyncIterator[None]:
            async with self.slots:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                t0 = time.perf_counter()
                try:
                    yield
                finally:
                    self.in_flight -= 1
                    self.sent += 1
                    self.slot_seconds += time.perf_counter() - t0

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            async with self._slot():
                if request.url.scheme == "http":
                    return await self.plain.handle_async_request(request)  # the body is read
                return await self._pooled(request)

        async def post_plain(self, *args: Any) -> Reply:
            """A plain-``http://`` request as bytes (the arguments of `Http11Transport.exchange`), in a slot like
            any other: no `httpx2.Request` or `httpx2.Response` is built (about 50 us of a request's CPU), but for
            an error."""
            async with self._slot():
                return await self.plain.exchange(*args)

        async def _pooled(self, request: httpx2.Request) -> httpx2.Response:
            i = min(range(len(self.pools)), key=self.busy.__getitem__)
            self.busy[i] += 1
            try:
                response = await self.pools[i].handle_async_request(request)
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
                return response
            finally:
                self.busy[i] -= 1

        async def aclose(self) -> None:
            await self.plain.aclose()
            for pool in self.pools:
                await pool.aclose()

    transport = BoundedTransport()
    client = openai.DefaultAsyncHttpxClient(transport=transport)
    client.boe_post_plain = transport.post_plain  # type: ignore[attr-defined]  # (`_Post` of boe.tools.client)
    return client
