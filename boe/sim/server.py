"""`boe sim serve`: an OpenAI-compatible HTTP endpoint for the simulated VLM `boe-sim-vlm`.

It also serves the independent judge `boe-sim-judge` (`boe.sim.judge`): a request naming that model is
answered by it; any other model name by the generator.

Routes: GET /v1/models, GET /v1/models/{boe-sim-vlm,boe-sim-judge}, POST /v1/chat/completions,
GET /v1/sim/stats (request, response and fault counters), GET /health.
Standard library HTTP (ThreadingHTTPServer); one thread per connection.

Behind options (`SimOptions`) it emulates what a vLLM server does with a request:
a model's ``generation_config.json`` filling the sampling fields a request leaves
out (vLLM's default ``--generation-config auto``; ``top_k: 1`` makes every sample
the greedy one), greedy ``n > 1`` refused, ``--max-model-len`` and
``--limit-mm-per-prompt`` enforced with vLLM's wording. It always accounts a prefix
cache as vLLM's does (block hashes chained over the prompt, images by content or
``uuid``) and reports hits in ``usage.prompt_tokens_details.cached_tokens``. Asked for
``logprobs``, a judge reply carries the model's own verdict distribution at its verdict token
(`token_logprobs`).
Images are sized from their headers and refused above a pixel limit before anything
decodes them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from boe.sim.faults import FaultPlan, Stats
from boe.sim.judge import JUDGE_MODEL_NAME, make_judge
from boe.sim.model import MODEL_NAME, ModelInput, SimModel
from boe.sim.wire import (
    PIXEL_LIMIT,
    ChatRequest,
    RequestError,
    Segment,
    parse_chat_request,
    text_tokens,
    truncate_tokens,
)

__all__ = [
    "PrefixCache",
    "SimHandle",
    "SimOptions",
    "SimServer",
    "load_generation_config",
    "make_server",
    "serve_in_thread",
]

MAX_BODY = 64 * 1024 * 1024
#: vLLM's KV-cache block size: only whole blocks are cached and reused.
BLOCK = 16
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


@dataclass(frozen=True)
class SimOptions:
    """vLLM behaviours the simulator emulates (all off by default, except the prefix-cache accounting)."""

    generation_config: dict[str, Any] = field(default_factory=dict)  # applied to absent sampling fields
    reject_greedy_n: bool = False  # n > 1 with temperature 0: 400 "n must be 1 when using greedy sampling"
    max_model_len: int | None = None  # prompt + reply tokens allowed
    limit_images: int | None = None  # images per prompt (--limit-mm-per-prompt image=N)
    pixel_limit: int | None = PIXEL_LIMIT  # decoded pixels an image may declare
    prefix_blocks: int = 200_000  # prefix-cache capacity in cached segment hashes (LRU)


def load_generation_config(path: str | Path) -> dict[str, Any]:
    """The sampling defaults of a model's ``generation_config.json`` (temperature, top_p, top_k, min_p,
    max_new_tokens); raises ValueError naming the problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read generation config {str(path)!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"generation config {str(path)!r} is not a JSON object")
    keys = ("temperature", "top_p", "top_k", "min_p", "max_new_tokens")
    out = {k: data[k] for k in keys if k in data and data[k] is not None}
    for k, v in out.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"generation config {str(path)!r}: {k} must be a number, got {v!r}")
    return out


