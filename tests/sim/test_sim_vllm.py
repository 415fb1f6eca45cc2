"""The simulator's vLLM emulation driven by the real model client (openai SDK over loopback HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from boe.errors import ModelError
from boe.prompts import SYSTEM_TEXT, load_prompt, options_block
from boe.sim.requests import data_url
from boe.sim.server import SimOptions, serve_in_thread
from boe.sim.wire import text_tokens
from boe.tools.client import ModelClient
from tests.images_hostile import png_bomb

#: A model's generation_config.json like Qwen2.5-VL-7B-Instruct's: greedy unless a request says otherwise.
QWEN_LIKE = {"temperature": 0.1, "top_p": 0.001, "top_k": 1}


def _url(question: dict[str, Any]) -> str:
    return data_url(Path(question["images"][0]).read_bytes())


def _generation(question: dict[str, Any]):
    return load_prompt("generation").render(question=question["question"], options_block=options_block(None))


def _judge(question: dict[str, Any]):
    return load_prompt("factor_judge").render(
        view_kind="whole", figure="0", question=question["question"], slot="modality", value="ct"
    )


def _ask(base_url: str, prompt, urls, *, n: int = 1, temperature: float = 0.0, seed: int = 7, **kw: Any):
    async def go():
        client = ModelClient(base_url=base_url, model="boe-sim-vlm", backoff=0.001, **kw)
        try:
            return client, await client.complete(prompt, urls, n=n, temperature=temperature, seed=seed)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_explicit_sampling_keeps_k16_diverse_against_a_top_k_1_generation_config(sim_questions):
    q = sim_questions[0]
    prompt, urls = _generation(q), [_url(q)]
    with serve_in_thread() as plain, serve_in_thread(options=SimOptions(generation_config=QWEN_LIKE)) as qwen:
        _, baseline = _ask(plain.base_url, prompt, urls, n=16, temperature=1.1)
        client, sent = _ask(qwen.base_url, prompt, urls, n=16, temperature=1.1)
        # what a request with only a temperature gets there (the server kind openai: no top_k is sent)
        _, collapsed = _ask(qwen.base_url, prompt, urls, n=16, temperature=1.1, server="openai")
    assert client.endpoint.kind == "vllm" and "boe-simulator" in client.endpoint.detected
    assert sent.call.sampling == {"server": "vllm", "temperature": 1.1, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
    assert sent.texts == baseline.texts  # the generation config changed nothing: the temperature decides
    assert len(set(sent.texts)) >= 4, sent.texts
    assert len(set(collapsed.texts)) == 1 and "top_k" not in collapsed.call.sampling  # K copies of the greedy answer


def test_greedy_n_is_refused_as_vllm_does_and_the_client_samples_one_at_a_time(sim_questions):
    q = sim_questions[0]
    with serve_in_thread(options=SimOptions(reject_greedy_n=True)) as sim:
        raw = openai.OpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as err:
            raw.chat.completions.create(
                model="boe-sim-vlm", n=2, temperature=0.0, messages=[{"role": "user", "content": "hi"}]
            )
        assert "n must be 1 when using greedy sampling, got 2." in str(err.value)
        _, comp = _ask(sim.base_url, _judge(q), [_url(q)], n=3, temperature=0.0)
        assert len(comp.texts) == 3 and comp.call.n_fallback and comp.call.requests == 3
        assert "greedy" in comp.call.tags["n_fallback_reason"]


def test_a_context_length_refusal_names_the_limit_the_size_and_the_fix(sim_questions):
    q = sim_questions[0]
    with serve_in_thread(options=SimOptions(max_model_len=300)) as sim:
        with pytest.raises(ModelError) as err:
            _ask(sim.base_url, _generation(q), [_url(q)], max_tokens=100)
        stats = sim.stats()
    msg = str(err.value)
    assert "the limit is 300 tokens" in msg and "input tokens (1 image(s))" in msg
    assert "--max-pixels" in msg and "--max-model-len" in msg and "maximum context length" in msg
    assert stats["requests"] == 1  # not retried


def test_a_reply_limit_over_the_model_length_gets_vllm_032s_refusal_and_guidance(sim_questions):
    q = sim_questions[0]
    with serve_in_thread(options=SimOptions(max_model_len=300)) as sim:
        with pytest.raises(ModelError) as err:
            _ask(sim.base_url, _generation(q), [_url(q)], max_tokens=512)
        stats = sim.stats()
    msg = str(err.value)
    assert "max_completion_tokens=512 cannot be greater than max_model_len=300" in msg
    assert "up to 512 reply tokens" in msg and "the limit is 300 tokens" in msg and "--max-tokens" in msg
    assert stats["requests"] == 1  # not retried


def test_an_image_count_refusal_names_the_limit_and_the_fix(sim_questions):
    q = sim_questions[0]
    with serve_in_thread(options=SimOptions(limit_images=1)) as sim:
        with pytest.raises(ModelError) as err:
            _ask(sim.base_url, _generation(q), [_url(q), _url(sim_questions[1])])
        assert sim.stats()["requests"] == 1
    msg = str(err.value)
    assert "at most 1 image(s)" in msg and "this request has 2" in msg and "--limit-mm-per-prompt" in msg


def test_requests_about_one_figure_share_the_prefix_up_to_it(sim_questions):
    q, other = sim_questions[0], sim_questions[2]
    with serve_in_thread() as sim:
        _, first = _ask(sim.base_url, _generation(q), [_url(q)], n=4, temperature=1.0)
        before = sim.stats()
        _, judge = _ask(sim.base_url, _judge(q), [_url(q)])
        after = sim.stats()
        _, elsewhere = _ask(sim.base_url, _judge(other), [_url(other)])
    assert first.call.cached_tokens == 0
    image_tokens = after["image_tokens"] - before["image_tokens"]
    # the system text and the image came from the cache, up to the last 16-token block (it also holds task text)
    cached_image = after["cached_image_tokens"] - before["cached_image_tokens"]
    assert image_tokens > 0 and image_tokens - 16 < cached_image <= image_tokens
    assert judge.call.cached_tokens >= cached_image
    # another figure: only the shared system text (the same for every task and question)
    assert 0 < elsewhere.call.cached_tokens <= text_tokens(SYSTEM_TEXT) + 2 < cached_image


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int, *args: str) -> subprocess.Popen[bytes]:
    boe = Path(sys.executable).with_name("boe")
    cmd = [str(boe)] if boe.exists() else [sys.executable, "-m", "boe"]
    proc = subprocess.Popen(
        [*cmd, "sim", "serve", "--port", str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)


def _post(port: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak memory from /proc")
def test_a_pixel_bomb_is_refused_and_the_simulator_keeps_serving(sim_questions):
    port = _free_port()
    proc = _serve(port)
    try:
        bomb = data_url(png_bomb(20000, 20000))
        body = {
            "model": "boe-sim-vlm",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": bomb}},
                        {"type": "text", "text": "<question>q</question>"},
                    ],
                }
            ],
        }
        t0 = time.perf_counter()
        status, reply = _post(port, body)
        seconds = time.perf_counter() - t0
        assert status == 400 and "20000x20000 pixels" in reply["error"]["message"], reply
        assert "the limit is 100 megapixels" in reply["error"]["message"]
        q = sim_questions[0]
        text = {"type": "text", "text": "<question>q</question>"}
        parts = [{"type": "image_url", "image_url": {"url": _url(q)}}, text]
        ok, _ = _post(port, {"model": "boe-sim-vlm", "messages": [{"role": "user", "content": parts}]})
        assert ok == 200
        peak = _peak_rss_mb(proc.pid)
        print(f"pixel bomb refused in {seconds:.2f} s; simulator peak RSS {peak:.0f} MB")
        assert peak < 1536
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err


def test_a_client_that_resets_its_connection_leaves_no_traceback():
    port = _free_port()
    proc = _serve(port)
    try:
        for partial in (
            b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"mo',
            b"POST /v1/chat/comp",
        ):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(partial)
            time.sleep(0.1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()  # linger 0: the peer gets a reset
        time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err and b"ConnectionResetError" not in err, err.decode()[-2000:]


def test_the_generation_config_flag_is_read_by_the_cli(tmp_path):
    cfg = tmp_path / "generation_config.json"
    cfg.write_text(json.dumps({**QWEN_LIKE, "bos_token_id": 1}))
    port = _free_port()
    proc = _serve(port, "--generation-config", str(cfg), "--reject-greedy-n", "--limit-mm-per-prompt", "image=1")
    try:
        body = {"model": "boe-sim-vlm", "n": 2, "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
        status, reply = _post(port, body)
        assert status == 400 and "greedy" in reply["error"]["message"]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert os.path.exists(cfg)
