"""Best-of-Evidence: Best-of-N selection under partial verification.

`import boe` is light: numpy and pydantic only. The agent (LangGraph, openai),
the store (SQLAlchemy) and segmentation (torch) load on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "ask"]


def __getattr__(name: str) -> Any:
    if name == "ask":
        from boe.agent.api import ask

        return ask
    raise AttributeError(f"module 'boe' has no attribute {name!r}")