class PrefixCache:
    """Prefix-cache accounting as vLLM does it: a chain of hashes over the prompt's pieces; a request reuses the
    longest prefix seen before, counted in whole 16-token blocks (images hash by content, or by their uuid)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, segments: tuple[Segment, ...]) -> tuple[int, int, int]:
        """(cached tokens, cached image tokens, image tokens) of a prompt; its prefixes are then remembered."""
        chain = hashlib.sha256()
        hashes: list[tuple[bytes, int, Segment]] = []
        total = 0
        for seg in segments:
            chain.update(f"{seg.kind}:{seg.key}:{seg.tokens};".encode())
            total += seg.tokens
            hashes.append((chain.copy().digest(), total, seg))
        with self._lock:
            hit = 0
            for h, upto, _ in hashes:
                if h not in self._seen:
                    break
                self._seen.move_to_end(h)
                hit = upto
            for h, _, _ in hashes:
                self._seen[h] = None
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
        # whole blocks only, and never the prompt's last token (it is always computed)
        cached = min(hit, total - 1) // BLOCK * BLOCK if total else 0
        images = cached_images = 0
        before = 0
        for _, upto, seg in hashes:
            if seg.kind == "image":
                images += seg.tokens
                if upto <= cached:
                    cached_images += seg.tokens
                elif before < cached:
                    cached_images += cached - before
            before = upto
        return cached, cached_images, images


class SimServer(ThreadingHTTPServer):
    """The HTTP server; holds the model, the fault plan and the counters."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        model: SimModel,
        faults: FaultPlan,
        verbose: bool = False,
        options: SimOptions | None = None,
        judge: SimModel | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.model = model
        self.judge = judge or make_judge(model)
        self.faults = faults
        self.stats = Stats()
        self.verbose = verbose
        self.started = int(time.time())
        self.options = options or SimOptions()
        self.prefix_cache = PrefixCache(self.options.prefix_blocks)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset, broken pipe) is no error worth a traceback."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, _DISCONNECTS):
            return
        super().handle_error(request, client_address)


