"""Fill any simple JSON schema (a third-party client's) from what the simulator sees."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from boe.sim.percept import Percept
from boe.sim.questions import ASKS
from boe.sim.vocab import canonical, surface

__all__ = ["bound_strings", "fill_schema"]

# property-name keywords -> slot
_NAME_SLOTS = (
    (("modality", "imaging_type", "scan_type", "technique"), "modality"),
    (("region", "body", "organ", "anatomy", "part"), "region"),
    (("plane", "view", "orientation", "projection"), "plane"),
    (("finding", "abnormal", "diagnos", "lesion", "patholog", "disease"), "finding"),
    (("side", "lateral"), "side"),
    (("vertical", "level", "zone"), "vertical"),
    (("size",), "size"),
)
# what a scalar property names -> the protocol slot (the yes/no asks have no scalar value)
_SCALAR_SLOTS = {ask: slot for ask, slot in ASKS.items() if ask not in ("presence", "abnormal")}


def _slot_of(name: str) -> str | None:
    low = name.lower()
    for keys, slot in _NAME_SLOTS:
        if any(k in low for k in keys):
            return slot
    return None


def _percept_value(p: Percept, slot: str) -> str | None:
    return {
        "modality": p.modality,
        "region": p.region,
        "plane": p.plane,
        "finding": p.finding,
        "side": p.side,
        "vertical": p.vertical,
        "size": p.size,
    }[slot]


def _describe(p: Percept) -> str:
    head = f"{surface('modality', p.modality)} of the {p.region}, {surface('plane', p.plane)} view"
    if p.finding == "normal":
        return f"{head}; no focal abnormality is seen."
    return f"{head}; a {p.size} {p.finding} in the {p.vertical} {p.side} part of the image."


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in schema and seen < 16:
        ref = str(schema["$ref"])
        node: Any = root
        for part in ref.lstrip("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        seen += 1
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if isinstance(o, dict) and o.get("type") != "null"]
            if options:
                schema = {**_resolve(options[0], root), **{k: v for k, v in schema.items() if k != key}}
    if isinstance(schema.get("type"), list):
        types = [t for t in schema["type"] if t != "null"]
        schema = {**schema, "type": types[0] if types else "null"}
    return schema


def _enum_choice(name: str, values: list[Any], p: Percept, answer: str, rng: np.random.Generator) -> Any:
    slot = _slot_of(name)
    candidates = [slot] if slot else []
    candidates += [s for s in ("modality", "region", "plane", "finding", "side", "vertical", "size") if s != slot]
    for s in candidates:
        want = _percept_value(p, s)
        for v in values:
            if isinstance(v, str) and want is not None and canonical(_SCALAR_SLOTS[s], v) == want:
                return v
    for v in values:
        if isinstance(v, str) and canonical("attribute", v) == canonical("attribute", answer):
            return v
    return values[int(rng.integers(len(values)))]


def _string(name: str, p: Percept, answer: str) -> str:
    low = name.lower()
    if "answer" in low:
        return answer
    if "location" in low or "position" in low:
        return "none" if p.finding == "normal" else f"{p.vertical} {p.side}"
    slot = _slot_of(name)
    if slot in ("side", "vertical", "size"):
        return _percept_value(p, slot) or "none"
    if slot:
        return surface(_SCALAR_SLOTS[slot], _percept_value(p, slot) or "normal")
    return _describe(p)


def _number(name: str, p: Percept, temperature: float) -> float:
    low = name.lower()
    if any(k in low for k in ("confidence", "prob", "certainty", "score")):
        return round(float(np.clip(0.9 - 0.2 * temperature, 0.3, 0.95)), 2)
    if any(k in low for k in ("count", "number", "num_")):
        return 0.0 if p.finding == "normal" else 1.0
    if p.blob is not None:
        if any(k in low for k in ("size", "diameter", "width", "length", "mm")):
            x0, y0, x1, y1 = p.blob.box
            return float(max(x1 - x0, y1 - y0))
        if low in ("x", "cx", "center_x", "centroid_x"):
            return round(p.blob.centroid[0], 1)
        if low in ("y", "cy", "center_y", "centroid_y"):
            return round(p.blob.centroid[1], 1)
    return 0.0


def _boolean(name: str, p: Percept) -> bool:
    low = name.lower()
    named = canonical("finding", low.replace("is_", "").replace("has_", "").replace("_present", ""))
    if named and named != "normal":
        return p.finding == named
    if "normal" in low and "abnormal" not in low:
        return p.finding == "normal"
    return p.finding != "normal"


def fill_schema(schema: dict[str, Any], p: Percept, answer: str, temperature: float, rng: np.random.Generator) -> Any:
    """A value that validates against `schema` (objects, strings, numbers, booleans, enums, arrays)."""
    root = schema

    def fill(node: dict[str, Any], name: str) -> Any:
        node = _resolve(node, root)
        if "const" in node:
            return node["const"]
        if "enum" in node and node["enum"]:
            return _enum_choice(name, list(node["enum"]), p, answer, rng)
        kind = node.get("type", "object" if "properties" in node else "string")
        handlers: dict[str, Callable[[], Any]] = {
            "object": lambda: {k: fill(v, k) for k, v in (node.get("properties") or {}).items()},
            "array": lambda: _array(node, name),
            "string": lambda: _string(name, p, answer)[: node.get("maxLength")],
            "number": lambda: _number(name, p, temperature),
            "integer": lambda: int(round(_number(name, p, temperature))),
            "boolean": lambda: _boolean(name, p),
            "null": lambda: None,
        }
        return handlers.get(kind, lambda: _string(name, p, answer)[: node.get("maxLength")])()

    def _array(node: dict[str, Any], name: str) -> list[Any]:
        items = node.get("items") or {"type": "string"}
        low = int(node.get("minItems", 0))
        high = node.get("maxItems")
        count = 0 if p.finding == "normal" and _slot_of(name) == "finding" else 1
        count = max(low, count if high is None else min(int(high), count))
        return [fill(items, name) for _ in range(count)]

    return fill(schema, "")


def bound_strings(reply: str, response_format: dict[str, Any] | None) -> str:
    """A JSON reply with every string cut to its property's ``maxLength`` in the request's JSON schema.

    A structured-output backend (vLLM's xgrammar) cannot write past the bound:
    the string closes there. A reply that is not a JSON object is left as it is.
    """
    spec = (response_format or {}).get("json_schema") if (response_format or {}).get("type") == "json_schema" else None
    props = ((spec or {}).get("schema") or {}).get("properties") or {}
    bounds = {
        k: v["maxLength"] for k, v in props.items() if isinstance(v, dict) and isinstance(v.get("maxLength"), int)
    }
    if not bounds:
        return reply
    try:
        obj = json.loads(reply)
    except json.JSONDecodeError:
        return reply
    if not isinstance(obj, dict):
        return reply
    over = {k: v[: bounds[k]] for k, v in obj.items() if k in bounds and isinstance(v, str) and len(v) > bounds[k]}
    return json.dumps({**obj, **over}) if over else reply
