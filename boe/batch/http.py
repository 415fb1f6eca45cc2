"""One bound on the model calls in flight, shared by the generator and the judge clients.

Each `ModelClient` has its own semaphore; the batch hands both clients one
HTTP client whose transport admits at most ``limit`` requests at a time, so
``--concurrency`` bounds every request of the worker (retries included). A
request waiting for a slot is not yet on the wire, so it cannot time out.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["bounded_http_client"]


def bounded_http_client(limit: int) -> Any:
    """An ``httpx2.AsyncClient`` (openai's defaults) that sends at most ``limit`` requests at once."""
    import httpx2
    import openai

    class BoundedTransport(httpx2.AsyncBaseTransport):
        """Admits ``limit`` requests at a time; a slot is held until the reply has been read."""

        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport(
                limits=httpx2.Limits(max_connections=limit, max_keepalive_connections=limit)
            )
            self.slots = asyncio.Semaphore(limit)
            self.in_flight = 0
            self.peak = 0
            self.sent = 0  # requests that got a slot
            self.slot_seconds = 0.0  # their time on the wire: from the slot to the reply read

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            async with self.slots:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                t0 = time.perf_counter()
                try:
                    response = await self.inner.handle_async_request(request)
                    try:
                        await response.aread()
                    except BaseException:
                        await response.aclose()
                        raise
                    return response
                finally:
                    self.in_flight -= 1
                    self.sent += 1
                    self.slot_seconds += time.perf_counter() - t0

        async def aclose(self) -> None:
            await self.inner.aclose()

    return openai.DefaultAsyncHttpxClient(transport=BoundedTransport())
