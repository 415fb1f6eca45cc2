"""The model client: OpenAI-compatible chat completions for the generator and the judges.

One `ModelClient` talks to one model behind one or more base URLs through
``openai.AsyncOpenAI`` (vLLM, SGLang, OpenAI, the built-in simulator, ...). It

* puts the images (base64 data URLs, encoded once per figure) *before* the
  text, so a server's prefix cache reuses an image across the many judge calls
  of one question;
* samples K answers in one request with ``n=K``, topping up with single
  requests when a server refuses ``n`` or returns fewer choices;
* asks for a JSON-schema reply (``response_format``) and drops it for good
  if the server refuses it (the reply parser copes with prose);
* sends each request body serialised once (orjson) and reads the reply from
  its bytes, through the SDK's typed errors;
* decides every failure with one retry policy (`boe.tools.retry`): 408/409/429/5xx,
  timeouts, connection errors and replies that are no chat completion are retried
  with exponential backoff and jitter (``Retry-After`` is honoured); a refused
  request field is dropped and the request sent again; a context-length or
  image-count refusal is reported with the limit, the request's size and the
  options that fix it (not retried); the SDK's own retries are off;
* spreads requests over several base URLs by load (fewest in flight) and routes
  around a server that went away (see `boe.tools.endpoints`);
* records every call (tokens, latency, attempts, error) as a `boe.core.calls.ModelCall`;
* answers repeated requests from a request cache (keyed by `boe.core.calls.request_key`
  with the first base URL, whichever server answered), so a re-run never pays twice;
* sends explicit sampling fields (``top_p``, ``top_k``, ``min_p``; defaults that
  sample the model's whole distribution), so a server that fills absent fields
  from the model's ``generation_config.json`` (vLLM's default; Qwen2.5-VL ships
  ``top_k: 1``) cannot turn K samples into K copies of the greedy answer. The
  server kind (vllm, sglang, openai, generic) is read from ``GET /models`` or
  given; OpenAI's API gets no ``top_k``/``min_p``; a generic server that refuses
  them has them dropped (recorded);
* validates every reply at the boundary: a body of the wrong shape is one clear
  per-call error, never an AttributeError.

Per-endpoint facts learnt from a server (its kind, whether it takes ``n``,
``max_completion_tokens``, ``top_k``) live in an `EndpointState` per base URL and
model that the clients of one run share (`boe.tools.endpoints.Servers`), and are
recorded (`ModelClient.describe`).

The API key comes from the argument, ``BOE_API_KEY`` or ``OPENAI_API_KEY``;
it is never logged, recorded or stored. ``OPENAI_BASE_URL`` is read by the CLI
as the default endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time
import uuid
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from boe.core.calls import ModelCall, request_key
from boe.errors import ConfigError, MissingExtraError, ModelError
from boe.logs import get_logger, mask_secret
from boe.prompts import Rendered
from boe.tools.completion import Reply, read_completion
from boe.tools.endpoints import EndpointState, Server, Servers, split_urls
from boe.tools.retry import DROPPABLE, MAX_RETRY_AFTER, BadReply, Failure, limit_message, profile_for
from boe.util import redact_url

_log = get_logger("client")

__all__ = [
    "SERVER_KINDS",
    "Completion",
    "EndpointState",
    "MemoryCache",
    "ModelCall",
    "ModelClient",
    "RequestCache",
    "Servers",
    "request_head",
    "api_key_from_env",
    "base_url_from_env",
    "build_messages",
    "request_key",
]

#: How often an unusable reply (not JSON at all) is asked again.
MAX_REASKS = 2
#: How the client talks to a server: ``auto`` reads ``owned_by`` from ``GET /models``.
SERVER_KINDS = ("auto", "vllm", "sglang", "openai", "generic")
#: ``owned_by`` values of ``GET /models`` and the server kind they mean.
_OWNERS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "boe-simulator": "vllm",
    "openai": "openai",
    "system": "openai",
    "openai-internal": "openai",
}
#: Sampling fields OpenAI's hosted API refuses (it takes top_p).
_NOT_OPENAI = ("top_k", "min_p")
#: The call whose requests are being sent (set by `ModelClient.complete`): a transport that writes requests
#: instead of sending them (`boe.batch.files`) names each by the call's request key.
current_call: ContextVar[ModelCall | None] = ContextVar("boe_current_call", default=None)
#: What a refused field costs, said in the endpoint's note.
_EFFECT = {
    "temperature": "the server's default temperature applies",
    "seed": "replies are no longer reproducible by seed",
    "logprobs": "verdicts carry no probability",
    "top_logprobs": "verdicts carry no probability",
}


class RequestCache(Protocol):
    """Where finished replies are kept; the cache names its own key function."""

    def key(self, endpoint: str, model: str, messages: Any, params: dict[str, Any], seed: int | None) -> str: ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None: ...


class MemoryCache:
    """A request cache in a dict (tests, one process)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}

    def key(self, endpoint: str, model: str, messages: Any, params: dict[str, Any], seed: int | None) -> str:
        return request_key(endpoint, model, messages, params, seed)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.data.get(key)

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.data[key] = value


