"""Reports and question pages opened in a real headless Chromium: screenshots, and the DOM after the page ran.

The checks compare what the browser shows with the report's own data: the
figures, every table, a link to every question, and on a question page the
image with the crops the evidence used, the candidate table, the graph's
signed edges and bought claims, and the evidence timeline.
"""

from __future__ import annotations

import cv2
import pytest
from dom import parse

from boe.report import make_question_page, make_report
from boe.report.browser import dump_dom, open_page, screenshot

pytestmark = pytest.mark.chromium

RESCUED = "sim-0-00003"  # the demo question whose raw majority is wrong (see boe.agent.demo)


@pytest.fixture(scope="module")
def agent_report(agent_db, tmp_path_factory, chromium):
    db, run = agent_db
    return make_report(tmp_path_factory.mktemp("rep") / "report.html", db=db, run=run, png_dir=None)


@pytest.fixture(scope="module")
def ledger_report(pool_ledger, tmp_path_factory, chromium):
    return make_report(
        tmp_path_factory.mktemp("rep") / "pool.html", ledgers=[pool_ledger], budgets=[4, 16], resamples=200
    )


def _not_blank(png, min_std=20.0):
    img = cv2.imread(str(png))
    assert img is not None and img.shape[1] == 1280
    assert img.std() > min_std  # text, figures and images, not an empty page
    return img


def test_the_report_opens_with_its_figures_tables_and_a_link_to_every_question(agent_report, tmp_path):
    rep = agent_report.report
    _not_blank(screenshot(agent_report.html, tmp_path / "report.png", size=(1280, 2400)))
    dom = parse(open_page(agent_report.html).dom)  # it raises if the page's script did not record its opening
    for name in ("accuracy_vs_budget", "selection_summary", "paired_intervals", "cost"):
        svg = dom.one(f"figure#fig-{name} svg.plot")
        assert svg.select("path") and svg.select("text")
    exp = rep.experiment
    assert len(dom.one("table#metrics").select("tbody tr")) == len(exp.rows)
    assert len(dom.one("table#comparisons").select("tbody tr")) == len(exp.comparisons)
    assert len(dom.one("table#calibration-table").select("tbody tr")) == len(rep.calibration)
    assert len(dom.one("table#bayes-confusion").select("tbody tr")) == len(rep.channels) > 0
    assert len(dom.one("table#cost-table").select("tbody tr")) == len(rep.costs)
    rows = dom.one("table#qtable").select("tbody tr")
    assert [r.attrs["data-q"] for r in rows] == [t.anchor for t in rep.table]
    links = [a.attrs["href"] for r in rows for a in r.select("a[href]")]
    assert links == ["#" + t.anchor for t in rep.table]
    pages = {s.attrs["id"] for s in dom.select("section.qpage")}
    assert {h[1:] for h in links} <= pages
    assert "show-question" not in dom.one("body").classes
    # the rescued question is tagged in its row
    row = next(r for r in rows if r.attrs["data-q"].endswith(RESCUED))
    assert "rescued" in row.attrs["data-tags"].split()


def test_the_question_table_loads_thumbnails_as_it_is_scrolled_to(agent_report):
    # the observer's callbacks run after a rendering update: wait for them in real time (a virtual-time
    # budget can be used up on a loaded machine before the first frame); the thumbs that never load time out
    pending = "document.querySelectorAll('table#qtable img.thumb[data-img]').length === 0"
    dom = parse(dump_dom(agent_report.html, "questions", until=pending, timeout=60))
    thumbs = dom.select("table#qtable img.thumb")
    assert len(thumbs) == len(agent_report.report.table)
    assert all(t.attrs.get("src", "").startswith("data:image/webp;base64,") for t in thumbs)


