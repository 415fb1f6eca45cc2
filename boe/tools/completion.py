"""A chat completion read from the server's JSON: token counts and choices, every part checked.

A reply of the wrong shape raises `boe.tools.retry.BadReply` naming what is wrong (the client
retries it like a 5xx), never an AttributeError deep inside the agent.
"""

from __future__ import annotations

from typing import Any

from boe.tools.retry import BadReply

__all__ = ["Reply", "read_completion"]

#: One choice of a reply: its text and its token log-probabilities (``logprobs.content``, when given).
Reply = tuple[str | None, Any]


def _count(usage: dict[str, Any], key: str, where: str = "usage") -> int:
    v = usage.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e12:
        raise BadReply(f"replied with a malformed chat completion ({where}.{key} is {str(v)[:40]!r}, not a count)")
    return int(v)


def _object(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``parent[key]`` as an object (absent or null: empty)."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        shown = f" is {str(value)[:40]!r}, not an object" if key == "usage" else " is not an object"
        raise BadReply(f"replied with a malformed chat completion ({where}{shown})")
    return value


def _choice(i: int, c: Any) -> tuple[int, Reply]:
    """The index, text and token logprobs of ``choices[i]``."""
    if not isinstance(c, dict):
        raise BadReply(f"replied with a malformed chat completion (choices[{i}] is not an object)")
    index = c.get("index", i)
    if isinstance(index, bool) or not isinstance(index, int):
        raise BadReply(f"replied with a malformed chat completion (choices[{i}].index is {str(index)[:20]!r})")
    content = _object(c, "message", f"choices[{i}].message").get("content")
    if isinstance(content, list):  # content parts: their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict)) or None
    if content is not None and not isinstance(content, str):
        raise BadReply(f"replied with a malformed chat completion (choices[{i}].message.content is not text)")
    lp = c.get("logprobs")
    tokens = lp.get("content") if isinstance(lp, dict) and isinstance(lp.get("content"), list) else None
    return index, (content, tokens)


def read_completion(resp: Any) -> tuple[int, int, int, list[Reply]]:
    """Token counts (prompt, completion, cached) and the choices (text, token logprobs) in index order."""
    if not isinstance(resp, dict):
        raise BadReply(f"replied with something that is not a chat completion: {str(resp)[:120]!r}")
    if "choices" not in resp and isinstance(resp.get("error"), (dict, str)):
        err = resp["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise BadReply(f"replied 200 with an error: {str(msg)[:200]!r}")
    choices = resp.get("choices")
    if not isinstance(choices, list):
        raise BadReply(f"replied with something that is not a chat completion: {str(resp)[:120]!r}")
    if not choices:
        raise BadReply("replied with a chat completion without choices")
    usage = _object(resp, "usage", "usage")
    details = _object(usage, "prompt_tokens_details", "usage.prompt_tokens_details")
    pt, ct = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    cached = _count(details, "cached_tokens", "usage.prompt_tokens_details")
    indexed = sorted((_choice(i, c) for i, c in enumerate(choices)), key=lambda t: t[0])
    return pt, ct, cached, [t for _, t in indexed]
