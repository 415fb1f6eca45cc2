"""One registry shape for everything registered by name (policies, kinds, tools, segmenters, formats, stores).

An entry is an object or a lazy ``"module:attr"`` string imported on first
use; each remembers its source (the distribution that registered it, ``boe``
for built-ins). A duplicate name is refused unless ``override=True``. This
module does no I/O and imports nothing above the core: plugin discovery
(entry points, `boe.registry`) is a hook that ``import boe`` installs with
`set_plugin_loader`; it runs once, the first time any registry is listed or
asked for a name it does not hold.

The ledger reader needs to know the registered action kinds (their targets, and which the ledger format
itself lists) but may not import them: the layer that owns the kinds installs a function that lists them
(`set_kind_source`, done when `boe` is imported), and `ledger_kinds` / `ledger_kind` read through it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from boe.errors import ConfigError

__all__ = [
    "BUILTIN",
    "DISTRIBUTION",
    "Entry",
    "KindInfo",
    "Registry",
    "all_registries",
    "current_source",
    "ledger_kind",
    "ledger_kinds",
    "load_plugins",
    "set_kind_source",
    "set_plugin_loader",
    "source_scope",
]

T = TypeVar("T")

#: Who registrations made by this package are attributed to.
BUILTIN = "boe"
#: The distribution that ships the built-ins (what a user installs; never the unrelated PyPI project ``boe``).
DISTRIBUTION = "best-of-evidence"

_REGISTRIES: dict[str, Registry[Any]] = {}
_loader: Callable[[], None] | None = None
_loaded = False
_source_stack: list[str] = []


def set_plugin_loader(loader: Callable[[], None] | None) -> None:
    """Install the function that discovers third-party plugins (called at most once, lazily)."""
    global _loader, _loaded
    _loader = loader
    _loaded = False


def load_plugins() -> None:
    """Run the plugin loader once (no-op without one)."""
    global _loaded
    if _loaded or _loader is None:
        return
    _loaded = True
    _loader()


@dataclass(frozen=True)
class KindInfo:
    """What the ledger reader knows of a registered action kind."""

    target: Literal["claim", "response", "answer"]
    package: str  # the distribution that defines it (`DISTRIBUTION` for a built-in kind)
    order: int  # menu order
    judged: bool  # its check is a model call
    #: the ledger format whose own kind list holds it (spec sections 1 and 8); None: a record using it declares it
    #: in its ``kinds`` (format 1.2)
    ledger: str | None = None


_kind_source: Callable[[], Mapping[str, KindInfo]] = dict


def set_kind_source(source: Callable[[], Mapping[str, KindInfo]]) -> None:
    """Install the function listing the registered action kinds (name -> `KindInfo`; the same mapping object
    until a kind is registered, so readers may cache what they derive from it). It must not discover plugins."""
    global _kind_source
    _kind_source = source


def ledger_kinds() -> Mapping[str, KindInfo]:
    """The action kinds registered so far (built-ins and the plugins loaded yet)."""
    return _kind_source()


def ledger_kind(name: str) -> KindInfo | None:
    """One registered action kind (plugins are discovered on a miss), or None."""
    info = _kind_source().get(name)
    if info is None:
        load_plugins()
        info = _kind_source().get(name)
    return info


class _SourceScope:
    def __init__(self, source: str) -> None:
        self.source = source

    def __enter__(self) -> None:
        _source_stack.append(self.source)

    def __exit__(self, *exc: object) -> None:
        _source_stack.pop()


def source_scope(source: str) -> _SourceScope:
    """A context in which registrations are attributed to ``source`` (a plugin's distribution)."""
    return _SourceScope(source)


def current_source() -> str:
    """Who registrations are attributed to now ("boe" outside a plugin's loading)."""
    return _source_stack[-1] if _source_stack else BUILTIN


def all_registries() -> dict[str, Registry[Any]]:
    """Every registry by its plural noun ("policies", "kinds", ...), in creation order."""
    return dict(_REGISTRIES)


@dataclass
class Entry(Generic[T]):
    """One registered name: the object (or where to import it from) and who registered it."""

    name: str
    target: str | None  # "module:attr" for a lazy entry
    obj: T | None
    source: str
    where: str | None = None  # what to show for an object that is no class or function

    @property
    def loaded(self) -> bool:
        return self.obj is not None

    def spec(self) -> str:
        """Where the object lives ("module:qualname")."""
        if self.target is not None:
            return self.target
        if self.where is not None:
            return self.where
        return f"{getattr(self.obj, '__module__', '?')}:{getattr(self.obj, '__qualname__', type(self.obj).__name__)}"


def _own_import(obj: object, where: str | None) -> bool:
    """A registration this package's code makes while it is imported (a built-in module's decorators, or a lazy
    entry into this package): built-in, even when a plugin's import is what imports that module."""
    if isinstance(obj, str):
        return _ours(obj.partition(":")[0])
    module = (where or "").partition(":")[0] or getattr(obj, "__module__", None)
    spec = getattr(sys.modules.get(module or ""), "__spec__", None)
    return _ours(module) and bool(getattr(spec, "_initializing", False))


def _ours(module: str | None) -> bool:
    return module is not None and (module == "boe" or module.startswith("boe."))


def _same(target: str, obj: object) -> bool:
    mod, _, attr = target.partition(":")
    return getattr(obj, "__module__", None) == mod and getattr(obj, "__qualname__", None) == attr


class Registry(Mapping[str, T]):
    """Name -> object, with lazy entries, refusing duplicates unless overridden, and plugin discovery on a miss."""

    def __init__(
        self, noun: str, what: str, builtins: Callable[[], None] | None = None, *, listed: bool = True
    ) -> None:
        self.noun = noun  # plural, for listings ("policies")
        self.what = what  # singular, for messages ("policy")
        self.listed = listed  # shown by `boe plugins` (an internal mirror of another registry is not)
        self._entries: dict[str, Entry[T]] = {}
        self._builtins = builtins  # registers built-ins that are not lazy entries (run once, before a miss)
        _REGISTRIES[noun] = self

    def set_builtins(self, fill: Callable[[], None]) -> None:
        """Install the function that registers the built-ins that are not lazy entries (run once, before the first
        listing or miss)."""
        self._builtins = fill

    def _fill_builtins(self) -> None:
        if self._builtins is not None:
            fill, self._builtins = self._builtins, None
            with source_scope(BUILTIN):  # even when a plugin's registration is what triggers it
                fill()

    def _fill(self) -> None:
        self._fill_builtins()
        load_plugins()

    def add(
        self, name: str, obj: T | str, *, override: bool = False, source: str | None = None, where: str | None = None
    ) -> None:
        """Register ``obj`` (or a lazy ``"module:attr"``) as ``name``; a taken name needs ``override=True``."""
        src = source or (BUILTIN if _own_import(obj, where) else current_source())
        self._fill_builtins()  # a built-in must be there to be refused as a duplicate
        old = self._entries.get(name)
        if old is not None and not override:
            if isinstance(obj, str):
                if old.target == obj:
                    return
            elif old.obj is obj or (old.obj is None and old.target and _same(old.target, obj)):
                old.obj = obj  # a lazy built-in entry resolving itself (its module registers on import)
                return
            raise ConfigError(
                f"{self.what} {name!r} is already registered by {old.source!r} ({old.spec()}); "
                f"{src!r} cannot register it again without override=True"
            )
        if isinstance(obj, str):
            self._entries[name] = Entry(name, obj, None, src)
        else:
            self._entries[name] = Entry(name, None, obj, src, where)

    def register(self, name: str, *, override: bool = False) -> Callable[[Any], Any]:
        """Decorator form of `add`."""

        def deco(obj: Any) -> Any:
            self.add(name, obj, override=override)
            return obj

        return deco

    def entry(self, name: str) -> Entry[T]:
        """The entry for ``name`` (plugins are discovered on a miss); `ConfigError` naming the known ones."""
        if name not in self._entries:
            self._fill()
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(f"unknown {self.what} {name!r}; known: {', '.join(sorted(self._entries))}") from None

    def get_obj(self, name: str) -> T:
        """The object for ``name``, importing a lazy entry on first use."""
        e = self.entry(name)
        if e.obj is None:
            assert e.target is not None
            mod, _, attr = e.target.partition(":")
            obj: Any = importlib.import_module(mod)
            for part in attr.split("."):
                obj = getattr(obj, part)
            e.obj = obj
        assert e.obj is not None
        return e.obj

    def names(self, *, discover: bool = True) -> list[str]:
        """The registered names in registration order; ``discover=False`` lists the built-ins and what is
        registered so far without loading plugins (for help texts)."""
        self._fill() if discover else self._fill_builtins()
        return list(self._entries)

    def entries(self) -> list[Entry[T]]:
        """Every entry (plugins discovered first), in registration order."""
        self._fill()
        return list(self._entries.values())

    def pop(self, name: str, default: Any = None) -> Any:
        """Remove ``name`` (for tests and plugins replacing themselves); its object or ``default``."""
        e = self._entries.pop(name, None)
        return default if e is None else e.obj

    def __getitem__(self, name: str) -> T:
        try:
            return self.get_obj(name)
        except ConfigError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._entries:
            self._fill()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        self._fill()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self._fill()
        return len(self._entries)
