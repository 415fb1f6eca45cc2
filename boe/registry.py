"""Plugins: third-party packages register kinds, tools, policies, segmenters, dataset formats and store backends.

A plugin is a distribution with an entry point in the group ``boe.plugins``::

    [project.entry-points."boe.plugins"]
    chartqa = "boe_chartqa:register"      # a register() callable, or a module that registers on import

Entry points are loaded lazily and once: the first time any registry is
listed or asked for a name it does not hold. Registrations made while a
plugin loads are attributed to its distribution; a name a built-in (or
another plugin) already holds is refused unless the plugin passes
``override=True``. ``BOE_DISABLE_PLUGINS`` (comma-separated entry-point or
distribution names, or ``all``) hides plugins.
"""

from __future__ import annotations

import importlib
import os
import types
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from boe.core import registry as _core
from boe.core.registry import Registry, all_registries, source_scope
from boe.errors import ConfigError
from boe.kinds import kind_names

__all__ = ["GROUP", "PluginInfo", "Registry", "listing", "load_entry_point", "plugins", "registries"]

GROUP = "boe.plugins"


@dataclass
class PluginInfo:
    """One entry point of the ``boe.plugins`` group and what became of it."""

    name: str
    value: str
    dist: str
    error: str | None = None


_PLUGINS: list[PluginInfo] = []


def _disabled() -> set[str]:
    raw = os.environ.get("BOE_DISABLE_PLUGINS", "")
    return {p.strip() for p in raw.split(",") if p.strip()}


def load_entry_point(ep: EntryPoint, dist: str) -> None:
    """Import one plugin entry point and run its ``register()`` with registrations attributed to ``dist``."""
    with source_scope(dist):
        obj = ep.load()
        if isinstance(obj, types.ModuleType):
            register = getattr(obj, "register", None)
            if callable(register):
                register()
        elif callable(obj):
            obj()
        else:
            raise ConfigError(f"plugin entry point {ep.name} = {ep.value!r} is neither a module nor a callable")


def load_entry_points() -> None:
    """Load every plugin of the ``boe.plugins`` group (the registries' plugin loader, which `boe` installs and
    `boe.core.registry.load_plugins` runs once); a plugin that fails is reported with a warning and skipped."""
    off = _disabled()
    for ep in entry_points(group=GROUP):
        dist = ep.dist.name if ep.dist is not None else ep.module.split(".")[0]
        if "all" in off or ep.name in off or dist in off:
            continue
        info = PluginInfo(ep.name, ep.value, dist)
        _PLUGINS.append(info)
        try:
            load_entry_point(ep, dist)
        except Exception as exc:  # a refused or broken plugin must not take the built-ins down with it
            info.error = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
            import warnings

            warnings.warn(f"boe plugin {ep.name!r} from {dist!r} was not loaded: {info.error}", stacklevel=2)


#: Modules whose import creates the registries (each registry lives beside what it registers).
_REGISTRY_MODULES = (
    "boe.kinds",
    "boe.core.policies",
    "boe.tools.protocol",
    "boe.tools.segment",
    "boe.datasets._registry",
    "boe.db.backends",
)


def registries() -> dict[str, Any]:
    """Every registry by its plural noun, created if need be (imports no optional dependency); ``tools`` is a view
    of the kinds."""
    for mod in _REGISTRY_MODULES:
        importlib.import_module(mod)
    from boe.kinds import TOOLS

    out: dict[str, Any] = {}
    for noun, reg in all_registries().items():
        out[noun] = reg
        if noun == "kinds":
            out[TOOLS.noun] = TOOLS
    return out


def plugins() -> list[PluginInfo]:
    """The entry points found in the ``boe.plugins`` group (loading them if not done yet)."""
    _core.load_plugins()
    return list(_PLUGINS)


def listing() -> dict[str, list[dict[str, str]]]:
    """Every registered name per registry: ``{noun: [{name, source, target}]}`` (what ``boe plugins`` prints)."""
    out: dict[str, list[dict[str, str]]] = {}
    for noun, reg in registries().items():
        if reg.listed:
            out[noun] = [{"name": e.name, "source": e.source, "target": e.spec()} for e in reg.entries()]
    order = {name: n for n, name in enumerate(kind_names())}
    out["kinds"].sort(key=lambda e: order.get(e["name"], len(order)))
    return out
