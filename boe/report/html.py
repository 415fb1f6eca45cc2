"""HTML of the report and of a standalone question page: plain string templates, one self-contained file each.

Everything a page needs is inline (CSS, script, figures as SVG, images as
data URLs), so it opens without a network. Record text is escaped here or,
for question pages, set as text by the page script; the embedded JSON has
every ``<`` escaped so no record can close its script element.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from functools import cache
from html import escape
from importlib import resources
from typing import Any

from boe.core.version import __version__
from boe.report.images import EncodedImage
from boe.report.model import Report
from boe.report.plots import Plot, figure_svg
from boe.report.questions import anchor

__all__ = ["neutralise_bidi", "question_html", "report_html"]


@cache
def _asset(name: str) -> str:
    return resources.files("boe.report").joinpath(name).read_text(encoding="utf-8")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _e(x: Any) -> str:
    return escape("" if x is None else str(x), quote=True)


def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def _budget(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def _table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    cls: str = "data",
    left: Iterable[int] = (0,),
    row_cls: Sequence[str] | None = None,
    attrs: str = "",
) -> str:
    """A table whose cells are already HTML; columns in ``left`` are left-aligned."""
    lft = set(left)
    head = "".join(f"<th{' class=l' if i in lft else ''}>{h}</th>" for i, h in enumerate(headers))
    body = []
    for n, row in enumerate(rows):
        rc = f' class="{row_cls[n]}"' if row_cls and row_cls[n] else ""
        body.append(
            f"<tr{rc}>" + "".join(f"<td{' class=l' if i in lft else ''}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        )
    return (
        f'<div class="scroll"><table class="{cls}"{attrs}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _kinds() -> dict[str, dict[str, str]]:
    """Label and target of every registered action kind (the page script names kinds with them)."""
    from boe.kinds import KINDS

    return {n: {"label": KINDS.get_obj(n).report_label, "target": KINDS.get_obj(n).target} for n in KINDS}


# Bidirectional controls (embeddings, overrides, isolates, marks) reorder what a reader sees: a hostile record could
# make one question id read as another. None belongs to a page of ours, so each is shown as its code point instead.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def neutralise_bidi(text: str) -> str:
    """``text`` with every bidirectional control character written visibly as ``[U+XXXX]``."""
    return _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def _page(title: str, body: str, data: dict[str, Any], images: dict[str, EncodedImage], body_class: str = "") -> str:
    pictures = {k: v.as_json() for k, v in images.items()}
    data = {**data, "kinds": _kinds()}
    # the whole page at once: record text reaches it through templates, the JSON the script reads, and SVG labels
    return neutralise_bidi(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="boe {_e(__version__)}"><title>{_e(title)}</title>'
        f'<style>{_asset("report.css")}</style></head>\n<body class="{body_class}">\n{body}\n'
        f'<script type="application/json" id="boe-data">{_json(data)}</script>\n'
        f'<script type="application/json" id="boe-images">{_json(pictures)}</script>\n'
        f"<script>{_asset('report.js')}</script>\n</body></html>\n"
    )


def _figure(plot: Plot) -> str:
    return (
        f'<figure class="plot" id="fig-{plot.name}">{figure_svg(plot.figure)}'
        f"<figcaption>{_e(plot.caption)}</figcaption></figure>"
    )


def _settings(report: Report) -> str:
    s = report.settings
    exp = report.experiment
    items = [
        ("source", _e(report.source)),
        ("questions", f"{len(exp.questions):,} ({sum(1 for q in exp.questions if q.labelled):,} with utilities)"),
        ("policies", ", ".join(f"<b>{_e(p)}</b>" if p == s.focus else _e(p) for p in s.policies)),
        ("budgets", ", ".join(_budget(b) for b in s.budgets) + f" (main: {_budget(s.main_budget)})"),
        ("calibration", _e(s.calibration_label) + f"; cheap κ {report.cheap_kappa:.3f}"),
        ("bootstrap", f"{s.resamples} resamples, seed {s.seed}"),
        (
            "question pages",
            f"evidence of <b>{_e(s.focus)}</b> at C={_budget(s.main_budget)} under this calibration"
            + (" (an online agent's own log where the record holds one)" if s.agent_log else ""),
        ),
    ]
    if report.run is not None:
        run = report.run
        items.insert(
            1,
            (
                "run",
                f"{_e(run.name)}, created {_e(run.created.strftime('%Y-%m-%d %H:%M'))}, boe {_e(run.boe_version)}"
                + (f", git {_e(run.git_revision[:10])}" if run.git_revision else ""),
            ),
        )
    return '<dl class="settings">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _cards(report: Report) -> str:
    s = report.settings
    rows = [r for r in report.experiment.rows if r.budget == s.main_budget]
    out = []
    for ds in dict.fromkeys(r.dataset for r in rows):
        by = {r.policy: r for r in rows if r.dataset == ds}
        raw, foc = by.get("raw"), by.get(s.focus)
        if raw is None or foc is None:
            continue
        out.append(
            f'<div class="card"><h3>{_e(ds)} <span class="muted">N={raw.n:,}</span></h3>'
            f'<div class="big">{_pct(foc.accuracy)}</div>'
            f'<div class="sub">{_e(s.focus)} at C={_budget(s.main_budget)}; raw {_pct(raw.accuracy)}, '
            f"Oracle@K {_pct(raw.oracle_at_k)}</div>"
            f'<div class="sub">ΔAcc {100 * foc.delta_acc:+.2f} pp: {foc.corrections} corrected, {foc.harms} harmed; '
            f"rescued {_pct(foc.rescue_rate)} of {raw.majority_wrong} MajorityWrong</div></div>"
        )
    return f'<div class="cards">{"".join(out)}</div>'


def _metrics_table(report: Report) -> str:
    s = report.settings
    cost = {(c.dataset, c.policy, c.budget): c for c in report.costs}
    rows, cls = [], []
    for r in report.experiment.rows:
        c = cost.get((r.dataset, r.policy, r.budget))
        rows.append(
            [
                _e(r.dataset),
                _e(r.policy),
                _budget(r.budget),
                f"{r.n:,}",
                _pct(r.accuracy, 2),
                _pct(r.oracle_at_k, 2),
                f"{r.majority_wrong:,}",
                _pct(r.rescue_rate, 2),
                str(r.corrections),
                str(r.harms),
                f"{100 * r.delta_acc:+.2f} pp",
                _num(r.mean_cost),
                _num(c.tokens, 0) if c else "–",
                f"{r.sharp:+.3f}",
            ]
        )
        cls.append("focus" if r.policy == s.focus and r.budget == s.main_budget else "")
    return _table(
        [
            "dataset",
            "policy",
            "C",
            "N",
            "accuracy",
            "Oracle@K",
            "MajorityWrong",
            "rescue",
            "corr.",
            "harms",
            "ΔAcc vs raw",
            "mean cost",
            "mean tokens",
            "Sharp",
        ],
        rows,
        left=(0, 1),
        row_cls=cls,
        attrs=' id="metrics"',
    )


def _comparisons_table(report: Report) -> str:
    comps = report.experiment.comparisons
    if not comps:
        return '<p class="note">No comparisons (give --compare A:B).</p>'
    rows = [
        [
            _e(c.dataset),
            _budget(c.budget),
            _e(c.a),
            _e(c.b),
            f"{c.n:,}",
            _pct(c.accuracy_a, 2),
            _pct(c.accuracy_b, 2),
            f"<b>{100 * c.diff:+.2f}</b>" if c.ci95[0] > 0 or c.ci95[1] < 0 else f"{100 * c.diff:+.2f}",
            f"[{100 * c.ci95[0]:+.2f}, {100 * c.ci95[1]:+.2f}]",
            f"{c.a_only_correct} / {c.b_only_correct}",
            f"{c.mcnemar_p:.4g}",
        ]
        for c in comps
    ]
    return _table(
        [
            "dataset",
            "C",
            "A",
            "B",
            "N",
            "acc A",
            "acc B",
            "A − B (pp)",
            "95% interval (pp)",
            "discordants A/B",
            "McNemar p",
        ],
        rows,
        left=(0, 2, 3),
        attrs=' id="comparisons"',
    )


def _calibration_tables(report: Report) -> str:
    rows = []
    for c in report.calibration:
        kappa = f"{c.kappa:.3f}" + (
            f' <span class="muted">[{c.kappa_range[0]:.3f}, {c.kappa_range[1]:.3f}]</span>' if c.kappa_range else ""
        )
        rows.append(
            [
                _e(c.group),
                kappa,
                f"{c.p[0]:.3f}",
                f"{c.p[1]:.3f}",
                f"{c.p[2]:.3f}",
                _num(c.support, 0),
                _num(c.contradict, 0),
                f"{c.actions:,}",
                f"{c.bought:,}",
            ]
        )
    s = report.settings
    out = _table(
        [
            "group (dataset/channel)",
            "κ<sub>g</sub>",
            "p(confirm)",
            "p(reject)",
            "p(unresolved)",
            "support pairs",
            "contradict pairs",
            "actions here",
            f"bought by {_e(s.focus)} at C={_budget(s.main_budget)}",
        ],
        rows,
        attrs=' id="calibration-table"',
    )
    if report.channels:
        crow = [
            [
                _e(c.group),
                c.kind,
                *(f"{v:.3f}" for v in c.given_true),
                *(f"{v:.3f}" for v in c.given_false),
                _num(c.actions, 0),
            ]
            for c in report.channels
        ]
        out += (
            "<h3>bayes: channel confusion per group</h3>"
            '<p class="note">P(outcome | latent) of the <code>bayes</code> observation model: the latent is the '
            "claim's "
            "truth for factor groups and the judge's verdict on the judged answer for whole-response groups "
            "(mean over folds when cross-fitted).</p>"
            + _table(
                [
                    "group",
                    "channel",
                    "confirm | true",
                    "reject | true",
                    "unresolved | true",
                    "confirm | false",
                    "reject | false",
                    "unresolved | false",
                    "fit actions",
                ],
                crow,
                left=(0, 1),
                attrs=' id="bayes-confusion"',
            )
        )
    return out


def _cost_table(report: Report) -> str:
    s = report.settings
    rows, cls = [], []
    for c in report.costs:
        rows.append(
            [
                _e(c.dataset),
                _e(c.policy),
                _budget(c.budget),
                f"{c.n:,}",
                _num(c.mean_cost),
                _num(c.tokens, 0),
                _num(c.seconds, 3),
                "–" if c.observed is None else _pct(c.observed, 1),
            ]
        )
        cls.append("focus" if c.policy == s.focus and c.budget == s.main_budget else "")
    return _table(
        ["dataset", "policy", "C", "N", "mean design cost", "mean tokens", "mean model time (s)", "observed"],
        rows,
        left=(0, 1),
        row_cls=cls,
        attrs=' id="cost-table"',
    )


_TAGS = ("majority-wrong", "rescued", "harmed", "changed", "no-correct-candidate")
#: Question rows shown per page; the others are in the page too, hidden, so the browser never lays out thousands.
PAGE_ROWS = 100
_OK = {True: ' <span class="ok">✓</span>', False: ' <span class="bad">✗</span>', None: ""}


def _question_table(report: Report) -> str:
    rows = []
    for n, t in enumerate(report.table):
        thumb = f'<img class="thumb" data-img="{_e(t.image)}" alt="">' if t.image else '<span class="thumb"></span>'
        tags = "".join(f'<span class="tag {g}">{g}</span>' for g in t.tags)
        hidden = " hidden" if n >= PAGE_ROWS else ""
        rows.append(
            f'<tr data-q="{_e(t.anchor)}" data-ds="{_e(t.dataset)}" data-tags="{" ".join(t.tags)}"{hidden}>'
            f"<td>{thumb}</td>"
            f'<td><a href="#{_e(t.anchor)}">{_e(t.question_id)}</a></td><td>{_e(t.dataset)}</td>'
            f'<td title="{_e(t.text)}">{_e(t.text)}</td><td>{_e(t.reference)}</td>'
            f"<td>{_e(t.raw)}{_OK[t.raw_ok]}</td><td>{_e(t.selected)}{_OK[t.selected_ok]}</td>"
            f"<td>{t.spent:g}</td><td>{t.steps}</td>"
            f"<td>{tags}</td></tr>"
        )
    datasets = list(dict.fromkeys(t.dataset for t in report.table))
    counts = {g: sum(1 for t in report.table if g in t.tags) for g in _TAGS}
    s = report.settings
    filters = (
        '<div class="filters"><label>show <select id="qfilter"><option value="">all questions</option>'
        + "".join(f'<option value="{g}">{g} ({counts[g]})</option>' for g in _TAGS)
        + '</select></label><label>dataset <select id="qdataset"><option value="">all</option>'
        + "".join(f'<option value="{_e(d)}">{_e(d)}</option>' for d in datasets)
        + '</select></label><label>search <input id="qsearch" type="search" placeholder="id, question, answer"></label>'
        + f'<span id="qcount" class="muted">{len(report.table):,} questions</span>'
        + f'<span class="pager" data-rows="{PAGE_ROWS}"><button type="button" id="qprev">‹ previous</button> '
        + '<span id="qpage"></span> <button type="button" id="qnext">next ›</button></span></div>'
    )
    cols = (
        '<colgroup><col style="width:50px"><col style="width:13%"><col style="width:9%"><col>'
        '<col style="width:9%"><col style="width:11%"><col style="width:11%"><col style="width:52px">'
        '<col style="width:46px"><col style="width:15%"></colgroup>'
    )
    head = (
        "<thead><tr><th></th><th>question</th><th>dataset</th><th>text</th><th>reference</th><th>raw majority</th>"
        "<th>selected</th><th>spent</th><th>steps</th><th>tags</th></tr></thead>"
    )
    note = (
        f'<p class="note">Selected: {_e(s.focus)} at C={_budget(s.main_budget)} (or the agent\'s own selection). '
        "Each question links to its page: the image with the crops and masks the evidence used, the candidates, "
        "the signed candidate–claim graph and the evidence log.</p>"
    )
    return note + filters + f'<table class="questions" id="qtable">{cols}{head}<tbody>{"".join(rows)}</tbody></table>'


def report_html(report: Report, plots: Sequence[Plot]) -> str:
    """The report as one self-contained HTML document."""
    by = {p.name: p for p in plots}
    nav = [
        ("summary", "Summary"),
        ("accuracy", "Accuracy vs budget"),
        ("selection", "MajorityWrong"),
        ("intervals", "Paired intervals"),
        ("calibration", "Calibration"),
        ("cost", "Cost"),
        ("questions", "Questions"),
    ]
    warn = "".join(f"<p>{_e(w)}</p>" for w in report.warnings)
    exp = report.experiment
    parts = [
        f'<header class="top"><h1>{_e(report.title)}</h1>'
        f'<p class="meta">{len(exp.questions):,} questions · {_e(report.source)} · made {_e(report.created)} '
        f"with boe {_e(__version__)}</p>"
        '<nav class="sections">' + "".join(f'<a href="#{k}">{v}</a>' for k, v in nav) + "</nav></header>",
        '<main id="report">',
        f'<section class="block" id="summary"><h2>Summary</h2><div class="warnings">{warn}</div>'
        f"{_cards(report)}{_settings(report)}</section>",
        '<section class="block" id="accuracy"><h2>Accuracy versus budget</h2>'
        + (
            _figure(by["accuracy_vs_budget"])
            if "accuracy_vs_budget" in by
            else '<p class="empty">No labelled questions.</p>'
        )
        + "<h3>All figures</h3>"
        + _metrics_table(report)
        + "</section>",
        '<section class="block" id="selection"><h2>Rescue on MajorityWrong</h2>'
        + (_figure(by["selection_summary"]) if "selection_summary" in by else "")
        + "</section>",
        '<section class="block" id="intervals"><h2>Paired intervals and McNemar p</h2>'
        + (_figure(by["paired_intervals"]) if "paired_intervals" in by else "")
        + _comparisons_table(report)
        + "</section>",
        '<section class="block" id="calibration"><h2>Calibration</h2>'
        '<p class="note">κ<sub>g</sub> is the discrimination index of each dataset/channel group, p its outcome '
        f"masses (spec §4); {_e(report.settings.calibration_label)}. Cross-fitted: the mean over folds, the range "
        "in brackets.</p>" + _calibration_tables(report) + "</section>",
        '<section class="block" id="cost"><h2>Token and time cost per policy</h2>'
        + (_figure(by["cost"]) if "cost" in by else "")
        + '<p class="note">Design cost: the menu\'s units. Tokens and model time (summed latency of the calls, '
        "not wall time) come from the model calls in each record: the shared calls (generation, claim extraction) "
        "plus the judge "
        "calls of the actions a policy buys. Observed: the share of bought actions whose outcome the record holds.</p>"
        + _cost_table(report)
        + "</section>",
        f'<section class="block" id="questions"><h2>Questions</h2>{_question_table(report)}</section>',
        "</main>",
        '<div id="pages">'
        + "".join(f'<section class="qpage" id="{_e(t.anchor)}" hidden></section>' for t in report.table)
        + "</div>",
        f"<footer>boe {_e(__version__)} · Best-of-Evidence report · {_e(report.source)}</footer>",
    ]
    return _page(report.title, "\n".join(parts), report.payload(), report.images)


def question_html(
    view: dict[str, Any],
    strings: list[str],
    slots: list[str],
    images: dict[str, EncodedImage],
    *,
    source: str,
    policies: Sequence[str],
    focus: str,
    budget: float,
) -> str:
    """One question's page as a self-contained HTML document."""
    title = f"{view['ds']} / {view['id']} — boe"
    data = {
        "strings": strings,
        "slots": slots,
        "policies": list(policies),
        "focus": focus,
        "budget": budget,
        "questions": [view],
    }
    body = (
        f'<header class="top"><h1>Question {_e(view["id"])}</h1><p class="meta">{_e(view["ds"])} · {_e(source)} · '
        f"boe {_e(__version__)}</p></header>"
        f'<div id="pages"><section class="qpage" id="{_e(anchor(view["ds"], view["id"]))}"></section></div>'
    )
    return _page(title, body, data, images, body_class="standalone")
