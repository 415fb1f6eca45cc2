"""The retry policy per server kind: what each server states in its error body decides, its wording only as the
last resort. Error bodies as each server sends them; wordings from each server's own source (vLLM's
``entrypoints/openai/engine/serving.py`` and renderer, SGLang's ``managers/tokenizer_manager.py`` and
``entrypoints/openai/protocol.py`` error shape, OpenAI's documented error codes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from replies import chat_reply

from boe.errors import ModelError
from boe.prompts import load_prompt, options_block
from boe.tools.client import ModelClient
from boe.tools.retry import PROFILES, Failure

IMG = "data:image/png;base64,AAAA"


def _prompt() -> Any:
    return load_prompt("generation").render(question="what modality?", options_block=options_block(None))


def _run(owned_by: str, replies: list[httpx2.Response], **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """One call against a server of ``owned_by`` answering ``replies`` in turn (then 200s)."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return httpx2.Response(200, json={"data": [{"id": "m", "owned_by": owned_by}]})
        body = json.loads(request.content)
        bodies.append(body)
        if len(bodies) <= len(replies):
            return replies[len(bodies) - 1]
        return chat_reply(body, ['{"answer": "ct"}'] * body.get("n", 1))

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    cl = ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, backoff=0.001, **kw)
    try:
        return asyncio.run(cl.complete(_prompt(), [IMG, IMG], n=4, temperature=1.0)), bodies
    except ModelError as exc:
        return exc, bodies


def _vllm(message: str, param: str | None, status: int = 400) -> httpx2.Response:
    """vLLM's ErrorResponse (create_error_response): the VLLMValidationError's parameter is the param."""
    return httpx2.Response(
        status, json={"error": {"message": message, "type": "BadRequestError", "param": param, "code": status}}
    )


def _sglang(message: str) -> httpx2.Response:
    """SGLang's ErrorResponse: the error object at the top level, no param."""
    body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    return httpx2.Response(400, json=body)


def _openai(status: int, message: str, type_: str, param: str | None, code: str | None) -> httpx2.Response:
    return httpx2.Response(status, json={"error": {"message": message, "type": type_, "param": param, "code": code}})


@pytest.mark.parametrize(
    ("reply", "expect"),
    [
        pytest.param(
            _vllm("Prompt too long for this deployment.", "input_tokens"),
            "refused a request longer than its context",
            id="vllm-param-input_tokens-any-wording",
        ),
        pytest.param(
            _vllm("The reply limit is over the model's length.", "max_tokens"),
            "refused a reply limit over its context",
            id="vllm-param-max_tokens-any-wording",
        ),
        pytest.param(
            _vllm(
                "This model's maximum context length is 4096 tokens. However, your request has 4100 input tokens. "
                "Please reduce the length of the input messages.",
                "input_tokens",
            ),
            "the limit is 4096 tokens, this request has 4100 input tokens",
            id="vllm-serving-validate-input",
        ),
    ],
)
def test_vllm_states_its_limits_in_param(reply: httpx2.Response, expect: str) -> None:
    err, bodies = _run("vllm", [reply])
    assert isinstance(err, ModelError) and expect in str(err) and "Not retried" in str(err)
    assert len(bodies) == 1


@pytest.mark.parametrize(
    ("message", "expect"),
    [
        pytest.param(
            "The input (43028 tokens) is longer than the model's context length (40960 tokens).",
            ["the limit is 40960 tokens", "43028 input tokens"],
            id="sglang-input-longer-than-context",
        ),
        pytest.param(
            "Requested token count exceeds the model's maximum context length of 262144 tokens. You requested a total "
            "of 263925 tokens: 199925 tokens from the input messages and 64000 tokens for the completion. Please "
            "reduce the number of tokens in the input messages or the completion to fit within the limit.",
            ["the limit is 262144 tokens", "199925 input tokens"],
            id="sglang-requested-token-count",
        ),
    ],
)
def test_sglang_words_its_limits(message: str, expect: list[str]) -> None:
    err, bodies = _run("sglang", [_sglang(message)])
    assert isinstance(err, ModelError) and all(e in str(err) for e in expect), err
    assert len(bodies) == 1


def test_openai_states_the_context_limit_in_code() -> None:
    reply = _openai(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130120 tokens. "
        "Please reduce the length of the messages.",
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
    err, bodies = _run("openai", [reply])
    assert isinstance(err, ModelError) and "the limit is 128000 tokens, this request has 130120 input" in str(err)
    assert len(bodies) == 1


def test_openai_insufficient_quota_is_not_retried_a_rate_limit_is() -> None:
    quota = _openai(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
        None,
        "insufficient_quota",
    )
    err, bodies = _run("openai", [quota])
    assert isinstance(err, ModelError) and "current quota" in str(err) and len(bodies) == 1
    slow = _openai(429, "Rate limit reached for requests", "requests", None, "rate_limit_exceeded")
    comp, bodies = _run("openai", [slow, slow])
    assert comp.texts and comp.call.requests == 3 and len(bodies) == 3


def test_openai_states_a_refused_field_in_code_and_param() -> None:
    reply = _openai(400, "This field is not for this model.", "invalid_request_error", "top_p", "unsupported_parameter")
    comp, bodies = _run("openai", [reply])
    assert comp.texts and "top_p" in bodies[0] and "top_p" not in bodies[1]  # no refusal wording needed
    err, _ = _run("vllm", [_vllm("This field is not for this model.", "top_p")])
    assert isinstance(err, ModelError)  # without the code, and without refusal words, it is no refusal


def test_the_error_body_is_read_nested_or_at_the_top_level() -> None:
    import openai

    request = httpx2.Request("POST", "http://vlm.test/v1/chat/completions")
    for body in (
        {"error": {"message": "m", "type": "t", "param": "p", "code": "c"}},
        {"object": "error", "message": "m", "type": "t", "param": "p", "code": "c"},
    ):
        response = httpx2.Response(400, json=body, request=request)
        f = Failure.of(openai.BadRequestError("m", response=response, body=body))
        assert (f.status, f.message, f.type, f.param, f.code) == (400, "m", "t", "p", "c")


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_every_profile_retries_what_is_transient_and_nothing_else(kind: str) -> None:
    profile = PROFILES[kind]
    for status in (408, 409, 429, 500, 502, 503, 504):
        assert profile.should_retry(Failure(status=status, message="x"))
    for status in (400, 401, 403, 404, 413, 422):
        assert not profile.should_retry(Failure(status=status, message="x"))
    assert profile.should_retry(Failure(status=None, message="refused", unreachable=True))
    assert profile.should_retry(Failure(status=None, message="not JSON", bad_reply=True))
