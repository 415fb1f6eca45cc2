"""A chat-completion reply as an OpenAI-compatible server sends it, for httpx2 mock transports."""

from __future__ import annotations

from typing import Any

import httpx2


def chat_reply(body: dict[str, Any], texts: list[str], usage: tuple[int, int] = (50, 5)) -> httpx2.Response:
    """200 with one choice per text; usage counts the prompt once and ``usage[1]`` tokens per completion."""
    return httpx2.Response(
        200,
        json={
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                for i, t in enumerate(texts)
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1] * len(texts),
                "total_tokens": usage[0] + usage[1] * len(texts),
                "prompt_tokens_details": {"cached_tokens": 7},
            },
        },
    )
