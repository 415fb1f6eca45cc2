"""The figures (inline SVG and PNG) and the `boe report` / `boe show` commands as scripts call them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from boe.core.experiment import run_experiment
from boe.core.loading import load_ledgers
from boe.report.plots import figure_svg, make_plots, save_png


def boe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "boe", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_figures_draw_every_policy_and_the_oracle_line(pool_ledger, tmp_path):
    qs, groups = load_ledgers([pool_ledger])
    pols = ["raw", "boe", "whole"]
    exp = run_experiment(qs, groups.keys, pols, [1, 4], compare_pairs=[("boe", "raw")], resamples=100)
    plots = make_plots(exp.rows, exp.comparisons, [], pols, "boe", 4.0)
    assert [p.name for p in plots] == ["accuracy_vs_budget", "selection_summary", "paired_intervals"]
    acc = figure_svg(plots[0].figure)
    assert acc.startswith("<svg") and 'class="plot"' in acc and "viewBox" in acc
    oracle = exp.rows[0].oracle_at_k
    assert f"Oracle@K {100 * oracle:.1f}%" in acc  # text stays text (svg.fonttype none)
    for p in pols:
        assert f">{p}<" in acc
    summary = figure_svg(plots[1].figure)
    mw = next(r for r in exp.rows if r.policy == "boe").majority_wrong
    assert f"n={mw}" in summary
    intervals = figure_svg(plots[2].figure)
    c = exp.comparisons[-1]
    assert f"p={c.mcnemar_p:.2g}" in intervals and f"{c.a_only_correct}/{c.b_only_correct}" in intervals
    png = save_png(plots[0].figure, tmp_path / "acc.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape[1] >= 1000 and img.std() > 10  # 200 dpi, not blank


def test_boe_report_and_show_from_a_ledger(pool_ledger, tmp_path):
    out = tmp_path / "report.html"
    res = boe(
        "report",
        "--ledger",
        str(pool_ledger),
        "--out",
        str(out),
        "--png",
        str(tmp_path / "figs"),
        "--budget",
        "4,16",
        "--policy",
        "raw,boe,random-factor",
        "--resamples",
        "100",
    )
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stdout.replace("\n", "") and "150 questions" in res.stdout
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "accuracy_vs_budget.png",
        "cost.png",
        "paired_intervals.png",
        "selection_summary.png",
    ]
    html = out.read_text()
    assert html.count('id="fig-') == 4
    # self-contained: nothing is fetched from anywhere
    assert not re.search(r'(src|href)="(https?:)?//|url\((?!#)|@import|<link', html)
    qid = re.search(r'href="#q/pool/([^"]+)"', html).group(1)
    shown = boe("show", qid, "--ledger", str(pool_ledger), "--budget", "16")
    assert shown.returncode == 0, shown.stderr
    assert qid in shown.stdout and "candidates" in shown.stdout
    page = tmp_path / "q.html"
    assert boe("show", qid, "--ledger", str(pool_ledger), "--html", str(page)).returncode == 0
    assert f'id="q/pool/{qid}"' in page.read_text()


def test_user_errors_are_one_message_without_a_traceback(pool_ledger, tmp_path):
    def error(*args: str) -> str:
        res = boe(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        return " ".join(res.stderr.split())

    assert "give --ledger FILE" in error("report", "--out", str(tmp_path / "r.html"))
    assert "no question 'no-such-question'" in error("show", "no-such-question", "--ledger", str(pool_ledger))
    assert "A:B" in error("report", "--ledger", str(pool_ledger), "--compare", "boe", "--out", str(tmp_path / "r.html"))
    assert "does not exist" in error("report", "--ledger", str(pool_ledger), "--out", str(tmp_path / "no" / "r.html"))
    assert not (tmp_path / "r.html").exists()


def test_show_marks_correctness_in_words_no_answer_can_be(pool_ledger):
    """'selected #3 left right' reads as two answers on a side question: correctness is marked (correct)/(wrong)."""
    qs, _ = load_ledgers([pool_ledger])
    shown = boe("show", qs[0].question_id, "--ledger", str(pool_ledger), "--budget", "16")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("selected #"))
    assert re.search(r"^selected #\d+ .+ \((correct|wrong)\)   raw majority #\d+ .+ \((correct|wrong)\)", line), line
