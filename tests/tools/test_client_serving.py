"""What the client sends each kind of server, and what it makes of refusals and malformed replies (httpx2 mocks)."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest
from replies import chat_reply

from boe.errors import ModelError
from boe.prompts import load_prompt, options_block
from boe.tools.client import ModelClient

IMG = "data:image/png;base64,AAAA"


def _ok(body, texts=None):
    return chat_reply(body, texts or [json.dumps({"answer": f"a{j}"}) for j in range(body.get("n", 1))])


class Server:
    """A scripted endpoint: GET /models answers ``owned_by``; ``refuse(body)`` may return an error response."""

    def __init__(self, owned_by="vllm", refuse=None):
        self.owned_by = owned_by
        self.refuse = refuse
        self.bodies = []
        self.gets = 0

    def __call__(self, request):
        if request.method == "GET":
            self.gets += 1
            if self.owned_by is None:
                return httpx2.Response(404, json={"error": {"message": "no such route"}})
            return httpx2.Response(200, json={"object": "list", "data": [{"id": "m", "owned_by": self.owned_by}]})
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.refuse is not None:
            forced = self.refuse(body)
            if forced is not None:
                return forced
        return _ok(body)

    def client(self, **kw):
        kw.setdefault("backoff", 0.001)
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        return ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, **kw)


def _prompt():
    return load_prompt("generation").render(question="what modality?", options_block=options_block(None))


def run(coro):
    return asyncio.run(coro)


def _error(status, message, param=None):
    return httpx2.Response(
        status, json={"error": {"message": message, "type": "BadRequestError", "param": param, "code": status}}
    )


@pytest.mark.parametrize(
    ("owned_by", "kind", "fields"),
    [
        ("vllm", "vllm", {"top_p": 1.0, "top_k": 0, "min_p": 0.0}),  # vLLM's "no limit" is 0
        ("sglang", "sglang", {"top_p": 1.0, "top_k": -1, "min_p": 0.0}),  # SGLang refuses 0 and takes -1
        ("openai", "openai", {"top_p": 1.0}),  # OpenAI's API refuses top_k and min_p
        ("someone", "generic", {"top_p": 1.0, "top_k": -1, "min_p": 0.0}),
        (None, "generic", {"top_p": 1.0, "top_k": -1, "min_p": 0.0}),  # no GET /models
    ],
)
def test_sampling_is_explicit_in_the_form_each_server_takes(owned_by, kind, fields):
    srv = Server(owned_by)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG], n=4, temperature=1.1, seed=1))
    body = srv.bodies[0]
    assert cl.endpoint.kind == kind and srv.gets == 1
    assert {k: body[k] for k in ("top_p", "top_k", "min_p") if k in body} == fields
    assert body["temperature"] == 1.1 and body["max_completion_tokens"] == 512 and "max_tokens" not in body
    assert comp.call.sampling == {"server": kind, "temperature": 1.1, **fields}
    assert cl.describe()["endpoint"]["kind"] == kind
    image = body["messages"][1]["content"][0]
    assert ("uuid" in image) == (kind == "vllm")  # the figure's content hash as vLLM's cache key
    run(cl.complete(_prompt(), [IMG], n=2, temperature=1.1))
    assert srv.gets == 1  # detected once per endpoint


def test_the_server_kind_can_be_given_and_the_user_sampling_and_extra_body_are_sent():
    srv = Server("vllm")
    cl = srv.client(
        server="sglang",
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20},
    )
    run(cl.complete(_prompt(), [IMG], n=2, temperature=0.7))
    body = srv.bodies[0]
    assert srv.gets == 0 and cl.endpoint.detected == "given"
    assert body["top_p"] == 0.9 and body["min_p"] == 0.05 and body["top_k"] == 20  # the extra body wins
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_a_server_that_only_knows_max_tokens_gets_it_from_then_on():
    def refuse(body):
        if "max_completion_tokens" in body:
            return _error(400, "Unrecognized request argument supplied: max_completion_tokens")
        return None

    srv = Server("someone", refuse)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG]))
    run(cl.complete(_prompt(), [IMG], seed=3))
    assert comp.texts and [("max_tokens" in b, "max_completion_tokens" in b) for b in srv.bodies] == [
        (False, True),
        (True, False),
        (True, False),
    ]
    assert cl.endpoint.tokens_field == "max_tokens" and "max_completion_tokens" in cl.endpoint.notes[0]


def test_a_generic_server_that_refuses_top_k_has_it_dropped_and_recorded():
    def refuse(body):
        if "top_k" in body:
            return _error(400, "Extra inputs are not permitted: top_k")
        return None

    srv = Server("someone", refuse)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG], n=2, temperature=1.0))
    assert comp.texts and "top_k" not in srv.bodies[-1] and cl.endpoint.dropped == ["top_k"]
    assert "top_k" not in comp.call.sampling and cl.describe()["endpoint"]["dropped"] == ["top_k"]


@pytest.mark.parametrize(
    ("message", "expect"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your request has 9300 input tokens. "
            "Please reduce the length of the input messages.",
            ["the limit is 8192 tokens", "9300 input tokens"],
        ),
        (
            "'max_tokens' or 'max_completion_tokens' is too large: 512. This model's maximum context length is 4096 "
            "tokens and your request has 3900 input tokens (512 > 4096 - 3900).",
            ["the limit is 4096 tokens", "3900 input tokens", "up to 512 reply tokens"],
        ),
        ("At most 1 image(s) may be provided in one prompt.", ["at most 1 image(s)", "this request has 2"]),
        # the wordings below are vLLM's own (serving, renderer and engine input checks of recent releases)
        pytest.param(
            "max_completion_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer output tokens.",
            ["up to 5000 reply tokens (max_completion_tokens)", "the limit is 4096 tokens", "--max-tokens"],
            id="vllm-0.32-renderer-max-tokens",
        ),
        pytest.param(
            "max_tokens=5000cannot be greater than max_model_len=max_total_tokens=4096. Please request fewer output "
            "tokens.",
            ["up to 5000 reply tokens (max_tokens)", "the limit is 4096 tokens", "--max-model-len"],
            id="vllm-renderer-max-tokens-older",
        ),
        pytest.param(
            "This model's maximum context length is 4096 tokens. However, you requested 512 output tokens and your "
            "prompt contains at least 3585 input tokens, for a total of at least 4097 tokens. Please reduce the length "
            "of the input prompt or the number of requested output tokens.",
            ["the limit is 4096 tokens", "3585 input tokens"],
            id="vllm-prompt-at-least",
        ),
        pytest.param(
            "You passed 4000 input tokens and requested 512 output tokens. However, the model's context length is "
            "only 4096 tokens, resulting in a maximum input length of 3584 tokens. Please reduce the length of the "
            "input prompt.",
            ["the limit is 4096 tokens", "4000 input tokens"],
            id="vllm-renderer-input-tokens",
        ),
        pytest.param(
            "You passed 20000 input characters and requested 512 output tokens. However, the model's context length "
            "is only 4096 tokens, resulting in a maximum input length of 3584 tokens (at most 14336 characters). "
            "Please reduce the length of the input prompt.",
            ["the limit is 4096 tokens", "--max-model-len"],
            id="vllm-renderer-input-characters",
        ),
        pytest.param(
            "The decoder prompt (length 4100) is longer than the maximum model length of 4096. Make sure that "
            "`max_model_len` is no smaller than the number of text tokens plus multimodal tokens. For image inputs, "
            "the number of image tokens depends on the number of images, and possibly their aspect ratios as well.",
            ["the limit is 4096 tokens", "4100 input tokens"],
            id="vllm-engine-decoder-prompt",
        ),
        pytest.param(
            "The decoder prompt (length 4096) plus the number of requested output tokens (at least 1) is longer than "
            "the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text "
            "tokens (prompt + requested output tokens).",
            ["the limit is 4096 tokens", "4096 input tokens"],
            id="vllm-engine-decoder-prompt-plus-one",
        ),
        pytest.param(
            "Input length (5000) exceeds model's maximum context length (4096).",
            ["the limit is 4096 tokens", "5000 input tokens"],
            id="vllm-get-max-tokens",
        ),
        pytest.param(
            "At most 6 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to increase this limit.",
            ["at most 6 image(s)", "this request has 2"],
            id="vllm-mm-limit-with-hint",
        ),
        pytest.param(
            "The decoder prompt contains a(n) image item with 20000 embedding tokens, which exceeds the pre-allocated "
            "encoder cache size 16384. Please reduce the input size or increase the encoder cache size by setting "
            "--limit-mm-per-prompt at startup.",
            ["an image of 20000 tokens", "encoder cache holds 16384"],
            id="vllm-encoder-cache",
        ),
    ],
)
def test_limit_refusals_say_what_to_change_and_are_not_retried(message, expect):
    srv = Server("vllm", lambda body: _error(400, message))
    cl = srv.client()
    with pytest.raises(ModelError) as err:
        run(cl.complete(_prompt(), [IMG, IMG], n=4, temperature=1.0))
    text = str(err.value)
    assert all(e in text for e in expect), text
    assert "Not retried" in text and any(o in text for o in ("--max-pixels", "--limit-mm-per-prompt", "--max-tokens"))
    assert len(srv.bodies) == 1 and err.value.call.requests == 1


def test_the_n_fallback_follows_the_errors_param_and_is_recorded():
    srv = Server("vllm", lambda b: _error(400, "not supported", param="n") if b.get("n", 1) > 1 else None)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG], n=3, temperature=1.0, seed=5))
    assert [b.get("n", 1) for b in srv.bodies] == [3, 1, 1, 1] and len(comp.texts) == 3
    assert cl.endpoint.n is False and "names parameter 'n'" in cl.endpoint.n_reason
    assert comp.call.n_fallback and comp.call.tags["n_fallback_reason"] == cl.endpoint.n_reason


def test_an_unexplained_refusal_of_n_is_settled_by_one_probe():
    srv = Server("vllm", lambda b: _error(400, "bad request") if b.get("n", 1) > 1 else None)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG], n=3, temperature=1.0, seed=5))
    assert [b.get("n", 1) for b in srv.bodies] == [3, 1, 1, 1] and len(comp.texts) == 3  # the probe is sample 0
    assert cl.endpoint.n is False and "probe" in cl.endpoint.n_reason


def test_a_refusal_that_is_not_about_n_is_reported_after_the_probe():
    srv = Server("vllm", lambda b: _error(400, "bad request"))
    cl = srv.client()
    with pytest.raises(ModelError, match="bad request"):
        run(cl.complete(_prompt(), [IMG], n=3, temperature=1.0))
    assert len(srv.bodies) == 2 and cl.endpoint.n is None  # n still unknown


def test_a_server_that_takes_n_is_recorded():
    srv = Server("vllm")
    cl = srv.client()
    run(cl.complete(_prompt(), [IMG], n=3, temperature=1.0))
    assert cl.endpoint.n is True and len(srv.bodies) == 1


BAD_REPLIES = [
    ({"choices": [{"index": 0, "message": {"content": "x"}}], "usage": "lots"}, "usage is 'lots'"),
    ({"choices": [], "usage": {}}, "without choices"),
    ({"choices": [1]}, "choices[0] is not an object"),
    ({"choices": [{"message": "hello"}]}, "choices[0].message is not an object"),
    ({"choices": [{"message": {"content": 5}}]}, "content is not text"),
    ({"choices": [{"index": "a", "message": {"content": "x"}}]}, "choices[0].index"),
    ({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -1}}, "prompt_tokens"),
    ({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens_details": []}}, "prompt_tokens_details"),
    ({"error": {"message": "overloaded"}}, "replied 200 with an error"),
    ([1, 2, 3], "not a chat completion"),
    ("just text", "not a chat completion"),
]


@pytest.mark.parametrize(("reply", "expect"), BAD_REPLIES)
def test_a_reply_of_the_wrong_shape_is_one_clear_error_recorded_with_the_call(reply, expect):
    def handler(request):
        if request.method == "GET":
            return httpx2.Response(404)
        return httpx2.Response(200, json=reply)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    cl = ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, max_retries=1, backoff=0.001)
    with pytest.raises(ModelError) as err:
        run(cl.complete(_prompt(), [IMG]))
    assert expect in str(err.value) and "after 2 attempt(s)" in str(err.value)
    call = err.value.call
    assert call.error == str(err.value) and call.requests == 2


def test_content_parts_and_missing_usage_are_read():
    def handler(request):
        if request.method == "GET":
            return httpx2.Response(404)
        return httpx2.Response(
            200,
            json={
                "choices": [
                    {"index": 1, "message": {"content": [{"type": "text", "text": "b"}]}},
                    {"index": 0, "message": {"content": None}},
                ]
            },
        )

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    cl = ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, max_retries=0)
    comp = run(cl.complete(_prompt(), [IMG], n=2, temperature=1.0))
    assert comp.texts == [None, "b"] and comp.call.prompt_tokens == 0


def test_openai_base_url_is_the_default_endpoint(monkeypatch):
    from boe.tools.client import base_url_from_env

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert base_url_from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert base_url_from_env() == "http://127.0.0.1:9/v1"


def test_a_server_refusing_schema_bounds_gets_the_schema_without_them_and_keeps_the_schema():
    message = (
        "Invalid schema for response_format 'boe_generation': In context=('properties', 'answer'), "
        "'maxLength' is not permitted."
    )

    def refuse(body):
        return _error(400, message) if "maxLength" in json.dumps(body.get("response_format")) else None

    srv = Server("openai", refuse)
    cl = srv.client()
    run(cl.complete(_prompt(), [IMG], n=2, temperature=1.0))
    run(cl.complete(_prompt(), [IMG], n=2, temperature=1.0))
    sent = [b["response_format"]["json_schema"]["schema"]["properties"]["answer"] for b in srv.bodies]
    assert "maxLength" in sent[0] and "maxLength" not in sent[1] and "maxLength" not in sent[2]
    assert cl.json_schema and cl.endpoint.dropped == ["maxLength"] and "maxLength" in cl.endpoint.notes[0]
