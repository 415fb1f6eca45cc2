"""The model client against httpx2 mock transports (no network)."""

import asyncio
import json

import httpx2
import pytest
from replies import chat_reply

from boe.errors import ModelError
from boe.prompts import SYSTEM_TEXT, load_prompt, options_block
from boe.tools.client import MemoryCache, ModelClient, build_messages

IMG = "data:image/png;base64,AAAA"


class Server:
    """A scripted endpoint: ``script`` maps the request number to a response factory."""

    def __init__(self, script=None, refuse_n=False, refuse_schema=False, short_n=False):
        self.bodies = []
        self.headers = []
        self.script = script or {}
        self.refuse_n = refuse_n
        self.refuse_schema = refuse_schema
        self.short_n = short_n

    def __call__(self, request):
        body = json.loads(request.content)
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        i = len(self.bodies)
        if i in self.script:
            return self.script[i](request)
        if self.refuse_schema and "response_format" in body:
            return httpx2.Response(400, json={"error": {"message": "response_format json_schema is not supported"}})
        n = body.get("n", 1)
        if self.refuse_n and n > 1:
            return httpx2.Response(400, json={"error": {"message": "'n' must be 1 for this model"}})
        if self.short_n:
            n = 1
        return chat_reply(body, [json.dumps({"answer": f"a{i}-{j}"}) for j in range(n)])

    def client(self, base_url="http://vlm.test/v1", **kw):
        kw.setdefault("backoff", 0.001)
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        return ModelClient(base_url=base_url, model="m", http_client=http, api_key="sk-SECRET-123", **kw)


def _prompt():
    return load_prompt("generation").render(question="what modality?", options_block=options_block(None))


def run(coro):
    return asyncio.run(coro)


def test_images_come_before_the_text():
    msgs = build_messages(_prompt(), [IMG, IMG])
    assert msgs[0]["role"] == "system" and msgs[0]["content"] == SYSTEM_TEXT  # one system text for every task
    parts = msgs[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert parts[-1]["text"].startswith("TASK: boe_generation")  # the task's instructions come after the images


def test_k_samples_in_one_request_with_schema_and_usage():
    srv = Server()
    comp = run(srv.client().complete(_prompt(), [IMG], n=4, temperature=1.1, seed=3))
    assert len(srv.bodies) == 1
    body = srv.bodies[0]
    assert body["n"] == 4 and body["seed"] == 3 and body["temperature"] == 1.1
    assert body["response_format"]["json_schema"]["name"] == "boe_generation"
    assert "guided_json" not in json.dumps(body)
    assert len(comp.texts) == 4
    c = comp.call
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.requests) == (50, 20, 7, 1)
    assert c.prompt_version == _prompt().version and c.latency_ms > 0


def test_the_api_key_is_sent_but_never_recorded(monkeypatch):
    srv = Server()
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG]))
    assert srv.headers[0]["authorization"] == "Bearer sk-SECRET-123"
    assert "SECRET" not in json.dumps(comp.call.as_dict()) and "SECRET" not in json.dumps(cl.describe())
    monkeypatch.setenv("BOE_API_KEY", "sk-FROM-ENV")
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(srv))
    env_client = ModelClient(base_url="http://u:pw@vlm.test/v1", model="m", http_client=http)
    comp = run(env_client.complete(_prompt(), [IMG]))
    assert comp.call.base_url == "http://vlm.test/v1"
    assert "pw" not in json.dumps(comp.call.as_dict()) and "FROM-ENV" not in json.dumps(comp.call.as_dict())


def test_a_server_that_refuses_n_gets_k_requests():
    srv = Server(refuse_n=True)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG], n=3, seed=10, temperature=1.0))
    assert len(comp.texts) == 3 and comp.call.n_fallback
    assert [b.get("n", 1) for b in srv.bodies] == [3, 1, 1, 1]
    assert sorted(b.get("seed") for b in srv.bodies[1:]) == [10, 11, 12]
    run(cl.complete(_prompt(), [IMG], n=2, temperature=1.0))  # remembered: no second refusal
    assert [b.get("n", 1) for b in srv.bodies[4:]] == [1, 1]


def test_a_server_that_returns_fewer_choices_is_topped_up():
    srv = Server(short_n=True)
    comp = run(srv.client().complete(_prompt(), [IMG], n=3, temperature=1.0))
    assert len(comp.texts) == 3 and len(srv.bodies) == 3


