"""The Chat Completions wire format: validate a request body, count tokens."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "PIXEL_LIMIT",
    "ChatRequest",
    "RequestError",
    "Segment",
    "image_size",
    "image_tokens",
    "parse_chat_request",
    "text_tokens",
    "truncate_tokens",
]

_ROLES = ("system", "developer", "user", "assistant", "tool")
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,(.*)$", re.S)
MAX_N = 128
#: Decoded width x height an image may declare (read from its header, before any decoding).
PIXEL_LIMIT = 100_000_000


class RequestError(ValueError):
    """A request the server answers with 400; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Segment:
    """One piece of the prompt in order (a message's role, a text, an image) for prefix-cache accounting."""

    kind: str  # role | text | image
    key: str  # the content hash (an image part's uuid when it has one)
    tokens: int


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat completion request, reduced to what the simulator reads."""

    system: str
    user: str
    images: tuple[bytes, ...]
    n: int
    temperature: float
    seed: int | None
    max_tokens: int | None
    response_format: dict[str, Any] | None
    sampling: dict[str, Any] = field(default_factory=dict)  # the sampling fields the request sets (absent: unset)
    segments: tuple[Segment, ...] = ()
    image_sizes: tuple[tuple[int, int], ...] = ()  # width, height of each image (from its header)
    model: str = ""
    top_logprobs: int | None = None  # alternatives per token asked for (``logprobs: true``); None: no logprobs
    tokens_field: str = "max_completion_tokens"  # the field the reply limit came in


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise RequestError(f"'{key}' must be a number in [{lo}, {hi}], got {v!r}", key)
    return float(v)


def _integer(body: dict[str, Any], key: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise RequestError(f"'{key}' must be an integer {bound}, got {v!r}", key)
    return v


def _image(part: dict[str, Any], where: str) -> bytes:
    """The bytes of an image part (a base64 data URL)."""
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    if not isinstance(url, str):
        raise RequestError(f"{where}.image_url.url must be a string", where)
    m = _DATA_URL.match(url)
    if not m:
        raise RequestError(
            f"{where}: only base64 data URLs (data:image/...;base64,...) are accepted; the simulator has no network",
            where,
        )
    try:
        return base64.b64decode(m.group(1), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(f"{where}: invalid base64 image data", where) from exc


def _text_segments(text: str) -> list[Segment]:
    """A text as one segment per line: a prefix cache reuses the lines two prompts share (vLLM hashes blocks of
    tokens; lines are this simulator's coarser unit)."""
    return [
        Segment("text", hashlib.sha256(line.encode("utf-8", "replace")).hexdigest(), text_tokens(line))
        for line in text.split("\n")
    ]


def _content(
    msg: dict[str, Any], i: int, segments: list[Segment], sizes: list[tuple[int, int]], pixel_limit: int | None
) -> tuple[str, list[bytes]]:
    content = msg.get("content")
    segments.append(Segment("role", str(msg.get("role")), 1))
    if content is None or isinstance(content, str):
        segments.extend(_text_segments(content or ""))
        return content or "", []
    if not isinstance(content, list):
        raise RequestError(f"messages[{i}].content must be a string or a list of parts", f"messages[{i}].content")
    texts, images = [], []
    for j, part in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        if not isinstance(part, dict):
            raise RequestError(f"{where} must be an object", where)
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.text must be a string", where)
            texts.append(part["text"])
            segments.extend(_text_segments(part["text"]))
        elif kind == "image_url":
            data = _image(part, where)
            w, h = _checked_size(data, where, pixel_limit)
            images.append(data)
            sizes.append((w, h))
            key = part.get("uuid")
            if key is not None and not isinstance(key, str):
                raise RequestError(f"{where}.uuid must be a string", where)
            segments.append(
                Segment("image", "uuid:" + key if key else hashlib.sha256(data).hexdigest(), image_tokens(w, h))
            )
        else:
            raise RequestError(f"{where}: unsupported part type {kind!r} (text, image_url)", where)
    return "\n".join(texts), images


def _checked_size(data: bytes, where: str, pixel_limit: int | None) -> tuple[int, int]:
    """An image's size from its header, refused when it is unreadable or declares more than the pixel limit."""
    from boe.tools.images import header_size

    size = header_size(data)
    if size is None:
        raise RequestError(
            f"{where}: not an image the simulator reads (PNG, JPEG, GIF, BMP, WebP, TIFF; {len(data)} bytes)", where
        )
    w, h = size
    if w < 1 or h < 1:
        raise RequestError(f"{where}: the image header declares {w}x{h} pixels", where)
    if pixel_limit is not None and w * h > pixel_limit:
        raise RequestError(
            f"{where}: the image is {w}x{h} pixels ({w * h / 1e6:.1f} megapixels, {len(data)} bytes); "
            f"the limit is {pixel_limit / 1e6:g} megapixels",
            where,
        )
    return w, h


def _response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise RequestError("'response_format.type' must be text, json_object or json_schema", "response_format")
    if fmt["type"] == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise RequestError("'response_format.json_schema' needs a 'name'", "response_format.json_schema")
        if not isinstance(spec.get("schema", {}), dict):
            raise RequestError("'response_format.json_schema.schema' must be an object", "response_format.json_schema")
    return fmt


def parse_chat_request(body: bytes, pixel_limit: int | None = PIXEL_LIMIT) -> ChatRequest:
    """Validate a request body; raises RequestError naming the problem (images are sized from their headers
    and refused above ``pixel_limit`` before anything decodes them)."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    if not isinstance(data.get("model"), str) or not data["model"]:
        raise RequestError("'model' is required", "model")
    if data.get("stream"):
        raise RequestError("streaming is not supported by boe-sim-vlm", "stream")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    system, user, images = [], [], []
    segments: list[Segment] = []
    sizes: list[tuple[int, int]] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
            raise RequestError(f"messages[{i}].role must be one of {', '.join(_ROLES)}", f"messages[{i}].role")
        text, imgs = _content(msg, i, segments, sizes, pixel_limit)
        if msg["role"] in ("system", "developer"):
            system.append(text)
        elif msg["role"] == "user":
            user.append(text)
            images.extend(imgs)
    n = _integer(data, "n", 1, MAX_N) or 1
    temperature = _number(data, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(data, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    top_k = _integer(data, "top_k", -(2**31))
    if top_k is not None and top_k < -1:
        raise RequestError(f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k")
    _number(data, "min_p", 0.0, 0.0, 1.0)
    sampling = {k: data[k] for k in ("temperature", "top_p", "top_k", "min_p") if data.get(k) is not None}
    seed = _integer(data, "seed", -(2**63))
    max_tokens = _integer(data, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(data, "max_tokens", 1)
    top_logprobs = _integer(data, "top_logprobs", 0, 20)
    if top_logprobs is not None and not data.get("logprobs"):
        raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    return ChatRequest(
        "\n".join(system),
        "\n\n".join(user),
        tuple(images),
        n,
        temperature,
        seed,
        max_tokens,
        _response_format(data),
        sampling,
        tuple(segments),
        tuple(sizes),
        data["model"],
        (top_logprobs or 0) if data.get("logprobs") else None,
        "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens",
    )


def text_tokens(text: str) -> int:
    """Approximate tokens of a text: 1.3 per whitespace-separated word."""
    return math.ceil(1.3 * len(text.split()))


def truncate_tokens(text: str, limit: int) -> str:
    """The prefix of `text` that counts at most `limit` tokens."""
    keep = max(1, int(limit / 1.3))
    return " ".join(text.split(" ")[:keep])


def image_size(data: bytes) -> tuple[int, int]:
    """Width and height of an encoded image (0, 0 when it cannot be decoded)."""
    import cv2

    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    return (0, 0) if arr is None else (int(arr.shape[1]), int(arr.shape[0]))


def image_tokens(width: int, height: int) -> int:
    """Tokens of an image, as a VLM with 28-pixel patches counts them (at least 4)."""
    return max(4, math.ceil(width / 28) * math.ceil(height / 28))
