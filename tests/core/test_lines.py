"""One ledger reader: the same line gives the same record or the same message in replay, import, report and export."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boe.core.ledger import iter_ledger, read_ledger
from boe.core.lines import MAX_DEPTH, decode_line, nesting_depth
from boe.core.loading import load_ledgers, load_lines
from boe.errors import LedgerError, RecordError
from boe.sim.ledgers import pool_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
GOOD = [json.dumps(r) for r in pool_ledger(3, seed=5)]
CUT = GOOD[0].index('"what is') + 5  # inside a string

BAD_LINES = {
    "truncated": GOOD[0][:300],
    "truncated-inside-a-string-then-newline": GOOD[0][:CUT] + "\n",
    "not-json": "{not json}",
    "trailing-garbage": GOOD[0] + " x",
    "bad-utf8": GOOD[0][:50] + "\udcff" + GOOD[0][50:],
    "array": "[1, 2]",
    "wrong-format": GOOD[0].replace("boe-ledger/1", "boe-ledger/9"),
    "bad-cost": GOOD[0].replace('"cost": 1.0', '"cost": -1.0', 1),
    "deep": "[" * 100_000 + "]" * 100_000,
    "deep-within-the-stack": "[" * 600 + "]" * 600,  # json.loads reads it: refused by depth all the same
    "deep-and-broken": "[" * 600 + "]" * 599,  # too deep is said first, wherever the JSON breaks
}


def _bytes(line: str) -> bytes:
    return line.encode("utf-8", "surrogateescape")


def messages(path: Path, tmp: Path, n_good: int = 3) -> dict[str, list[str]]:
    """Every reader's messages for the bad lines of one file."""
    out: dict[str, list[str]] = {}
    for name, fn in (
        ("read_ledger", lambda cb: list(read_ledger(path, on_error=cb))),
        ("iter_ledger", lambda cb: list(iter_ledger(path, on_error=cb))),
        ("load_ledgers", lambda cb: load_ledgers([path], on_error=cb, workers=1)),
        ("load_lines", lambda cb: load_lines(path.read_bytes().splitlines(keepends=True), str(path), on_error=cb)),
    ):
        errs: list[RecordError] = []
        fn(errs.append)
        out[name] = [e.describe() for e in errs]
    from boe.db import Store, import_ledger
    from boe.report.source import open_source

    errs = []
    with Store(tmp / f"{path.stem}.db") as store:
        import_ledger(store, path, "r", on_error=errs.append, parallel=False)
    out["import"] = [e.describe() for e in errs]
    errs = []
    with open_source(ledgers=[path], on_error=errs.append) as src:
        assert len(src.questions) == n_good
    out["report"] = [e.describe() for e in errs]
    return out


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_a_bad_line_reads_the_same_everywhere(tmp_path: Path, name: str) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(b"\n".join(_bytes(x) for x in [GOOD[0], BAD_LINES[name], GOOD[1], GOOD[2]]) + b"\n")
    got = messages(path, tmp_path)
    first = got["read_ledger"]
    assert len(first) == 1 and first[0].startswith(f"{path}:2"), got
    assert all(v == first for v in got.values()), got
    assert "at at" not in first[0]


def test_truncation_is_worded_the_same_with_or_without_the_line_end(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(GOOD[0][:CUT])
    b.write_text(GOOD[0][:CUT] + "\n")
    ma, mb = (messages(p, tmp_path, 0)["load_ledgers"] for p in (a, b))
    assert [m.split(":", 1)[1] for m in ma] == [m.split(":", 1)[1] for m in mb]
    assert "Unterminated string starting at column" in ma[0]


@pytest.mark.parametrize("variant", ["bom", "crlf", "bom+crlf"])
def test_bom_and_crlf_are_accepted(tmp_path: Path, variant: str) -> None:
    end = "\r\n" if "crlf" in variant else "\n"
    text = end.join(GOOD) + end
    data = (b"\xef\xbb\xbf" if "bom" in variant else b"") + text.encode()
    path = tmp_path / "l.jsonl"
    path.write_bytes(data)
    got = messages(path, tmp_path)
    assert all(v == [] for v in got.values()), got
    assert [r.question_id for r in read_ledger(path, strict=True)] == [json.loads(g)["question_id"] for g in GOOD]


def test_a_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="it is a folder"):
        list(read_ledger(tmp_path))
    with pytest.raises(LedgerError, match=f"cannot open ledger {tmp_path}: it is a folder"):
        load_ledgers([tmp_path])