def test_a_server_that_refuses_the_schema_is_asked_without_it():
    srv = Server(refuse_schema=True)
    cl = srv.client()
    comp = run(cl.complete(_prompt(), [IMG]))
    assert comp.texts[0] and "response_format" not in srv.bodies[-1] and not cl.json_schema


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(
            lambda r: httpx2.Response(429, headers={"retry-after": "0"}, json={"error": {"message": "slow"}}), id="429"
        ),
        pytest.param(lambda r: httpx2.Response(500, json={"error": {"message": "boom"}}), id="500"),
        pytest.param(lambda r: httpx2.Response(503, text="unavailable"), id="503"),
        pytest.param(
            lambda r: httpx2.Response(200, headers={"content-type": "application/json"}, content=b'{"choi'),
            id="200-broken-json",
        ),
        pytest.param(lambda r: httpx2.Response(200, text="<html>proxy page</html>"), id="200-not-json"),
        pytest.param(lambda r: httpx2.Response(200, json={"error": "no choices"}), id="200-not-a-completion"),
        pytest.param(lambda r: (_ for _ in ()).throw(httpx2.ReadTimeout("slow", request=r)), id="timeout"),
        pytest.param(lambda r: (_ for _ in ()).throw(httpx2.ConnectError("refused", request=r)), id="connect"),
    ],
)
def test_transient_failures_are_retried(failure):
    srv = Server(script={1: failure, 2: failure})
    comp = run(srv.client(max_retries=3).complete(_prompt(), [IMG]))
    assert comp.texts[0] and comp.call.requests == 3 and comp.call.error is None


def test_retries_run_out_into_a_model_error_with_the_call():
    bad = lambda r: httpx2.Response(500, json={"error": {"message": "down"}})  # noqa: E731
    srv = Server(script={i: bad for i in range(1, 10)})
    with pytest.raises(ModelError, match="after 3 attempt") as info:
        run(srv.client(max_retries=2).complete(_prompt(), [IMG]))
    assert info.value.call.requests == 3 and "500" in info.value.call.error


def test_a_body_that_stays_broken_is_a_model_error_naming_it():
    srv = Server(script={i: (lambda r: httpx2.Response(200, json={"choices": "x"})) for i in range(1, 10)})
    with pytest.raises(ModelError, match="not a chat completion.*after 2 attempt"):
        run(srv.client(max_retries=1).complete(_prompt(), [IMG]))


def test_client_errors_are_not_retried():
    srv = Server(script={1: lambda r: httpx2.Response(401, json={"error": {"message": "bad key"}})})
    with pytest.raises(ModelError, match="401"):
        run(srv.client().complete(_prompt(), [IMG]))
    assert len(srv.bodies) == 1


def test_backoff_grows_and_honours_retry_after():
    cl = Server().client(backoff=0.5, max_backoff=4.0)
    delays = [cl._delay(a, None) for a in (1, 2, 3, 4, 5, 6)]
    for a, d in zip((1, 2, 3, 4, 5, 6), delays, strict=True):
        base = min(4.0, 0.5 * 2 ** (a - 1))
        assert base / 2 <= d <= base
    assert cl._delay(1, 3.0) == 3.0 and cl._delay(1, 999.0) <= 0.5


def test_the_request_cache_answers_a_repeated_request():
    srv = Server()
    cache = MemoryCache()
    cl = srv.client(cache=cache)
    first = run(cl.complete(_prompt(), [IMG], n=2, seed=1, temperature=1.0))
    again = run(cl.complete(_prompt(), [IMG], n=2, seed=1, temperature=1.0))
    other = run(cl.complete(_prompt(), [IMG], n=2, seed=2, temperature=1.0))
    assert len(srv.bodies) == 2
    assert again.texts == first.texts and again.call.cache_hit and not first.call.cache_hit
    assert other.texts != first.texts


def test_concurrency_is_bounded():
    active = 0
    peak = 0

    async def handler(request):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.01)
        active -= 1
        return chat_reply(json.loads(request.content), ['{"answer": "x"}'])

    async def go():
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
        cl = ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, concurrency=3)
        await asyncio.gather(*(cl.complete(_prompt(), [IMG], seed=i) for i in range(12)))

    run(go())
    assert peak == 3


