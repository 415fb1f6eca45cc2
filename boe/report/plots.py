"""The report's figures with matplotlib (Agg): inline SVG for the page, PNG files for papers.

Every figure is built from the report's metric rows, comparisons and cost
rows; one policy keeps one colour in every figure.

* ``accuracy_vs_budget``: selected-candidate accuracy per budget, one panel
  per dataset, Oracle@K as the ceiling line;
* ``selection_summary``: at the main budget, the rescue rate on MajorityWrong
  (subset sizes under the dataset names) and full-set accuracy;
* ``paired_intervals``: paired bootstrap 95% intervals of accuracy
  differences with McNemar p and the discordant counts;
* ``cost``: accuracy against what was spent per question (tokens when the
  records carry model calls, else design cost units).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from boe.core.metrics import Comparison, MetricRow
from boe.report.costs import CostRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FIGURES", "Plot", "figure_svg", "make_plots", "policy_color", "save_png"]

FIGURES = ("accuracy_vs_budget", "selection_summary", "paired_intervals", "cost")

_COLORS = {
    "raw": "#7a7a7a",
    "boe": "#1f4e9c",
    "boe-factor": "#6a9bd8",
    "random-factor": "#e08a2e",
    "whole": "#3a9d5d",
    "label-guided": "#8e5ab5",
    "bayes": "#c0392b",
    "bayes-lookahead": "#e377c2",
}
_EXTRA = ("#17becf", "#bcbd22", "#8c564b", "#9467bd", "#d62728", "#2ca02c")
_MARKERS = {"raw": "s", "boe": "o", "boe-factor": "o", "random-factor": "^", "whole": "D", "label-guided": "v"}
_STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "svg.fonttype": "none",
    "svg.hashsalt": "boe-report",
    "font.family": "DejaVu Sans",
}


def policy_color(policy: str, order: Sequence[str] = ()) -> str:
    """The colour of a policy in every figure."""
    if policy in _COLORS:
        return _COLORS[policy]
    others = [p for p in order if p not in _COLORS]
    return _EXTRA[(others.index(policy) if policy in others else len(others)) % len(_EXTRA)]


@dataclass(frozen=True)
class Plot:
    name: str  # file stem and element id
    title: str
    caption: str
    figure: Figure


@contextmanager
def _style() -> Iterator[None]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    with plt.rc_context(_STYLE):  # type: ignore[arg-type]
        yield


def _fmt_budget(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else f"{b:g}"


def _datasets(rows: Sequence[MetricRow]) -> list[str]:
    return list(dict.fromkeys(r.dataset for r in rows))


def _panels(n: int) -> tuple[Figure, list[Any]]:
    """A figure with one panel per dataset, at most three a row (panels left over are hidden)."""
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    width = {1: 5.2, 2: 4.0}.get(cols, 3.4)
    fig = _new_figure(width * cols + 0.4, 2.8 * rows + 0.5)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _legend_below(fig: Figure, axes: list[Any]) -> Figure:
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 7), frameon=False)
    return fig


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def accuracy_vs_budget(rows: Sequence[MetricRow], policies: Sequence[str], focus: str) -> Figure:
    datasets = _datasets(rows)
    budgets = sorted({r.budget for r in rows})
    fig, axes = _panels(len(datasets))
    x = {b: i for i, b in enumerate(budgets)}
    for ax, ds in zip(axes, datasets, strict=False):
        sub = [r for r in rows if r.dataset == ds]
        oracle = 100 * sub[0].oracle_at_k
        for p in policies:
            pts = sorted((r.budget, 100 * r.accuracy) for r in sub if r.policy == p)
            if not pts:
                continue
            ax.plot(
                [x[b] for b, _ in pts],
                [a for _, a in pts],
                marker=_MARKERS.get(p, "o"),
                ms=4 if p != focus else 5,
                lw=2.2 if p == focus else 1.3,
                color=policy_color(p, policies),
                label=p,
                ls="--" if p == "label-guided" else "-",
                zorder=3 if p == focus else 2,
            )
        ax.axhline(oracle, color="#222222", ls=(0, (4, 3)), lw=1.0, zorder=1)
        ax.annotate(
            f"Oracle@K {oracle:.1f}%",
            (0.99, oracle),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            xytext=(0, 2),
            textcoords="offset points",
            fontsize=7.5,
            color="#222222",
        )
        ax.set_xticks(range(len(budgets)), [_fmt_budget(b) for b in budgets])
        ax.set_xlim(-0.3, len(budgets) - 0.7)
        lo = min(100 * r.accuracy for r in sub)
        ax.set_ylim(max(0.0, lo - max(4.0, 0.15 * (oracle - lo))), min(101.5, oracle + max(3.0, 0.08 * oracle)))
        ax.set_title(f"{ds}  (N={sub[0].n})")
        ax.set_xlabel("budget C")
        ax.set_ylabel("accuracy (%)")
    return _legend_below(fig, axes)


def _bars(
    ax: Any,
    groups: list[str],
    series: list[str],
    value: Mapping[tuple[str, str], float | None],
    policies: Sequence[str],
    focus: str,
    fmt: str,
) -> list[float]:
    ax.set_axisbelow(True)
    width = 0.8 / max(len(series), 1)
    centers: list[float] = []
    for gi, g in enumerate(groups):
        centers.append(float(gi))
        for si, p in enumerate(series):
            v = value.get((g, p))
            if v is None:
                continue
            xpos = gi - 0.4 + width * (si + 0.5)
            ax.bar(
                xpos,
                v,
                width * 0.92,
                color=policy_color(p, policies),
                label=p if gi == 0 else None,
                edgecolor="#1b1b1b" if p == focus else "none",
                linewidth=0.8 if p == focus else 0,
            )
            ax.annotate(
                fmt.format(v),
                (xpos, v),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=6.5,
                rotation=90 if len(series) > 4 else 0,
                fontweight="bold" if p == focus else "normal",
            )
    return centers


def selection_summary(rows: Sequence[MetricRow], policies: Sequence[str], focus: str, budget: float) -> Figure:
    sub = [r for r in rows if r.budget == budget]
    datasets = _datasets(sub)
    fig = _new_figure(min(11.0, 3.0 + 1.6 * len(datasets) * 2), 3.2)
    left, right = fig.subplots(1, 2)
    rescue_pols = [p for p in policies if p != "raw"]
    rescue = {(r.dataset, r.policy): None if r.rescue_rate is None else 100 * r.rescue_rate for r in sub}
    mw = {r.dataset: r.majority_wrong for r in sub}
    centers = _bars(left, datasets, rescue_pols, rescue, policies, focus, "{:.1f}")
    left.set_xticks(centers, [f"{d}\nn={mw[d]}" for d in datasets])
    left.set_ylabel("rescued (% of MajorityWrong)")
    left.set_title(f"Rescue on MajorityWrong, C={_fmt_budget(budget)}")
    top = max([v for v in rescue.values() if v is not None] + [1.0])
    left.set_ylim(0, top * 1.25)
    acc = {(r.dataset, r.policy): 100 * r.accuracy for r in sub}
    centers = _bars(right, datasets, list(policies), acc, policies, focus, "{:.1f}")
    n = {r.dataset: r.n for r in sub}
    for gi, d in enumerate(datasets):
        oracle = 100 * next(r.oracle_at_k for r in sub if r.dataset == d)
        right.hlines(
            oracle,
            gi - 0.45,
            gi + 0.45,
            colors="#222222",
            linestyles=(0, (4, 3)),
            lw=1.0,
            label="Oracle@K" if gi == 0 else None,
        )
        right.annotate(
            f"Oracle@K {oracle:.1f}",
            (gi + 0.45, oracle),
            xytext=(0, 2),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=6.5,
            color="#222222",
        )
    right.set_xticks(centers, [f"{d}\nN={n[d]}" for d in datasets])
    right.set_ylabel("accuracy (%)")
    right.set_title(f"Full-set accuracy, C={_fmt_budget(budget)}")
    vals = list(acc.values())
    lo = min(vals) if vals else 0.0
    hi = max([100 * r.oracle_at_k for r in sub] + vals + [1.0])
    right.set_ylim(max(0.0, math.floor((lo - 10) / 10) * 10), min(100.0, hi * 1.08 + 1))
    handles, labels = right.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 8), frameon=False)
    return fig


def paired_intervals(comparisons: Sequence[Comparison], policies: Sequence[str]) -> Figure:
    items = list(comparisons)
    fig = _new_figure(7.6, 1.0 + 0.3 * len(items))
    ax = fig.subplots()
    ys = list(range(len(items)))[::-1]
    for y, c in zip(ys, items, strict=True):
        d, lo, hi = 100 * c.diff, 100 * c.ci95[0], 100 * c.ci95[1]
        separated = lo > 0 or hi < 0
        color = policy_color(c.a, policies)
        ax.errorbar(
            d,
            y,
            xerr=[[d - lo], [hi - d]],
            fmt="o",
            color=color,
            ms=4.5 if separated else 3.5,
            mfc=color if separated else "white",
            capsize=2.5,
            lw=1.4 if separated else 1.0,
        )
    ax.axvline(0, color="#444444", lw=0.8)
    ax.set_yticks(ys, [f"{c.dataset}  C={_fmt_budget(c.budget)}  {c.a} − {c.b}" for c in items])
    ax.set_ylim(-0.7, len(items) - 0.3)
    ax.grid(axis="x", color="#e4e4e4", lw=0.6)
    ax.grid(axis="y", visible=False)
    right = ax.twinx()  # the numbers beside each interval, as tick labels so the layout makes room for them
    right.set_ylim(ax.get_ylim())
    right.set_yticks(
        ys,
        [
            f"{100 * c.diff:+.2f} [{100 * c.ci95[0]:+.2f}, {100 * c.ci95[1]:+.2f}]  "
            f"{c.a_only_correct}/{c.b_only_correct}  p={c.mcnemar_p:.2g}"
            for c in items
        ],
    )
    right.tick_params(axis="y", length=0, labelsize=7.5)
    right.grid(False)
    for side in ("top", "right"):
        right.spines[side].set_visible(False)
    ax.set_xlabel("A − B, percentage points (paired bootstrap 95% interval; filled: excludes 0)")
    return fig


def cost_figure(rows: Sequence[MetricRow], costs: Sequence[CostRow], policies: Sequence[str], focus: str) -> Figure:
    use_tokens = any(c.tokens is not None for c in costs)
    datasets = _datasets(rows)
    fig, axes = _panels(len(datasets))
    spent = {(c.dataset, c.policy, c.budget): (c.tokens if use_tokens else c.mean_cost) for c in costs}
    for ax, ds in zip(axes, datasets, strict=False):
        for p in policies:
            pts = sorted(
                (spent.get((ds, p, r.budget)), 100 * r.accuracy)
                for r in rows
                if r.dataset == ds and r.policy == p and spent.get((ds, p, r.budget)) is not None
            )
            if pts:
                ax.plot(
                    [s for s, _ in pts],
                    [a for _, a in pts],
                    marker=_MARKERS.get(p, "o"),
                    ms=4,
                    lw=2.2 if p == focus else 1.3,
                    color=policy_color(p, policies),
                    label=p,
                )
        ax.set_title(ds)
        ax.set_xlabel("mean tokens per question" if use_tokens else "mean design cost per question")
        ax.set_ylabel("accuracy (%)")
    return _legend_below(fig, axes)


def make_plots(
    rows: Sequence[MetricRow],
    comparisons: Sequence[Comparison],
    costs: Sequence[CostRow],
    policies: Sequence[str],
    focus: str,
    budget: float,
) -> list[Plot]:
    """The report's figures (paired intervals only when there are comparisons)."""
    out = []
    with _style():
        if rows:
            out.append(
                Plot(
                    "accuracy_vs_budget",
                    "Accuracy versus budget",
                    "Selected-candidate accuracy per budget and policy; the dashed line is Oracle@K, the share of "
                    "questions whose pool holds a correct candidate (the ceiling of any selection).",
                    accuracy_vs_budget(rows, policies, focus),
                )
            )
            out.append(
                Plot(
                    "selection_summary",
                    "Selection summary",
                    f"At C={_fmt_budget(budget)}. Left: rescue rate on MajorityWrong, the questions on which raw BoN "
                    "selects a wrong candidate (subset sizes under the names; raw rescues none by definition). Right: "
                    f"full-set accuracy with Oracle@K. {focus} is outlined and its labels bold.",
                    selection_summary(rows, policies, focus, budget),
                )
            )
        if comparisons:
            out.append(
                Plot(
                    "paired_intervals",
                    "Paired intervals",
                    "Question-paired bootstrap 95% intervals of accuracy differences (filled when the interval "
                    "excludes "
                    "0); on the right the difference [interval] in points, the discordant questions (A right and B "
                    "wrong / A wrong and B right) and the exact McNemar p (exploratory, uncorrected).",
                    paired_intervals(comparisons, policies),
                )
            )
        if rows and costs:
            tokens = any(c.tokens is not None for c in costs)
            out.append(
                Plot(
                    "cost",
                    "Accuracy versus cost",
                    "Accuracy against the mean "
                    + (
                        "prompt + completion tokens"
                        if tokens
                        else "design cost (record check 1, factor 4, whole 8 by default)"
                    )
                    + " spent per question; points are the budgets.",
                    cost_figure(rows, costs, policies, focus),
                )
            )
    return out


def figure_svg(fig: Figure) -> str:
    """The figure as an inline <svg> element that scales with its container."""
    with _style():
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF boilerplate
    head, rest = text.split(">", 1)
    # keep the natural size (so every figure has the same type size) but let it shrink with the page
    head = re.sub(r'\s(width|height)="([\d.]+)pt"', lambda m: f' {m.group(1)}="{float(m.group(2)) * 4 / 3:.0f}"', head)
    return head + ' class="plot" role="img">' + rest


def save_png(fig: Figure, path: str | Path, dpi: int = 200) -> Path:
    """Write the figure as a PNG for papers."""
    p = Path(path)
    with _style():
        fig.savefig(p, format="png", dpi=dpi, facecolor="white")
    return p
