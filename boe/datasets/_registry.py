"""Dataset formats registered by name, format detection, and `load_dataset`."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boe.core.registry import Registry
from boe.datasets._context import LoadContext
from boe.datasets._item import Dataset, DatasetItem, LoadIssue
from boe.errors import ConfigError, InputError

__all__ = ["FORMATS", "DatasetFormat", "available_formats", "detect_format", "load_dataset", "register_format"]

Loader = Callable[..., Iterable[DatasetItem]]


@dataclass(frozen=True)
class DatasetFormat:
    """One on-disk layout: how to load it, how to recognise it, where its root is."""

    name: str
    load: Loader  # load(path, ctx, **options) -> items
    sniff: Callable[[Path], bool] | None = None
    root: Callable[[Path], Path] | None = None  # the dataset root for a given path (default: the dir itself)
    description: str = ""
    exclusive: bool = False  # a sniff match is certain (a marker file names the format): no other format is tried
    dataset_name: Callable[[Path], str] | None = None  # the dataset's name for a given path (default: the format's)

    @property
    def options(self) -> dict[str, Any]:
        """The keyword options the loader accepts, with their defaults."""
        params = inspect.signature(self.load).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


# The built-in formats live in modules that register themselves on import (the first time one is looked up).
_BUILTIN_MODULES = ("_vqarad", "_vqamed", "_slake", "_pathvqa", "_pmcvqa", "_medxpert", "_sim", "_hf")


def _builtins() -> None:
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"boe.datasets.{mod}")


#: Dataset formats by name (a duplicate name is refused unless ``override=True``).
FORMATS: Registry[DatasetFormat] = Registry("formats", "dataset format", _builtins)


def register_format(
    name: str,
    *,
    sniff: Callable[[Path], bool] | None = None,
    root: Callable[[Path], Path] | None = None,
    description: str = "",
    exclusive: bool = False,
    dataset_name: Callable[[Path], str] | None = None,
    override: bool = False,
) -> Callable[[Loader], Loader]:
    """Decorator: make ``load(path, ctx, **options)`` available to `load_dataset` as ``format=name``.

    ``sniff(path)`` says whether a path looks like this format (for
    `detect_format`); an ``exclusive`` format's match ends detection before
    any other sniffer opens a file; ``dataset_name(path)`` names a dataset
    loaded without ``name=`` (default: the format's name).
    """

    def deco(fn: Loader) -> Loader:
        old = FORMATS._entries.get(name)
        if old is not None and old.obj is not None and old.obj.load is fn and not override:
            return fn  # the same loader registered again (a module imported twice)
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        where = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}"
        FORMATS.add(
            name, DatasetFormat(name, fn, sniff, root, doc, exclusive, dataset_name), override=override, where=where
        )
        return fn

    return deco


def available_formats() -> dict[str, str]:
    """Format name -> one-line description."""
    return {name: f.description for name, f in sorted(FORMATS.items())}


def detect_format(path: str | Path, *, option: str = "format=") -> str:
    """The one format whose layout ``path`` matches; `InputError` (naming ``option``) when none or several do."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"dataset path {str(p)!r} does not exist")
    for name, f in FORMATS.items():
        if f.exclusive and f.sniff is not None and f.sniff(p):
            return name
    hits = [name for name, f in FORMATS.items() if not f.exclusive and f.sniff is not None and f.sniff(p)]
    if len(hits) == 1:
        return hits[0]
    known = ", ".join(sorted(FORMATS))
    if not hits:
        raise InputError(f"cannot tell the dataset format of {str(p)!r}; pass {option} one of: {known}")
    raise InputError(f"{str(p)!r} matches several dataset formats ({', '.join(sorted(hits))}); pass {option}")


def load_dataset(
    path: str | Path,
    format: str | None = None,
    *,
    root: str | Path | None = None,
    name: str | None = None,
    strict: bool = False,
    require_images: bool = True,
    on_issue: Callable[[LoadIssue], None] | None = None,
    **options: Any,
) -> Dataset:
    """Load a benchmark from its published layout (a directory or one file) into `DatasetItem`s.

    ``format`` is detected when left out and the layout is unambiguous.
    ``root`` is the directory every image must lie in (default: the
    format's idea of the dataset root). A malformed record, an image path
    outside the root, a duplicate id, or (with ``require_images``) a
    missing image file skips that record and is reported in
    ``Dataset.issues`` and to ``on_issue``; ``strict=True`` raises
    `DatasetRecordError` instead. Format ``options`` (e.g. ``split``,
    ``keep_yes_no``, ``hide_options``) are checked before anything is read.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"dataset path {str(p)!r} does not exist")
    fmt_name = format or detect_format(p)
    fmt = FORMATS.get(fmt_name)
    if fmt is None:
        raise ConfigError(f"unknown dataset format {fmt_name!r}; known: {', '.join(sorted(FORMATS))}")
    unknown = sorted(set(options) - set(fmt.options))
    if unknown:
        accepted = ", ".join(fmt.options) or "none"
        raise ConfigError(f"format {fmt_name!r} has no option(s) {unknown}; it accepts: {accepted}")
    if root is not None:
        root_dir = Path(root).expanduser()
    elif fmt.root is not None:
        root_dir = fmt.root(p)
    else:
        root_dir = p if p.is_dir() else p.parent
    if not root_dir.is_dir():
        raise InputError(f"dataset root {str(root_dir)!r} is not a directory")
    name = name or (fmt.dataset_name(p) if fmt.dataset_name is not None else fmt_name)
    ctx = LoadContext(root_dir, name, strict=strict, require_images=require_images, on_issue=on_issue)
    items = tuple(fmt.load(p, ctx, **options))
    recorded = {
        "format": fmt_name,
        "path": str(p.resolve()),
        "strict": strict,
        "require_images": require_images,
        **fmt.options,
        **options,
    }
    return Dataset(name, fmt_name, ctx.root, items, tuple(ctx.issues), dict(ctx.dropped), recorded)
