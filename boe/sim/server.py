"""`boe sim serve`: an OpenAI-compatible HTTP endpoint for the simulated VLM `boe-sim-vlm`.

It also serves the independent judge `boe-sim-judge` (`boe.sim.judge`): a request naming that model is
answered by it; any other model name by the generator.

Routes: GET /v1/models, GET /v1/models/{boe-sim-vlm,boe-sim-judge}, POST /v1/chat/completions,
GET /v1/sim/stats (request, response and fault counters), GET /health.
Standard library HTTP (ThreadingHTTPServer); one thread per connection.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from boe.sim.faults import FaultPlan, Stats
from boe.sim.judge import JUDGE_MODEL_NAME, make_judge
from boe.sim.model import MODEL_NAME, ModelInput, SimModel
from boe.sim.wire import RequestError, image_size, image_tokens, parse_chat_request, text_tokens, truncate_tokens

__all__ = ["SimHandle", "SimServer", "make_server", "serve_in_thread"]

MAX_BODY = 64 * 1024 * 1024


class SimServer(ThreadingHTTPServer):
    """The HTTP server; holds the model, the fault plan and the counters."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], model: SimModel, faults: FaultPlan, verbose: bool = False,
                 judge: SimModel | None = None) -> None:
        super().__init__(address, _Handler)
        self.model = model
        self.judge = judge or make_judge(model)
        self.faults = faults
        self.stats = Stats()
        self.verbose = verbose
        self.started = int(time.time())


def _error(message: str, kind: str = "invalid_request_error", param: str | None = None,
           code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "boe-sim/0.1"
    # TCP_NODELAY: the status line and headers go out in one write, the body in the next; with Nagle's
    # algorithm the body waits for the client's delayed ACK of the headers (~40 ms a reply on Linux).
    disable_nagle_algorithm = True
    server: SimServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes | dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True  # the client gave up (e.g. after an injected timeout)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0].rstrip("/")
        models = {name: {"id": name, "object": "model", "created": self.server.started, "owned_by": "boe-simulator"}
                  for name in (MODEL_NAME, JUDGE_MODEL_NAME)}
        if path == "/v1/models":
            self._send(200, {"object": "list", "data": list(models.values())})
        elif path.startswith("/v1/models/") and path.removeprefix("/v1/models/") in models:
            self._send(200, models[path.removeprefix("/v1/models/")])
        elif path == "/v1/sim/stats":
            self._send(200, self.server.stats.snapshot())
        elif path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok", "model": MODEL_NAME, "simulator": True})
        else:
            self._send(404, _error(f"no route GET {path}", code="not_found"))

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body()
        if body is None:
            return
        if path != "/v1/chat/completions":
            self._send(404, _error(f"no route POST {path}", code="not_found"))
            return
        stats, plan = self.server.stats, self.server.faults
        fault, latency = plan.decide(stats.next_index())
        if latency > 0:
            time.sleep(latency)
        if fault in ("429", "500"):
            status = int(fault)
            msg = ("Rate limit reached" if status == 429 else "Internal error") + " (injected by boe sim)"
            kind = "rate_limit_error" if status == 429 else "server_error"
            stats.record(status, fault)
            self._send(status, _error(msg, kind), {"Retry-After": "0"} if status == 429 else None)
            return
        if fault == "timeout":
            time.sleep(plan.timeout_sleep)
        try:
            reply = self._complete(body, fault)
        except RequestError as exc:
            stats.record(400, "timeout" if fault == "timeout" else None)
            self._send(400, _error(str(exc), param=exc.param))
            return
        content, usage = reply
        stats.record(200, fault, choices=len(content["choices"]), prompt=usage["prompt_tokens"],
                     completion=usage["completion_tokens"])
        self._send(200, content)

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(411 if length is None else 400, _error("a Content-Length header is required"))
            return None
        size = int(length)
        if size > MAX_BODY:
            self.close_connection = True
            self._send(413, _error(f"request body of {size} bytes is larger than {MAX_BODY}"))
            return None
        return self.rfile.read(size)

    def _complete(self, body: bytes, fault: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        req = parse_chat_request(body)
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        model = self.server.judge if req.model == JUDGE_MODEL_NAME else self.server.model
        sizes = [image_size(img) for img in req.images]
        try:
            inp = ModelInput(req.system, req.user, req.images, req.temperature, req.response_format, seed)
            texts = model.complete(inp, req.n)
        except ValueError as exc:
            raise RequestError(str(exc), "messages") from exc
        prompt = text_tokens(req.system + "\n" + req.user) + sum(image_tokens(w, h) for w, h in sizes)
        choices, completion = [], 0
        for k, text in enumerate(texts):
            finish = "stop"
            if fault == "malformed":
                text = _malform(text)
            elif fault == "truncated":
                text, finish = text[: max(1, len(text) * 2 // 5)], "length"
            if req.max_tokens is not None and text_tokens(text) > req.max_tokens:
                text, finish = truncate_tokens(text, req.max_tokens), "length"
            completion += text_tokens(text)
            choices.append({"index": k, "message": {"role": "assistant", "content": text, "refusal": None},
                            "logprobs": None, "finish_reason": finish})
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": 0}}
        seeded = req.seed is not None
        digest = hashlib.sha256(body + str(seed).encode()).hexdigest()[:24] if seeded else secrets.token_hex(12)
        return {
            "id": f"chatcmpl-{digest}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model.name,
            "system_fingerprint": "boe-sim-0.1",
            "choices": choices,
            "usage": usage,
        }, usage


def _malform(text: str) -> str:
    """An injected malformed reply: not valid JSON."""
    return text.rstrip().rstrip("}") + ', "' if text.lstrip().startswith("{") else "{" + text


def make_server(host: str = "127.0.0.1", port: int = 8000, *, faults: FaultPlan | None = None,
                model: SimModel | None = None, verbose: bool = False) -> SimServer:
    """Bind the server (port 0 picks a free port); call `serve_forever()` to run it."""
    return SimServer((host, port), model or SimModel(), faults or FaultPlan(), verbose)


@dataclass
class SimHandle:
    """A server running in a background thread."""

    server: SimServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        """The server root, e.g. http://127.0.0.1:8123."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. http://127.0.0.1:8123/v1."""
        return self.url + "/v1"

    def stats(self) -> dict[str, object]:
        """The server's counters."""
        return self.server.stats.snapshot()

    def close(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_in_thread(host: str = "127.0.0.1", port: int = 0, *, faults: FaultPlan | None = None,
                    model: SimModel | None = None, verbose: bool = False) -> SimHandle:
    """Start the simulator on a background thread (a free loopback port by default)."""
    server = make_server(host, port, faults=faults, model=model, verbose=verbose)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name=f"boe-sim:{server.server_address[1]}", daemon=True)
    thread.start()
    return SimHandle(server, thread)