def api_key_from_env() -> str | None:
    """``BOE_API_KEY``, else ``OPENAI_API_KEY``, else None."""
    return os.environ.get("BOE_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def base_url_from_env() -> str | None:
    """``OPENAI_BASE_URL`` (the openai SDK's variable), else None."""
    return os.environ.get("OPENAI_BASE_URL") or None


def build_messages(prompt: Rendered, image_urls: Sequence[str]) -> list[dict[str, Any]]:
    """System message (one text for every task), then one user message: the images first, the task text last."""
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    parts.append({"type": "text", "text": prompt.user})
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": parts}]


def attempt_seed(seed: int | None, attempt: int) -> int | None:
    """The seed sent with attempt ``attempt`` (0: the first ask) of a call whose seed is ``seed``.

    A server that honours per-request seeds (vLLM) answers the same request and
    seed with the same text, so a re-ask with the first seed repeats the reply it
    re-asks. Each re-ask gets a seed derived from the call's seed: fresh, and the
    same on a rerun (the request cache keys the call by its first seed).
    """
    if seed is None or attempt == 0:
        return seed
    digest = hashlib.sha256(f"boe-reask/{seed}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def image_uuid(url: str) -> str:
    """A content hash of an image data URL (vLLM takes it as the image part's ``uuid``: its cache key)."""
    return "sha256-" + hashlib.sha256(url.encode("ascii", "replace")).hexdigest()[:32]


@dataclass
class Completion:
    """The reply texts of one call (None for a choice without content) and its record."""

    texts: list[str | None]
    call: ModelCall
    #: per choice, the server's token log-probabilities (``choices[i].logprobs.content``) when they were asked for
    #: (``top_logprobs``) and given; None otherwise
    logprobs: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class _Ask:
    """What every request of one call sends: the prompt, its messages, the sampling temperature, the seed (each
    single-choice request of a fallback gets its own), the call's record and the logprobs asked for."""

    prompt: Rendered
    messages: list[dict[str, Any]]
    temperature: float
    seed: int | None
    call: ModelCall
    top_logprobs: int | None = None


class _Refused(Exception):
    """The server rejected a request parameter with a 4xx: ``n`` (named by the error), or ``n?`` (a 4xx of an
    n > 1 request that names no parameter: one probe with n = 1 decides)."""

    def __init__(self, param: str, failure: Failure, where: str) -> None:
        self.param = param
        self.failure = failure
        self.where = where
        super().__init__(param)

    def error(self) -> ModelError:
        return ModelError(f"{self.where} refused the request: {self.failure.describe()}")


def _check_options(
    timeout: float,
    max_retries: int,
    concurrency: int,
    backoff: float,
    server: str,
    top_p: float | None,
    top_k: int | None,
    min_p: float | None,
) -> None:
    """Refuse client options out of range (a `ConfigError` naming the option)."""
    if timeout <= 0 or max_retries < 0 or concurrency < 1 or backoff < 0:
        raise ConfigError("timeout > 0, max_retries >= 0, concurrency >= 1 and backoff >= 0 are required")
    if server not in SERVER_KINDS:
        raise ConfigError(f"server kind must be one of {', '.join(SERVER_KINDS)}, got {server!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_p must lie in (0, 1], got {top_p}")
    if top_k is not None and (top_k < -1 or isinstance(top_k, bool)):
        raise ConfigError(f"top_k must be -1 (no limit) or a positive count, got {top_k}")
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise ConfigError(f"min_p must lie in [0, 1], got {min_p}")


def _loads(raw: bytes) -> Any:
    """A reply's JSON (orjson; the standard library for what only it reads, such as NaN)."""
    import orjson

    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class _Post:
    """``POST /chat/completions`` with bytes, as the SDK sends it and raising the SDK's typed errors.

    The SDK's own ``post`` builds its options, headers and URL again for every request (about 0.3 ms of CPU, most
    of a call's client-side cost); here they are built once per base URL. What it raises is what the SDK raises:
    `openai.APITimeoutError`, `openai.APIConnectionError`, and the `openai.APIStatusError` subclass of a status
    (made by the SDK's own `_make_status_error_from_response`, with the server's error body)."""

    def __init__(self, sdk: Any, http: Any, timeout: float) -> None:
        import httpx2

        self._httpx2 = httpx2
        self.sdk = sdk
        self.http = http
        self.url = httpx2.URL(str(sdk.base_url).rstrip("/") + "/chat/completions")
        headers = {**sdk.default_headers, **sdk.auth_headers}
        self.headers = httpx2.Headers({k: v for k, v in headers.items() if isinstance(v, str)})
        self.extensions = {"timeout": httpx2.Timeout(timeout).as_dict()}
        # the batch's HTTP client sends plain-http requests as bytes (`boe.batch.http`): the head is made once
        self._plain = getattr(http, "boe_post_plain", None) if self.url.scheme == "http" else None
        self._where = (self.url.host, self.url.port or 80)
        self._head = request_head(self.request(b"{}"), template=True)

    def request(self, data: bytes) -> Any:
        """The `httpx2.Request` of a body."""
        return self._httpx2.Request("POST", self.url, headers=self.headers, content=data, extensions=self.extensions)

    async def __call__(self, data: bytes) -> bytes:
        import openai

        httpx2 = self._httpx2
        if self._plain is not None:
            try:
                status, reason, version, headers, content = await self._plain(
                    self._where, self._head % len(data), data, self.extensions["timeout"], lambda: self.request(data)
                )
            except httpx2.TimeoutException as exc:
                raise openai.APITimeoutError(request=exc.request) from exc
            except httpx2.HTTPError as exc:  # no reply: refused, reset, closed mid-reply
                raise openai.APIConnectionError(request=exc.request) from exc
            if status >= 400:
                extensions = {"http_version": version, "reason_phrase": reason}
                response = httpx2.Response(
                    status, headers=headers, content=content, request=self.request(data), extensions=extensions
                )
                raise self.sdk._make_status_error_from_response(response)
            out: bytes = content
            return out
        request = self.request(data)
        try:
            response = await self.http.send(request)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc
        except httpx2.HTTPError as exc:  # no reply: refused, reset, closed mid-reply
            raise openai.APIConnectionError(request=request) from exc
        if response.status_code >= 400:
            raise self.sdk._make_status_error_from_response(response)
        body: bytes = response.content
        return body


def request_head(request: Any, *, template: bool = False) -> bytes:
    """The request line and headers of an `httpx2.Request` as HTTP/1.1 writes them (`boe.batch.http11`);
    ``template``: every ``%`` doubled and the Content-Length a ``%d``, for ``head % len(body)``."""

    def esc(b: bytes) -> bytes:
        return b.replace(b"%", b"%%") if template else b

    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), esc(request.url.raw_path))]
    for k, v in request.headers.raw:
        lines.append(k + b": " + (b"%d" if template and k.lower() == b"content-length" else esc(v)))
    return b"\r\n".join(lines) + b"\r\n\r\n"


