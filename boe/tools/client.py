"""The model client: OpenAI-compatible chat completions for the generator and the judges.

One `ModelClient` talks to one endpoint and model through ``openai.AsyncOpenAI``
(vLLM, SGLang, OpenAI, the built-in simulator, ...). It

* puts the images (base64 data URLs) *before* the text, so a server's prefix
  cache reuses an image across the many judge calls of one question;
* samples K answers in one request with ``n=K``, topping up with single
  requests when a server refuses ``n`` or returns fewer choices;
* asks for a JSON-schema reply (``response_format``) and drops it for good
  if the server refuses it (the reply parser copes with prose);
* bounds concurrency, and retries 408/409/429/5xx, timeouts and connection
  errors with exponential backoff and jitter (``Retry-After`` is honoured);
* records every call (tokens, latency, attempts, error) as a `boe.core.calls.ModelCall`;
* answers repeated requests from a request cache (keyed by `boe.core.calls.request_key`), so a
  re-run never pays twice;
* sends explicit sampling fields (``top_p``, ``top_k``, ``min_p``; defaults that
  sample the model's whole distribution), so a server that fills absent fields
  from the model's ``generation_config.json`` (vLLM's default; Qwen2.5-VL ships
  ``top_k: 1``) cannot turn K samples into K copies of the greedy answer. The
  server kind (vllm, sglang, openai, generic) is read from ``GET /models`` or
  given; OpenAI's API gets no ``top_k``/``min_p``; a generic server that refuses
  them has them dropped (recorded);
* validates every reply at the boundary: a body of the wrong shape is one clear
  per-call error, never an AttributeError;
* reports a context-length or image-count refusal with the limit, the request's
  size and the options that fix it (not retried).

Per-endpoint facts learnt from the server (its kind, whether it takes ``n``,
``max_completion_tokens``, ``top_k``) live in an `EndpointState` that the clients
of one run share, and are recorded (`ModelClient.describe`).

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
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from boe.core.calls import ModelCall, request_key
from boe.errors import ConfigError, MissingExtraError, ModelError
from boe.logs import get_logger, mask_secret
from boe.prompts import Rendered
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
    "api_key_from_env",
    "base_url_from_env",
    "build_messages",
    "request_key",
]

#: How often an unusable reply (not JSON at all) is asked again.
MAX_REASKS = 2
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0
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
class EndpointState:
    """What one endpoint (base URL and model) was found to accept; shared by the clients of a run, recorded."""

    kind: str = "auto"  # vllm | sglang | openai | generic once known
    detected: str = ""  # how the kind was decided
    n: bool | None = None  # whether the server takes n > 1 (None: not yet known)
    n_reason: str = ""  # how that was decided (the error's param, or a probe)
    tokens_field: str = "max_completion_tokens"  # falls back to max_tokens for servers that only know it
    dropped: list[str] = field(default_factory=list)  # request fields the server refused and no longer gets
    notes: list[str] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def note(self, text: str) -> None:
        """Record what the endpoint was found to refuse (kept with the run) and log it."""
        self.notes.append(text)
        _log.warning("%s", text)

    def as_dict(self) -> dict[str, Any]:
        """The state as recorded with a run."""
        return {
            "kind": self.kind,
            "detected": self.detected,
            "n": self.n,
            "n_reason": self.n_reason,
            "tokens_field": self.tokens_field,
            "dropped": list(self.dropped),
            "notes": list(self.notes),
        }


@dataclass
class Completion:
    """The reply texts of one call (None for a choice without content) and its record."""

    texts: list[str | None]
    call: ModelCall
    #: per choice, the server's token log-probabilities (``choices[i].logprobs.content``) when they were asked for
    #: (``top_logprobs``) and given; None otherwise
    logprobs: list[Any] | None = None


class _Refused(Exception):
    """The server rejected a request parameter with a 4xx: ``n`` (named by the error), or ``n?`` (a 4xx of an
    n > 1 request that names no parameter: one probe with n = 1 decides)."""

    def __init__(self, param: str, exc: Exception) -> None:
        self.param = param
        self.exc = exc
        super().__init__(param)


class ModelClient:
    """Chat completions against one OpenAI-compatible endpoint and model."""

    def __init__(
        self,
        *,
        base_url: str,
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
        endpoints: dict[tuple[str, str], EndpointState] | None = None,
    ) -> None:
        if not base_url:
            raise ConfigError("the model client needs a base URL")
        if not model:
            raise ConfigError("the model client needs a model name")
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
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ConfigError("extra_body must be a JSON object")
        try:
            import openai
        except ImportError as exc:
            raise MissingExtraError("agent", "openai", "the model client") from exc
        self._openai = openai
        self.base_url = base_url
        self.safe_url = redact_url(base_url)
        self.model = model
        self.role = role
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.cache = cache
        self.use_n = use_n
        self.json_schema = json_schema
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
        shared = endpoints if endpoints is not None else {}
        self.endpoint = shared.setdefault((base_url.rstrip("/"), model), EndpointState())
        if server != "auto" and self.endpoint.kind == "auto":
            self.endpoint.kind, self.endpoint.detected = server, "given"
        self._uuids: dict[str, str] = {}
        self.last_sampling: dict[str, Any] = {}  # the sampling fields of the last request sent
        self._sem = asyncio.Semaphore(concurrency)
        self._rng = random.Random(jitter_seed)
        key = api_key or api_key_from_env() or "EMPTY"  # local servers accept any key
        mask_secret(api_key)
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=key, max_retries=0, timeout=self.timeout, http_client=http_client
        )

    def describe(self) -> dict[str, Any]:
        """What a run records about this client (no secrets)."""
        return {
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

    async def aclose(self) -> None:
        await self._client.close()

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
        key = keyer(self.base_url, self.model, messages, params, seed)
        call = ModelCall(
            call_id=uuid.uuid4().hex,
            role=self.role,
            purpose=prompt.name,
            prompt_version=prompt.version,
            model=self.model,
            base_url=self.safe_url,
            n=n,
            temperature=temperature,
            request_key=key,
            started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            tags=dict(tags or {}),
        )
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None and len(hit.get("texts", [])) == n:
                call.cache_hit = True
                usage = hit.get("usage", {})
                call.prompt_tokens = int(usage.get("prompt_tokens", 0))
                call.completion_tokens = int(usage.get("completion_tokens", 0))
                call.cached_tokens = int(usage.get("cached_tokens", 0))
                call.seeds = [int(x) for x in hit.get("seeds") or []]  # the seeds that produced the stored reply
                return Completion(list(hit["texts"]), call, hit.get("logprobs"))
        t0 = time.perf_counter()
        problem: str | None = None
        for attempt in range(MAX_REASKS + 1):
            sent = attempt_seed(seed, attempt)
            if sent is not None:
                call.seeds.append(sent)
            try:
                replies = await self._sample(prompt, messages, n, temperature, sent, call, top_logprobs)
                texts = [t for t, _ in replies]
            except ModelError as exc:
                call.latency_ms = (time.perf_counter() - t0) * 1000.0
                call.error = str(exc)
                exc.call = call  # type: ignore[attr-defined]
                raise
            problem = accept(texts) if accept is not None else None
            if problem is None:
                break
            if attempt < MAX_REASKS:
                call.reasks += 1
        call.latency_ms = (time.perf_counter() - t0) * 1000.0
        logprobs = [lp for _, lp in replies] if any(lp is not None for _, lp in replies) else None
        if problem is not None:
            call.error = f"unusable reply after {call.reasks} re-asks: {problem}"
        elif self.cache is not None and all(t is not None for t in texts):
            self.cache.put(
                key,
                {
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
                    **({"logprobs": logprobs} if logprobs is not None else {}),
                },
            )
        return Completion(texts, call, logprobs)

    async def _sample(
        self,
        prompt: Rendered,
        messages: list[dict[str, Any]],
        n: int,
        temperature: float,
        seed: int | None,
        call: ModelCall,
        top_logprobs: int | None = None,
    ) -> list[_Reply]:
        await self._detect()
        texts: list[_Reply] = []  # (text, token logprobs) per choice
        ep = self.endpoint
        # vLLM refuses n > 1 with greedy sampling ("n must be 1 when using greedy sampling"): sample one at a time
        if n > 1 and self.use_n and ep.n is not False and temperature > 0:
            try:
                texts.extend((await self._request(prompt, messages, n, temperature, seed, call, top_logprobs))[:n])
            except _Refused as r:
                if r.param == "n?":  # a 4xx naming no parameter: one request with n = 1 tells whether n was it
                    try:
                        texts.extend(
                            (await self._request(prompt, messages, 1, temperature, seed, call, top_logprobs))[:1]
                        )
                    except _Refused:
                        raise ModelError(f"{self.safe_url} refused the request: {_describe(r.exc)}") from r.exc
                    except ModelError:
                        raise ModelError(f"{self.safe_url} refused the request: {_describe(r.exc)}") from r.exc
                    how = f"a probe with n=1 succeeded after: {_short(r.exc)}"
                else:
                    how = f"the server's error names parameter 'n': {_short(r.exc)}"
                if ep.n is None:
                    ep.n, ep.n_reason = False, how
                    _log.warning("%s does not take n > 1; sampling one reply per request (%s)", self.safe_url, how)
                self.use_n = False  # this endpoint does not take n; sample one at a time from now on
        missing = n - len(texts)
        if missing > 0:
            call.n_fallback = n > 1
            if n > 1 and temperature <= 0:
                call.tags.setdefault("n_fallback_reason", "greedy sampling (temperature 0) takes n = 1")
            elif n > 1 and ep.n is False:
                call.tags.setdefault("n_fallback_reason", ep.n_reason)
            start = len(texts)

            async def one(i: int) -> list[_Reply]:
                s = None if seed is None else seed + i
                try:
                    return (await self._request(prompt, messages, 1, temperature, s, call, top_logprobs))[:1]
                except _Refused as r:
                    raise ModelError(f"{self.safe_url} refused the request: {_describe(r.exc)}") from r.exc

            parts = await asyncio.gather(*(one(start + i) for i in range(missing)))
            for p in parts:
                texts.extend(p)
        elif n > 1 and ep.n is None:
            ep.n, ep.n_reason = True, "a request with n > 1 was answered"
        return texts

    async def _detect(self) -> None:
        """Decide the server kind once per endpoint (``auto``): the host, else ``owned_by`` from ``GET /models``."""
        ep = self.endpoint
        if ep.kind != "auto":
            return
        async with ep.lock:
            if ep.kind != "auto":
                return
            if "api.openai.com" in self.base_url:
                ep.kind, ep.detected = "openai", "the base URL is OpenAI's"
                return
            try:
                listing = await self._client.get("/models", cast_to=object)
                models = listing.get("data") if isinstance(listing, dict) else None
                owners = {str(m.get("id")): str(m.get("owned_by", "")) for m in models or [] if isinstance(m, dict)}
            except Exception as exc:  # any failure: a server we cannot identify
                ep.kind, ep.detected = "generic", f"GET /models failed ({type(exc).__name__})"
                return
            owner = owners.get(self.model) or next(iter(owners.values()), "")
            kind = _OWNERS.get(owner.lower())
            if kind is None and owner.lower().startswith(("openai", "user-", "org-")):
                kind = "openai"
            ep.kind = kind or "generic"
            ep.detected = f"GET /models: owned_by {owner!r}" if owner else "GET /models named no owner"

    def _body(
        self, prompt: Rendered, messages: list[dict[str, Any]], n: int, temperature: float, seed: int | None
    ) -> dict[str, Any]:
        """The request body as this endpoint takes it (sampling fields, token field, image uuids, extra body)."""
        ep = self.endpoint
        if self.image_uuids and ep.kind == "vllm" and "uuid" not in ep.dropped:
            messages = self._with_uuids(messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if "temperature" not in ep.dropped:
            body["temperature"] = temperature
        body[ep.tokens_field] = self.max_tokens
        for k, v in self.sampling_fields.items():
            if k in ep.dropped or (ep.kind == "openai" and k in _NOT_OPENAI):
                continue
            body[k] = 0 if (k == "top_k" and v == -1 and ep.kind == "vllm") else v  # vLLM's "no limit" is 0
        if n > 1:
            body["n"] = n
        if seed is not None and "seed" not in ep.dropped:
            body["seed"] = seed
        if self.json_schema:
            schema = _unbounded(prompt.schema) if "maxLength" in ep.dropped else prompt.schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": prompt.schema_name, "schema": schema, "strict": True},
            }
        body.update(self.extra_body)  # the user's fields win
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

    async def _request(
        self,
        prompt: Rendered,
        messages: list[dict[str, Any]],
        n: int,
        temperature: float,
        seed: int | None,
        call: ModelCall,
        top_logprobs: int | None = None,
    ) -> list[_Reply]:
        """The replies of one request with retries; tokens and request counts are added to ``call``."""
        openai = self._openai
        ep = self.endpoint
        attempt = 0
        while True:
            attempt += 1
            kwargs = self._body(prompt, messages, n, temperature, seed)
            if top_logprobs is not None and "logprobs" not in ep.dropped:
                kwargs.update(logprobs=True, top_logprobs=top_logprobs)
            call.sampling = {
                "server": ep.kind,
                **{k: kwargs[k] for k in ("temperature", "top_p", "top_k", "min_p") if k in kwargs},
            }
            if ep.dropped:  # fields this endpoint refused: not sent (the endpoint's notes say why)
                call.sampling["dropped"] = list(ep.dropped)
            self.last_sampling = call.sampling
            call.requests += 1
            call.attempts = attempt
            try:
                async with self._sem:
                    # The request body is already plain JSON: `post` skips the typed-params transform
                    # and the response model of `chat.completions.create` (~2 ms of CPU a call).
                    resp = await self._client.post("/chat/completions", body=kwargs, cast_to=object)
                reply = _read_completion(resp)
            except (_BadBody, ValueError) as exc:  # a 200 that is no chat completion (or no JSON): retried like a 5xx
                if attempt > self.max_retries:
                    raise ModelError(f"{self.safe_url} ({self.model}) {exc} after {attempt} attempt(s)") from None
                _log.info("%s (%s): retrying after attempt %d: %s", self.safe_url, self.model, attempt, exc)
                await asyncio.sleep(self._delay(attempt, None))
                continue
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in (400, 413, 422):
                    limit = _limit_error(exc, kwargs, self)
                    if limit is not None:
                        raise ModelError(limit) from exc
                if status in (400, 422):
                    dropped = self._drop_refused(exc, kwargs)
                    if dropped:
                        attempt -= 1
                        continue
                if (
                    status in (400, 422)
                    and self.json_schema
                    and _mentions(exc, ("response_format", "json_schema", "guided"))
                ):
                    self.json_schema = False  # the server cannot constrain output; the parser copes
                    _log.warning(
                        "%s refused the reply schema; replies are parsed without it (%s)", self.safe_url, _short(exc)
                    )
                    attempt -= 1
                    continue
                if status in (400, 422) and n > 1:
                    param = _error_field(exc, "param")
                    if param == "n" or _mentions(exc, ("'n'", '"n"', "n must be", "parameter n ")):
                        raise _Refused("n", exc) from exc
                    if ep.n is None and not param:
                        raise _Refused("n?", exc) from exc
                if status not in RETRY_STATUS or attempt > self.max_retries:
                    raise ModelError(
                        f"{self.safe_url} ({self.model}) failed after {attempt} attempt(s): {_describe(exc)}"
                    ) from exc
                _log.info("%s (%s): retrying after attempt %d: %s", self.safe_url, self.model, attempt, _describe(exc))
                await asyncio.sleep(self._delay(attempt, _retry_after(exc)))
                continue
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                if attempt > self.max_retries:
                    kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "connection failed"
                    raise ModelError(f"{self.safe_url} ({self.model}) {kind} after {attempt} attempt(s)") from exc
                _log.info(
                    "%s (%s): retrying after attempt %d: %s", self.safe_url, self.model, attempt, type(exc).__name__
                )
                await asyncio.sleep(self._delay(attempt, None))
                continue
            pt, ct, cached, replies = reply
            call.prompt_tokens += pt
            call.completion_tokens += ct
            call.cached_tokens += cached
            return replies

    def _drop_refused(self, exc: Exception, body: dict[str, Any]) -> bool:
        """Stop sending a field the server refuses (a sampling field, the seed, logprobs, an image uuid, schema
        bounds, max_completion_tokens), remembered for the endpoint and model with a note; True when the request
        is to be sent again without it (once per field)."""
        ep = self.endpoint
        text = _error_text(exc)
        if not re.search(
            r"unrecogni[sz]ed|unknown|not (permitted|allowed|supported)|extra (fields|inputs)|"
            r"unexpected|invalid|unsupported|does not support",
            text,
        ):
            return False
        name = _refused_field(exc, text)
        if name in _DROPPABLE and name in body and name not in self.extra_body:
            if name not in ep.dropped:  # (a request in flight with it when another learnt the refusal: just resend)
                names = ("logprobs", "top_logprobs") if name in ("logprobs", "top_logprobs") else (name,)
                ep.dropped.extend(n for n in names if n not in ep.dropped)
                effect = {
                    "temperature": "the server's default temperature applies",
                    "seed": "replies are no longer reproducible by seed",
                    "logprobs": "verdicts carry no probability",
                    "top_logprobs": "verdicts carry no probability",
                }.get(name, "the server's default applies")
                ep.note(f"the server refused {name}; it is no longer sent, {effect} ({_short(exc)})")
            return True
        if ("maxlength" in text or "maxitems" in text) and self.json_schema and "maxLength" not in ep.dropped:
            ep.dropped.append("maxLength")  # the bounds stay in the prompt's contract; the schema goes without them
            ep.note(f"the server refused maxLength/maxItems in the reply schema; they are left out ({_short(exc)})")
            return True
        if "max_completion_tokens" in text and ep.tokens_field == "max_completion_tokens":
            ep.tokens_field = "max_tokens"
            ep.note(f"the server refused max_completion_tokens; max_tokens is sent ({_short(exc)})")
            return True
        for name in ("top_k", "min_p", "uuid"):
            if name in text and name not in ep.dropped and name not in self.extra_body:
                sent = (self.image_uuids and ep.kind == "vllm") if name == "uuid" else name in body
                if sent:
                    ep.dropped.append(name)
                    ep.note(f"the server refused {name}; it is no longer sent ({_short(exc)})")
                    return True
        return False

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter; a server's Retry-After wins when it is longer."""
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        delay: float = base / 2 + self._rng.uniform(0, base / 2)
        if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER:
            delay = max(delay, retry_after)
        return delay


