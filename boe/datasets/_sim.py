"""boe-sim: the simulator's own datasets (`boe sim dataset`), read from disk.

Layout (``boe/sim/dataset.py``, format "boe-sim" version 1)::

    DIR/dataset.json      {"format": "boe-sim", "version": 1, ...}
    DIR/questions.jsonl   id, image_id, images (relative paths), dicom, question, options,
                          answer (canonical value), answer_type (open | closed | choice), asks, slot
    DIR/images/           the scans
    DIR/facts.jsonl       the truth behind every image: never opened here

Only the reference answer is evaluation data; the facts sidecar stays
unread. A choice question's label is the option whose text names the
reference (through the simulator's synonym table when it is installed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from boe.datasets._context import (
    LoadContext,
    RecordProblem,
    clean_text,
    read_jsonl,
    require_fields,
    text_field,
)
from boe.datasets._item import AnswerType, DatasetItem
from boe.datasets._registry import register_format
from boe.datasets.evaluate import normalise

FORMAT = "boe-sim"
VERSION = 1
_TYPES: dict[str, AnswerType] = {"open": "open", "closed": "closed", "choice": "mcq"}


def _meta_file(p: Path) -> Path:
    return (p if p.is_dir() else p.parent) / "dataset.json"


def _sniff(p: Path) -> bool:
    meta = _meta_file(p)
    if not meta.is_file() or (p.is_file() and p.name != "questions.jsonl"):
        return False
    try:
        meta = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def _synonyms(slot: str | None, value: str) -> list[str]:
    """The simulator's surface forms of a canonical value (empty when the simulator is not installed)."""
    if not slot:
        return []
    try:
        from boe.sim.vocab import surface
    except ImportError:
        return []
    forms: list[str] = []
    for pick in range(16):  # `surface` wraps around its list
        form = surface(slot, value, pick)
        if form in forms:
            break
        forms.append(form)
    return forms


def _label(options: Mapping[str, str], answer: str, forms: list[str], given: Any) -> str:
    if given is not None:
        label = clean_text(given).upper()
        if label not in options:
            raise RecordProblem(f"label {given!r} is not one of the options")
        return label
    accepted = {normalise(a) for a in (answer, *forms)}
    hits = [k for k, v in options.items() if normalise(v) in accepted]
    if len(hits) != 1:
        raise RecordProblem(f"answer {answer!r} names {len(hits)} of the options {dict(options)}; expected one")
    return hits[0]


# exclusive: detection stops at dataset.json, so no other format's sniffer peeks into facts.jsonl
@register_format(
    FORMAT,
    sniff=_sniff,
    exclusive=True,
    description="the simulator's datasets (dataset.json + questions.jsonl + images/)",
)
def load_boe_sim(path: Path, ctx: LoadContext) -> Iterator[DatasetItem]:
    """Load a boe-sim dataset directory (or its questions.jsonl); facts.jsonl is never read."""
    meta_path = _meta_file(path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ctx.file_error(meta_path, "missing: not a boe-sim dataset") from None
    except (OSError, ValueError) as exc:
        raise ctx.file_error(meta_path, f"unreadable ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        found = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else meta
        raise ctx.file_error(meta_path, f"format/version {found!r} is not {FORMAT!r} version {VERSION}")
    questions = meta_path.parent / "questions.jsonl"
    if not questions.is_file():
        raise ctx.file_error(questions, "missing")
    for line, raw in read_jsonl(ctx, questions):
        with ctx.record(questions, line):
            rec = require_fields(raw, ("id", "question", "answer", "answer_type", "images"))
            atype = _TYPES.get(clean_text(rec["answer_type"]).lower())
            if atype is None:
                raise RecordProblem(f"answer_type {rec['answer_type']!r} is not open, closed or choice")
            if not isinstance(rec["images"], list) or not rec["images"]:
                raise RecordProblem("field 'images' must be a non-empty list of paths")
            answer = text_field(rec, "answer")
            slot = rec.get("slot") if isinstance(rec.get("slot"), str) else None
            forms = _synonyms(slot, answer)
            raw_options = rec.get("options")
            options = (
                {clean_text(k).upper(): clean_text(v) for k, v in raw_options.items()}
                if isinstance(raw_options, Mapping) and raw_options
                else None
            )
            metadata = {k: rec[k] for k in ("image_id", "asks", "slot") if isinstance(rec.get(k), str)}
            if isinstance(rec.get("dicom"), str) and rec["dicom"]:
                metadata["dicom"] = str(ctx.image(rec["dicom"], figure="dicom").path)
            label: str | None = None
            reference, alternatives = answer, forms
            if atype == "mcq":
                if options is None:
                    raise RecordProblem("a choice question without options")
                label = _label(options, answer, forms, rec.get("label"))
                reference, alternatives = label, [options[label], answer, *forms]
            yield ctx.item(
                question_id=text_field(rec, "id"),
                question=text_field(rec, "question"),
                reference=reference,
                alternatives=alternatives,
                answer_type=atype,
                options=options,
                label=label,
                images=[ctx.image(p) for p in rec["images"]],
                metadata=metadata,
                answer_raw=str(rec["answer"]),
            )
