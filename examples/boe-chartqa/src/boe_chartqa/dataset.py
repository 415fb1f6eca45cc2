"""The ``chartqa`` dataset format: questions about charts, each with the chart's data table.

Layout::

    DIR/chartqa.json     {"format": "chartqa", "version": 1, "name": ...}
    DIR/questions.jsonl  id, image (relative path), question, answer, table ({label: value})

The table is evaluation-side metadata (what the chart was drawn from); the
generator and the judge see only the image and the question.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from boe.datasets import DatasetItem, LoadContext, RecordProblem, register_format
from boe.datasets._context import read_jsonl, require_fields, text_field

FORMAT = "chartqa"


def _root(p: Path) -> Path:
    return p if p.is_dir() else p.parent


def _sniff(p: Path) -> bool:
    marker = _root(p) / "chartqa.json"
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


@register_format(FORMAT, sniff=_sniff, root=_root, exclusive=True, description="bar charts with their data tables")
def load_chartqa(path: Path, ctx: LoadContext) -> Iterator[DatasetItem]:
    """Load a chartqa folder (chartqa.json + questions.jsonl + the chart images)."""
    questions = _root(path) / "questions.jsonl"
    if not questions.is_file():
        raise ctx.file_error(questions, "missing")
    for line, raw in read_jsonl(ctx, questions):
        with ctx.record(questions, line):
            rec = require_fields(raw, ("id", "image", "question", "answer", "table"))
            if not isinstance(rec["table"], dict) or not rec["table"]:
                raise RecordProblem("field 'table' must map labels to values")
            yield ctx.item(
                question_id=text_field(rec, "id"),
                question=text_field(rec, "question"),
                reference=text_field(rec, "answer"),
                answer_type="open",
                images=[ctx.image(rec["image"])],
                metadata={"table": json.dumps(rec["table"], sort_keys=True)},
                answer_raw=str(rec["answer"]),
            )
