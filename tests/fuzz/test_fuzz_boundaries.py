"""Fuzzing the input boundaries: model replies of any shape and size, truncated and hostile image bytes.

Each target ends in a result or a `BoeError` (or the simulator's 400 `RequestError`) with a message, never
another exception. Examples per target are the `max_examples` below (about 15 s in all on 2 cores).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import tempfile
import zlib
from pathlib import Path

import cv2
import httpx2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.errors import BoeError, ModelError
from boe.prompts import load_prompt, options_block
from boe.tools.client import ModelClient
from boe.tools.completion import read_completion
from boe.tools.images import header_size, open_image
from boe.tools.retry import BadReply

FUZZ = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], derandomize=True
)

# -- model replies ------------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
message = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"role": st.just("assistant")}, optional={"content": st.one_of(st.text(max_size=3000), json_values)}
    ),
)
choice = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "index": json_values,
            "message": message,
            "finish_reason": json_values,
            "logprobs": st.one_of(json_values, st.fixed_dictionaries({"content": json_values})),
        },
    ),
)
usage = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": json_values,
            "completion_tokens": json_values,
            "prompt_tokens_details": st.one_of(
                json_values, st.fixed_dictionaries({}, optional={"cached_tokens": json_values})
            ),
        },
    ),
)
replies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "choices": st.one_of(json_values, st.lists(choice, max_size=5)),
            "usage": usage,
            "error": json_values,
        },
    ),
)


@settings(FUZZ, max_examples=400)
@given(replies)
def test_any_reply_body_is_read_or_is_one_bad_body_error(reply):
    try:
        pt, ct, cached, choices = read_completion(reply)
    except BadReply as exc:
        assert str(exc)
        return
    assert min(pt, ct, cached) >= 0 and choices and all(t is None or isinstance(t, str) for t, _ in choices)
    assert all(lp is None or isinstance(lp, list) for _, lp in choices)  # a choice's logprobs.content, as given


@settings(FUZZ, max_examples=80)
@given(replies, st.sampled_from([200, 200, 200, 400, 404, 413, 422, 500]), st.integers(0, 300_000), st.integers(1, 4))
def test_the_client_ends_any_reply_in_a_completion_or_a_model_error(reply, status, padding, n):
    def handler(request):
        if request.method == "GET":
            return httpx2.Response(200, json={"data": [{"id": "m", "owned_by": "vllm"}]})
        body = reply if not isinstance(reply, dict) else {**reply, "padding": "x" * padding}
        return httpx2.Response(status, content=json.dumps(body).encode())

    async def go():
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
        cl = ModelClient(base_url="http://vlm.test/v1", model="m", http_client=http, max_retries=1, backoff=0.0)
        prompt = load_prompt("generation").render(question="q", options_block=options_block(None))
        try:
            return await cl.complete(prompt, ["data:image/png;base64,AAAA"], n=n, temperature=1.0, seed=1)
        finally:
            await cl.aclose()

    try:
        comp = asyncio.run(go())
    except ModelError as exc:
        assert str(exc) and exc.call is not None and exc.call.error == str(exc)
        return
    assert len(comp.texts) == n


# -- images -------------------------------------------------------------------------------------------------


def _png(arr: np.ndarray) -> bytes:
    return cv2.imencode(".png", arr)[1].tobytes()


def _seeds() -> list[bytes]:
    gray = (np.arange(48 * 40) % 251).astype(np.uint8).reshape(48, 40)
    out = [
        _png(gray),
        _png(gray.astype(np.uint16) * 257),
        cv2.imencode(".jpg", gray)[1].tobytes(),
        cv2.imencode(".bmp", gray)[1].tobytes(),
        cv2.imencode(".tiff", gray.astype(np.float32))[1].tobytes(),
        cv2.imencode(".webp", np.dstack([gray] * 3))[1].tobytes(),
    ]
    try:
        from pydicom.data import get_testdata_file

        out.append(Path(get_testdata_file("CT_small.dcm")).read_bytes())
    except Exception:  # pydicom's test data is optional here
        pass
    return out


SEEDS = _seeds()


def _declares(width: int, height: int) -> bytes:
    """A PNG header declaring any size, followed by a tiny deflate stream."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@st.composite
def hostile_images(draw):
    kind = draw(st.sampled_from(["truncate", "flip", "prefix", "declare", "random"]))
    if kind == "declare":
        return _declares(draw(st.integers(0, 2**31 - 1)), draw(st.integers(0, 2**31 - 1)))
    if kind == "random":
        return draw(st.binary(max_size=4096))
    seed = draw(st.sampled_from(SEEDS))
    if kind == "truncate":
        return seed[: draw(st.integers(0, len(seed)))]
    if kind == "prefix":  # a real magic number, then garbage
        return seed[: draw(st.integers(2, 40))] + draw(st.binary(max_size=2048))
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    return bytes(data)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydicom warns about each broken element of a mangled file
@settings(FUZZ, max_examples=250)
@given(hostile_images())
def test_any_image_bytes_open_or_are_one_input_error(data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "figure.img"
        p.write_bytes(data)
        try:
            img = open_image(p, pixel_limit=4_000_000, max_pixels=65_536)
        except BoeError as exc:
            assert str(exc)
            return
    assert img.pixels.dtype == np.uint8 and img.data_url.startswith("data:image/")
    w, h = img.sent_size
    assert w * h <= 65_536
    sent = cv2.imdecode(np.frombuffer(base64.b64decode(img.data_url.split(",", 1)[1]), np.uint8), -1)
    assert sent is not None and sent.dtype == np.uint8


@settings(FUZZ, max_examples=150)
@given(hostile_images())
def test_the_simulator_answers_any_image_bytes_or_refuses_them_with_a_400(data):
    from boe.sim.model import ModelInput, SimModel
    from boe.sim.wire import RequestError, parse_chat_request

    body = {
        "model": "boe-sim-vlm",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()},
                    },
                    {"type": "text", "text": "TASK: boe_generation\n<question>Which side?</question>"},
                ],
            }
        ],
    }
    try:
        req = parse_chat_request(json.dumps(body).encode(), pixel_limit=4_000_000)
        texts = SimModel().complete(ModelInput(req.system, req.user, req.images, 1.0, None, 3), 2)
    except RequestError as exc:
        assert str(exc)
        return
    except ValueError as exc:  # the server answers these with a 400 naming the problem
        assert str(exc)
        return
    assert len(texts) == 2


@settings(FUZZ, max_examples=300)
@given(st.binary(max_size=512))
def test_header_sizes_never_raise(data):
    size = header_size(data)
    assert size is None or (isinstance(size[0], int) and isinstance(size[1], int))