def _error(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
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
        models = {
            name: {"id": name, "object": "model", "created": self.server.started, "owned_by": "boe-simulator"}
            for name in (MODEL_NAME, JUDGE_MODEL_NAME)
        }
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
        stats.record(
            200,
            fault,
            choices=len(content["choices"]),
            prompt=usage["prompt_tokens"],
            completion=usage["completion_tokens"],
        )
        self._send(200, content)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _DISCONNECTS:
            self.close_connection = True  # the client went away mid-request: nothing to answer

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
        opts = self.server.options
        req = parse_chat_request(body, opts.pixel_limit)
        seed = req.seed if req.seed is not None else secrets.randbits(63)
        model = self.server.judge if req.model == JUDGE_MODEL_NAME else self.server.model
        temperature, max_tokens = _effective(req, opts)
        prompt = sum(seg.tokens for seg in req.segments)
        _check_limits(req, opts, prompt, max_tokens)
        asked = req.top_logprobs is not None
        try:
            inp = ModelInput(req.system, req.user, req.images, temperature, req.response_format, seed, asked)
            scored = model.complete_scored(inp, req.n)
        except ValueError as exc:
            raise RequestError(str(exc), "messages") from exc
        cached, cached_images, images = self.server.prefix_cache.lookup(req.segments)
        self.server.stats.add_prefix(cached, cached_images, images)
        choices, completion = [], 0
        for k, (text, dist) in enumerate(scored):
            finish = "stop"
            if fault == "malformed":
                text = _malform(text)
            elif fault == "truncated":
                text, finish = text[: max(1, len(text) * 2 // 5)], "length"
            if max_tokens is not None and text_tokens(text) > max_tokens:
                text, finish = truncate_tokens(text, max_tokens), "length"
            completion += text_tokens(text)
            choices.append(
                {
                    "index": k,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": token_logprobs(text, dist, req.top_logprobs or 0) if asked else None,
                    "finish_reason": finish,
                }
            )
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
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


_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
_VERDICT_VALUE = re.compile(r'"verdict"\s*:\s*"')


def token_logprobs(text: str, verdicts: dict[str, float] | None, top: int) -> dict[str, Any]:
    """A choice's ``logprobs`` as vLLM gives them (``content``: token, logprob, bytes, ``top_logprobs``).

    The simulator models one token's distribution: the verdict word of a judge
    reply, whose alternatives are the three verdicts with the model's own verdict
    probabilities (`SimModel.complete_scored`). Every other token is given as
    certain (logprob 0, itself its only alternative). Tokens are words, runs of
    white space and single other characters: they spell the text exactly.
    """
    found = list(_VERDICT_VALUE.finditer(text)) if verdicts else []
    at = found[-1].end() if found else -1
    content, pos = [], 0
    for tok in _TOKEN.findall(text):
        if pos == at and verdicts is not None and tok in verdicts:
            ranked = sorted(verdicts.items(), key=lambda kv: -kv[1])[:top]
            entry = {"token": tok, "logprob": math.log(verdicts[tok]), "bytes": list(tok.encode())}
            entry["top_logprobs"] = [{"token": v, "logprob": math.log(p), "bytes": list(v.encode())} for v, p in ranked]
        else:
            entry = {"token": tok, "logprob": 0.0, "bytes": list(tok.encode())}
            entry["top_logprobs"] = [dict(entry)][:top]
        content.append(entry)
        pos += len(tok)
    return {"content": content}


def _effective(req: ChatRequest, opts: SimOptions) -> tuple[float, int | None]:
    """The temperature the model samples at and the reply-token limit, after the generation config fills the
    fields the request left out (request, then generation config, then OpenAI's defaults, as vLLM does).

    A ``top_k`` of 1 (say, Qwen2.5-VL's generation_config.json) keeps only the most likely token: every sample is
    the greedy one, whatever the temperature."""
    gc = opts.generation_config
    temperature = float(req.sampling.get("temperature", gc.get("temperature", 1.0)))
    top_k = req.sampling.get("top_k", gc.get("top_k", 0))
    greedy = temperature <= 1e-5 or top_k == 1
    if opts.reject_greedy_n and temperature <= 1e-5 and req.n > 1:
        raise RequestError(f"n must be 1 when using greedy sampling, got {req.n}.", "n")
    max_tokens = req.max_tokens
    if max_tokens is None and gc.get("max_new_tokens") is not None:
        max_tokens = int(gc["max_new_tokens"])
    return (0.0 if greedy else temperature), max_tokens


def _check_limits(req: ChatRequest, opts: SimOptions, prompt: int, max_tokens: int | None) -> None:
    """vLLM's refusals of a prompt with too many images or too long for the model, in vLLM's wording."""
    if opts.limit_images is not None and len(req.images) > opts.limit_images:
        raise RequestError(f"At most {opts.limit_images} image(s) may be provided in one prompt.", "messages")
    limit = opts.max_model_len
    if limit is None:
        return
    if max_tokens is not None and max_tokens > limit:  # vLLM 0.32 checks the reply limit first (its renderer)
        field = "max_completion_tokens" if req.tokens_field == "max_completion_tokens" else "max_tokens"
        raise RequestError(
            f"{field}={max_tokens} cannot be greater than max_model_len={limit}. Please request fewer output tokens.",
            field,
        )
    if prompt >= limit:
        raise RequestError(
            f"This model's maximum context length is {limit} tokens. However, your request has {prompt} input "
            "tokens. Please reduce the length of the input messages.",
            "input_tokens",
        )
    if max_tokens is not None and prompt + max_tokens > limit:
        raise RequestError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            f"length is {limit} tokens and your request has {prompt} input tokens ({max_tokens} > {limit} - "
            f"{prompt}).",
            "max_tokens",
        )


def _malform(text: str) -> str:
    """An injected malformed reply: not valid JSON."""
    return text.rstrip().rstrip("}") + ', "' if text.lstrip().startswith("{") else "{" + text


def make_server(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    faults: FaultPlan | None = None,
    model: SimModel | None = None,
    verbose: bool = False,
    options: SimOptions | None = None,
) -> SimServer:
    """Bind the server (port 0 picks a free port); call `serve_forever()` to run it."""
    return SimServer((host, port), model or SimModel(), faults or FaultPlan(), verbose, options)


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


def serve_in_thread(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    faults: FaultPlan | None = None,
    model: SimModel | None = None,
    verbose: bool = False,
    options: SimOptions | None = None,
) -> SimHandle:
    """Start the simulator on a background thread (a free loopback port by default)."""
    server = make_server(host, port, faults=faults, model=model, verbose=verbose, options=options)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"boe-sim:{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return SimHandle(server, thread)
