"""Speed of reading JSON out of model replies: `extract_json` / `read_verdict` against the old quadratic reader.

    python benchmarks/parse_speed.py                  # sizes up to 1 MB; the old reader up to 100 KB
    python benchmarks/parse_speed.py --old-max 300000 # also time the old reader at 280 KB (about 15 s)

Each reply is prose with many ``{`` that do not start an object (the shape
that made the old reader quadratic: it copied the rest of the text at every
``{``), then the judge's own verdict object; plus 1 MB replies that are one
valid object, object openers that never close, and many small objects that
do not decode (the new reader's worst shape: each one is tried). Both readers run in this
process on the same texts; the table gives the best of ``--repeat`` runs and
the old/new ratio where the old reader was timed. Target: 1 MB in < 50 ms.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from boe.tools.parse import ReplyError, extract_json, read_verdict

# --- the reader as it was (kept verbatim as the baseline) --------------------------------------------
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def old_extract_json(text: str | None) -> dict[str, Any]:
    """The first JSON object in ``text``: whole text, fenced blocks, then the first decodable ``{...}``."""
    if text is None:
        raise ValueError("empty reply")
    stripped = text.strip()
    if not stripped:
        raise ValueError("empty reply")
    for chunk in [stripped, *(m.group(1).strip() for m in _FENCE.finditer(stripped))]:
        obj = _old_loads(chunk)
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
    raise ValueError("no JSON object in reply")


def _old_loads(text: str) -> Any:
    for attempt in (text, _TRAILING_COMMA.sub(r"\1", text)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            continue
    return None


# --- replies -----------------------------------------------------------------------------------------
VERDICT = '{"verdict": "reject", "rationale": "the region shows no lesion"}'


def braces_reply(size: int) -> str:
    """Prose full of set-notation braces, then the verdict object."""
    unit = "the set {a, b} of findings, with {c} noted; "
    body = unit * max(1, (size - len(VERDICT)) // len(unit))
    return body + "My answer: " + VERDICT


def object_reply(size: int) -> str:
    """One valid object of about ``size`` characters."""
    pad = "x" * max(0, size - len(VERDICT) - 20)
    return json.dumps({"verdict": "confirm", "rationale": pad})


def unclosed_reply(size: int) -> str:
    """Object openers that never close, then the verdict object."""
    return '{"a" ' * ((size - len(VERDICT)) // 5) + VERDICT


def broken_reply(size: int) -> str:
    """Small objects that do not decode, then the verdict object (every one is tried)."""
    unit = '{"a": b} '
    return unit * ((size - len(VERDICT)) // len(unit)) + VERDICT


def outcome(fn: Callable[[], object]) -> str:
    try:
        got = fn()
    except (ReplyError, ValueError) as exc:
        return "error: " + str(exc)[:40]
    return str(got[0]) if isinstance(got, tuple) else ("object" if isinstance(got, dict) else str(got))


def best(fn: Callable[[], object], repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        outcome(fn)
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,30000,100000,280000,1040000", help="reply sizes in characters")
    ap.add_argument("--old-max", type=int, default=100_000, help="time the old reader up to this size")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    table = Table(title=f"JSON from model replies (best of {args.repeat} runs)")
    for col in ("reply", "chars", "new extract_json", "new read_verdict", "verdict", "old extract_json", "old / new"):
        table.add_column(col, justify="right" if col != "reply" else "left")
    cases = [("prose + braces", braces_reply, s) for s in sizes]
    cases += [
        ("one object", object_reply, sizes[-1]),
        ("unclosed openers", unclosed_reply, sizes[-1]),
        ("broken objects", broken_reply, sizes[-1]),
    ]
    for name, make, size in cases:
        text = make(size)
        verdict = outcome(lambda t=text: read_verdict(t))
        t_new = best(lambda t=text: extract_json(t), args.repeat)
        t_verdict = best(lambda t=text: read_verdict(t), args.repeat)
        if len(text) <= args.old_max:
            t_old = best(lambda t=text: old_extract_json(t), 1 if len(text) > 50_000 else args.repeat)
            old, ratio = f"{t_old * 1e3:.1f} ms", f"{t_old / t_new:.0f}x"
        else:
            old, ratio = "-", "-"
        table.add_row(name, f"{len(text):,}", f"{t_new * 1e3:.2f} ms", f"{t_verdict * 1e3:.2f} ms", verdict, old, ratio)
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
