"""`boe ask` fails (exit 1, one line saying why) when no candidate is usable, through the real openai client.

A tiny OpenAI-compatible server on a free loopback port answers every generation request with the replies that
made `boe ask` exit 0 with ``"answer": null``: ``content: null``, a choice without ``message``, and 5 MB of text.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
IMAGE = Path(__file__).parents[2] / "boe" / "sim" / "data" / "demo" / "images" / "img-0-00000.png"
GOOD = json.dumps({"answer": "ct", "modality": "ct", "region": None, "plane": None, "finding": None, "attribute": None})


def _choice(i: int, usable: bool) -> dict[str, Any]:
    if usable and i == 0:
        return {"index": i, "message": {"role": "assistant", "content": GOOD}, "finish_reason": "stop"}
    if i % 3 == 0:
        return {"index": i, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}
    if i % 3 == 1:
        return {"index": i, "finish_reason": "stop"}  # no message at all
    return {"index": i, "message": {"role": "assistant", "content": "x" * 5_000_000}, "finish_reason": "stop"}


class _Handler(BaseHTTPRequestHandler):
    usable = False  # set on a subclass per server

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, obj: dict[str, Any]) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # GET /v1/models
        self._send({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "vllm"}]})

    def do_POST(self) -> None:  # POST /v1/chat/completions
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        task = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
        n = int(body.get("n") or 1)
        if task == "boe_generation":
            choices = [_choice(i, self.usable) for i in range(n)]
        else:  # claim extraction and judges: a plain valid object
            text = json.dumps({"verdict": "unresolved", "rationale": "test"})
            choices = [
                {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                for i in range(n)
            ]
        usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        self._send({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices,
                    "usage": usage})  # fmt: skip


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (_Handler,), {"usable": request.param})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def ask(base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None, "the boe console script is not installed next to this interpreter"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOE_", "OPENAI_"))}
    cmd = [BOE, "ask", str(IMAGE), "What modality is shown?", "--base-url", base_url, "--model", "m", "--k", "6"]
    return subprocess.run([*cmd, "--max-retries", "0", *extra], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("server", [False], indirect=True)
@pytest.mark.parametrize("mode", [(), ("--json",)], ids=["text", "json"])
def test_no_usable_candidate_is_exit_1_with_one_line(server: str, mode: tuple[str, ...]) -> None:
    res = ask(server, *mode)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: no usable candidate: all 6 replies of 'm'"), res.stderr
    assert "empty reply ×4" in lines[0] and "over the 1,048,576-character limit ×2" in lines[0], lines[0]
    if mode:  # the result is still printed for a script to read
        data = json.loads(res.stdout)
        assert data["answer"] is None and not any(c["valid"] for c in data["candidates"])


@pytest.mark.parametrize("server", [True], indirect=True)
def test_one_usable_candidate_is_an_answer(server: str) -> None:
    res = ask(server, "--json", "--budget", "0")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["answer"] == "ct"