def _check_question(sec, view, strings):
    """The drawn page of one question against its data."""
    assert sec.attrs.get("data-rendered") == "1" and "hidden" not in sec.attrs
    assert f"{view['ds']} / {view['id']}" in sec.one("h2.qtitle").text
    log = view["log"]
    # the image, with one outline per distinct crop the bought checks used
    scans = sec.select("svg.scan")
    shaped = any(s[8] and (s[8][2] or s[8][3] or s[8][5]) for s in log)
    assert len(scans) == (len(view["img"]) or int(shaped))
    if view["img"]:
        assert scans[0].one("image").attrs["href"].startswith("data:image/webp;base64,")
    boxes = {tuple(s[8][2]) for s in log if s[8] and s[8][2]}
    assert len(sec.select("svg.scan g.view rect.crop")) == len(boxes)
    # the candidate table: every candidate once, the selected one marked
    rows = sec.one("table.cands").select("tbody tr")
    assert sorted(int(r.attrs["data-cand"]) for r in rows) == list(range(len(view["cand"])))
    assert [int(r.attrs["data-cand"]) for r in rows if "selected" in r.classes] == [view["sel"]]
    # the graph: one edge per sign, the bought claims marked
    graph = sec.one("svg.graph")
    assert len(graph.select("path.e.pos")) == sum(row.count("+") for row in view["inc"])
    assert len(graph.select("path.e.neg")) == sum(row.count("-") for row in view["inc"])
    bought = {int(n.attrs["data-l"]) for n in graph.select("g.node.claim.bought")}
    assert bought == {s[2] for s in log if s[2] >= 0}
    # the timeline: one step per bought action, in order, with its outcome
    steps = sec.select("ol.timeline li.step")
    assert [s.attrs["class"].split()[-1] for s in steps] == [f"o-{s[5]}" for s in log]
    for li, s in zip(steps, log, strict=True):
        if s[6] >= 0:
            assert strings[s[6]] in li.text
    return steps


def test_a_question_page_inside_the_report(agent_report, tmp_path):
    rep = agent_report.report
    n, view = next((n, v) for n, v in enumerate(rep.questions) if v["id"] == RESCUED)
    anchor = rep.table[n].anchor
    png = screenshot(agent_report.html, tmp_path / "question.png", anchor, size=(1280, 2400))
    img = _not_blank(png)
    dom = parse(open_page(agent_report.html, anchor).dom)
    assert "show-question" in dom.one("body").classes
    rendered = dom.select("section.qpage[data-rendered]")
    assert [s.attrs["id"] for s in rendered] == [anchor]
    steps = _check_question(rendered[0], view, rep.strings)
    assert any(s.select("div.view svg") for s in steps)  # crop thumbnails in the log
    assert "rescued" in rendered[0].one("div.verdict").text
    # the page is drawn from the top: the header's title is in the screenshot's first rows
    assert img[:60].std() > 5


def test_the_standalone_question_page_of_boe_show(agent_db, tmp_path, chromium):
    db, run = agent_db
    page = make_question_page(RESCUED, db=db, run=run)
    path = tmp_path / "q.html"
    path.write_text(page.html)
    _not_blank(screenshot(path, tmp_path / "q.png", size=(1280, 2400)))
    opened = open_page(path)
    dom = parse(opened.dom)
    sec = dom.one("section.qpage")
    _check_question(sec, page.view, page.strings)
    summaries = [d.one("summary").text for d in sec.select("details")]
    assert any(t.startswith("The whole menu") for t in summaries) and any(
        t.startswith("Model calls") for t in summaries
    )
    assert len(sec.one("table.calls").select("tbody tr")) == len(page.view["calls"])


def test_a_ledger_question_page_shows_what_there_is(ledger_report, tmp_path):
    rep = ledger_report.report
    n = next(i for i, t in enumerate(rep.table) if "rescued" in t.tags)
    opened = open_page(ledger_report.html, rep.table[n].anchor)
    dom = parse(opened.dom)
    sec = dom.one("section.qpage[data-rendered]")
    steps = _check_question(sec, rep.questions[n], rep.strings)
    assert "names no image" in sec.text
    # who moved is derived from the signed edges: a confirmed claim lifts the candidates asserting it
    view = rep.questions[n]
    for li, s in zip(steps, view["log"], strict=True):
        if s[5] == "c" and s[2] >= 0:
            up = [i for i, c in enumerate(view["inc"][s[2]]) if c == "+"]
            assert bool(up) == bool(li.select("span.up"))
    # next / previous questions are linked from the page
    assert any(a.attrs["href"] == "#questions" for a in sec.select("div.crumbs a"))
