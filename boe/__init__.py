"""Best-of-Evidence: Best-of-N selection under partial verification.

`import boe` is light: numpy and pydantic only. The agent (LangGraph, openai),
the store (SQLAlchemy) and segmentation (torch) load on first use. The Python
API (`boe.ask`, `boe.replay`, `boe.run_batch`, `boe.fit_calibration`, ...) is
`boe.api`, re-exported here on first access.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from boe import logs as _logs  # noqa: F401  (the `boe` logger's NullHandler)
from boe.core import registry as _registry
from boe.core.version import __version__

#: Names `boe` re-exports from `boe.api` (loaded on first access).
__all__ = [
    "LoadedQuestions",
    "ReplayResult",
    "__version__",
    "ask",
    "fit_calibration",
    "load_calibration",
    "load_config",
    "load_questions",
    "read_ledger",
    "register_format",
    "register_kind",
    "register_policy",
    "register_segmenter",
    "register_store_backend",
    "register_tool",
    "replay",
    "run_batch",
    "save_calibration",
    "write_ledger",
]

if TYPE_CHECKING:
    from boe.api import (
        LoadedQuestions,
        ReplayResult,
        ask,
        fit_calibration,
        load_calibration,
        load_config,
        load_questions,
        read_ledger,
        register_format,
        register_kind,
        register_policy,
        register_segmenter,
        register_store_backend,
        register_tool,
        replay,
        run_batch,
        save_calibration,
        write_ledger,
    )


def _load_plugins() -> None:
    from boe.registry import load_entry_points

    load_entry_points()


def _kinds() -> Mapping[str, _registry.KindInfo]:
    from boe.kinds import ledger_kinds

    _registry.set_kind_source(ledger_kinds)  # later calls go straight to it
    return ledger_kinds()


# The pure core reads plugins and action kinds through these hooks (it never imports the layers above it).
_registry.set_plugin_loader(_load_plugins)
_registry.set_kind_source(_kinds)


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from boe import api

        return getattr(api, name)
    raise AttributeError(f"module 'boe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
