"""Providers that refuse request parameters: a loopback HTTP server answering as OpenAI's reasoning models do.

The error bodies are OpenAI's own (``invalid_request_error`` with ``param`` and ``code``): ``top_p`` is refused
as an unsupported parameter, a temperature other than 1 as an unsupported value. The client sends the request
once more without the field, remembers the refusal for the endpoint and model, and says so in a note.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from boe.prompts import load_prompt, options_block
from boe.tools.client import ModelClient, Servers

IMAGE = Path(__file__).parents[1] / "datasets" / "fixtures" / "vqa-rad" / "images" / "synpic21604.jpg"


def _unsupported_parameter(name: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"Unsupported parameter: '{name}' is not supported with this model.",
            "type": "invalid_request_error",
            "param": name,
            "code": "unsupported_parameter",
        }
    }


def _unsupported_temperature(value: float) -> dict[str, Any]:
    return {
        "error": {
            "message": f"Unsupported value: 'temperature' does not support {value} with this model. Only the default "
            "(1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
    if name == "boe_generation":
        text = json.dumps({"answer": "CT", "modality": "ct", "region": "head", "plane": "axial", "finding": "normal",
                           "attribute": None})  # fmt: skip
    elif name == "boe_claim_extraction":
        text = json.dumps({"modality": "ct", "region": "head", "plane": "axial", "finding": None, "attribute": None})
    else:
        text = json.dumps({"verdict": "confirm", "rationale": "it is."})
    n = int(body.get("n", 1))
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"} for i in range(n)
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10 * n, "total_tokens": 100 + 10 * n},
    }


class Refusing(ThreadingHTTPServer):
    """Answers chat completions; refuses the fields in ``refuse`` the way OpenAI's reasoning models do."""

    daemon_threads = True

    def __init__(self, refuse: set[str], owned_by: str = "system") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.refuse = refuse
        self.owned_by = owned_by
        self.bodies: list[dict[str, Any]] = []
        self.refusals: list[str] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: Refusing

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._send(
            200, {"object": "list", "data": [{"id": "o3-mini", "object": "model", "owned_by": self.server.owned_by}]}
        )

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.bodies.append(body)
        for name in ("top_p", "seed", "top_k", "logprobs"):
            if name in srv.refuse and name in body:
                with srv.lock:
                    srv.refusals.append(name)
                return self._send(400, _unsupported_parameter(name))
        if "temperature" in srv.refuse and body.get("temperature", 1) != 1:
            with srv.lock:
                srv.refusals.append("temperature")
            return self._send(400, _unsupported_temperature(body["temperature"]))
        return self._send(200, _reply(body))


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Refusing] = []

    def start(refuse: set[str], owned_by: str = "system") -> Refusing:
        srv = Refusing(refuse, owned_by)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def _prompt() -> Any:
    return load_prompt("generation").render(question="what modality?", options_block=options_block(None))


async def _two_clients(srv: Refusing, **kw: Any) -> tuple[ModelClient, ModelClient]:
    endpoints = Servers()
    gen = ModelClient(
        base_url=srv.base_url, model="o3-mini", role="generator", endpoints=endpoints, backoff=0.001, **kw
    )
    judge = ModelClient(base_url=srv.base_url, model="o3-mini", role="judge", endpoints=endpoints, backoff=0.001, **kw)
    return gen, judge


def test_refused_fields_are_dropped_after_one_retry_remembered_and_noted(serve) -> None:
    srv = serve({"top_p", "temperature"})

    async def go() -> tuple[Any, ...]:
        gen, judge = await _two_clients(srv)
        try:
            first = await gen.complete(_prompt(), n=3, temperature=0.7, seed=4)
            second = await judge.complete(_prompt(), temperature=0.0, seed=4)
            return first, second, gen.describe()["endpoint"]
        finally:
            await gen.aclose()
            await judge.aclose()

    first, second, endpoint = asyncio.run(go())
    # one refusal per field, each followed by one request without it; the judge (same endpoint and model) never
    # sends them: the refusal is remembered
    assert srv.refusals == ["top_p", "temperature"]
    assert [sorted(k for k in ("top_p", "temperature") if k in b) for b in srv.bodies] == [
        ["temperature", "top_p"],
        ["temperature"],
        [],
        [],
    ]
    assert first.texts and first.call.error is None and first.call.requests == 3
    assert second.call.requests == 1 and second.call.error is None
    assert endpoint["dropped"] == ["top_p", "temperature"]
    assert "refused top_p" in endpoint["notes"][0] and "Unsupported parameter" in endpoint["notes"][0]
    assert "default temperature applies" in endpoint["notes"][1]
    assert first.call.sampling["dropped"] == ["top_p", "temperature"] and "temperature" not in first.call.sampling
    assert all(b.get("seed") == 4 for b in srv.bodies)  # what was not refused is still sent


@pytest.mark.parametrize("field", ["seed", "top_k"])
def test_a_refused_seed_or_top_k_is_dropped_too(serve, field: str) -> None:
    srv = serve({field}, owned_by="someone")  # a generic server: top_k is sent

    async def go() -> Any:
        gen, judge = await _two_clients(srv)
        try:
            return await gen.complete(_prompt(), n=2, temperature=1.0, seed=9)
        finally:
            await gen.aclose()
            await judge.aclose()

    comp = asyncio.run(go())
    assert srv.refusals == [field] and field in srv.bodies[0] and field not in srv.bodies[1]
    assert comp.call.error is None and comp.call.sampling["dropped"] == [field]


def _boe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, timeout=300)


def test_boe_ask_finishes_against_a_reasoning_model_and_top_p_none_leaves_it_out(serve, tmp_path: Path) -> None:
    srv = serve({"top_p", "temperature"})
    common = ["--base-url", srv.base_url, "--model", "o3-mini", "--k", "3", "--budget", "8", "--json"]
    done = _boe("ask", str(IMAGE), "what imaging modality was used?", *common)
    assert done.returncode == 0, done.stderr[-2000:]
    assert srv.refusals == ["top_p", "temperature"]  # once each for the whole run (generator and judges)
    srv.bodies.clear()
    srv.refusals.clear()
    config = tmp_path / "boe.toml"
    config.write_text('top_p = "none"\n')
    done = _boe("ask", str(IMAGE), "what imaging modality was used?", *common, "--top-p", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    assert srv.bodies and not any("top_p" in b for b in srv.bodies) and "top_p" not in srv.refusals
    srv.bodies.clear()
    done = _boe("ask", str(IMAGE), "what imaging modality was used?", *common, "--config", str(config))
    assert done.returncode == 0, done.stderr[-2000:]
    assert srv.bodies and not any("top_p" in b for b in srv.bodies)


def test_refused_logprobs_are_asked_for_once(serve) -> None:
    srv = serve({"logprobs"})

    async def go() -> list[Any]:
        gen, judge = await _two_clients(srv)
        try:
            return [await judge.complete(_prompt(), temperature=1.0, seed=s, top_logprobs=5) for s in (1, 2)]
        finally:
            await gen.aclose()
            await judge.aclose()

    first, second = asyncio.run(go())
    assert srv.refusals == ["logprobs"] and [("logprobs" in b, "top_logprobs" in b) for b in srv.bodies] == [
        (True, True),
        (False, False),
        (False, False),
    ]
    assert first.logprobs is None and first.call.error is None and second.call.requests == 1
    assert first.call.sampling["dropped"] == ["logprobs", "top_logprobs"]
