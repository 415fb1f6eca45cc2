"""Fuzzing the one ledger reader: random, truncated and hostile lines end in a record or a `RecordError`.

Every reader (the model path, the dict path, the replay loader (msgspec), the
streaming reader, import's parser and the report's re-reader) is given the
same line; each must accept it or reject it with a `BoeError` that has a
message, never another exception, and they must agree on which and on the
message.
"""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boe.core.ledger import iter_ledger, parse_record, parse_record_dict
from boe.core.lines import decode_line
from boe.core.loading import load_lines
from boe.errors import BoeError, RecordError
from tests.core.strategies import records

SCALE = float(os.environ.get("BOE_FUZZ_SCALE", "1"))  # BOE_FUZZ_SCALE=20 for a long hunt
FUZZ = settings(max_examples=int(250 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_hostile = st.sampled_from(
    [
        None,
        True,
        1,
        -1,
        0,
        10**30,
        -(10**30),
        1e308,
        -1e-308,
        "",
        "\x00",
        "\ud800",
        "\u202e",
        "a" * 300,
        [],
        {},
        [[[]]],
        {"a": {"b": {}}},
        "NaN",
        float("inf"),
        float("nan"),
        "confirm",
        "whole_response",
        2.5,
    ]
)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=True)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid record with one or more fields replaced, deleted or retyped, then maybe truncated or wrapped."""
    rec = draw(records())
    for _ in range(draw(st.integers(1, 3))):
        path: list[Any] = []
        node: Any = rec
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            path.append(key)
            node = node[key]
        if not path:
            key = draw(st.sampled_from(sorted(rec)))
            path = [key]
        parent = rec
        for key in path[:-1]:
            parent = parent[key]
        how = draw(st.sampled_from(["hostile", "json", "delete"]))
        if how == "delete" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(draw(_hostile)) if how == "hostile" else draw(_json)
    line = _dumps(rec).encode("utf-8", "surrogatepass")
    cut = draw(st.one_of(st.none(), st.integers(0, len(line))))
    if cut is not None:
        line = line[:cut]
    if draw(st.booleans()):
        line = b"\xef\xbb\xbf" + line
    return line + draw(st.sampled_from([b"", b"\n", b"\r\n", b"  \t"]))


lines = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    _json.map(lambda o: _dumps(o).encode("utf-8", "surrogatepass")),
    mutated(),
    st.integers(1, 3000).map(lambda n: (b"[" * n) + (b"]" * n)),
    st.integers(1, 3000).map(lambda n: b'{"format": ' * n),
)


def _outcome(fn: Any) -> tuple[str, str]:
    try:
        fn()
    except BoeError as exc:
        assert str(exc).strip(), "a BoeError without a message"
        assert isinstance(exc, RecordError), type(exc)
        return "error", exc.message
    return "ok", ""


@FUZZ
@given(lines)
def test_every_reader_accepts_or_names_the_problem(raw: bytes) -> None:
    end = b"\n" if raw.endswith(b"\n") else b""
    raw = raw[: len(raw) - len(end)].replace(b"\n", b" ") + end  # one line: a newline only at its end
    got = {
        "model": _outcome(lambda: parse_record(raw, source="f", line=1)),
        "dict": _outcome(lambda: parse_record_dict(raw, source="f", line=1)),
        "loader": _outcome(lambda: load_lines([raw], "f", strict=True)),
        "stream": _outcome(lambda: list(iter_ledger(io.BytesIO(raw + b"\n"), strict=True))),
    }
    if not raw.strip():
        return  # a blank line is skipped by the streaming readers and refused by the single-line parsers
    kinds = {k for k, _ in got.values()}
    assert len(kinds) == 1, got
    assert len({m for _, m in got.values()}) == 1, got
    # the report's re-reader (JSON only) agrees with the parsers on what is JSON
    try:
        decode_line(raw)
    except RecordError as exc:
        assert got["model"][0] == "error" and got["model"][1] == exc.message, (got, exc.message)


@settings(max_examples=int(60 * SCALE), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(lines, min_size=1, max_size=6))
def test_import_reads_a_file_of_fuzzed_lines_like_replay(raws: list[bytes]) -> None:
    from boe.core.loading import load_ledgers
    from boe.db.interchange import parse_files

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.jsonl"
        path.write_bytes(b"\n".join(r.replace(b"\n", b" ").replace(b"\r", b" ") for r in raws) + b"\n")
        replay_errs: list[RecordError] = []
        questions, _ = load_ledgers([path], on_error=replay_errs.append, workers=1)
        items = list(parse_files([path]))
    bad = [(p[0], p[2]) for k, p in items if k == "bad"]
    assert bad == [(e.message, e.line) for e in replay_errs]
    assert sum(1 for k, _ in items if k == "ok") == len(questions)
