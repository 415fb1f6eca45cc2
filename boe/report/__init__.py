"""Seeing the evidence: an HTML report of a run, question pages, and the figures as PNG.

    from boe.report import make_report, make_question_page
    files = make_report("report.html", db="sqlite:///runs.db", run="demo", png_dir="figures")
    page = make_question_page("sim-0-00012", db="sqlite:///runs.db")

The report is one self-contained file: figures as inline SVG (matplotlib),
tables, and every question's page, drawn by a small inline script when it is
opened (``report.html#q/DATASET/ID``). Images are embedded once each as small
WebP thumbnails within a byte budget; `make_question_page` (``boe show``)
embeds them at full size. `boe.report.browser` opens pages in a headless
Chromium (screenshots, DOM, open time) for tests and benchmarks.
"""

from __future__ import annotations

from boe.report.build import QuestionPage, ReportFiles, make_question_page, make_report

__all__ = ["QuestionPage", "ReportFiles", "make_question_page", "make_report"]
