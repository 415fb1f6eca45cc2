"""An `AgentConfig` from a TOML or JSON file of its fields, with overrides on top.

The file holds `AgentConfig` field names at the top level (``base_url``,
``k``, ``grounded_view``, ``costs = {structured = 1, ...}``); an ``[agent]``
table is read the same way. What a caller passes as overrides wins over the
file, and the file over the configuration's defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boe.errors import ConfigError

if TYPE_CHECKING:
    from boe.agent.configuration import AgentConfig

__all__ = ["load_agent_config", "read_config_file"]


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The `AgentConfig` fields a TOML (``.toml``) or JSON file sets; unknown fields are refused by name."""
    from boe.agent.configuration import AgentConfig

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"--config {path}: no such file")
    text = p.read_text(encoding="utf-8")
    data: Any
    if p.suffix.lower() == ".toml":
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--config {path}: not valid JSON ({exc.msg} at line {exc.lineno}); a TOML file must end in .toml"
            ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the file must hold a table of AgentConfig fields")
    if set(data) == {"agent"} and isinstance(data["agent"], dict):
        data = data["agent"]
    known = AgentConfig.model_fields
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ConfigError(f"--config {path}: unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return dict(data)


def load_agent_config(path: str | Path | None = None, /, **overrides: Any) -> AgentConfig:
    """`AgentConfig` from ``path`` (TOML or JSON; optional) with ``overrides`` on top (None values ignored)."""
    from boe.agent.configuration import make_config

    values: dict[str, Any] = read_config_file(path) if path is not None else {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return make_config(**values)
    except ConfigError as exc:
        if path is None:
            raise
        raise ConfigError(f"{exc} (configuration from {path} and the options given)") from None
