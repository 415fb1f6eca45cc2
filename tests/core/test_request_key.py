"""`request_key` stays the plain SHA-256 of the request's canonical JSON, whatever the request holds.

The key splices long strings (images) into the canonical JSON and keeps the hash of each prefix; these tests
compare it with the definition written out literally, so a store's existing cache keeps answering."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from boe.core.calls import request_key
from boe.util import redact_url


def literal(endpoint: str, model: str, messages: Any, params: dict[str, Any] | None, seed: int | None) -> str:
    """The key as defined: no shortcut."""
    body = {
        "endpoint": redact_url(endpoint).rstrip("/"),
        "model": model,
        "messages": messages,
        "params": {
            k: v
            for k, v in sorted((params or {}).items())
            if k not in {"api_key", "authorization", "headers", "extra_headers", "timeout", "max_retries"}
            and k not in {"http_client", "stream", "seed"}
        },
        "seed": seed if seed is not None else (params or {}).get("seed"),
    }
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def image(n: int = 110_000) -> str:
    return "data:image/png;base64," + base64.b64encode(os.urandom(n)).decode("ascii")


def messages(system: str, urls: list[str], text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    parts.append({"type": "text", "text": text})
    return [{"role": "system", "content": system}, {"role": "user", "content": parts}]


def test_requests_with_images_get_the_literal_key_and_repeats_agree() -> None:
    a, b = image(), image(3000)
    params = {"n": 16, "temperature": 1.1, "max_tokens": 512, "schema": "boe_generation"}
    for urls in ([a], [a, b], [b, a], []):
        for text in ("what modality?", "welche Modalität? — 何の撮影法? \u2028 \x00 \ud7ff", "x" * 5000):
            m = messages("SYSTEM " * 300, urls, text)
            want = literal("http://u:pw@vlm.test/v1/", "m", m, params, 7)
            assert request_key("http://u:pw@vlm.test/v1/", "m", m, params, 7) == want
            assert request_key("http://u:pw@vlm.test/v1/", "m", m, params, 7) == want  # the kept prefix
    # the same images under another endpoint, model or system text: other keys, each the literal one
    m = messages("other system", [a], "q")
    assert request_key("http://other/v1", "m2", m, params, None) == literal("http://other/v1", "m2", m, params, None)


def test_long_strings_anywhere_and_objects_json_cannot_encode() -> None:
    long_text = "é" * 3000 + '"\\\n'
    msgs = [{"role": "user", "content": long_text}, ("tuple", long_text, 1.5, None, True)]
    params = {"extra_body": {"z": Path("/tmp/x"), "a": [long_text, {"b": long_text}]}, "seed": 4, "stream": True}
    assert request_key("http://h/v1", "m", msgs, params) == literal("http://h/v1", "m", msgs, params, None)


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.text(min_size=2048, max_size=2100),
    st.sampled_from(["boe-long-0", '"boe-long-1"', "\u2028\u2029", "\x7f\x1f"]),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    json_values,
    st.dictionaries(st.sampled_from(["n", "temperature", "schema", "seed", "sampling", "timeout"]), json_values),
    st.one_of(st.none(), st.integers(0, 2**31)),
)
def test_any_request_gets_the_literal_key(msgs: Any, params: dict[str, Any], seed: int | None) -> None:
    try:
        want = literal("http://vlm.test/v1", "m", msgs, params, seed)
    except (TypeError, ValueError, UnicodeEncodeError) as exc:  # the definition refuses it: so does the key
        try:
            request_key("http://vlm.test/v1", "m", msgs, params, seed)
        except type(exc):
            return
        raise AssertionError(f"the literal key raised {exc!r}, request_key did not") from None
    assert request_key("http://vlm.test/v1", "m", msgs, params, seed) == want
    assert request_key("http://vlm.test/v1", "m", msgs, params, seed) == want
