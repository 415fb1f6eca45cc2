"""Where an `AgentConfig` comes from, first winning: the options given (`boe.cli.agent_options`) or a LangGraph
context, the ``BOE_<FIELD>`` variables (``OPENAI_BASE_URL`` stands in for ``BOE_BASE_URL``), a TOML (``.toml``) or
JSON file of its fields (``--config``, else ``BOE_CONFIG``; or its ``[agent]`` table), a command's own defaults.
pydantic-settings' sources read the variables and the file; `build` validates once, naming where a bad value came
from (``--k (k): ...``, ``BOE_K (k): ...``, ``--config agent.toml: k: ...``, ``context k: ...``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pydantic_settings as ps
from pydantic import ValidationError

from boe.agent.configuration import AgentConfig
from boe.errors import ConfigError

__all__ = ["Layer", "build", "config_from_env", "environment", "file_layer", "load_config", "make_config", "missing"]

#: How an error names a field of a source, and the values it gives (None: not given).
Layer = tuple[Callable[[str], str], Mapping[str, Any]]


class AgentSettings(ps.BaseSettings, AgentConfig):
    """`AgentConfig` as pydantic-settings' sources read it; a variable stays text, read as an option is."""

    model_config = ps.SettingsConfigDict(env_prefix="BOE_", env_ignore_empty=True, enable_decoding=False)


def build(*layers: Layer, note: str = "") -> AgentConfig:
    """The `AgentConfig` of ``layers``, the first winning; one `ConfigError` naming where a bad value came from."""
    from boe.agent.costs import costs_fields

    values: dict[str, Any] = {}
    where: dict[str, Callable[[str], str]] = {}
    for name, given in reversed(layers):
        for key, value in given.items():
            try:  # costs as text (not JSON) may set the cost mode, basis and file too
                text = key == "costs" and isinstance(value, str) and not value.lstrip().startswith("{")
                fields = costs_fields(value) if text else {} if value is None else {key: value}
            except ConfigError as exc:
                raise ConfigError(f"{name(key)}: {exc}{note}") from None
            values.update(fields)
            where.update(dict.fromkeys(fields, name))
    try:
        return AgentConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(map(str, err["loc"])) or "configuration"
        msg = err["msg"].removeprefix("Value error, ")
        msg = (
            f"unknown field; known: {', '.join(AgentConfig.model_fields)}" if err["type"] == "extra_forbidden" else msg
        )
        raise ConfigError(f"{where.get(field.split('.')[0], str)(field)}: {msg}{note}") from None


def file_layer(path: str | Path, label: str = "--config") -> Layer:
    """The fields a TOML (``.toml``) or JSON file sets."""
    p, toml = Path(path).expanduser(), str(path).lower().endswith(".toml")
    if not p.is_file():
        raise ConfigError(f"{label} {path}: no such file")
    try:
        data: Any = (ps.TomlConfigSettingsSource if toml else ps.JsonConfigSettingsSource)(AgentSettings, p)()
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        hint = "" if toml else "; a TOML file must end in .toml"
        raise ConfigError(f"{label} {path}: not valid {'TOML' if toml else 'JSON'} ({exc}){hint}") from None
    agent = set(data) == {"agent"} and isinstance(data["agent"], dict)
    return (lambda f: f"{label} {path}: {f}"), data["agent"] if agent else data


def environment(file: str | None = None) -> list[Layer]:
    """The ``BOE_<FIELD>`` variables, then a file (``file``: a ``--config``, else ``BOE_CONFIG``)."""
    env = {"base_url": os.environ.get("OPENAI_BASE_URL") or None, **ps.EnvSettingsSource(AgentSettings)()}
    path = file or os.environ.get("BOE_CONFIG")
    files = [file_layer(path, "--config" if file else "BOE_CONFIG")] if path else []
    return [(lambda f: f"BOE_{f.split('.')[0].upper()} ({f})", env), *files]


def missing(layers: list[Layer]) -> list[str]:
    """The required fields no layer gives."""
    return [f for f in ("base_url", "model") if not any(values.get(f) for _, values in layers)]


def make_config(**values: Any) -> AgentConfig:
    """Build an `AgentConfig` (None values left out, costs as text too); one `ConfigError` naming the field."""
    return build((str, values))


def load_config(path: str | Path | None = None, /, **overrides: Any) -> AgentConfig:
    """`AgentConfig` from ``path`` (TOML or JSON; optional) with ``overrides`` on top (None values ignored)."""
    note = f" (configuration from {path} and the options given)" if path is not None else ""
    return build((str, overrides), *([file_layer(path)] if path is not None else []), note=note)


def config_from_env(context: Mapping[str, Any] | None = None) -> AgentConfig:
    """An `AgentConfig` from the environment (`environment`) with a LangGraph context's fields on top."""
    if absent := missing(layers := [(lambda f: f"context {f}", dict(context or {})), *environment()]):
        raise ConfigError(
            f"the agent needs {' and '.join(absent)}: set BOE_BASE_URL and BOE_MODEL (or BOE_CONFIG=file.json), "
            "or pass a configuration to make_graph"
        )
    return build(*layers)
