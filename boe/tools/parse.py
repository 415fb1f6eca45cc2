"""A forgiving reader of model replies that should be JSON.

Servers that ignore ``response_format`` (or models that talk around it)
wrap the object in prose, code fences or trailing text. `extract_json`
finds the object; `read_generation` and `read_verdict` check it against the
reply schemas of `boe.prompts` and normalise it. Anything that cannot be
read raises `ReplyError` with the reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from boe.vocab import SLOTS

__all__ = ["ReplyError", "extract_json", "read_figure", "read_generation", "read_slots", "read_verdict"]

VERDICTS = ("confirm", "reject", "unresolved")
_VERDICT_WORDS = {
    "confirm": "confirm",
    "confirmed": "confirm",
    "confirms": "confirm",
    "supported": "confirm",
    "support": "confirm",
    "true": "confirm",
    "yes": "confirm",
    "correct": "confirm",
    "reject": "reject",
    "rejected": "reject",
    "rejects": "reject",
    "refuted": "reject",
    "refute": "reject",
    "contradicted": "reject",
    "false": "reject",
    "no": "reject",
    "incorrect": "reject",
    "unresolved": "unresolved",
    "unknown": "unresolved",
    "uncertain": "unresolved",
    "unclear": "unresolved",
    "undetermined": "unresolved",
    "indeterminate": "unresolved",
    "cannot determine": "unresolved",
    "cannot tell": "unresolved",
    "not applicable": "unresolved",
    "n/a": "unresolved",
}
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_MAX_TEXT = 500


class ReplyError(ValueError):
    """A model reply could not be read as the expected JSON object."""


def extract_json(text: str | None) -> dict[str, Any]:
    """The first JSON object in ``text``: whole text, fenced blocks, then the first decodable ``{...}``."""
    if text is None:
        raise ReplyError("empty reply")
    stripped = text.strip()
    if not stripped:
        raise ReplyError("empty reply")
    for chunk in _candidates(stripped):
        obj = _loads(chunk)
        if isinstance(obj, dict):
            return obj
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", stripped):
        frag = stripped[m.start() :]
        for attempt in (frag, _TRAILING_COMMA.sub(r"\1", frag)):
            try:
                obj, _ = decoder.raw_decode(attempt)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ReplyError(f"no JSON object in reply: {_clip(stripped)!r}")


def _candidates(text: str) -> list[str]:
    out = [text]
    out.extend(m.group(1).strip() for m in _FENCE.finditer(text))
    return out


def _loads(text: str) -> Any:
    for attempt in (text, _TRAILING_COMMA.sub(r"\1", text)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            continue
    return None


def _clip(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _str_or_none(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        v = value.strip()
        return v[:_MAX_TEXT] if v else None
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        joined = ", ".join(x.strip() for x in value if x.strip())
        return joined[:_MAX_TEXT] or None
    raise ReplyError(f"{key!r} must be a string or null, got {type(value).__name__}")


def read_slots(obj: dict[str, Any]) -> tuple[dict[str, str | None], bool]:
    """The five slots of a reply (missing keys are None) and whether any slot key was present."""
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    aliases = {"view": "plane", "anatomy": "region", "organ": "region", "primary_finding": "finding"}
    for alias, slot in aliases.items():
        if slot not in lowered and alias in lowered:
            lowered[slot] = lowered[alias]
    present = any(s in lowered for s in SLOTS)
    return {s: _str_or_none(lowered.get(s), s) for s in SLOTS}, present


def read_generation(text: str | None) -> tuple[str, dict[str, str | None], bool]:
    """(answer, slots, slots_present) of a generation reply; `ReplyError` when there is no answer."""
    obj = extract_json(text)
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    answer = _str_or_none(lowered.get("answer"), "answer")
    if answer is None:
        raise ReplyError("the reply has no 'answer'")
    slots, present = read_slots(obj)
    return answer, slots, present


def read_verdict(text: str | None) -> tuple[str, str]:
    """(verdict, rationale) of a judge reply; the verdict is one of confirm | reject | unresolved."""
    obj = extract_json(text)
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    raw = lowered.get("verdict", lowered.get("outcome"))
    if not isinstance(raw, str):
        raise ReplyError(f"the reply has no string 'verdict': {_clip(json.dumps(obj))!r}")
    verdict = _VERDICT_WORDS.get(raw.strip().lower().strip(".! "))
    if verdict is None:
        raise ReplyError(f"verdict {raw!r} is not one of {', '.join(VERDICTS)}")
    rationale = _str_or_none(lowered.get("rationale", lowered.get("reason")), "rationale") or ""
    return verdict, rationale


_FIGURE_WORDS = re.compile(r"^(?:fig(?:ure)?\.?|image|panel)\s*", re.IGNORECASE)


def read_figure(text: str | None, figures: list[str] | tuple[str, ...]) -> str | None:
    """The figure id a reply names in its ``figure`` key (``"Figure B"`` reads as ``B``); None if it names none."""
    if not figures or text is None:
        return None
    try:
        obj = extract_json(text)
    except ReplyError:
        return None
    raw = {str(k).strip().lower(): v for k, v in obj.items()}.get("figure")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return figures[raw - 1] if 1 <= raw <= len(figures) else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    want = raw.strip()
    for attempt in (want, _FIGURE_WORDS.sub("", want)):
        hits = [f for f in figures if f.lower() == attempt.lower()]
        if hits:
            return hits[0]
    return None