def test_an_unusable_reply_is_asked_again_and_not_cached():
    replies = iter(["not json", "still not", '{"verdict": "confirm", "rationale": "ok"}'])
    srv = Server(script={i: (lambda r: chat_reply(json.loads(r.content), [next(replies)])) for i in (1, 2, 3)})
    cache = MemoryCache()
    cl = srv.client(cache=cache)
    prompt = load_prompt("factor_judge").render(
        view_kind="whole", figure="0", question="q", slot="modality", value="ct"
    )

    def accept(texts):
        return None if texts[0].startswith("{") else "not JSON"

    comp = run(cl.complete(prompt, [IMG], accept=accept))
    assert comp.texts[0].startswith('{"verdict"') and comp.call.reasks == 2 and comp.call.error is None
    assert comp.call.requests == 3 and len(cache.data) == 1


def test_a_reply_that_stays_unusable_is_returned_with_the_error_and_not_cached():
    srv = Server(script={i: (lambda r: chat_reply(json.loads(r.content), ["nope"])) for i in range(1, 10)})
    cache = MemoryCache()
    comp = run(srv.client(cache=cache).complete(_prompt(), [IMG], accept=lambda t: "not JSON"))
    assert comp.texts == ["nope"] and comp.call.reasks == 2 and "not JSON" in comp.call.error
    assert comp.call.requests == 3
    assert cache.data == {}


def _seeded_server(bad_seeds):
    """A server that honours seeds as vLLM does: the same request and seed give the same reply (cut short for
    ``bad_seeds``)."""

    def reply(request):
        body = json.loads(request.content)
        seed = body.get("seed")
        text = '{"verdict": "confirm", "rationale": "cut' if seed in bad_seeds else '{"verdict": "reject"}'
        return chat_reply(body, [text] * body.get("n", 1))

    return Server(script={i: reply for i in range(1, 50)})


def _judge_prompt():
    return load_prompt("factor_judge").render(view_kind="whole", figure="0", question="q", slot="modality", value="ct")


def _verdict_ok(texts):
    return None if texts[0].endswith("}") else "truncated"


def test_each_reask_sends_a_fresh_seed_derived_from_the_calls_seed_and_records_it():
    from boe.tools.client import attempt_seed

    srv = _seeded_server({7, attempt_seed(7, 1)})
    comp = run(srv.client().complete(_judge_prompt(), [IMG], seed=7, accept=_verdict_ok))
    sent = [b["seed"] for b in srv.bodies]
    assert sent == [7, attempt_seed(7, 1), attempt_seed(7, 2)] and len(set(sent)) == 3
    assert comp.call.seeds == sent and comp.call.reasks == 2 and comp.call.error is None
    assert comp.texts == ['{"verdict": "reject"}']
    assert comp.call.ledger_entry()["seeds"] == sent
    # a rerun sends the same seeds (reproducible), and the cache answers it with the seeds that made the reply
    again = _seeded_server({7, attempt_seed(7, 1)})
    cache = MemoryCache()
    first = run(again.client(cache=cache).complete(_judge_prompt(), [IMG], seed=7, accept=_verdict_ok))
    assert [b["seed"] for b in again.bodies] == sent and first.call.seeds == sent
    hit = run(again.client(cache=cache).complete(_judge_prompt(), [IMG], seed=7, accept=_verdict_ok))
    assert hit.call.cache_hit and hit.call.seeds == sent and len(again.bodies) == 3


def test_reasks_of_single_samples_shift_every_choices_seed():
    from boe.tools.client import attempt_seed

    srv = _seeded_server({5, 6})
    comp = run(
        srv.client(use_n=False).complete(_judge_prompt(), [IMG], n=2, temperature=1.0, seed=5, accept=_verdict_ok)
    )
    sent = sorted(b["seed"] for b in srv.bodies)
    assert sent == sorted([5, 6, attempt_seed(5, 1), attempt_seed(5, 1) + 1])
    assert comp.call.seeds == [5, attempt_seed(5, 1)] and comp.call.reasks == 1


def test_without_a_seed_no_seed_is_sent_or_recorded():
    srv = Server()
    comp = run(srv.client().complete(_prompt(), [IMG]))
    assert "seed" not in srv.bodies[0] and comp.call.seeds == []
