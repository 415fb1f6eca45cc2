"""Where an `AgentConfig` comes from: one model, an adapter per source, one precedence.

Each source gives `AgentConfig` field values: the options given on the command line (`boe.cli.agent_options`),
the context a LangGraph server or Studio passes the graph, the environment (``BOE_<FIELD>``, JSON for lists and
mappings; ``OPENAI_BASE_URL`` stands in for ``BOE_BASE_URL``; ``BOE_CONFIG`` names a file), and a TOML (``.toml``)
or JSON file of its fields (an ``[agent]`` table is read the same way). pydantic-settings reads the environment and
the files; `resolve` layers the sources (a later one wins) and validates once, naming where a bad value came from
(``--k (k): ...``, ``BOE_K: ...``, ``--config agent.toml: k: ...``). ``costs`` may be text everywhere (see
`boe.agent.costs.costs_fields`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_origin

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    JsonConfigSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from boe.agent.configuration import AgentConfig
from boe.errors import ConfigError

__all__ = [
    "AgentSettings",
    "Source",
    "config_from_env",
    "environment",
    "file_values",
    "missing",
    "load_config",
    "make_config",
    "resolve",
]

#: A source: how an error names one of its fields, and the values it gives (None: not given).
Source = tuple[Callable[[str], str], Mapping[str, Any]]


class AgentSettings(BaseSettings, AgentConfig):
    """`AgentConfig` as pydantic-settings' sources read it (``BOE_`` variables, TOML and JSON files); variables stay
    text, read by `resolve` like the command line's."""

    model_config = SettingsConfigDict(
        env_prefix="BOE_", case_sensitive=False, env_ignore_empty=True, enable_decoding=False
    )


#: The fields of lists and mappings: given as text, they are JSON.
_EXAMPLE = {dict: """object, e.g. '{"top_k": 20}'""", list: """list, e.g. '["vlm_factor"]'"""}
_JSON = {name for name, f in AgentConfig.model_fields.items() if get_origin(f.annotation) in (dict, list, tuple)}


def resolve(sources: Sequence[Source], note: str = "") -> AgentConfig:
    """The `AgentConfig` of ``sources`` layered in order (a later one wins); one `ConfigError` naming the source of
    a bad value (``note`` is added to it)."""
    values: dict[str, Any] = {}
    where: dict[str, Callable[[str], str]] = {}
    for name_of, given in sources:
        for key, value in given.items():
            if value is None:
                continue
            try:
                fields = _from_text(key, value) if isinstance(value, str) else {key: value}
            except ConfigError as exc:
                raise ConfigError(f"{name_of(key)}: {exc}{note}") from None
            values.update(fields)
            where.update(dict.fromkeys(fields, name_of))
    try:
        return AgentConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "configuration"
        name = where[str(err["loc"][0])](field) if err["loc"] and str(err["loc"][0]) in where else field
        raise ConfigError(f"{name}: {err['msg'].removeprefix('Value error, ')}{note}") from None


def _from_text(key: str, text: str) -> dict[str, Any]:
    """The fields a text value sets: costs as `costs_fields` reads them, a list or mapping field as JSON."""
    from boe.agent.costs import costs_fields

    if key == "costs" and not text.lstrip().startswith("{"):
        return costs_fields(text)
    if key not in _JSON | {"costs"}:
        return {key: text}
    want = list if get_origin(AgentConfig.model_fields[key].annotation) in (list, tuple) else dict
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"must be a JSON {_EXAMPLE[want]}: {exc.msg} at {exc.pos}") from None
    if not isinstance(value, want):
        raise ConfigError(f"must be a JSON {_EXAMPLE[want]}; got {type(value).__name__}")
    return {key: value}


def file_values(path: str | Path, label: str = "--config") -> dict[str, Any]:
    """The fields a TOML (``.toml``) or JSON file sets; unknown fields are refused by name."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{label} {path}: no such file")
    toml = p.suffix.lower() == ".toml"
    try:
        source = TomlConfigSettingsSource(AgentSettings, p) if toml else JsonConfigSettingsSource(AgentSettings, p)
        data: Any = source()
    except ValueError as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        hint = "" if toml else "; a TOML file must end in .toml"
        raise ConfigError(f"{label} {path}: not valid {'TOML' if toml else 'JSON'} ({exc}){hint}") from None
    if set(data) == {"agent"} and isinstance(data["agent"], dict):
        data = data["agent"]
    if unknown := sorted(k for k in data if k not in AgentConfig.model_fields):
        known = ", ".join(AgentConfig.model_fields)
        raise ConfigError(f"{label} {path}: unknown field(s) {', '.join(unknown)}; known: {known}")
    return dict(data)


class _Env(EnvSettingsSource):
    """The ``BOE_<FIELD>`` variables of a given mapping (`os.environ`, or a test's)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        super().__init__(AgentSettings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self.env.items() if v}


def environment(env: Mapping[str, str], file: str | None = None) -> list[Source]:
    """The sources under the options given: a file (``file``, a ``--config``, else ``BOE_CONFIG``), then the
    ``BOE_<FIELD>`` variables (``OPENAI_BASE_URL`` stands in for ``BOE_BASE_URL``)."""
    path, label = (file, "--config") if file else (env.get("BOE_CONFIG"), "BOE_CONFIG")
    values = {"base_url": env.get("OPENAI_BASE_URL") or None, **_Env(env)()}
    file_layer: Source = (lambda f: f"{label} {path}: {f}", file_values(path, label) if path else {})
    return [file_layer, (lambda f: f"BOE_{f.split('.')[0].upper()} ({f})", values)]


def missing(sources: Sequence[Source]) -> list[str]:
    """The required fields no source gives."""
    return [f for f in ("base_url", "model") if not any(vals.get(f) for _, vals in sources)]


def load_config(path: str | Path | None = None, /, **overrides: Any) -> AgentConfig:
    """`AgentConfig` from ``path`` (TOML or JSON; optional) with ``overrides`` on top (None values ignored)."""
    note = f" (configuration from {path} and the options given)" if path is not None else ""
    file = file_values(path) if path is not None else {}
    return resolve([(lambda f: f"--config {path}: {f}", file), (str, overrides)], note)


def config_from_env(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """An `AgentConfig` from the environment (`environment`) with ``overrides`` (a LangGraph context's fields)."""
    layers = [*environment(os.environ if env is None else env), (lambda f: f"context {f}", dict(overrides or {}))]
    if absent := missing(layers):
        raise ConfigError(
            f"the agent needs {' and '.join(absent)}: set BOE_BASE_URL and BOE_MODEL (or BOE_CONFIG=file.json), "
            "or pass a configuration to make_graph"
        )
    return resolve(layers)


def make_config(**values: Any) -> AgentConfig:
    """Build an `AgentConfig` (None values left out, costs as text too); one `ConfigError` naming the field."""
    return resolve([(str, values)])
