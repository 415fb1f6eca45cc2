"""The judge's probability of its verdict, read from the token log-probabilities a server returns.

A judge reply is ``{"verdict": V, ...}``. At the token where ``V`` begins, the
server's ``top_logprobs`` list the most likely alternatives; those that begin
one verdict word (``confirm``, ``reject``, ``unresolved``: enough of it to tell
which) carry that verdict's mass. The verdict probability is the recorded
verdict's share of the mass of the three: the judge's own distribution over
its answers at that point, renormalised over the verdicts the server listed.
Anything that does not line up (tokens that do not spell the text, no verdict
key, the recorded verdict not among the alternatives) gives None: no number
rather than a wrong one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TOP_LOGPROBS", "verdict_probability"]

#: Alternatives asked for at each token of a judge reply (the three verdicts and room for their spellings).
TOP_LOGPROBS = 5

_VERDICTS = ("confirm", "reject", "unresolved")
_VALUE = re.compile(r'"verdict"\s*:\s*"')
_WORD = re.compile(r"[a-z]+")


def verdict_probability(text: str | None, content: Sequence[Any] | None, verdict: str) -> float | None:
    """P(``verdict``) among the three verdicts at the verdict token of ``text``; None when it cannot be read."""
    if not text or not content or verdict not in _VERDICTS:
        return None
    tokens: list[str] = []
    for c in content:
        tok = c.get("token") if _is_mapping(c) else None
        if not isinstance(tok, str):
            return None
        tokens.append(tok)
    if "".join(tokens) != text:
        return None
    found = list(_VALUE.finditer(text))
    if not found:
        return None
    at = found[-1].end()  # the judge's own (final) object
    start = 0
    for i, tok in enumerate(tokens):
        end = start + len(tok)
        if start <= at < end:
            return _share(content[i], text[start:at], verdict)
        start = end
    return None


def _is_mapping(value: object) -> bool:
    """``isinstance(value, Mapping)``, a decoded reply's dicts first (the ABC check costs ~1 us; a reply has ~40
    tokens of 6 alternatives each)."""
    return type(value) is dict or isinstance(value, Mapping)


def _share(entry: Mapping[str, Any], prefix: str, verdict: str) -> float | None:
    """The verdict's share of the alternatives at one token whose text before the verdict is ``prefix``."""
    options: dict[str, float] = {}
    for alt in [entry, *(entry.get("top_logprobs") or [])]:
        tok, lp = (alt.get("token"), alt.get("logprob")) if _is_mapping(alt) else (None, None)
        if isinstance(tok, str) and isinstance(lp, (int, float)) and not isinstance(lp, bool) and lp <= 0:
            options.setdefault(tok, float(lp))  # the sampled token and its listed twin are one alternative
    mass = dict.fromkeys(_VERDICTS, 0.0)
    for tok, lp in options.items():
        if not tok.startswith(prefix):
            continue
        word = _WORD.match(tok[len(prefix) :].lower())
        if word is None:
            continue
        hits = [v for v in _VERDICTS if v.startswith(word.group()) or word.group().startswith(v)]
        if len(hits) == 1:
            mass[hits[0]] += math.exp(lp)
    total = sum(mass.values())
    if mass[verdict] <= 0 or total <= 0:
        return None
    return mass[verdict] / total
