"""Small helpers shared by the command modules."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = [
    "JSON_SCHEMAS",
    "Interrupted",
    "alert_console",
    "check_outputs",
    "check_store",
    "err_console",
    "out_console",
    "parse_budgets",
    "parse_list",
    "print_json",
    "progress_bar",
    "quiet",
    "registered",
    "set_quiet",
]

#: The ``schema`` of each ``--json`` document: ``boe.<name>/<version>``. A version changes when a key is removed,
#: renamed or changes meaning (added keys keep it). docs/json-output.md says what each version holds.
JSON_SCHEMAS = {
    "ask": 1,
    "batch": 1,
    "batch.dry-run": 1,
    "calibrate": 1,
    "costs": 1,
    "demo": 1,
    "import": 1,
    "plugins": 1,
    "replay": 1,
    "report": 1,
    "show": 1,
    "theory.factor-code": 1,
    "theory.noisy": 1,
}

_QUIET = [False]


def set_quiet(value: bool) -> None:
    """``boe -q``: no progress bars, status lines or notes on standard error (errors still show)."""
    _QUIET[0] = value
    err_console().quiet = value


def quiet() -> bool:
    """True under ``boe -q``."""
    return _QUIET[0]


def print_json(name: str, data: dict[str, Any], *, indent: int | None = 2) -> None:
    """Write a ``--json`` document to standard output, its ``schema`` key (``boe.<name>/<version>``) first."""
    doc = {"schema": f"boe.{name}/{JSON_SCHEMAS[name]}", **data}
    sys.stdout.write(json.dumps(doc, indent=indent, default=str) + "\n")


@cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@cache
def alert_console() -> Console:
    """Standard error for what ``-q`` never hides (errors)."""
    from rich.console import Console

    return Console(stderr=True)


@cache
def out_console() -> Console:
    from rich.console import Console

    return Console()


def progress_bar(console: Console, show: bool) -> Progress:
    """A transient bar with the stage, count and elapsed time (shown only when ``show``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not show,
    )


def registered(registry: Any, keep: Callable[[Any], bool] | None = None) -> str:
    """The names a registry holds (its built-ins; ``boe plugins`` lists what plugins add), for a help text."""
    return ", ".join(n for n in registry.names(discover=False) if keep is None or keep(registry.get_obj(n)))


def parse_list(text: str) -> list[str]:
    """Comma-separated values, blanks dropped, order kept, duplicates removed."""
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if part and part not in out:
            out.append(part)
    return out


def parse_budgets(text: str) -> list[float]:
    """Comma-separated non-negative budgets."""
    from boe.errors import ConfigError

    out = []
    for part in parse_list(text):
        try:
            b = float(part)
        except ValueError:
            raise ConfigError(f"--budget: {part!r} is not a number") from None
        if not b >= 0:
            raise ConfigError(f"--budget: budgets must be >= 0, got {part}")
        out.append(b)
    if not out:
        raise ConfigError("--budget: give at least one budget")
    return out


def check_outputs(*outputs: tuple[str, str | Path | None], folders: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, output paths that cannot be written: (option, path) pairs, None skipped.

    A file must not be a folder and its folder must exist and take a new file
    (one is created and removed: permission bits say nothing to root, nor
    about /proc); an existing device or pipe (``/dev/stdout``) must open for
    writing; ``-`` is standard output. Options named in ``folders`` take a
    folder (created with its parents): it must be a folder if it exists, and
    its nearest existing parent must take a new file.
    """
    import stat

    from boe.errors import ConfigError

    for option, value in outputs:
        if value is None or str(value) == "-":
            continue
        path = Path(value).expanduser()
        if option in folders:
            if path.exists() and not path.is_dir():
                raise ConfigError(f"{option} {value}: is a file, not a folder")
            base = path
            while not base.exists() and base != base.parent:
                base = base.parent
            if not base.is_dir():
                raise ConfigError(f"{option} {value}: {base} is a file, not a folder")
            _probe_folder(option, value, base)
            continue
        if path.is_dir():
            raise ConfigError(f"{option} {value}: is a folder; give a file name")
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):  # a device or a pipe: written in place
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                raise ConfigError(f"{option} {value}: cannot be written ({exc.strerror})") from None
            continue
        parent = path.parent
        if not parent.is_dir():
            raise ConfigError(f"{option} {value}: the folder {parent} does not exist")
        _probe_folder(option, value, parent)
        if mode is not None and not os.access(path, os.W_OK):
            raise ConfigError(f"{option} {value}: the file exists and is not writable")


def check_store(option: str, url: str | Path | None) -> None:
    """`check_outputs` for the file of an SQLite store a command writes to (other back ends are left alone)."""
    if url is None:
        return
    from boe.db.engine import sqlite_path, to_url
    from boe.errors import StoreError

    try:
        path = sqlite_path(to_url(url))
    except StoreError:
        return  # not a database URL: opening the store says so
    check_outputs((option, path))


def _probe_folder(option: str, value: str | Path, folder: Path) -> None:
    """`ConfigError` unless a new file can be created in ``folder`` (it is removed at once)."""
    import tempfile

    from boe.errors import ConfigError

    try:
        fd, name = tempfile.mkstemp(prefix=".boe-write-test-", dir=folder)
    except OSError as exc:
        raise ConfigError(f"{option} {value}: cannot write in the folder {folder} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(name)


class Interrupted(Exception):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) that a command has already explained (what was kept, how to
    resume): nothing more is printed."""

    def __init__(self, code: int = 130) -> None:
        super().__init__(code)
        self.code = code
