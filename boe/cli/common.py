"""Small helpers shared by the command modules."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["err_console", "out_console", "parse_list", "parse_budgets"]


@cache
def err_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@cache
def out_console() -> Console:
    from rich.console import Console

    return Console()


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
