"""Options shared by the commands that talk to a model server: server kind, sampling, extra body, image size."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["BASE_URL_ENV", "endpoint_settings"]

#: Where --base-url is read from when not given (boe's own variable first, then the openai SDK's).
BASE_URL_ENV = ["BOE_BASE_URL", "OPENAI_BASE_URL"]


def _json_object(text: str | None, option: str) -> dict[str, Any] | None:
    from boe.errors import ConfigError

    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option} must be a JSON object, e.g. '{{\"top_k\": 20}}': {exc.msg} at {exc.pos}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option} must be a JSON object, got {type(value).__name__}")
    return value


def endpoint_settings(
    *,
    server: str | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    extra_body: str | None = None,
    judge_extra_body: str | None = None,
    max_pixels: int | None = None,
    pixel_limit: int | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """`make_config` keyword arguments from the command-line options (None: the configuration's default)."""
    values: dict[str, Any] = {
        "server": server,
        "top_p": top_p,
        "top_k": top_k,
        "min_p": min_p,
        "extra_body": _json_object(extra_body, "--extra-body"),
        "judge_extra_body": _json_object(judge_extra_body, "--judge-extra-body"),
        "pixel_limit": pixel_limit,
        "max_pixels": max_pixels,  # 0: no limit
        "max_tokens": max_tokens,
    }
    return {k: v for k, v in values.items() if v is not None}
