"""One retry policy: what a failed request means, decided once per failure by the kind of server that failed it.

`Failure.of` reads what the openai SDK raised (its typed errors: `openai.APIStatusError` with
the server's error body, `openai.APIConnectionError`, `openai.APITimeoutError`) or a 200 that
was no chat completion into one shape: the HTTP status and what the server states in its error
body (``type``, ``param``, ``code``, ``message``; vLLM, SGLang and OpenAI all send that object,
nested under ``error`` or not). A `Profile` per server kind (`PROFILES`) then decides, from what
the server states first and from the wording of its message only as a last resort:

* `Profile.should_retry`: transient failures (no reply, 408, 409, 429, 5xx, a 200 that is no
  chat completion) are retried with backoff; OpenAI's ``insufficient_quota`` 429 is not;
* `Profile.limit`: a context-length, reply-length, image-count or image-size refusal (vLLM
  states ``param: input_tokens`` / ``max_tokens``, OpenAI and recent vLLM
  ``code: context_length_exceeded``; SGLang only words it), never retried, reported with
  the limit, the request's size and the options that fix it (`limit_message`);
* `Profile.refused_field`: a request field the server refuses (OpenAI states
  ``code: unsupported_parameter`` or ``unsupported_value`` with the ``param``; others word it).

Every wording matched here is a server's own, with a test in tests/tools.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["PROFILES", "Failure", "Limit", "Profile", "limit_message", "profile_for"]

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 30.0

#: Request fields sent again without, for good, when the server refuses them by name (OpenAI's reasoning models
#: refuse top_p and a non-default temperature).
DROPPABLE = ("temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs")


class BadReply(Exception):
    """A successful HTTP reply whose body is not a chat completion (retried like a 5xx)."""


@dataclass(frozen=True)
class Failure:
    """One failed request as the retry policy reads it."""

    status: int | None  # None: no HTTP reply (connection, timeout) or a 200 that was no chat completion
    message: str  # the server's message (or the transport error's)
    type: str | None = None  # the error body's fields, as the server stated them
    param: str | None = None
    code: str | None = None
    unreachable: bool = False  # no reply at all: the server is down or gone
    timeout: bool = False
    bad_reply: bool = False
    retry_after: float | None = None
    text: str = ""  # the message and the whole error body, lower case (for the last-resort wording match)

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        """The failure an exception of the openai SDK (or a `BadReply`, or a reply's JSON error) stands for."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            fields = _error_fields(exc.body)
            message = str(fields.get("message") or exc.message or exc)
            body = "" if exc.body is None else json.dumps(exc.body, default=str)
            return cls(
                status=exc.status_code,
                message=message,
                type=_str(fields.get("type")),
                param=_str(fields.get("param")),
                code=_str(fields.get("code")),
                retry_after=_retry_after(exc.response.headers),
                text=f"{exc} {body}".lower(),
            )
        if isinstance(exc, openai.APIConnectionError):
            timeout = isinstance(exc, openai.APITimeoutError)
            return cls(status=None, message=str(exc), unreachable=True, timeout=timeout, text=str(exc).lower())
        return cls(status=None, message=str(exc), bad_reply=True, text=str(exc).lower())  # BadReply, bad JSON

    def describe(self) -> str:
        """The failure in one line (``HTTP 400: ...``), at most 300 characters of the message."""
        msg = self.message if len(self.message) <= 300 else self.message[:300] + "..."
        return f"HTTP {self.status}: {msg}" if self.status else msg

    def short(self) -> str:
        """The server's message, at most 160 characters (for notes)."""
        return self.message if len(self.message) <= 160 else self.message[:160] + "..."

    def worded_refusal(self) -> bool:
        """Whether the message words a refusal of something the request sent (unknown, unsupported, ...)."""
        return _REFUSAL_WORDS.search(self.text) is not None

    def mentions(self, *words: str) -> bool:
        """Whether the message or error body has any of ``words`` (lower case): the last resort."""
        return any(w in self.text for w in words)


def _error_fields(body: Any) -> dict[str, Any]:
    """The error object of a body: ``{"error": {...}}`` (OpenAI, vLLM) or the body itself (SGLang, older vLLM)."""
    if not isinstance(body, dict):
        return {"message": body} if isinstance(body, str) else {}
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _retry_after(headers: Any) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        if value is None:
            continue
        try:
            return float(value) / scale
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Limit:
    """A refusal for a limit of the server: which one, and its numbers as the server's message gives them."""

    kind: str  # context | reply | images | image_size
    limit: str = "?"  # the context length (context, reply), images per prompt, or the encoder cache size
    used: str = "?"  # input tokens (context), reply tokens asked (reply), or the image's tokens (image_size)
    field: str = ""  # reply: the request field that asked (max_completion_tokens or max_tokens)


# Wordings of limit refusals, each a server's own (tests/tools/test_client_serving.py and test_retry.py quote them):
# vLLM's serving, renderer and engine input checks over its releases, SGLang's tokenizer manager, OpenAI.
_CONTEXT = re.compile(
    r"maximum (?:context length|model length)(?: is| of)? \(?(\d+)|context length is only (\d+)|"
    r"max_model_len=(?:max_total_tokens=)?(\d+)|model's context length \((\d+)"
)
_INPUT = re.compile(
    r"(?:has|contains(?: at least)?|resulted in|passed|prompt \(length) (\d+)(?: input)? tokens?|"
    r"prompt \(length (\d+)\)|input length \((\d+)\)|the input \((\d+) tokens\)|(\d+) tokens from the input"
)
# vLLM 0.32 (renderer): "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request ..."
_OUTPUT = re.compile(r"(max_completion_tokens|max_tokens)=(\d+) ?cannot be greater than")
_IMAGES = re.compile(r"at most (\d+) image")
# vLLM: "The decoder prompt contains a(n) image item with N embedding tokens, which exceeds the pre-allocated
# encoder cache size C."
_ENCODER = re.compile(
    r"image item with (\d+) embedding tokens, which exceeds the pre-allocated encoder cache size (\d+)"
)
_CONTEXT_WORDS = ("context length", "context_length_exceeded", "maximum model length")


def _first(pattern: re.Pattern[str], text: str) -> str:
    m = pattern.search(text)
    return next((g for g in m.groups() if g), "?") if m else "?"


def _worded_limit(text: str) -> Limit | None:
    """The limit a message words (the last resort), or None."""
    m = _IMAGES.search(text)
    if m:
        return Limit("images", limit=m.group(1))
    m = _ENCODER.search(text)
    if m:
        return Limit("image_size", limit=m.group(2), used=m.group(1))
    m = _OUTPUT.search(text)
    if m:
        return Limit("reply", limit=_first(_CONTEXT, text), used=m.group(2), field=m.group(1))
    if _CONTEXT.search(text) or any(w in text for w in _CONTEXT_WORDS):
        return Limit("context", limit=_first(_CONTEXT, text), used=_first(_INPUT, text))
    return None


_REFUSAL_WORDS = re.compile(
    r"unrecogni[sz]ed|unknown|not (permitted|allowed|supported)|extra (fields|inputs)|"
    r"unexpected|invalid|unsupported|does not support"
)
_UNSUPPORTED = re.compile(r"unsupported (?:parameter|value): '(\w+)'")


@dataclass(frozen=True)
class Profile:
    """How one kind of server states its failures (see the module docstring)."""

    kind: str
    #: ``param`` values that name a limit: vLLM raises its length checks with the field they concern
    limit_params: tuple[tuple[str, str], ...] = ()
    #: ``code`` values that name a limit
    limit_codes: tuple[tuple[str, str], ...] = (("context_length_exceeded", "context"),)
    #: ``code`` values stating that ``param`` is a field the server refuses
    refusal_codes: tuple[str, ...] = ()
    #: ``code`` (or ``type``) values of a 429 that waiting does not cure
    final_codes: tuple[str, ...] = ()

    def should_retry(self, f: Failure) -> bool:
        """Whether asking again (after a backoff) may succeed."""
        if f.status is None:
            return True  # no reply, or a 200 that was no chat completion
        if f.status == 429 and (f.code in self.final_codes or f.type in self.final_codes):
            return False
        return f.status in RETRY_STATUS

    def limit(self, f: Failure) -> Limit | None:
        """The server limit a refusal is about: from its ``param`` or ``code``, else from its wording."""
        if f.status not in (400, 413, 422):
            return None
        stated = dict(self.limit_params).get(f.param or "") or dict(self.limit_codes).get(f.code or "")
        worded = _worded_limit(f.text)
        if stated is None or worded is not None:
            return worded  # a wording we know gives the numbers (and the finer kind: a reply over the context)
        if stated == "reply":
            return Limit("reply", limit=_first(_CONTEXT, f.text), used=_first(_REPLY, f.text), field=f.param or "")
        return Limit(stated, limit=_first(_CONTEXT, f.text), used=_first(_INPUT, f.text))

    def refused_field(self, f: Failure) -> str | None:
        """The request field a 400/422 refuses: stated (``code`` and ``param``), else named by a refusal message."""
        if f.status not in (400, 422):
            return None
        if f.param and f.code in self.refusal_codes:
            return f.param
        if not f.worded_refusal():
            return None
        if f.param:
            return f.param
        m = _UNSUPPORTED.search(f.text)
        if m:
            return m.group(1)
        named = [name for name in DROPPABLE if re.search(rf"\b{name}\b", f.text)]
        return named[0] if len(named) == 1 else None


# vLLM's "'max_tokens' or 'max_completion_tokens' is too large: 512."
_REPLY = re.compile(r"too large: (\d+)|(?:max_completion_tokens|max_tokens)=(\d+)")

_VLLM_LIMITS = (
    ("input_tokens", "context"),
    ("max_tokens", "reply"),
    ("max_completion_tokens", "reply"),
)

PROFILES: dict[str, Profile] = {
    "vllm": Profile("vllm", limit_params=_VLLM_LIMITS),
    "sglang": Profile("sglang", limit_codes=()),
    "openai": Profile(
        "openai",
        refusal_codes=("unsupported_parameter", "unsupported_value"),
        final_codes=("insufficient_quota",),
    ),
    "generic": Profile("generic"),
}


def profile_for(kind: str) -> Profile:
    """The profile of a server kind (a kind not yet known is generic)."""
    return PROFILES.get(kind, PROFILES["generic"])


def limit_message(lim: Limit, body: dict[str, Any], where: str, said: str) -> str:
    """The limit, the request's size and the options that fix it, in one message (the request is not retried)."""
    messages = body.get("messages") or []
    images = sum(
        1 for m in messages if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image_url"
    )
    reply = body.get("max_completion_tokens", body.get("max_tokens", "?"))
    if lim.kind == "images":
        return (
            f"{where} takes at most {lim.limit} image(s) in one prompt; this request has {images}. Start the server "
            f"with more images per prompt (vLLM: --limit-mm-per-prompt '{{\"image\": {max(images, 6)}}}') or use a "
            f"model that takes several images. Not retried. The server said: {said}"
        )
    if lim.kind == "image_size":
        return (
            f"{where} refused an image of {lim.used} tokens: its encoder cache holds {lim.limit}. Fix: lower "
            "--max-pixels (smaller images), or start the server with a larger encoder budget "
            f"(vLLM: --limit-mm-per-prompt, --max-num-batched-tokens). Not retried. The server said: {said}"
        )
    if lim.kind == "reply":
        return (
            f"{where} refused a reply limit over its context: this request asks for up to {lim.used} reply "
            f"tokens ({lim.field or 'max_tokens'}) and the limit is {lim.limit} tokens for prompt and reply "
            "together. Fix: lower --max-tokens (well below the limit: the prompt and its images count too), or "
            f"start the server with a larger --max-model-len. Not retried. The server said: {said}"
        )
    return (
        f"{where} refused a request longer than its context: the limit is {lim.limit} tokens, this request has "
        f"{lim.used} input tokens ({images} image(s)) and asks for up to {reply} reply tokens. Fix: lower "
        "--max-pixels (smaller images), lower --max-tokens, or start the server with a larger --max-model-len. "
        f"Not retried. The server said: {said}"
    )