class ModelClient:
    """Chat completions against one model behind one or more OpenAI-compatible base URLs."""

    def __init__(
        self,
        *,
        base_url: str | Sequence[str],
        model: str,
        role: str = "generator",
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 8,
        cache: RequestCache | None = None,
        use_n: bool = True,
        json_schema: bool = True,
        max_tokens: int = 512,
        http_client: Any = None,
        jitter_seed: int | None = None,
        server: str = "auto",
        top_p: float | None = 1.0,
        top_k: int | None = -1,
        min_p: float | None = 0.0,
        extra_body: dict[str, Any] | None = None,
        image_uuids: bool = True,
        endpoints: Servers | None = None,
    ) -> None:
        urls = split_urls(base_url) if base_url else []
        if not urls:
            raise ConfigError("the model client needs a base URL")
        if not model:
            raise ConfigError("the model client needs a model name")
        _check_options(timeout, max_retries, concurrency, backoff, server, top_p, top_k, min_p)
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ConfigError("extra_body must be a JSON object")
        try:
            import openai
        except ImportError as exc:
            raise MissingExtraError("agent", "openai", "the model client") from exc
        self._api_error = openai.APIError  # what the SDK raises: a status error with the server's body, or no reply
        self.urls = urls
        self.base_url = urls[0]  # the request cache's endpoint: the same whichever server answers
        self.safe_url = redact_url(self.base_url)
        self.model = model
        self.role = role
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.cache = cache
        self.use_n = use_n
        self._json_schema = json_schema
        self.max_tokens = int(max_tokens)
        self.server = server
        # top_k 0 means "no limit" to vLLM but is refused by SGLang; -1 means "no limit" to both
        self.sampling_fields: dict[str, Any] = {
            k: v
            for k, v in (("top_p", top_p), ("top_k", -1 if top_k == 0 else top_k), ("min_p", min_p))
            if v is not None
        }
        self.extra_body = dict(extra_body or {})
        self.image_uuids = image_uuids
        self.servers = endpoints if endpoints is not None else Servers()
        for url in urls:
            state = self.servers.state(url, model)
            if server != "auto" and state.kind == "auto":
                state.kind, state.detected = server, "given"
        self._uuids: dict[str, str] = {}
        self.last_sampling: dict[str, Any] = {}  # the sampling fields of the last request sent
        self._sem = asyncio.Semaphore(concurrency)
        self._rng = random.Random(jitter_seed)
        key = api_key or api_key_from_env() or "EMPTY"  # local servers accept any key
        mask_secret(api_key)
        self._http = http_client if http_client is not None else openai.DefaultAsyncHttpxClient()
        self._sdk = {
            url: openai.AsyncOpenAI(
                base_url=url, api_key=key, max_retries=0, timeout=self.timeout, http_client=self._http
            )
            for url in urls
        }
        self._posts = {url: _Post(sdk, self._http, self.timeout) for url, sdk in self._sdk.items()}

    @property
    def endpoint(self) -> EndpointState:
        """What the first base URL was found to accept for this model."""
        return self.servers.state(self.base_url, self.model)

    @property
    def json_schema(self) -> bool:
        """Whether replies are asked for with a JSON schema (off when asked so, or once the server refused it)."""
        return self._json_schema and "response_format" not in self.endpoint.dropped

    def describe(self) -> dict[str, Any]:
        """What a run records about this client (no secrets)."""
        out = {
            "role": self.role,
            "base_url": self.safe_url,
            "model": self.model,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "use_n": self.use_n,
            "json_schema": self.json_schema,
            "max_tokens": self.max_tokens,
            "server": self.server,
            "sampling": dict(self.sampling_fields),
            "extra_body": dict(self.extra_body),
            "endpoint": self.endpoint.as_dict(),
        }
        if len(self.urls) > 1:
            out["base_urls"] = [redact_url(u) for u in self.urls]
            out["endpoints"] = [self.servers.state(u, self.model).as_dict() for u in self.urls]
        return out

    async def aclose(self) -> None:
        for sdk in self._sdk.values():
            await sdk.close()

    async def complete(
        self,
        prompt: Rendered,
        image_urls: Sequence[str] = (),
        *,
        n: int = 1,
        temperature: float = 0.0,
        seed: int | None = None,
        tags: dict[str, Any] | None = None,
        accept: Callable[[list[str | None]], str | None] | None = None,
        top_logprobs: int | None = None,
    ) -> Completion:
        """``n`` replies to one prompt. Raises `ModelError` (with ``.call``) once retries are spent.

        ``accept(texts)`` returns None for a usable reply or the reason it is not;
        an unusable reply (say, a batch that is not JSON at all) is asked again up
        to `MAX_REASKS` times and is never cached. The last reply is returned
        either way: the caller keeps unreadable candidates as invalid and turns an
        unreadable verdict into ``unresolved`` with the error.

        ``top_logprobs`` asks for the token log-probabilities of the reply (the
        most likely alternatives at each token), where the server gives them
        (vLLM, the simulator, OpenAI's non-reasoning models); a server that
        refuses them is not asked again. They do not change the reply, so they
        are not part of the request's cache key.
        """
        if n < 1:
            raise ValueError("n must be >= 1")
        messages = build_messages(prompt, image_urls)
        call = self._new_call(prompt, messages, n, temperature, seed, tags)
        current_call.set(call)
        hit = self._cached(call, n)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        problem: str | None = None
        for attempt in range(MAX_REASKS + 1):
            sent = attempt_seed(seed, attempt)
            if sent is not None:
                call.seeds.append(sent)
            try:
                replies = await self._sample(_Ask(prompt, messages, temperature, sent, call, top_logprobs), n)
            except ModelError as exc:
                call.latency_ms = (time.perf_counter() - t0) * 1000.0
                call.error = str(exc)
                exc.call = call  # type: ignore[attr-defined]
                raise
            problem = accept([t for t, _ in replies]) if accept is not None else None
            if problem is None:
                break
            if attempt < MAX_REASKS:
                call.reasks += 1
        call.latency_ms = (time.perf_counter() - t0) * 1000.0
        texts = [t for t, _ in replies]
        logprobs = [lp for _, lp in replies] if any(lp is not None for _, lp in replies) else None
        if problem is not None:
            call.error = f"unusable reply after {call.reasks} re-asks: {problem}"
        elif self.cache is not None and all(t is not None for t in texts):
            self._store(call, prompt, texts, logprobs)
        return Completion(texts, call, logprobs)

    def _new_call(
        self,
        prompt: Rendered,
        messages: list[dict[str, Any]],
        n: int,
        temperature: float,
        seed: int | None,
        tags: dict[str, Any] | None,
    ) -> ModelCall:
        """The call's record, with its request key (the first base URL's, whichever server answers)."""
        params: dict[str, Any] = {
            "n": n,
            "temperature": temperature,
            "max_tokens": self.max_tokens,
            "schema": prompt.schema_name,
        }
        if self.sampling_fields != {"top_p": 1.0, "top_k": -1, "min_p": 0.0}:
            params["sampling"] = self.sampling_fields  # the defaults leave earlier cache keys as they were
        if self.extra_body:
            params["extra_body"] = self.extra_body
        keyer = self.cache.key if self.cache is not None else request_key
        return ModelCall(
            call_id=uuid.uuid4().hex,
            role=self.role,
            purpose=prompt.name,
            prompt_version=prompt.version,
            model=self.model,
            base_url=self.safe_url,
            n=n,
            temperature=temperature,
            request_key=keyer(self.base_url, self.model, messages, params, seed),
            started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            tags=dict(tags or {}),
        )

    def _cached(self, call: ModelCall, n: int) -> Completion | None:
        """The cache's reply to the call, filling in its record; None when there is none."""
        if self.cache is None:
            return None
        hit = self.cache.get(call.request_key)
        if hit is None or len(hit.get("texts", [])) != n:
            return None
        call.cache_hit = True
        usage = hit.get("usage", {})
        call.prompt_tokens = int(usage.get("prompt_tokens", 0))
        call.completion_tokens = int(usage.get("completion_tokens", 0))
        call.cached_tokens = int(usage.get("cached_tokens", 0))
        call.seeds = [int(x) for x in hit.get("seeds") or []]  # the seeds that produced the stored reply
        call.sampling = dict(hit.get("sampling") or {})  # and the sampling fields it was asked with
        call.reasks = int(hit.get("reasks", 0))  # and the re-asks it took
        return Completion(list(hit["texts"]), call, hit.get("logprobs"))

    def _store(self, call: ModelCall, prompt: Rendered, texts: list[str | None], logprobs: list[Any] | None) -> None:
        assert self.cache is not None
        value: dict[str, Any] = {
            "texts": texts,
            "usage": {
                "prompt_tokens": call.prompt_tokens,
                "completion_tokens": call.completion_tokens,
                "cached_tokens": call.cached_tokens,
            },
            "model": self.model,
            "endpoint": self.safe_url,
            "prompt_version": prompt.version,
            "seeds": list(call.seeds),
            "sampling": dict(call.sampling),
            "reasks": call.reasks,
        }
        if logprobs is not None:
            value["logprobs"] = logprobs
        self.cache.put(call.request_key, value)

    async def _sample(self, ask: _Ask, n: int) -> list[Reply]:
        """``n`` choices: one request with ``n`` where the servers take it, topped up with single requests."""
        states = [self.servers.state(u, self.model) for u in self.urls]
        texts: list[Reply] = []  # (text, token logprobs) per choice
        call, temperature = ask.call, ask.temperature
        # vLLM refuses n > 1 with greedy sampling ("n must be 1 when using greedy sampling"): sample one at a time
        if n > 1 and self.use_n and all(st.n is not False for st in states) and temperature > 0:
            texts = await self._sample_n(ask, n, states)
        missing = n - len(texts)
        if missing <= 0:
            for st in states:
                if n > 1 and st.n is None:
                    st.n, st.n_reason = True, "a request with n > 1 was answered"
            return texts
        call.n_fallback = n > 1
        refused = next((st for st in states if st.n is False), None)
        if n > 1 and temperature <= 0:
            call.tags.setdefault("n_fallback_reason", "greedy sampling (temperature 0) takes n = 1")
        elif n > 1 and refused is not None:
            call.tags.setdefault("n_fallback_reason", refused.n_reason)

        async def one(i: int) -> list[Reply]:
            single = ask if ask.seed is None or i == 0 else replace(ask, seed=ask.seed + i)
            try:
                return (await self._request(single, 1))[:1]
            except _Refused as r:
                raise r.error() from None

        parts = await asyncio.gather(*(one(len(texts) + i) for i in range(missing)))
        return texts + [t for p in parts for t in p]

    async def _sample_n(self, ask: _Ask, n: int, states: list[EndpointState]) -> list[Reply]:
        """The choices of one request with ``n``; a refusal of ``n`` is learnt (named by the error, or settled by
        one probe with n = 1, whose choice is returned) and later calls sample one at a time."""
        try:
            return (await self._request(ask, n))[:n]
        except _Refused as r:
            probe: list[Reply] = []
            if r.param == "n?":  # a 4xx naming no parameter: one request with n = 1 tells whether n was it
                try:
                    probe = (await self._request(ask, 1))[:1]
                except (_Refused, ModelError):
                    raise r.error() from None
                how = f"a probe with n=1 succeeded after: {r.failure.short()}"
            else:
                how = f"the server's error names parameter 'n': {r.failure.short()}"
            for st in states:
                if st.n is None:
                    st.n, st.n_reason = False, how
                    _log.warning("%s does not take n > 1; sampling one reply per request (%s)", self.safe_url, how)
            self.use_n = False  # this endpoint does not take n; sample one at a time from now on
            return probe

    async def _detect(self, server: Server, ep: EndpointState) -> None:
        """Decide the server kind once per endpoint (``auto``): the host, else ``owned_by`` from ``GET /models``.

        A server that cannot be reached stays ``auto`` (asked again with the next request): only one that
        answers decides."""
        if ep.kind != "auto":
            return
        async with ep.lock:
            if ep.kind != "auto":
                return
            if "api.openai.com" in server.url:
                ep.kind, ep.detected = "openai", "the base URL is OpenAI's"
                return
            import openai

            try:
                listing = await self._sdk[server.url].get("/models", cast_to=object)
            except openai.APIConnectionError:
                return
            except Exception as exc:  # any other failure: a server we cannot identify
                ep.kind, ep.detected = "generic", f"GET /models failed ({type(exc).__name__})"
                return
            models = listing.get("data") if isinstance(listing, dict) else None
            owners = {str(m.get("id")): str(m.get("owned_by", "")) for m in models or [] if isinstance(m, dict)}
            owner = owners.get(self.model) or next(iter(owners.values()), "")
            kind = _OWNERS.get(owner.lower())
            if kind is None and owner.lower().startswith(("openai", "user-", "org-")):
                kind = "openai"
            ep.kind = kind or "generic"
            ep.detected = f"GET /models: owned_by {owner!r}" if owner else "GET /models named no owner"

    def _body(self, ep: EndpointState, ask: _Ask, n: int) -> dict[str, Any]:
        """The request body as this endpoint takes it (sampling fields, token field, image uuids, extra body)."""
        prompt, messages, seed, top_logprobs = ask.prompt, ask.messages, ask.seed, ask.top_logprobs
        if self.image_uuids and ep.kind == "vllm" and "uuid" not in ep.dropped:
            messages = self._with_uuids(messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if "temperature" not in ep.dropped:
            body["temperature"] = ask.temperature
        body[ep.tokens_field] = self.max_tokens
        for k, v in self.sampling_fields.items():
            if k in ep.dropped or (ep.kind == "openai" and k in _NOT_OPENAI):
                continue
            body[k] = 0 if (k == "top_k" and v == -1 and ep.kind == "vllm") else v  # vLLM's "no limit" is 0
        if n > 1:
            body["n"] = n
        if seed is not None and "seed" not in ep.dropped:
            body["seed"] = seed
        if self._json_schema and "response_format" not in ep.dropped:
            schema = _unbounded(prompt.schema) if "maxLength" in ep.dropped else prompt.schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.schema_name, "schema": schema, "strict": True},
            }
        body.update(self.extra_body)  # the user's fields win
        if top_logprobs is not None and "logprobs" not in ep.dropped:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        return body

    def _with_uuids(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
                parts = []
                for p in content:
                    if p.get("type") == "image_url":
                        url = p["image_url"]["url"]
                        key = self._uuids.get(url)
                        if key is None:
                            if len(self._uuids) > 256:
                                self._uuids.clear()
                            key = self._uuids[url] = image_uuid(url)
                        p = {**p, "uuid": key}
                    parts.append(p)
                m = {**m, "content": parts}
            out.append(m)
        return out

    async def _request(self, ask: _Ask, n: int) -> list[Reply]:
        """The replies of one request: the one attempt loop (a server per attempt, every failure decided by the
        retry policy); tokens and request counts are added to ``ask.call``."""
        call = ask.call
        failed = 0  # attempts that failed and count against max_retries
        deadline: list[float] = []  # --timeout bounds the whole request (every attempt and wait) from its slot
        while True:
            server = self.servers.pick(self.urls)
            ep = self.servers.state(server.url, self.model)
            server.in_flight += 1
            try:
                await self._detect(server, ep)
                body = self._body(ep, ask, n)
                self._record_sampling(call, ep, body)
                call.requests += 1
                call.attempts = failed + 1
                server.requests += 1
                try:
                    pt, ct, cached, replies = await self._send(server, body, deadline)
                except TimeoutError:
                    raise ModelError(
                        f"{server.safe_url} ({self.model}) timed out: no complete reply within --timeout "
                        f"{self.timeout:g} s ({failed + 1} attempt(s))"
                    ) from None
                except (self._api_error, BadReply, ValueError) as exc:
                    failure = Failure.of(exc)
                else:
                    self.servers.answered(server)
                    call.prompt_tokens += pt
                    call.completion_tokens += ct
                    call.cached_tokens += cached
                    call.base_url = server.safe_url
                    return replies
            finally:
                server.in_flight -= 1
            server.errors += 1
            if failure.unreachable:
                self.servers.unreachable(server)
            if self._learnt(failure, server, ep, body, n):
                continue  # sent again at once, without what the server refused (not an attempt of its own)
            failed += 1
            if failed > self.max_retries or not profile_for(ep.kind).should_retry(failure):
                raise ModelError(_failed_after(failure, f"{server.safe_url} ({self.model})", failed))
            _log.info("%s (%s): retrying after attempt %d: %s", server.safe_url, self.model, failed, failure.describe())
            delay = self._delay(failed, failure.retry_after)
            await self._backoff(delay, deadline[0] if deadline else None, failed, failure.short())

    async def _send(
        self, server: Server, body: dict[str, Any], deadline: list[float]
    ) -> tuple[int, int, int, list[Reply]]:
        """One request: the body serialised once (orjson), the reply read from its bytes, cut off at the request's
        deadline (set when its first attempt gets a slot: the wait for a slot is free)."""
        import orjson

        data = orjson.dumps(body)
        async with self._sem:
            if not deadline:
                deadline.append(asyncio.get_running_loop().time() + self.timeout)
            async with asyncio.timeout_at(deadline[0]):  # a server dripping bytes resets only a read's timeout
                raw = await self._posts[server.url](data)
        return read_completion(_loads(raw))

    def _record_sampling(self, call: ModelCall, ep: EndpointState, body: dict[str, Any]) -> None:
        call.sampling = {
            "server": ep.kind,
            **{k: body[k] for k in ("temperature", "top_p", "top_k", "min_p") if k in body},
        }
        if ep.dropped:  # fields this endpoint refused: not sent (the endpoint's notes say why)
            call.sampling["dropped"] = list(ep.dropped)
        self.last_sampling = call.sampling

    def _learnt(self, f: Failure, server: Server, ep: EndpointState, body: dict[str, Any], n: int) -> bool:
        """What a refusal teaches about the endpoint: True when the request is to be sent again at once without
        what was refused. A limit refusal raises `ModelError` with the fix; a refusal of ``n`` raises `_Refused`."""
        where = f"{server.safe_url} ({self.model})"
        profile = profile_for(ep.kind)
        limit = profile.limit(f)
        if limit is not None:
            raise ModelError(limit_message(limit, body, where, f.short()))
        if f.status not in (400, 422):
            return False
        if self._drop_refused(f, ep, body, profile.refused_field(f)):
            return True
        if "response_format" in body and f.mentions("response_format", "json_schema", "guided"):
            ep.dropped.append("response_format")  # the server cannot constrain output; the parser copes
            ep.note(f"the server refused response_format; replies are read without a schema ({f.short()})")
            return True
        if n > 1 and (f.param == "n" or f.mentions("'n'", '"n"', "n must be", "parameter n ")):
            raise _Refused("n", f, server.safe_url)
        if n > 1 and ep.n is None and not f.param:
            raise _Refused("n?", f, server.safe_url)
        return False

    def _drop_refused(self, f: Failure, ep: EndpointState, body: dict[str, Any], name: str | None) -> bool:
        """Stop sending a field the server refuses (a sampling field, the seed, logprobs, an image uuid, schema
        bounds, max_completion_tokens), remembered for the endpoint and model with a note; True when the request
        is to be sent again without it (once per field)."""
        if name in DROPPABLE and name in body and name not in self.extra_body:
            if name not in ep.dropped:  # (a request in flight with it when another learnt the refusal: just resend)
                names = ("logprobs", "top_logprobs") if name in ("logprobs", "top_logprobs") else (name,)
                ep.dropped.extend(x for x in names if x not in ep.dropped)
                effect = _EFFECT.get(name, "the server's default applies")
                ep.note(f"the server refused {name}; it is no longer sent, {effect} ({f.short()})")
            return True
        return self._drop_named(f, ep, body)

    def _drop_named(self, f: Failure, ep: EndpointState, body: dict[str, Any]) -> bool:
        """The refusals a message words without a field the server states: schema bounds, max_completion_tokens,
        top_k, min_p, an image uuid (the last resort)."""
        if not f.worded_refusal():
            return False
        text = f.text
        if ("maxlength" in text or "maxitems" in text) and "response_format" in body and "maxLength" not in ep.dropped:
            ep.dropped.append("maxLength")  # the bounds stay in the prompt's contract; the schema goes without them
            ep.note(f"the server refused maxLength/maxItems in the reply schema; they are left out ({f.short()})")
            return True
        if "max_completion_tokens" in text and ep.tokens_field == "max_completion_tokens":
            ep.tokens_field = "max_tokens"
            ep.note(f"the server refused max_completion_tokens; max_tokens is sent ({f.short()})")
            return True
        for name in ("top_k", "min_p", "uuid"):
            if name in text and name not in ep.dropped and name not in self.extra_body:
                sent = (self.image_uuids and ep.kind == "vllm") if name == "uuid" else name in body
                if sent:
                    ep.dropped.append(name)
                    ep.note(f"the server refused {name}; it is no longer sent ({f.short()})")
                    return True
        return False

    async def _backoff(self, delay: float, deadline: float | None, attempt: int, why: str) -> None:
        """Wait before the next attempt, or give up when that would pass the request's --timeout."""
        if deadline is not None and asyncio.get_running_loop().time() + delay >= deadline:
            raise ModelError(
                f"{self.safe_url} ({self.model}) gave up after {attempt} attempt(s): the next would start past "
                f"--timeout {self.timeout:g} s (last: {why})"
            )
        await asyncio.sleep(delay)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter; a server's Retry-After wins when it is longer."""
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        delay: float = base / 2 + self._rng.uniform(0, base / 2)
        if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER:
            delay = max(delay, retry_after)
        return delay


def _failed_after(f: Failure, where: str, attempts: int) -> str:
    """The error of a request that failed for good."""
    if f.unreachable:
        return f"{where} {'timed out' if f.timeout else 'connection failed'} after {attempts} attempt(s)"
    if f.bad_reply:
        return f"{where} {f.message} after {attempts} attempt(s)"
    return f"{where} failed after {attempts} attempt(s): {f.describe()}"


def _unbounded(schema: Any) -> Any:
    """A JSON schema without ``maxLength`` / ``maxItems`` (for a server whose schema subset refuses them)."""
    if isinstance(schema, dict):
        return {k: _unbounded(v) for k, v in schema.items() if k not in ("maxLength", "maxItems")}
    if isinstance(schema, list):
        return [_unbounded(v) for v in schema]
    return schema