def test_cli_reads_standard_input_and_names_folders(tmp_path: Path) -> None:
    assert BOE is not None
    text = "\ufeff" + "\r\n".join(GOOD) + "\r\n"
    res = subprocess.run(
        [BOE, "replay", "-", "--json", "--policy", "raw"], input=text, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["questions"] == 3
    res = subprocess.run([BOE, "replay", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and f"cannot open ledger {tmp_path}: it is a folder" in res.stderr
    assert "Traceback" not in res.stderr
    db = f"sqlite:///{tmp_path / 's.db'}"
    res = subprocess.run(
        [BOE, "import", "-", "--db", db, "--run", "r"], input=text, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "stored 3" in res.stdout, res.stderr
    res = subprocess.run(
        [BOE, "export", "--db", db, "--run", "r", "--out", "-"], capture_output=True, text=True, timeout=120
    )
    assert res.stdout.splitlines() == GOOD  # the lines as written, without the mark and the CR


_LITERAL = re.compile(r'[\[\]{}]|"(?:[^"\\]|\\.)*+"', re.DOTALL)


def _literal_depth(text: str) -> int:
    """The nesting depth as the spec words it: one token at a time, strings skipped whole."""
    depth = deepest = 0
    for m in _LITERAL.finditer(text):
        c = m.group()[0]
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


_PIECES = st.sampled_from(['"', "\\", "[", "]", "{", "}", "a", " ", ",", ":", "\n", '\\"', "\\\\", '"[{"', "é"])


@given(st.lists(_PIECES, max_size=80).map("".join))
def test_the_depth_check_counts_brackets_outside_strings_only(text: str) -> None:
    assert nesting_depth(text) == _literal_depth(text)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        pytest.param("[" * 401 + "]" * 401, 401, id="deep"),
        pytest.param('["' + "[" * 500 + '"]', 1, id="brackets-in-a-string"),
        pytest.param('["\\"' + "[" * 500 + '"]', 1, id="after-an-escaped-quote"),
        pytest.param('["abc\\' + "[" * 500, 501, id="unterminated-string"),
        pytest.param("]]][", 0, id="closing-first"),
    ],
)
def test_the_depth_check_on_its_edge_cases(text: str, depth: int) -> None:
    assert nesting_depth(text) == _literal_depth(text) == depth


def _literal_verdict(text: str) -> object:
    """What a line decodes to as the spec words it: too deep first (outside strings), then JSON's own verdict."""
    if _literal_depth(text) > MAX_DEPTH:
        return "nested"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg} {exc.pos}"


def _verdict(text: str) -> object:
    try:
        return decode_line(text)
    except RecordError as exc:
        if "nested more than" in exc.message:
            return "nested"
        assert exc.message.startswith("not valid JSON")
        return _literal_verdict(text)  # the wording is json's: its position is checked by the other tests


_RUNS = st.sampled_from(["[" * 150, "]" * 150, "{" * 150, "}" * 150, '{"a":' * 130, '"[[[' * 40, "]" * 149 + "1"])


@given(st.lists(st.one_of(_PIECES, _RUNS, st.sampled_from(["1", ",", '"a":', "[1,2]", '{"k":[]}'])), max_size=12))
def test_decoding_refuses_depth_exactly_as_the_spec_counts_it(pieces: list[str]) -> None:
    text = "".join(pieces)
    want, got = _literal_verdict(text), _verdict(text)
    assert (got == "nested") == (want == "nested"), text
    if want != "nested" and not isinstance(want, str):
        assert got == want


@given(st.integers(380, 420), st.integers(0, 2**32), st.sampled_from(["1", "[]", "{}", '"[["']))
def test_valid_json_near_the_limit_is_refused_exactly_past_it(levels: int, seed: int, inner: str) -> None:
    rng = random.Random(seed)
    text = inner
    for _ in range(levels):  # a value nested in `levels` arrays and objects, beside strings full of brackets
        if rng.random() < 0.5:
            text = "[" + rng.choice(["", '"]]}",', "1,"]) + text + "]"
        else:
            text = "{" + rng.choice(["", '"x": "[{",', '"]": 2,']) + '"k":' + text + "}"
    depth = levels + (inner in ("[]", "{}"))
    assert _literal_depth(text) == depth
    if depth > MAX_DEPTH:
        with pytest.raises(RecordError, match=f"nested more than {MAX_DEPTH} levels deep"):
            decode_line(text)
    else:
        assert decode_line(text) == json.loads(text)
