"""HTTP/1.1 over asyncio streams for the batch's plain-``http://`` model endpoints.

httpx's own transport (httpcore over anyio: cancel scopes, sniffio look-ups,
h11 events, a socket probe per pooled connection) spends about 0.9 ms of CPU
on a 140 KB chat-completions request against a local server; a question of
the batch sends about 31 of them. This transport writes the request head and
body in one go and reads the reply by its ``Content-Length`` (or chunks) on
kept-alive connections: about 0.1 ms. It returns `httpx2.Response` objects and
raises httpx2's errors (`httpx2.ConnectError`, `httpx2.ReadTimeout`,
`httpx2.RemoteProtocolError`, ...), so the SDK and the client's retry policy
see what they saw before. ``https://`` URLs are not its business: the caller
sends them through httpx's transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httpx2

from boe.tools.client import request_head

__all__ = ["Http11Transport", "Reply"]

#: A reply: status, reason phrase, HTTP version, headers and body.
Reply = tuple[int, bytes, bytes, list[tuple[bytes, bytes]], bytes]

#: Longest response head read (status line and headers).
MAX_HEAD = 64 * 1024

_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _NoReply(Exception):
    """A kept-alive connection gave no byte of a reply: the server had closed it (sent again on a new one)."""


class Http11Transport(httpx2.AsyncBaseTransport):
    """Plain-HTTP/1.1 requests on kept-alive connections (at most ``max_idle`` kept per host)."""

    def __init__(self, max_idle: int = 64) -> None:
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], list[_Conn]] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx2.UnsupportedProtocol(f"Http11Transport speaks http only, not {url.scheme!r}", request=request)
        body = request.content if request.stream is None else await request.aread()
        timeout: dict[str, float | None] = request.extensions.get("timeout") or {}
        where = (url.host, url.port or 80)
        status, reason, version, headers, content = await self.exchange(
            where, request_head(request), body, timeout, lambda: request, head_only=request.method == "HEAD"
        )
        return httpx2.Response(
            status,
            headers=headers,
            content=content,
            request=request,
            extensions={"http_version": version, "reason_phrase": reason},
        )

    async def exchange(
        self,
        where: tuple[str, int],
        head: bytes,
        body: bytes,
        timeout: Mapping[str, float | None],
        request: Callable[[], httpx2.Request],
        *,
        head_only: bool = False,
    ) -> Reply:
        """One request written as ``head`` and ``body`` to ``where`` (host, port): the reply's status, reason,
        HTTP version, headers and body. httpx2's errors name the request ``request()`` makes (built only then)."""
        conn = self._take(where)
        if conn is not None:
            try:
                return await self._exchange(conn, where, request, head + body, timeout, head_only, reused=True)
            except _NoReply:
                pass  # the server closed the idle connection as the request went out: a new one
        conn = await _connect(where, request, timeout.get("connect"))
        return await self._exchange(conn, where, request, head + body, timeout, head_only, reused=False)

    async def _exchange(
        self,
        conn: _Conn,
        where: tuple[str, int],
        request: Callable[[], httpx2.Request],
        data: bytes,
        timeout: Mapping[str, float | None],
        head_only: bool,
        *,
        reused: bool,
    ) -> Reply:
        reader, writer = conn
        keep = False
        try:
            try:
                async with asyncio.timeout(timeout.get("write")):
                    writer.write(data)
                    await writer.drain()
            except TimeoutError:
                raise httpx2.WriteTimeout("timed out sending the request", request=request()) from None
            except OSError as exc:
                if reused:
                    raise _NoReply from exc
                raise httpx2.WriteError(str(exc) or type(exc).__name__, request=request()) from exc
            try:
                async with asyncio.timeout(timeout.get("read")):
                    status, reason, version, headers, content, keep = await _read_response(reader, head_only)
            except TimeoutError:
                raise httpx2.ReadTimeout("timed out reading the reply", request=request()) from None
            except _NoReply:
                if reused:
                    raise
                raise httpx2.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request()
                ) from None
            except asyncio.IncompleteReadError as exc:
                raise httpx2.RemoteProtocolError(
                    "the server closed the connection mid-reply", request=request()
                ) from exc
            except OSError as exc:
                raise httpx2.ReadError(str(exc) or type(exc).__name__, request=request()) from exc
            except (ValueError, asyncio.LimitOverrunError) as exc:
                raise httpx2.RemoteProtocolError(f"malformed reply: {exc}", request=request()) from exc
        finally:
            if keep:
                self._give(where, conn)
            else:
                writer.close()
        return status, reason, version, headers, content

    def _take(self, where: tuple[str, int]) -> _Conn | None:
        idle = self._idle.get(where)
        while idle:
            reader, writer = idle.pop()  # the most recently used: the least likely closed by the server
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return None

    def _give(self, where: tuple[str, int], conn: _Conn) -> None:
        idle = self._idle.setdefault(where, [])
        if len(idle) < self.max_idle:
            idle.append(conn)
        else:
            conn[1].close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()


async def _connect(where: tuple[str, int], request: Callable[[], httpx2.Request], timeout: float | None) -> _Conn:
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(where[0], where[1], limit=MAX_HEAD)
    except TimeoutError:
        raise httpx2.ConnectTimeout(f"timed out connecting to {where[0]}:{where[1]}", request=request()) from None
    except OSError as exc:
        raise httpx2.ConnectError(str(exc) or type(exc).__name__, request=request()) from exc


async def _read_response(
    reader: asyncio.StreamReader, head_only: bool
) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]], bytes, bool]:
    """Status, reason, HTTP version, headers, body and whether the connection can be used again."""
    try:
        first = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
        if isinstance(exc, ConnectionResetError) or not exc.partial:
            raise _NoReply from exc
        raise
    while True:
        lines = first.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise ValueError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
        status = int(code)
        if not 100 <= status < 200:
            break
        first = await reader.readuntil(b"\r\n\r\n")  # an interim reply (100 Continue): the real one follows
    headers = []
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"bad header line {line[:80]!r}")
        name, value = name.strip(), value.strip()
        headers.append((name, value))
        fields[name.lower()] = value
    connection = fields.get(b"connection", b"").lower()
    keep = connection != b"close" if version == b"HTTP/1.1" else connection == b"keep-alive"
    if head_only or status in (204, 304):
        return status, reason, version, headers, b"", keep
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        return status, reason, version, headers, await _chunks(reader), keep
    length = fields.get(b"content-length")
    if length is not None:
        return status, reason, version, headers, await reader.readexactly(int(length)), keep
    return status, reason, version, headers, await reader.read(), False  # the body ends with the connection


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    """A chunked body (trailers skipped)."""
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
