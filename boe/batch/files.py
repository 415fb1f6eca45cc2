"""Batch files: a run's requests written as OpenAI batch JSONL, the runner's results read back into the store.

A run done by files goes in stages. ``boe batch ... --write-requests FILE``
runs every question as far as the request cache and the results read so far
answer it; a request with no reply is recorded (not sent) and its question is
*parked*. When every question is parked or stored, the recorded requests are
written to FILE, one line each::

    {"custom_id": "<request key>", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

``body`` is exactly what the client would POST to the server online, and
``custom_id`` is boe's request key of the request (`boe.core.calls.request_key`;
after ``~``, a re-ask of an unusable reply adds ``r1n16-s<seed>`` and a single-sample top-up ``n1-s<seed>``).
An external runner (``vllm run-batch``, the OpenAI Batch API) answers the file;
``--read-replies RESULTS`` stores each result line in the request cache (under
`reply_key` of its ``custom_id``) and the run continues, writing the next
stage's requests, until every question is stored. The client reads a stored
result exactly as it reads a server's reply (the same checks, re-asks and
request cache), so the stored ledgers are those of the same run online, and
an online run of the same questions afterwards pays for nothing.

A result line with an error (``error`` set, a status other than 200, or
OpenAI's ``batch_expired``) is reported by line and ``custom_id`` and is not
stored: its request is written again in the next file. Lines are read one by
one; a bad line never loses the others.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from boe.errors import ConfigError, InputError

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_FILE_LINES",
    "REQUEST_URL",
    "FileTransport",
    "Parked",
    "ReadReport",
    "check_files",
    "custom_id",
    "read_replies",
    "reply_key",
    "write_requests",
]

REQUEST_URL = "/v1/chat/completions"
#: OpenAI's limits of one batch input file (50,000 requests, 200 MB); a stage with more is split over several.
MAX_FILE_LINES = 50_000
MAX_FILE_BYTES = 200 * 1024 * 1024
#: The request cache's endpoint of a stored result line.
REPLY_ENDPOINT = "batch-file"


class Parked(BaseException):
    """A request with no reply yet in batch-file mode: recorded for the next file; its question waits.

    A `BaseException`, like a cancellation, so that no ``except Exception`` on the way (a check turning a failure
    into an unresolved outcome, the SDK turning a transport error into a connection error) takes it for a fault.
    """

    def __init__(self, custom_id: str) -> None:
        super().__init__(custom_id)
        self.custom_id = custom_id


def check_files(write: str | None, reads: Iterable[str]) -> None:
    """Refuse file options that cannot work together (a `ConfigError` naming them)."""
    reads = list(reads)
    if reads and write is None:
        raise ConfigError(
            "--read-replies needs --write-requests FILE: where the next stage's requests go (if there is one)"
        )
    if write is not None and Path(write).resolve() in {Path(r).resolve() for r in reads}:
        raise ConfigError("--write-requests must not name a file given to --read-replies")


def reply_key(cid: str) -> str:
    """The request-cache key under which the result line of ``custom_id`` is stored (not a request key)."""
    return hashlib.sha256(f"boe-batch-reply/{cid}".encode()).hexdigest()


def custom_id(call: Any, body: dict[str, Any]) -> str:
    """The ``custom_id`` of one request of a call: the call's request key for its first request; a re-ask (``~rN...``)
    or a request with another ``n`` or seed than the call's (a single-sample top-up: ``~n1-s<seed>``) is marked."""
    key = str(call.request_key)
    n = int(body.get("n", 1))
    seed = body.get("seed")
    first = call.seeds[0] if call.seeds else None
    suffix = f"r{call.reasks}" if call.reasks else ""
    if n != call.n or (seed != first and "seed" in body):
        suffix += f"n{n}" + (f"-s{seed}" if "seed" in body else "")
    return f"{key}~{suffix}" if suffix else key


def _error_text(error: Any) -> tuple[str, str]:
    """(code, message) of a result line's ``error`` (OpenAI: ``{code, message}``; vLLM: a string or an error
    response ``{"error": {...}}``)."""
    if isinstance(error, dict):
        inner: dict[str, Any] = error["error"] if isinstance(error.get("error"), dict) else error
        code = inner.get("code") or inner.get("type") or ""
        return str(code), str(inner.get("message") or inner)[:300]
    return "", str(error)[:300]


