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
from bisect import bisect_right
from functools import lru_cache
from typing import Any

from boe.errors import ModelError
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
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_MAX_TEXT = 500


#: Replies longer than this (characters) are refused unread: no schema reply comes near it.
MAX_REPLY_CHARS = 2**20
#: Candidate objects decoded at most per reply (a reply of thousands of broken objects is not read further).
MAX_TRIES = 256


class ReplyError(ModelError, ValueError):
    """A model reply could not be read as the expected JSON object."""


def extract_json(text: str | None, *, last: bool = False) -> dict[str, Any]:
    """A JSON object in ``text``: the whole text, else the first (``last``: the last) ``{...}`` that decodes.

    Strings may hold raw control characters (``strict=False``: a structured-output
    backend emits them). An object is never taken from inside another that cannot
    be read: a truncated or broken reply object is a `ReplyError`, not the first
    nested object that happens to decode (``last``: the judge's final object is
    read back from the end, see `read_verdict`). Linear in the length of the text;
    a text over `MAX_REPLY_CHARS` is refused.
    """
    if text is None:
        raise ReplyError("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise ReplyError(f"reply of {len(text):,} characters is over the {MAX_REPLY_CHARS:,}-character limit")
    stripped = text.strip()
    if not stripped:
        raise ReplyError("empty reply")

    obj = _loads(stripped)  # a schema-constrained reply is the object itself
    if isinstance(obj, dict):
        return obj
    if not last:
        return _first_object(stripped)
    tries = 0
    best: tuple[int, dict[str, Any]] | None = None  # (end, object) of the latest object found (``last``)
    for strings in (True, False):  # a stray quote in prose can hide objects from the string-aware scan
        if best is not None and (not last or _OPEN.search(stripped, best[0]) is None):
            break  # found; for ``last``, nothing after it could open an object the other scan would see
        spans = object_spans(stripped, strings=strings)
        found = None
        for start, end, inner in reversed(spans) if last else spans:
            # an object that does not decode may hold one that does (prose braces around it): one level down
            for s, e in [(start, end), *(reversed(inner) if last else inner)]:
                tries += 1
                if tries > MAX_TRIES:
                    raise ReplyError(
                        f"no JSON object among the first {MAX_TRIES} candidates in reply: {_clip(stripped)!r}"
                    )
                obj = _loads(stripped[s:e])
                if isinstance(obj, dict):
                    found = (e, obj)
                    break
            if found is not None:
                break
        # the last object is the one that ends last in either scan (a broken quote may hide it from the first)
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    if last:
        # the judge's own object ends the reply: read back from the last openers, whatever the prose before it left
        # open (an unclosed brace or quote there can hide it from both forward scans)
        tail = _tail_object(stripped)
        if tail is not None and (best is None or tail[0] > best[0]):
            best = tail
    if best is not None:
        return best[1]
    raise ReplyError(f"no JSON object in reply: {_clip(stripped)!r}")


def _first_object(text: str) -> dict[str, Any]:
    """The first ``{...}`` of a reply that decodes as a whole; never one nested in an object that does not
    decode or never closes (a truncated reply's inner object is no reply)."""
    tries = 0
    for strings in (True, False):  # a stray quote in prose can hide objects from the string-aware scan
        unclosed: list[int] = []
        for start, end, _inner in object_spans(text, strings=strings, unclosed=unclosed):
            if unclosed and unclosed[0] < start:
                break  # inside an object that never closes: everything from here on is part of it
            tries += 1
            if tries > MAX_TRIES:
                raise ReplyError(f"no JSON object among the first {MAX_TRIES} candidates in reply: {_clip(text)!r}")
            obj = _loads(text[start:end])
            if isinstance(obj, dict):
                return obj
    if _OPEN.match(text):
        raise ReplyError(f"the reply's JSON object cannot be read (truncated or malformed): {_clip(text)!r}")
    raise ReplyError(f"no JSON object in reply: {_clip(text)!r}")


#: Openers tried from the end of a reply, and braces looked at, by `_tail_object`.
_TAIL_TRIES = 32
_TAIL_BRACES = 4096


def _tail_object(text: str) -> tuple[int, dict[str, Any]] | None:
    """(end, object) of the decodable object that ends last, tried from the last openers backwards (bounded)."""
    decoder = json.JSONDecoder(strict=False)
    best: tuple[int, dict[str, Any]] | None = None
    hi, tries = len(text), 0
    for _ in range(_TAIL_BRACES):
        i = text.rfind("{", 0, hi)
        if i < 0 or tries >= _TAIL_TRIES:
            break
        hi = i
        if _OPEN.match(text, i) is None:
            continue
        tries += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and (best is None or end >= best[0]):  # an enclosing object replaces the inner one
            best = (end, obj)
    return best


_OPEN = re.compile(r'\{(?=\s*["}])')  # a brace that may open a JSON object (prose braces do not)
_TOKENS = re.compile(r'\{(?=\s*["}])|\}|"(?:[^"\\]|\\.)*+"|"', re.DOTALL)  # opener, closer, string, lone quote
_BRACE_TOKENS = re.compile(r'\{(?=\s*["}])|\}')


def object_spans(
    text: str, *, strings: bool = True, unclosed: list[int] | None = None
) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """The maximal balanced ``{...}`` spans that may be JSON objects, in order: (start, end, spans inside it).

    Only a ``{`` followed by a quote or ``}`` opens; between objects the regex
    engine jumps to the next opener (quotes in prose open nothing); inside one,
    strings are skipped whole (``strings=False``: quotes are ignored). A span
    is kept unless a later one encloses it, so spans inside a brace that never
    closes count too. A quote that never closes makes every later quote a
    literal. Each character is looked at a bounded number of times: linear.
    ``unclosed`` (when given) receives the positions of the openers that never close.
    """
    spans: list[tuple[int, int, list[tuple[int, int]]]] = []
    tokens = _TOKENS if strings else _BRACE_TOKENS
    n = len(text)
    pos = 0
    while pos < n:
        m = _OPEN.search(text, pos)
        if m is None:
            break
        stack: list[int] = []
        at, pos = m.start(), n  # if the braces never close, nothing after them is an object of its own
        while at < n:
            resume = None
            for t in tokens.finditer(text, at):
                i = t.start()
                c = text[i]
                if c == "{":
                    stack.append(i)
                elif c == "}":
                    start = stack.pop()
                    inner: list[tuple[int, int]] = []
                    while spans and spans[-1][0] > start:
                        inner.append(spans.pop()[:2])
                    inner.reverse()
                    spans.append((start, i + 1, inner))
                    if not stack:
                        pos = i + 1
                        break
                elif t.end() - i == 1:  # a quote that never closes: quotes are literals from here on
                    tokens, resume = _BRACE_TOKENS, i + 1
                    break
            if resume is None:
                break
            at = resume
        if unclosed is not None and stack:
            unclosed.extend(stack)
    return spans


#: ``json.loads(text, strict=False)`` builds a decoder for each call (only the default one is kept): one, kept.
_DECODER = json.JSONDecoder(strict=False)


def _loads(text: str) -> Any:
    """The JSON value of ``text`` (raw control characters in strings allowed; a trailing comma forgiven), else None."""
    try:
        return _DECODER.decode(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    if _TRAILING_COMMA.search(text) is None:
        return None
    try:
        return _DECODER.decode(_TRAILING_COMMA.sub(r"\1", text))
    except (json.JSONDecodeError, RecursionError):
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
    """(verdict, rationale) of a judge reply; the verdict is one of confirm | reject | unresolved.

    The judge's own answer is read, never JSON it quotes from the candidate:
    the whole reply when it is the schema-constrained object; else the later of
    its last fenced block holding a verdict object and its last verdict
    statement ("My verdict: reject", a line "Verdict: reject"; not inside
    double quotes), which win over bare objects (a statement only when no
    verdict object follows it); else the last bare object.
    """
    if text is not None and len(text) <= _MEMO_CHARS:
        return _read_verdict_memo(text)
    return _read_verdict(text)


#: Replies up to this long are remembered (the last 64): a judge's reply is read when it arrives (is it a
#: verdict? else it is asked again) and then for its verdict.
_MEMO_CHARS = 16_384


@lru_cache(maxsize=64)
def _read_verdict_memo(text: str) -> tuple[str, str]:
    return _read_verdict(text)


def _read_verdict(text: str | None) -> tuple[str, str]:
    if text is not None and len(text) <= MAX_REPLY_CHARS:
        stripped = text.strip()
        whole = _loads(stripped)
        if isinstance(whole, dict):
            return _verdict_of(whole)
        own = _own_answer(stripped)
        if own is not None:
            return own
    return _verdict_of(extract_json(text, last=True))


def _verdict_of(obj: dict[str, Any]) -> tuple[str, str]:
    lowered = {str(k).strip().lower(): v for k, v in obj.items()}
    raw = lowered.get("verdict", lowered.get("outcome"))
    if not isinstance(raw, str):
        raise ReplyError(f"the reply has no string 'verdict': {_clip(json.dumps(obj))!r}")
    verdict = _VERDICT_WORDS.get(raw.strip().lower().strip(".! "))
    if verdict is None:
        raise ReplyError(f"verdict {raw!r} is not one of {', '.join(VERDICTS)}")
    rationale = _str_or_none(lowered.get("rationale", lowered.get("reason")), "rationale") or ""
    return verdict, rationale


#: A double-quoted string on one line; a quote that does not close takes the rest of its line (one match: linear).
_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*+"?|\u201c[^\u201d\n]*+\u201d?')
_SEP = r"[\s*_:=\-\u2013\u2014\"'`]{0,8}"  # bounded: a long run after a label costs nothing
_STATEMENT = re.compile(
    r"(?:\b(?:my|final|overall)[ \t]+(?:verdict|answer|decision|judge?ment)|^[ \t*_#]*verdict)"
    rf"{_SEP}(?:is\b{_SEP})?(confirm(?:ed|s)?|reject(?:ed|s)?|unresolved)\b",
    re.IGNORECASE | re.MULTILINE,
)
#: Fenced blocks looked at, from the last one back.
_FENCE_TRIES = 16


def _own_answer(text: str) -> tuple[str, str] | None:
    """The judge's fenced verdict or final verdict statement, when the reply has one (see `read_verdict`)."""
    quoted = [m.span() for m in _QUOTED.finditer(text) if m.end() - m.start() > 1 and text[m.end() - 1] in '"\u201d']
    fenced = _last_fenced_verdict(text, quoted)
    said = None
    for m in _STATEMENT.finditer(text):
        if not _inside(m.start(), quoted):
            said = m
    if said is None or (fenced is not None and said.start() < fenced[0]):
        return _verdict_of(fenced[1]) if fenced is not None else None
    if fenced is None:
        after = _verdict_object(text[said.end() :])
        if after is not None:  # an object after the statement is the judge's final word
            return _verdict_of(after)
    verdict = _VERDICT_WORDS[said.group(1).lower()]
    before = fenced[1] if fenced is not None else _verdict_object(text[: said.start()])
    if before is not None:
        try:
            agreeing = _verdict_of(before)
        except ReplyError:
            agreeing = None
        if agreeing is not None and agreeing[0] == verdict and agreeing[1]:
            return agreeing  # the same verdict, with the object's rationale
    end = text.find("\n", said.end())
    return verdict, text[said.start() : end if end >= 0 else len(text)].strip()[:_MAX_TEXT]  # the statement's line


def _last_fenced_verdict(text: str, quoted: list[tuple[int, int]]) -> tuple[int, dict[str, Any]] | None:
    """(end, object) of the last ``` fenced block (markers outside quoted strings) that holds a verdict object."""
    marks = [m.start() for m in re.finditer("```", text) if not _inside(m.start(), quoted)]
    pairs = list(zip(marks[::2], marks[1::2], strict=False))
    for start, end in reversed(pairs[-_FENCE_TRIES:]):
        obj = _verdict_object(text[start + 3 : end])
        if obj is not None:
            return end + 3, obj
    return None


def _verdict_object(text: str) -> dict[str, Any] | None:
    """The last object in ``text`` if it has a 'verdict' (or 'outcome') key; None otherwise."""
    try:
        obj = extract_json(text, last=True)
    except ReplyError:
        return None
    keys = {str(k).strip().lower() for k in obj}
    return obj if keys & {"verdict", "outcome"} else None


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    """Whether ``pos`` lies inside one of the sorted, disjoint ``spans``."""
    i = bisect_right(spans, pos, key=lambda span: span[0])  # the spans starting at or before pos
    return i > 0 and pos < spans[i - 1][1]


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
