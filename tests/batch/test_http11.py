"""The batch's HTTP/1.1 transport against a real socket server: bodies, kept-alive connections, chunks, closed
connections, timeouts and refusals come back as httpx2 responses and errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import httpx2
import pytest

from boe.batch.http11 import Http11Transport

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]  # (request body, writer) -> keep the connection


async def _serve(reply: Reply) -> tuple[asyncio.Server, str, list[int]]:
    """A server reading each request by its Content-Length; ``reply`` answers it. Connections accepted are counted."""
    accepted: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                fields = dict(
                    line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
                )  # header names as sent
                body = await reader.readexactly(int(fields.get(b"Content-Length", b"0")))
                if not await reply(body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions", accepted


def _ok(payload: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(payload),
        extra,
        payload,
    )


def _with_server(reply: Reply, check: Callable[[Http11Transport, str, list[int]], Awaitable[None]]) -> None:
    """Run ``check(transport, url, accepted)`` against a fresh server answering with ``reply``."""

    async def main() -> None:
        server, url, accepted = await _serve(reply)
        transport = Http11Transport()
        try:
            await check(transport, url, accepted)
        finally:
            await transport.aclose()
            server.close()

    asyncio.run(main())


def _post(url: str, body: bytes, timeout: float = 5.0) -> httpx2.Request:
    return httpx2.Request("POST", url, content=body, extensions={"timeout": httpx2.Timeout(timeout).as_dict()})


async def _echo(body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(_ok(b'{"got": %d}' % len(body)))
    return True


async def _chunked(body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n\r\n")
    return True


async def _once(body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(_ok(b"{}"))  # no "Connection: close": the server just closes it afterwards
    await writer.drain()
    return False


async def _refuse(body: bytes, writer: asyncio.StreamWriter) -> bool:
    payload = b'{"error": {"message": "n must be 1", "param": "n"}}'
    writer.write(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(payload), payload)
    )
    return True


async def _silent(body: bytes, writer: asyncio.StreamWriter) -> bool:
    await asyncio.sleep(1)
    return False


async def _cut(body: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
    await writer.drain()
    return False


def test_bodies_go_and_come_on_one_kept_alive_connection() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        body = b"x" * 300_000  # several socket writes' worth, as a request with a figure is
        for _ in range(3):
            response = await transport.handle_async_request(_post(url, body))
            assert response.status_code == 200
            assert response.json() == {"got": 300_000}
            assert response.headers["content-type"] == "application/json"
        assert len(accepted) == 1

    _with_server(_echo, check)


def test_a_chunked_reply_is_joined() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        for _ in range(2):  # the connection is still usable after the last chunk
            assert (await transport.handle_async_request(_post(url, b"{}"))).text == "hello world"
        assert len(accepted) == 1

    _with_server(_chunked, check)


def test_a_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        for _ in range(3):
            assert (await transport.handle_async_request(_post(url, b"{}"))).status_code == 200
        assert len(accepted) == 3

    _with_server(_once, check)


def test_an_error_status_is_a_response_and_connection_close_is_honoured() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        for _ in range(2):
            response = await transport.handle_async_request(_post(url, b"{}"))
            assert response.status_code == 400
            assert response.json()["error"]["param"] == "n"
        assert len(accepted) == 2

    _with_server(_refuse, check)


def test_a_silent_server_is_a_read_timeout_and_a_closed_port_a_connect_error() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        with pytest.raises(httpx2.ReadTimeout):
            await transport.handle_async_request(_post(url, b"{}", timeout=0.2))
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there
        with pytest.raises(httpx2.ConnectError):
            await transport.handle_async_request(_post(f"http://127.0.0.1:{port}/v1/x", b"{}"))

    _with_server(_silent, check)


def test_a_reply_cut_short_is_a_protocol_error() -> None:
    async def check(transport: Http11Transport, url: str, accepted: list[int]) -> None:
        with pytest.raises(httpx2.RemoteProtocolError):
            await transport.handle_async_request(_post(url, b"{}"))

    _with_server(_cut, check)


def test_the_batch_client_sends_plain_http_as_bytes_exactly_as_httpx_would() -> None:
    """`_Post` through the batch's client writes the bytes httpx2 writes (head and body), and a refusal or a silence
    raises the same openai errors as the httpx2 path (no `httpx2.Request` is built unless there is an error)."""
    import openai

    from boe.batch.http import bounded_http_client
    from boe.tools.client import _Post

    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(v) for k, v in (ln.split(b": ", 1) for ln in head.split(b"\r\n")[1:] if ln)
                              if k.lower() == b"content-length")  # fmt: skip
                body = await reader.readexactly(length)
                seen.append(head + body)
                if body == b'{"go": "slow"}':
                    await asyncio.sleep(1)
                    break
                if body == b'{"go": "refused"}':
                    payload = b'{"error": {"message": "slow down", "type": "rate_limit"}}'
                    writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(payload), payload))  # fmt: skip
                else:
                    writer.write(_ok(b'{"id": "r1"}'))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def outcome(post: _Post, body: bytes) -> object:
        try:
            return await post(body)
        except openai.APIError as exc:
            status = getattr(exc, "status_code", None)
            headers = dict(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
            return (type(exc).__name__, status, headers, exc.message)

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        fast_http = bounded_http_client(4)
        slow_http = openai.DefaultAsyncHttpxClient(transport=Http11Transport())
        try:
            results = []
            for http in (fast_http, slow_http):
                sdk = openai.AsyncOpenAI(base_url=url, api_key="sk-test", http_client=http, max_retries=0)
                post = _Post(sdk, http, timeout=0.3)
                assert (post._plain is not None) == (http is fast_http)
                bodies = [b'{"model": "m", "messages": ["\xc3\xa9' + b"x" * 200_000 + b'"]}', b'{"go": "refused"}']
                results.append([await outcome(post, b) for b in [*bodies, b'{"go": "slow"}']])
            assert results[0] == results[1]
            assert results[0][0] == b'{"id": "r1"}'
            assert results[0][1] == ("RateLimitError", 429, results[0][1][2], results[0][1][3])
            assert results[0][1][2]["retry-after"] == "7" and "slow down" in results[0][1][3]
            assert results[0][2][0] == "APITimeoutError"
            assert seen[:3] == seen[3:] and len(seen) == 6  # byte for byte, heads and bodies
        finally:
            await fast_http.aclose()
            await slow_http.aclose()
            server.close()

    asyncio.run(main())
