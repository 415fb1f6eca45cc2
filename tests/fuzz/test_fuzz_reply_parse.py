"""Fuzzing the reply readers: any text, of any size, ends in an object / a verdict or a `ReplyError`.

`extract_json`, `read_verdict`, `read_generation` and `read_figure` get random
text, texts assembled from JSON-ish fragments (braces, quotes, escapes,
fences, whole objects), and large ones; each returns or raises a `BoeError`
with a message, never another exception. A verdict object appended last is
the one read, whatever fence-free prose comes before it; a fenced verdict block
is read whatever follows it.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from boe.errors import BoeError
from boe.tools.parse import (
    MAX_REPLY_CHARS,
    VERDICTS,
    ReplyError,
    extract_json,
    read_figure,
    read_generation,
    read_verdict,
)

SCALE = float(os.environ.get("BOE_FUZZ_SCALE", "1"))  # BOE_FUZZ_SCALE=20 for a long hunt
FUZZ = settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))

FRAGMENTS = [
    "{",
    "}",
    "{ ",
    '{"',
    '"',
    "\\",
    '\\"',
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "null",
    "true",
    "1e999",
    "-0",
    '{"verdict": "confirm"}',
    '{"verdict": "reject", "rationale": "x"}',
    '{"answer": "ct", "modality": "CT"}',
    '{"verdict": ',
    '"unresolved"',
    '{"a": b}',
    "```json\n",
    "```",
    "prose words ",
    "it's 5\" wide",
    "\ud800",
    '{"figure": 2}',
    '{"verdict": "maybe"}',
    '{"verdict": 1}',
    "{}",
    '{"x": {"y": {"z": []}}}',
    ",}",
]
texts = st.one_of(
    st.none(),
    st.text(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join),
    st.tuples(st.sampled_from(FRAGMENTS), st.integers(1, 20_000)).map(lambda t: t[0] * t[1]),
)
VERDICT = st.fixed_dictionaries(
    {"verdict": st.sampled_from(["confirm", "reject", "unresolved"]), "rationale": st.text(max_size=30)}
)


def _ok_or_reply_error(fn, *args):
    try:
        return fn(*args)
    except BoeError as exc:
        assert str(exc).strip()
        return None


@FUZZ
@given(texts)
def test_every_reader_returns_or_names_the_problem(text: str | None) -> None:
    obj = _ok_or_reply_error(extract_json, text)
    assert obj is None or isinstance(obj, dict)
    last = _ok_or_reply_error(lambda t: extract_json(t, last=True), text)
    # the first-object reader never takes an object nested in one that cannot be read; the verdict reader reads the
    # judge's final object back from the end (prose may desynchronise a forward scan): it finds whatever the first does
    assert obj is None or last is not None
    verdict = _ok_or_reply_error(read_verdict, text)
    assert verdict is None or (verdict[0] in VERDICTS and isinstance(verdict[1], str))
    gen = _ok_or_reply_error(read_generation, text)
    assert gen is None or isinstance(gen[0], str)
    assert read_figure(text, ["A", "B"]) in (None, "A", "B")


#: Prose without code fences (a fenced verdict block before the final object is the judge's answer instead).
unfenced = texts.map(lambda t: re.sub("`+", "`", t) if t else t)


@FUZZ
@given(unfenced, VERDICT, st.sampled_from(["", " ", "\nMy answer: ", "\n```json\n"]))
def test_the_judges_final_object_is_read_after_any_prose(prose: str | None, final: dict, sep: str) -> None:
    text = (prose or "") + sep + json.dumps(final)
    got = _ok_or_reply_error(read_verdict, text)
    if got is not None:  # prose may leave an object open around it; then nothing is read, never another object
        assert got == (final["verdict"], final["rationale"].strip()[:500]), (text[-200:], got)


@FUZZ
@given(unfenced, VERDICT, unfenced)
@example('{"verdict": "reject", "rationale": "x"}' * 27_000, {"verdict": "confirm", "rationale": "r"}, "}" * 9)
def test_a_fenced_verdict_wins_over_any_objects_after_it(before: str | None, mine: dict, after: str | None) -> None:
    """The judge's fenced answer is read whatever follows it (quoted candidate objects, broken JSON)."""
    text = (before or "") + "\n```json\n" + json.dumps(mine) + "\n```\n" + (after or "")
    if len(text) > MAX_REPLY_CHARS:  # two long runs of fragments: an over-long reply is refused, never half-read
        with pytest.raises(ReplyError, match="character limit"):
            read_verdict(text)
        return
    assert read_verdict(text) == (mine["verdict"], mine["rationale"].strip()[:500]), text[-300:]


@settings(max_examples=int(8 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(FRAGMENTS), st.integers(MAX_REPLY_CHARS // 4, MAX_REPLY_CHARS + 10))
def test_large_replies_are_read_or_refused(fragment: str, chars: int) -> None:
    text = (fragment * (chars // len(fragment) + 1))[:chars]
    for fn in (extract_json, read_verdict):
        _ok_or_reply_error(fn, text)
