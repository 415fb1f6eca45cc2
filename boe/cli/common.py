"""Small helpers shared by the command modules."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["Interrupted", "check_outputs", "err_console", "out_console", "parse_list", "parse_budgets", "progress_bar"]


@cache
def err_console() -> Console:
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

    A file's folder must exist and be writable and the path must not be a
    folder; ``-`` is standard output. Options named in ``folders`` take a
    folder (created with its parents): it must be a folder if it exists, and
    its nearest existing parent must be writable.
    """
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
            if not os.access(base, os.W_OK | os.X_OK):
                raise ConfigError(f"{option} {value}: cannot write in the folder {base}")
            continue
        if path.is_dir():
            raise ConfigError(f"{option} {value}: is a folder; give a file name")
        parent = path.parent
        if not parent.is_dir():
            raise ConfigError(f"{option} {value}: the folder {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"{option} {value}: cannot write in the folder {parent}")
        if path.exists() and not os.access(path, os.W_OK):
            raise ConfigError(f"{option} {value}: the file exists and is not writable")


class Interrupted(Exception):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) that a command has already explained (what was kept, how to
    resume): nothing more is printed."""

    def __init__(self, code: int = 130) -> None:
        super().__init__(code)
        self.code = code