def _unbounded(schema: Any) -> Any:
    """A JSON schema without ``maxLength`` / ``maxItems`` (for a server whose schema subset refuses them)."""
    if isinstance(schema, dict):
        return {k: _unbounded(v) for k, v in schema.items() if k not in ("maxLength", "maxItems")}
    if isinstance(schema, list):
        return [_unbounded(v) for v in schema]
    return schema


#: Request fields sent again without, for good, when the server refuses them by name (OpenAI's reasoning models
#: refuse top_p and a non-default temperature).
_DROPPABLE = ("temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs")
_UNSUPPORTED = re.compile(r"unsupported (?:parameter|value): '(\w+)'")


def _refused_field(exc: Exception, text: str) -> str | None:
    """The request field a refusal names: its ``param``, else ``Unsupported parameter: 'x'`` in the message, else
    the one droppable field the message names."""
    param = _error_field(exc, "param")
    if param:
        return param
    m = _UNSUPPORTED.search(text)
    if m:
        return m.group(1)
    named = [name for name in _DROPPABLE if re.search(rf"\b{name}\b", text)]
    return named[0] if len(named) == 1 else None


class _BadBody(Exception):
    """A successful HTTP reply whose body is not a chat completion."""


def _count(usage: dict[str, Any], key: str, where: str = "usage") -> int:
    v = usage.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e12:
        raise _BadBody(f"replied with a malformed chat completion ({where}.{key} is {str(v)[:40]!r}, not a count)")
    return int(v)


