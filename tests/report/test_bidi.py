"""Bidirectional control characters in hostile record text reach no HTML page raw: `boe report` and `boe show
--html` write each as a visible ``[U+XXXX]``, wherever the text lands (templates, the page's JSON, SVG labels)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from boe.sim.ledgers import pool_ledger

BOE = shutil.which("boe", path=str(Path(sys.executable).parent))
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
RAW = re.compile(f"[{BIDI}]")
# "q-\u202e1gpj.exe" reads as "q-exe.jpg1" in a browser: one question id disguised as another
QID = "q-\u202e1gpj.exe"


def hostile_ledger(path: Path) -> None:
    """Pool records whose id, dataset, question, answers, claim values and rationales carry every bidi control."""
    recs = list(pool_ledger(12, seed=3))
    for n, rec in enumerate(recs):
        rec["question_id"] = QID if n == 0 else f"{rec['question_id']}\u2067"
        rec["dataset"] = "pool\u2066x\u2069"
        rec["task"]["question"] = "which \u202bone\u202c is \u202dit\u202c\u200e\u200f\u061c?"
        for c in rec["candidates"]:
            if c["answer"] is not None:
                c["answer"] = f"\u202e{c['answer']}\u2068"
        if rec["reference"] is not None:
            rec["reference"] = f"\u202e{rec['reference']}\u2068"
        for a in rec["actions"]:
            a["rationale"] = "the judge says \u202aconfirm\u202c \u202e(really)"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")


def boe(*args: str) -> subprocess.CompletedProcess[str]:
    assert BOE is not None, "the boe console script is not installed next to this interpreter"
    return subprocess.run([BOE, *args], capture_output=True, text=True, timeout=300)


def test_report_and_question_page_show_bidi_controls_visibly(tmp_path: Path) -> None:
    ledger = tmp_path / "hostile.jsonl"
    hostile_ledger(ledger)
    report = tmp_path / "report.html"
    res = boe("report", "--ledger", str(ledger), "--budget", "4,16", "--out", str(report), "--resamples", "50")
    assert res.returncode == 0, res.stderr[-3000:]
    page = tmp_path / "q.html"
    res = boe("show", f"pool\u2066x\u2069/{QID}", "--ledger", str(ledger), "--budget", "16", "--html", str(page))
    assert res.returncode == 0, res.stderr[-3000:]
    for html in (report.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")):
        assert not RAW.search(html), sorted({f"U+{ord(c):04X}" for c in RAW.findall(html)})
        assert "q-[U+202E]1gpj.exe" in html  # the id as written, its override visible
        assert "pool[U+2066]x[U+2069]" in html
        data = re.search(r'<script type="application/json" id="boe-data">(.*?)</script>', html, re.S)
        assert data is not None
        strings = json.dumps(json.loads(data.group(1)), ensure_ascii=False)  # still valid JSON
        assert "which [U+202B]one[U+202C] is [U+202D]it[U+202C][U+200E][U+200F][U+061C]?" in strings
        assert "[U+202A]confirm[U+202C] [U+202E](really)" in strings
