"""Evidence tools and the model client.

Importing `boe.tools` is light; the client (openai), the image tools (OpenCV)
and the judges load on first use of their names.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Completion",
    "EvidenceTool",
    "GroundedFactorJudge",
    "ImageRef",
    "LoadedImage",
    "MemoryCache",
    "ModelCall",
    "ModelClient",
    "RequestCache",
    "StructuredCheck",
    "ToolRequest",
    "ToolResult",
    "VlmFactorJudge",
    "WholeResponseJudge",
    "extract_json",
    "open_image",
]

_WHERE = {
    "Completion": "client",
    "MemoryCache": "client",
    "ModelCall": "client",
    "ModelClient": "client",
    "RequestCache": "client",
    "ImageRef": "images",
    "LoadedImage": "images",
    "open_image": "images",
    "EvidenceTool": "protocol",
    "ToolRequest": "protocol",
    "ToolResult": "protocol",
    "StructuredCheck": "structured",
    "VlmFactorJudge": "judges",
    "GroundedFactorJudge": "judges",
    "WholeResponseJudge": "judges",
    "extract_json": "parse",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'boe.tools' has no attribute {name!r}")
    return getattr(importlib.import_module(f"boe.tools.{mod}"), name)
