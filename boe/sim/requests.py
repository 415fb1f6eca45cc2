"""Reference requests of docs/prompt-protocol.md (for tests, benchmarks and third-party examples).

The agent has its own prompt templates; these are the minimal messages that
follow the protocol, so the simulator can be exercised without the agent.
"""

from __future__ import annotations

import base64
import html
from typing import Any

__all__ = [
    "GENERATION_SCHEMA",
    "SLOTS_SCHEMA",
    "VERDICT_SCHEMA",
    "claim_extraction_request",
    "data_url",
    "factor_verdict_request",
    "generation_request",
    "whole_verdict_request",
]

_NULLABLE = {"type": ["string", "null"]}
SLOTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {k: dict(_NULLABLE) for k in ("modality", "region", "plane", "finding", "attribute")},
    "required": ["modality", "region", "plane", "finding", "attribute"],
    "additionalProperties": False,
}
GENERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, **SLOTS_SCHEMA["properties"]},
    "required": ["answer", *SLOTS_SCHEMA["required"]],
    "additionalProperties": False,
}
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["confirm", "reject", "unresolved"]},
        "rationale": {"type": "string"},
    },
    "required": ["verdict", "rationale"],
    "additionalProperties": False,
}


def data_url(png: bytes, mime: str = "image/png") -> str:
    """A base64 data URL for an encoded image."""
    return f"data:{mime};base64,{base64.b64encode(png).decode('ascii')}"


def _fmt(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _messages(task: str, image: bytes | None, text: str) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if image is not None:
        parts.append({"type": "image_url", "image_url": {"url": data_url(image)}})
    parts.append({"type": "text", "text": text})
    return [
        {"role": "system", "content": f"TASK: {task}\nYou are a careful radiology assistant. Reply in JSON."},
        {"role": "user", "content": parts},
    ]


def _question_block(question: str, options: dict[str, str] | None) -> str:
    text = f"<question>{html.escape(question, quote=False)}</question>"
    if options:
        lines = "\n".join(f"{k}: {html.escape(v, quote=False)}" for k, v in options.items())
        text += f"\n<options>\n{lines}\n</options>"
    return text


def generation_request(
    image: bytes, question: str, options: dict[str, str] | None = None, **params: Any
) -> dict[str, Any]:
    """Keyword arguments for `chat.completions.create`: K answers with their five slots."""
    text = _question_block(question, options) + "\nAnswer the question and fill every slot."
    return {
        "messages": _messages("boe_generation", image, text),
        "response_format": _fmt("boe_generation", GENERATION_SCHEMA),
        **params,
    }


def claim_extraction_request(question: str, candidate: str, **params: Any) -> dict[str, Any]:
    """Keyword arguments for extracting the five slots from one candidate's text."""
    text = (
        _question_block(question, None)
        + f"\n<candidate_response>{html.escape(candidate, quote=False)}</candidate_response>"
    )
    return {
        "messages": _messages("boe_claim_extraction", None, text),
        "response_format": _fmt("boe_claim_extraction", SLOTS_SCHEMA),
        **params,
    }


def factor_verdict_request(
    image: bytes, question: str, slot: str, value: str, *, kind: str = "whole", figure: str = "f0", **params: Any
) -> dict[str, Any]:
    """Keyword arguments for judging one claim on a view of the figure."""
    text = (
        f'<view kind="{kind}" figure="{html.escape(figure)}"/>\n'
        + _question_block(question, None)
        + f'\n<claim slot="{html.escape(slot)}">{html.escape(value, quote=False)}</claim>\n'
        + "Does the image support this claim?"
    )
    return {
        "messages": _messages("boe_factor_verdict", image, text),
        "response_format": _fmt("boe_factor_verdict", VERDICT_SCHEMA),
        **params,
    }


def whole_verdict_request(
    image: bytes, question: str, candidate: str, options: dict[str, str] | None = None, **params: Any
) -> dict[str, Any]:
    """Keyword arguments for judging a whole candidate response against the image."""
    text = (
        _question_block(question, options)
        + f"\n<candidate_response>{html.escape(candidate, quote=False)}</candidate_response>\n"
        + "Is the candidate's answer correct?"
    )
    return {
        "messages": _messages("boe_whole_verdict", image, text),
        "response_format": _fmt("boe_whole_verdict", VERDICT_SCHEMA),
        **params,
    }