@dataclass
class ReadReport:
    """What reading result files found."""

    files: list[str] = field(default_factory=list)
    lines: int = 0
    stored: int = 0  # replies stored in the request cache
    errors: list[dict[str, Any]] = field(default_factory=list)  # {where (file:line), custom_id, status, code, message}
    expired: int = 0
    unreadable: list[str] = field(default_factory=list)  # "file:line: why"

    def notes(self) -> list[str]:
        """What a person must know: failed and unreadable lines (their requests are written again)."""
        out = []
        if self.errors:
            first = self.errors[0]
            why = f"{first['code'] or first['status']}: {first['message']}"
            expired = f", {self.expired} expired" if self.expired else ""
            out.append(
                f"{len(self.errors)} result line(s) failed{expired}; their requests are written again "
                f"(first: {first['where']} {first['custom_id']}: {why})"
            )
        if self.unreadable:
            out.append(f"{len(self.unreadable)} line(s) could not be read (first: {self.unreadable[0]})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_line(text: str, where: str, report: ReadReport) -> dict[str, Any] | None:
    """The cache entry of one result line, or None (the line's problem added to ``report``)."""
    import orjson

    try:
        line = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        report.unreadable.append(f"{where}: not JSON ({exc})")
        return None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        report.unreadable.append(f"{where}: no custom_id: not a batch result line")
        return None
    if "method" in line and "body" in line and "response" not in line:
        raise InputError(f"{where} is a request, not a result: pass the file the batch runner wrote (its output)")
    cid = line["custom_id"]
    response: dict[str, Any] = line["response"] if isinstance(line.get("response"), dict) else {}
    error = line.get("error")
    status = response.get("status_code")
    body = response.get("body")
    if error is None and status == 200 and isinstance(body, dict) and isinstance(body.get("choices"), list):
        return {
            "key": reply_key(cid),
            "response": {
                "custom_id": cid,
                "id": line.get("id"),
                "request_id": response.get("request_id"),
                "body": body,
            },
            "endpoint": REPLY_ENDPOINT,
            "model": str(body.get("model") or ""),
            "prompt_tokens": (body.get("usage") or {}).get("prompt_tokens"),
            "completion_tokens": (body.get("usage") or {}).get("completion_tokens"),
        }
    if error is not None:
        code, message = _error_text(error)
    elif isinstance(body, dict) and body.get("error") is not None:
        code, message = _error_text(body)
    else:
        code, message = "", "no chat completion in the response" if status == 200 else "no reply"
    report.expired += code == "batch_expired"
    report.errors.append({"where": where, "custom_id": cid, "status": status, "code": code, "message": message})
    return None


def read_replies(store: Any, paths: Iterable[str | os.PathLike[str]]) -> ReadReport:
    """Store the successful result lines of ``paths`` in ``store``'s request cache (one transaction per file)."""
    report = ReadReport()
    for path in paths:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise InputError(f"--read-replies {p}: cannot read it ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"--read-replies {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        entries: dict[str, dict[str, Any]] = {}
        for i, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            report.lines += 1
            entry = _read_line(raw, f"{p.name}:{i}", report)
            if entry is not None:
                entries.setdefault(entry["key"], entry)
        store.cache_put_many(list(entries.values()))
        report.stored += len(entries)
        report.files.append(str(p))
    return report


def write_requests(
    path: str | os.PathLike[str], requests: dict[str, dict[str, Any]], models: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Write ``requests`` (custom_id -> body) as OpenAI batch input JSONL, sorted by custom_id.

    One file holds one model's requests (OpenAI's rule; ``vllm run-batch`` serves one model): when the run uses
    several ``models`` (or the requests name several), each gets ``name-<model>.jsonl`` in every stage. A file is
    split at `MAX_FILE_LINES` lines or `MAX_FILE_BYTES` bytes (``name-2.jsonl``...). Each file is written whole
    or not at all. Returns ``{path, model, requests}`` per file written."""
    import orjson

    p = Path(path)
    by_model: dict[str, list[bytes]] = {}
    for cid in sorted(requests):
        body = requests[cid]
        line = orjson.dumps({"custom_id": cid, "method": "POST", "url": REQUEST_URL, "body": body}) + b"\n"
        by_model.setdefault(str(body.get("model", "")), []).append(line)
    written = []
    for model, lines in by_model.items():
        stem = p.stem if len(by_model.keys() | set(models)) == 1 else f"{p.stem}-{_slug(model)}"
        for i, part in enumerate(_parts(lines)):
            target = p.with_name(f"{stem}{'' if i == 0 else f'-{i + 1}'}{p.suffix}")
            _write_whole(target, part)
            written.append({"path": str(target), "model": model, "requests": len(part)})
    return written


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "-" for c in text).strip("-") or "model"


def _parts(lines: list[bytes]) -> list[list[bytes]]:
    """``lines`` in runs within OpenAI's limits of one input file."""
    parts: list[list[bytes]] = [[]]
    size = 0
    for line in lines:
        if parts[-1] and (len(parts[-1]) >= MAX_FILE_LINES or size + len(line) > MAX_FILE_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(line)
        size += len(line)
    return parts


def _write_whole(target: Path, lines: list[bytes]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.writelines(lines)
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(f"--write-requests {target}: cannot write it ({exc.strerror or exc})") from None


class FileTransport:
    """An HTTP transport that answers chat completions from stored result lines and parks the rest.

    It stands where the batch's bounded transport stands (the client's ``http_client``), so the client sends,
    retries and reads exactly as online. A request whose result is stored gets that reply; any other is recorded
    under its `custom_id` and raises `Parked`.
    """

    def __init__(self, lookup: Any) -> None:
        self.lookup = lookup  # reply_key -> stored entry (dict) or None
        self.requests: dict[str, dict[str, Any]] = {}  # custom_id -> body, for the next file
        self.answered = 0
        self.sent = 0

    async def handle_async_request(self, request: Any) -> Any:
        import httpx2
        import orjson

        from boe.tools.client import current_call

        if not request.url.path.endswith("/chat/completions"):
            error = {"error": {"message": "batch files: no server to ask (only chat completions are written)"}}
            return httpx2.Response(404, json=error, request=request)
        body = orjson.loads(await request.aread())
        call = current_call.get()
        if call is None:  # a request made outside ModelClient.complete: nothing names it
            raise RuntimeError("batch files: a chat completion outside ModelClient.complete has no request key")
        cid = custom_id(call, body)
        hit = self.lookup(reply_key(cid))
        if hit is None:
            self.requests[cid] = body
            raise Parked(cid)
        self.answered += 1
        self.sent += 1
        return httpx2.Response(
            200,
            content=orjson.dumps(hit["body"]),
            headers={"content-type": "application/json"},
            request=request,
        )

    async def aclose(self) -> None:
        return None


def file_http_client(lookup: Any) -> Any:
    """An ``httpx2.AsyncClient`` (openai's defaults) over a `FileTransport`."""
    import httpx2
    import openai

    class _Transport(FileTransport, httpx2.AsyncBaseTransport):
        pass

    return openai.DefaultAsyncHttpxClient(transport=_Transport(lookup))
