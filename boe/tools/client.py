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
* records every call (tokens, latency, attempts, error) as a `ModelCall`;
* answers repeated requests from a request cache, so a re-run never pays twice.

The API key comes from the argument, ``BOE_API_KEY`` or ``OPENAI_API_KEY``;
it is never logged, recorded or stored.
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
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Protocol

from boe.errors import ConfigError, MissingExtraError, ModelError
from boe.prompts import Rendered
from boe.util import redact_url

__all__ = [
    "Completion",
    "MemoryCache",
    "ModelCall",
    "ModelClient",
    "RequestCache",
    "api_key_from_env",
    "build_messages",
    "request_key",
]

#: How often an unusable reply (not JSON at all) is asked again.
MAX_REASKS = 2
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0


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


def request_key(endpoint: str, model: str, messages: Any, params: dict[str, Any], seed: int | None) -> str:
    """sha256 over (redacted endpoint, model, messages, params, seed) in canonical JSON."""
    blob = json.dumps(
        {
            "endpoint": redact_url(endpoint).rstrip("/"),
            "model": model,
            "messages": messages,
            "params": params,
            "seed": seed,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def api_key_from_env() -> str | None:
    """``BOE_API_KEY``, else ``OPENAI_API_KEY``, else None."""
    return os.environ.get("BOE_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def build_messages(prompt: Rendered, image_urls: Sequence[str]) -> list[dict[str, Any]]:
    """System message, then one user message: the images first, the text last."""
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    parts.append({"type": "text", "text": prompt.user})
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": parts}]


@dataclass
class ModelCall:
    """One logical model call as recorded in the store (never holds the API key or the images)."""

    call_id: str
    role: str  # generator | judge
    purpose: str  # the prompt name
    prompt_version: str
    model: str
    base_url: str  # redacted
    n: int
    temperature: float
    request_key: str
    started_at: str
    requests: int = 0  # HTTP requests sent, retries included
    attempts: int = 0  # attempts of the last request chain
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_ms: float = 0.0
    cache_hit: bool = False
    n_fallback: bool = False
    reasks: int = 0  # requests repeated because the reply was unusable
    error: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The call as a JSON-ready dict (``dataclasses.asdict`` without its deep copies: fields are scalars)."""
        out = {f.name: getattr(self, f.name) for f in _CALL_FIELDS}
        out["tags"] = dict(self.tags)
        return out

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


_CALL_FIELDS = fields(ModelCall)


@dataclass
class Completion:
    """The reply texts of one call (None for a choice without content) and its record."""

    texts: list[str | None]
    call: ModelCall


class _Refused(Exception):
    """The server rejected a request parameter (n or response_format) with a 4xx."""

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
    ) -> None:
        if not base_url:
            raise ConfigError("the model client needs a base URL")
        if not model:
            raise ConfigError("the model client needs a model name")
        if timeout <= 0 or max_retries < 0 or concurrency < 1 or backoff < 0:
            raise ConfigError("timeout > 0, max_retries >= 0, concurrency >= 1 and backoff >= 0 are required")
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
        self._sem = asyncio.Semaphore(concurrency)
        self._rng = random.Random(jitter_seed)
        key = api_key or api_key_from_env() or "EMPTY"  # local servers accept any key
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
    ) -> Completion:
        """``n`` replies to one prompt. Raises `ModelError` (with ``.call``) once retries are spent.

        ``accept(texts)`` returns None for a usable reply or the reason it is not;
        an unusable reply (say, a batch that is not JSON at all) is asked again up
        to `MAX_REASKS` times and is never cached. The last reply is returned
        either way: the caller keeps unreadable candidates as invalid and turns an
        unreadable verdict into ``unresolved`` with the error.
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
                return Completion(list(hit["texts"]), call)
        t0 = time.perf_counter()
        problem: str | None = None
        for attempt in range(MAX_REASKS + 1):
            try:
                texts = await self._sample(prompt, messages, n, temperature, seed, call)
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
                },
            )
        return Completion(texts, call)

    async def _sample(
        self,
        prompt: Rendered,
        messages: list[dict[str, Any]],
        n: int,
        temperature: float,
        seed: int | None,
        call: ModelCall,
    ) -> list[str | None]:
        texts: list[str | None] = []
        if n > 1 and self.use_n:
            try:
                texts.extend((await self._request(prompt, messages, n, temperature, seed, call))[:n])
            except _Refused as r:
                if r.param != "n":
                    raise ModelError(f"{self.safe_url} refused the request: {_describe(r.exc)}") from r.exc
                self.use_n = False  # this server does not take n; sample one at a time from now on
        missing = n - len(texts)
        if missing > 0:
            call.n_fallback = n > 1
            start = len(texts)

            async def one(i: int) -> list[str | None]:
                s = None if seed is None else seed + i
                try:
                    return (await self._request(prompt, messages, 1, temperature, s, call))[:1]
                except _Refused as r:
                    raise ModelError(f"{self.safe_url} refused the request: {_describe(r.exc)}") from r.exc

            parts = await asyncio.gather(*(one(start + i) for i in range(missing)))
            for p in parts:
                texts.extend(p)
        return texts

    async def _request(
        self,
        prompt: Rendered,
        messages: list[dict[str, Any]],
        n: int,
        temperature: float,
        seed: int | None,
        call: ModelCall,
    ) -> list[str | None]:
        """The reply texts of one request with retries; tokens and request counts are added to ``call``."""
        openai = self._openai
        attempt = 0
        while True:
            attempt += 1
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "temperature": temperature,
                "max_tokens": self.max_tokens,
            }
            if n > 1:
                kwargs["n"] = n
            if seed is not None:
                kwargs["seed"] = seed
            if self.json_schema:
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": prompt.schema_name, "schema": prompt.schema, "strict": True},
                }
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
                await asyncio.sleep(self._delay(attempt, None))
                continue
            except openai.APIStatusError as exc:
                status = exc.status_code
                if (
                    status in (400, 422)
                    and self.json_schema
                    and _mentions(exc, ("response_format", "json_schema", "guided"))
                ):
                    self.json_schema = False  # the server cannot constrain output; the parser copes
                    attempt -= 1
                    continue
                if status in (400, 422) and n > 1 and _mentions(exc, ("'n'", " n ", "n must", "n=", '"n"')):
                    raise _Refused("n", exc) from exc
                if status not in RETRY_STATUS or attempt > self.max_retries:
                    raise ModelError(
                        f"{self.safe_url} ({self.model}) failed after {attempt} attempt(s): {_describe(exc)}"
                    ) from exc
                await asyncio.sleep(self._delay(attempt, _retry_after(exc)))
                continue
            except openai.APIConnectionError as exc:  # includes APITimeoutError
                if attempt > self.max_retries:
                    kind = "timed out" if isinstance(exc, openai.APITimeoutError) else "connection failed"
                    raise ModelError(f"{self.safe_url} ({self.model}) {kind} after {attempt} attempt(s)") from exc
                await asyncio.sleep(self._delay(attempt, None))
                continue
            pt, ct, cached, texts = reply
            call.prompt_tokens += pt
            call.completion_tokens += ct
            call.cached_tokens += cached
            return texts

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter; a server's Retry-After wins when it is longer."""
        base = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
        delay: float = base / 2 + self._rng.uniform(0, base / 2)
        if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER:
            delay = max(delay, retry_after)
        return delay


class _BadBody(Exception):
    """A successful HTTP reply whose body is not a chat completion."""


def _read_completion(resp: Any) -> tuple[int, int, int, list[str | None]]:
    """Token counts (prompt, completion, cached) and the choices' texts in index order, from the reply's JSON."""
    if not isinstance(resp, dict) or not isinstance(resp.get("choices"), list):
        raise _BadBody(f"replied with something that is not a chat completion: {str(resp)[:120]!r}")
    usage = resp.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    try:
        pt = int(usage.get("prompt_tokens") or 0)
        ct = int(usage.get("completion_tokens") or 0)
        cached = int(details.get("cached_tokens") or 0)
        choices = sorted(resp["choices"], key=lambda c: int(c.get("index") or 0))
        texts = [(c.get("message") or {}).get("content") for c in choices]
    except (AttributeError, TypeError, ValueError) as exc:
        raise _BadBody(f"replied with a malformed chat completion ({exc})") from None
    return pt, ct, cached, [t if isinstance(t, str) or t is None else str(t) for t in texts]


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