#: One choice of a reply: its text and its token log-probabilities (``logprobs.content``, when given).
_Reply = tuple[str | None, Any]


def _read_completion(resp: Any) -> tuple[int, int, int, list[_Reply]]:
    """Token counts (prompt, completion, cached) and the choices (text, token logprobs) in index order, from the
    reply's JSON.

    Every part is checked: a body of the wrong shape raises `_BadBody` naming what is wrong."""
    if not isinstance(resp, dict):
        raise _BadBody(f"replied with something that is not a chat completion: {str(resp)[:120]!r}")
    if "choices" not in resp and isinstance(resp.get("error"), (dict, str)):
        err = resp["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise _BadBody(f"replied 200 with an error: {str(msg)[:200]!r}")
    choices = resp.get("choices")
    if not isinstance(choices, list):
        raise _BadBody(f"replied with something that is not a chat completion: {str(resp)[:120]!r}")
    if not choices:
        raise _BadBody("replied with a chat completion without choices")
    usage = resp.get("usage")
    if usage is None:
        usage = {}
    if not isinstance(usage, dict):
        raise _BadBody(f"replied with a malformed chat completion (usage is {str(usage)[:40]!r}, not an object)")
    details = usage.get("prompt_tokens_details")
    if details is None:
        details = {}
    if not isinstance(details, dict):
        raise _BadBody("replied with a malformed chat completion (usage.prompt_tokens_details is not an object)")
    pt, ct = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    cached = _count(details, "cached_tokens", "usage.prompt_tokens_details")
    indexed: list[tuple[int, _Reply]] = []
    for i, c in enumerate(choices):
        if not isinstance(c, dict):
            raise _BadBody(f"replied with a malformed chat completion (choices[{i}] is not an object)")
        index = c.get("index", i)
        if isinstance(index, bool) or not isinstance(index, int):
            raise _BadBody(f"replied with a malformed chat completion (choices[{i}].index is {str(index)[:20]!r})")
        message = c.get("message")
        if message is None:
            message = {}
        if not isinstance(message, dict):
            raise _BadBody(f"replied with a malformed chat completion (choices[{i}].message is not an object)")
        content = message.get("content")
        if isinstance(content, list):  # content parts: their text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict)) or None
        if content is not None and not isinstance(content, str):
            raise _BadBody(f"replied with a malformed chat completion (choices[{i}].message.content is not text)")
        lp = c.get("logprobs")
        tokens = lp.get("content") if isinstance(lp, dict) and isinstance(lp.get("content"), list) else None
        indexed.append((index, (content, tokens)))
    indexed.sort(key=lambda t: t[0])
    return pt, ct, cached, [t for _, t in indexed]


def _error_field(exc: Exception, name: str) -> str | None:
    """A field of the server's structured error (``{"error": {"param": ...}}``), if it sent one."""
    value = getattr(exc, name, None)
    if value is None:
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            err = body.get("error")
            inner = err if isinstance(err, dict) else body
            value = inner.get(name)
    return None if value is None else str(value)


def _error_text(exc: Exception) -> str:
    text = str(exc).lower()
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + json.dumps(body, default=str).lower()
    return text


def _short(exc: Exception) -> str:
    msg = _error_field(exc, "message") or str(exc)
    return msg if len(msg) <= 160 else msg[:160] + "..."


# vLLM's wordings over its releases (serving, renderer and engine input checks) and other servers'
_CONTEXT = re.compile(
    r"maximum (?:context length|model length)(?: is| of)? \(?(\d+)|context length is only (\d+)|"
    r"max_model_len=(?:max_total_tokens=)?(\d+)"
)
_INPUT = re.compile(
    r"(?:has|contains(?: at least)?|resulted in|passed|prompt \(length) (\d+)(?: input)? tokens?|"
    r"prompt \(length (\d+)\)|input length \((\d+)\)"
)
# vLLM 0.32 (renderer): "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request ..."
_OUTPUT = re.compile(r"(max_completion_tokens|max_tokens)=(\d+) ?cannot be greater than")
_IMAGES = re.compile(r"at most (\d+) image")
# vLLM: "The decoder prompt contains a(n) image item with N embedding tokens, which exceeds the pre-allocated
# encoder cache size C."
_ENCODER = re.compile(
    r"image item with (\d+) embedding tokens, which exceeds the pre-allocated encoder cache size (\d+)"
)


def _first_group(m: re.Match[str] | None) -> str:
    return next((g for g in m.groups() if g), "?") if m else "?"


def _limit_error(exc: Exception, body: dict[str, Any], client: ModelClient) -> str | None:
    """A message naming the limit, the request's size and the options that fix it, for a context-length,
    reply-length, image-count or image-size refusal; None for any other error."""
    text = _error_text(exc)
    messages = body.get("messages") or []
    images = sum(
        1 for m in messages if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image_url"
    )
    said = _short(exc)
    where = f"{client.safe_url} ({client.model})"
    reply = body.get("max_completion_tokens", body.get("max_tokens", "?"))
    m = _IMAGES.search(text)
    if m:
        limit = int(m.group(1))
        return (
            f"{where} takes at most {limit} image(s) in one prompt; this request has {images}. Start the server "
            f"with more images per prompt (vLLM: --limit-mm-per-prompt '{{\"image\": {max(images, 6)}}}') or use a "
            f"model that takes several images. Not retried. The server said: {said}"
        )
    m = _ENCODER.search(text)
    if m:
        return (
            f"{where} refused an image of {m.group(1)} tokens: its encoder cache holds {m.group(2)}. Fix: lower "
            "--max-pixels (smaller images), or start the server with a larger encoder budget "
            f"(vLLM: --limit-mm-per-prompt, --max-num-batched-tokens). Not retried. The server said: {said}"
        )
    m = _OUTPUT.search(text)
    if m:
        return (
            f"{where} refused a reply limit over its context: this request asks for up to {m.group(2)} reply "
            f"tokens ({m.group(1)}) and the limit is {_first_group(_CONTEXT.search(text))} tokens for prompt and "
            "reply together. Fix: lower --max-tokens (well below the limit: the prompt and its images count too), "
            f"or start the server with a larger --max-model-len. Not retried. The server said: {said}"
        )
    m = _CONTEXT.search(text)
    if m or "context length" in text or "context_length_exceeded" in text or "maximum model length" in text:
        used = _first_group(_INPUT.search(text))
        return (
            f"{where} refused a request longer than its context: the limit is {_first_group(m)} tokens, this "
            f"request has {used} input tokens ({images} image(s)) and asks for up to {reply} reply tokens. Fix: "
            "lower --max-pixels (smaller images), lower --max-tokens, or start the server with a larger "
            f"--max-model-len. Not retried. The server said: {said}"
        )
    return None


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / scale
        except ValueError:
            return None
    return None


def _mentions(exc: Exception, words: tuple[str, ...]) -> bool:
    text = str(exc).lower()
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + json.dumps(body, default=str).lower()
    return any(w in text for w in words)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    msg = str(exc)
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return f"HTTP {status}: {msg}" if status else msg
