"""One question as the compact JSON its page is drawn from.

The page script (``report.js``) draws a question from this form.
Strings that repeat across questions (answers, slot values, claim ids,
rationales, question texts) are kept once in a shared table and referred to
by index (-1: none), so a 2,000-question report stays small. Keys:

``ds, id, text, opts, ref``  dataset, question id, question (index), options, reference
``img``   image ids (one per figure) into the report's image table
``cand``  per candidate ``[answer, valid, utility, score before, score after, [slot values]]``
``claims`` claim ids; ``cslot`` each claim's slot (index into ``slots``)
``inc``   per claim a string of K signs: ``+`` asserts, ``-`` denies, ``.`` no edge
``co, lo`` drawing order of candidates and claims (answers together, claims by slot
          and by where their supporters sit)
``sel, raw`` selected and raw-majority candidate; ``spent`` cost of the evidence
``log``   bought actions in order, each ``[action id, kind, claim, candidate, cost, outcome (c|r|u),
          rationale, kappa, view, extra?]``; a view is ``[kind, figure index, box, mask outlines, source,
          mask box]`` (0 when absent); ``extra`` holds ``err``, ``unobserved`` and, for the agent's own log,
          ``up, dn`` (who moved; a replay leaves them out: the page derives the outcome's signed
          effect from ``inc``)
``ps``    candidate each policy of the report selects at the main budget
``how``   where the scores and the evidence log come from (the agent's own run or a replay)

With ``detail`` (a standalone page) also ``rawtext`` (the model's replies),
``menu`` (every action of the menu with its outcome, if observed) and ``calls``
(every model call: purpose, model, tokens, latency).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from boe.core.calibration import Calibration
from boe.core.graph import Question
from boe.core.ledger import WHOLE_KIND
from boe.core.replay import ReplayRun
from boe.report.images import view_shapes
from boe.report.source import ImageSource, confine

__all__ = ["SLOT_ORDER", "Strings", "ViewContext", "anchor", "question_view"]

SLOT_ORDER = ("modality", "region", "plane", "finding", "attribute")
_OUTCOME = {"confirm": "c", "reject": "r", "unresolved": "u", 1: "c", -1: "r", 0: "u"}


#: Longer strings (a reply, a question text) are clipped in a report: one huge record cannot blow its size.
MAX_STRING = 20_000


class Strings:
    """A table of distinct strings; ``add`` returns a string's index (-1 for None)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._ids: dict[str, int] = {}
        self.bytes = 0  # UTF-8 size of the table (an estimate of its share of the report)

    def add(self, s: Any) -> int:
        if s is None:
            return -1
        s = str(s)
        if len(s) > MAX_STRING:
            s = s[:MAX_STRING] + f" ... [clipped: {len(s):,} characters in the record]"
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.items)
            self.items.append(s)
            self.bytes += len(s.encode("utf-8", "surrogatepass")) + 3
        return i


def anchor(dataset: str, question_id: str) -> str:
    """The element id (and URL fragment) of a question's page."""
    return "q/" + "_".join(f"{dataset}/{question_id}".split())


@dataclass(eq=False)
class ViewContext:
    """What every question view of one report shares."""

    policies: list[str]
    runs: dict[str, ReplayRun]  # policy -> its run at the main budget
    focus: str
    budget: float
    group_keys: list[str]
    calibration_of: Any  # question index -> Calibration
    agent_log: bool = True  # show a record's own agent evidence log (else the replay under calibration_of)
    base_dir: Path | None = None
    stored_images: Mapping[tuple[str, str], Sequence[ImageSource]] = field(default_factory=dict)
    strings: Strings = field(default_factory=Strings)
    slots: list[str] = field(default_factory=lambda: list(SLOT_ORDER))
    images: dict[str, ImageSource] = field(default_factory=dict)  # short id -> where the pixels are
    _image_ids: dict[str, str] = field(default_factory=dict)  # source key -> short id

    def image(self, src: ImageSource) -> str:
        """The short id of an image (registered on first use)."""
        sid = self._image_ids.get(src.key)
        if sid is None:
            sid = self._image_ids[src.key] = f"i{len(self._image_ids)}"
            self.images[sid] = src
        return sid

    def slot(self, name: str) -> int:
        if name not in self.slots:
            self.slots.append(name)
        return self.slots.index(name)


def _num(x: Any, digits: int = 4) -> float | None:
    if x is None:
        return None
    v = float(x)
    return None if math.isnan(v) else round(v, digits)


@dataclass(frozen=True)
class _Figures:
    """The images of one question and how a view names one of them."""

    keys: list[str]  # image ids in the report's image table, in figure order
    by_figure: dict[str, int]
    by_image_id: dict[str, int]

    def index(self, view: Mapping[str, Any]) -> int:
        image_id = view.get("image_id")
        if isinstance(image_id, str):
            for prefix, j in self.by_image_id.items():
                if prefix.startswith(image_id) or image_id.startswith(prefix):
                    return j
        fig = view.get("figure")
        if fig is not None and str(fig) in self.by_figure:
            return self.by_figure[str(fig)]
        try:
            return int(fig) if fig is not None and 0 <= int(fig) < max(len(self.keys), 1) else 0
        except (TypeError, ValueError):
            return 0


def _figure_refs(rec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The record's figure references (``figures``, else its ``image_ref``)."""
    refs = rec.get("figures") if isinstance(rec.get("figures"), list) else None
    if refs is None and isinstance(rec.get("image_ref"), Mapping):
        refs = [rec["image_ref"]]
    return [r for r in refs or [] if isinstance(r, Mapping)]


def _record_paths(rec: Mapping[str, Any], refs: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any, Any]]:
    """(path, width, height) of each figure the record names: its references' paths, else the task image(s)."""
    if refs and all(isinstance(r.get("path"), str) for r in refs):
        return [(str(r["path"]), r.get("width"), r.get("height")) for r in refs]
    image = (rec.get("task") or {}).get("image")
    names = [image] if isinstance(image, str) else [p for p in image or [] if isinstance(p, str)]
    return [(p, None, None) for p in names]


def _figures(rec: Mapping[str, Any], q: Question, ctx: ViewContext) -> _Figures:
    """The question's images: those the store links to it, else the record's figures or task image(s)."""
    refs = _figure_refs(rec)
    by_figure = {str(r.get("figure")): j for j, r in enumerate(refs) if r.get("figure") is not None}
    by_image_id = {str(r["image_id"]): j for j, r in enumerate(refs) if isinstance(r.get("image_id"), str)}
    stored = ctx.stored_images.get((q.dataset, q.question_id))
    if stored:
        keys = []
        for j, src in enumerate(stored):
            if src.path is not None and src.data is None and ctx.base_dir is not None:
                path, refused = confine(src.path, ctx.base_dir)
                src = ImageSource(src.key, path, None, src.width, src.height, refused)
            by_image_id.setdefault(src.key, j)
            keys.append(ctx.image(src))
        return _Figures(keys, by_figure, by_image_id)
    keys = []
    for p, w, h in _record_paths(rec, refs):
        path, refused = confine(p, ctx.base_dir)  # the record is untrusted: nothing outside the image root is read
        keys.append(ctx.image(ImageSource(path or f"refused:{p}", path, None, w, h, refused)))
    return _Figures(keys, by_figure, by_image_id)


def _order(q: Question, final: np.ndarray) -> tuple[list[int], list[int]]:
    """Drawing order of the candidates (answers together, the strongest first; invalid last) and each one's row."""
    k = q.k
    groups: dict[int, list[int]] = {}
    for i in range(k):
        groups.setdefault(int(q.answer_id[i]), []).append(i)
    invalid = groups.pop(-1, [])
    best = {a: max((final[i] if np.isfinite(final[i]) else -1.0) for i in ix) for a, ix in groups.items()}
    cand_order = [i for a in sorted(groups, key=lambda a: (-best[a], -len(groups[a]), a)) for i in groups[a]] + invalid
    row = {c: n for n, c in enumerate(cand_order)}
    return cand_order, [row[i] for i in range(k)]


class _Scores(NamedTuple):
    """How question ``r`` ended: final and prior scores, the selections, the spend, the log and what it told."""

    final: np.ndarray
    prior: np.ndarray
    selected: int
    raw_sel: int
    spent: float
    how: str
    log: list[Any]
    told: list[tuple[str, int, float]]


def _agent_scores(
    rec: Mapping[str, Any], q: Question, ctx: ViewContext, figs: _Figures, prior: np.ndarray, raw_sel: int
) -> _Scores:
    """The scores and evidence log the agent stored with the record."""
    agent, evidence = rec["agent"], rec["evidence_log"]
    cal = agent.get("calibration")
    how = f"the agent's run: {agent.get('policy')} at budget {_budget(agent.get('budget'))}"
    return _Scores(
        final=np.array([np.nan if v is None else float(v) for v in agent.get("scores") or [None] * q.k]),
        prior=np.array([np.nan if v is None else float(v) for v in agent.get("prior_scores") or prior]),
        selected=int(agent.get("selected", -1)),
        raw_sel=int(agent.get("raw_selected", raw_sel)),
        spent=float(agent.get("cost") or 0.0),
        how=how + (f", calibration {cal}" if cal else ""),
        log=[_agent_step(e, q, ctx, figs) for e in evidence if isinstance(e, Mapping)],
        told=[
            (str(e.get("id")), _OUTCOME_SIGN.get(str(e.get("outcome")), 0), float(e.get("kappa") or 0.5))
            for e in evidence
            if isinstance(e, Mapping)
        ],
    )


def _replay_scores(
    rec: Mapping[str, Any], q: Question, r: int, ctx: ViewContext, figs: _Figures, prior: np.ndarray, raw_sel: int
) -> _Scores:
    """The scores and purchases of the focus policy's replay."""
    run = ctx.runs[ctx.focus]
    cal = ctx.calibration_of(r)
    return _Scores(
        final=np.asarray(run.scores_of(r, q.k)),
        prior=prior,
        selected=int(run.selected[r]),
        raw_sel=raw_sel,
        spent=float(run.cost[r]),
        how=f"replay: {ctx.focus} at budget {_budget(ctx.budget)} ({_cal_name(cal)})",
        log=[_replay_step(int(a), q, r, rec.get("actions") or [], ctx, figs) for a in run.actions_of(r)],
        told=[
            (q.action_ids[a], int(q.outcome[a]), cal.group(ctx.group_keys[int(q.group[a])]).kappa)
            for a in (int(x) for x in run.actions_of(r))
        ],
    )


def _candidate_rows(
    cands: Sequence[Any], q: Question, prior: np.ndarray, final: np.ndarray, ctx: ViewContext
) -> list[list[Any]]:
    """One row per candidate: answer, valid, utility, prior and final score, slot values (in ``ctx.slots`` order)."""
    S = ctx.strings
    slot_names: list[str] = []
    for c in cands:
        for s in (c.get("slots") or {}) if isinstance(c.get("slots"), Mapping) else {}:
            if s not in slot_names:
                slot_names.append(s)
    width = max((ctx.slot(s) for s in slot_names), default=-1) + 1  # slot values are kept in ctx.slots order
    rows = []
    for i in range(q.k):
        c = cands[i] if i < len(cands) else {}
        slots: Mapping[str, Any] = c["slots"] if isinstance(c.get("slots"), Mapping) else {}
        u = q.utility[i]
        rows.append(
            [
                S.add(q.answers[i]),
                int(bool(q.valid[i])),
                None if math.isnan(u) else _short(float(u)),
                _num(prior[i], 3),
                _num(final[i], 3),
                [S.add(_text(slots.get(name))) for name in ctx.slots[:width]],
            ]
        )
    return rows


def _claim_slots(claims: Sequence[Any], q: Question, ctx: ViewContext) -> list[int]:
    """The slot index of each claim of the question (its record's slot, else the part of its id before ``=``)."""
    claim_slot = {}
    for cl in claims:
        if isinstance(cl, Mapping) and cl.get("id") is not None:
            claim_slot[str(cl["id"])] = cl.get("slot")
    return [ctx.slot(str(claim_slot.get(c) or c.partition("=")[0] or "claim")) for c in q.claim_ids]


def question_view(
    rec: Mapping[str, Any], q: Question, r: int, ctx: ViewContext, *, detail: bool = False
) -> dict[str, Any]:
    """The compact form of question ``r`` (see the module docstring)."""
    S = ctx.strings
    cands = rec.get("candidates") or []
    raw_run = ctx.runs.get("raw")
    prior = np.asarray(raw_run.scores_of(r, q.k)) if raw_run is not None else np.full(q.k, np.nan)
    raw_sel = int(raw_run.selected[r]) if raw_run is not None else -1
    own = ctx.agent_log and isinstance(rec.get("agent"), Mapping) and isinstance(rec.get("evidence_log"), list)
    figs = _figures(rec, q, ctx)
    sc = (
        _agent_scores(rec, q, ctx, figs, prior, raw_sel)
        if own
        else _replay_scores(rec, q, r, ctx, figs, prior, raw_sel)
    )
    final = sc.final if len(sc.final) == q.k else np.full(q.k, np.nan)
    prior = sc.prior if len(sc.prior) == q.k else np.full(q.k, np.nan)
    cand_rows = _candidate_rows(cands, q, prior, final, ctx)  # before the claims: strings and slots number in order
    cslot = _claim_slots(rec.get("claims") or [], q, ctx)
    inc = ["".join("+" if v > 0 else "-" if v < 0 else "." for v in row) for row in q.incidence]
    cand_order, cand_row = _order(q, final)
    claim_order = _claim_order(q, cslot, cand_row, ctx)
    view: dict[str, Any] = {
        "ds": q.dataset,
        "id": q.question_id,
        "text": S.add((rec.get("task") or {}).get("question")),
        "opts": (rec.get("task") or {}).get("options"),
        "ref": _text(rec.get("reference")),
        "img": figs.keys,
        "cand": cand_rows,
        "claims": [S.add(c) for c in q.claim_ids],
        "cslot": cslot,
        "inc": inc,
        "co": cand_order,
        "lo": claim_order,
        "sel": sc.selected,
        "raw": sc.raw_sel,
        "spent": _num(sc.spent, 3),
        "log": sc.log,
        "ps": [int(ctx.runs[p].selected[r]) for p in ctx.policies],
        "how": S.add(sc.how),
    }
    nar = _narration(q, sc.told, ctx, r)
    if nar is not None:
        view["close"] = S.add(nar.closing)
        view["inert"] = [int(x) for x in nar.inert]
        if detail:  # the words of every step only on a question's own page (a report stays small)
            view["words"] = [S.add(w) for w in nar.steps]
    if detail:
        view.update(_detail(rec, q, ctx))
    return view


def _detail(rec: Mapping[str, Any], q: Question, ctx: ViewContext) -> dict[str, Any]:
    """What only a question's own page shows: the raw replies, the whole menu and the model calls."""
    S = ctx.strings
    calls = rec.get("model_calls")
    return {
        "rawtext": [_text(c.get("raw_text")) for c in rec.get("candidates") or []],
        "menu": [
            {
                "id": a.get("id"),
                "kind": a.get("kind"),
                "cl": _claim_index(q, a.get("claim")),
                "ca": a.get("candidate"),
                "cost": a.get("cost"),
                "o": _OUTCOME.get(a.get("outcome")) if a.get("observed") is not False else None,
                "why": S.add(a.get("rationale")) if a.get("observed") is not False else -1,
            }
            for a in rec.get("actions") or []
        ],
        "calls": [_call_row(c) for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else [],
    }


def _call_row(c: Mapping[str, Any]) -> list[Any]:
    """One model call: purpose, model, tokens in and out, latency, cache hit, error, the action it served."""
    return [
        c.get("purpose"),
        c.get("model"),
        c.get("prompt_tokens"),
        c.get("completion_tokens"),
        _num(c.get("latency_ms"), 1),
        bool(c.get("cache_hit")),
        c.get("error"),
        (c.get("tags") or {}).get("action") if isinstance(c.get("tags"), Mapping) else None,
    ]


_OUTCOME_SIGN = {"confirm": 1, "reject": -1}


def _narration(q: Question, told: list[tuple[str, int, float]], ctx: ViewContext, r: int) -> Any:
    """The log in words (boe.report.narrate), or None when a step names an action the record does not hold."""
    from boe.report.narrate import narrate

    steps = []
    for aid, o, kappa in told:
        if aid not in q.action_ids:
            return None
        steps.append((q.action_ids.index(aid), o, kappa))
    return narrate(q, steps, ctx.calibration_of(r).cheap_kappa)


def how_of(view: Mapping[str, Any], strings: Sequence[str]) -> str:
    """Where a view's scores and evidence log come from, in words."""
    return str(strings[int(view["how"])])


def _claim_order(q: Question, cslot: list[int], cand_row: list[int], ctx: ViewContext) -> list[int]:
    def key(j: int) -> tuple[int, float, str]:
        sup = [cand_row[i] for i in np.nonzero(q.incidence[j] > 0)[0]]
        return (cslot[j], float(np.mean(sup)) if sup else float(q.k), q.claim_ids[j])

    return sorted(range(len(q.claim_ids)), key=key)


def _short(x: float) -> float | int:
    return int(x) if x.is_integer() else round(x, 3)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


def _budget(b: Any) -> str:
    try:
        f = float(b)
    except (TypeError, ValueError):
        return str(b)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def _cal_name(cal: Calibration) -> str:
    return f"calibration {cal.source}" if cal.source else "calibration fitted here"


def _claim_index(q: Question, claim: Any) -> int:
    try:
        return q.claim_ids.index(str(claim)) if claim is not None else -1
    except ValueError:
        return -1


def _agent_step(e: Mapping[str, Any], q: Question, ctx: ViewContext, figs: _Figures) -> list[Any]:
    return _step(
        ctx,
        figs,
        action_id=e.get("id"),
        kind=e.get("kind"),
        claim=_claim_index(q, e.get("claim")),
        candidate=e.get("candidate"),
        cost=e.get("cost"),
        outcome=e.get("outcome"),
        rationale=e.get("rationale"),
        error=e.get("error"),
        view=e.get("view"),
        up=e.get("moved_up") or [],
        down=e.get("moved_down") or [],
        kappa=e.get("kappa"),
    )


def _replay_step(a: int, q: Question, r: int, actions: Sequence[Any], ctx: ViewContext, figs: _Figures) -> list[Any]:
    """A bought action of a replay; who moved is its outcome's signed effect, which the page derives itself."""
    act = actions[a] if a < len(actions) and isinstance(actions[a], Mapping) else {}
    kappa = ctx.calibration_of(r).group(ctx.group_keys[int(q.group[a])]).kappa
    return _step(
        ctx,
        figs,
        action_id=q.action_ids[a],
        kind=act.get("kind") or (WHOLE_KIND if q.action_candidate[a] >= 0 else "factor"),
        claim=int(q.action_claim[a]),
        candidate=int(q.action_candidate[a]) if q.action_candidate[a] >= 0 else None,
        cost=float(q.cost[a]),
        outcome=int(q.outcome[a]),
        rationale=act.get("rationale"),
        error=act.get("error"),
        view=act.get("view"),
        up=None,
        down=None,
        kappa=kappa,
        observed=act.get("observed") is not False,
    )


def _step(
    ctx: ViewContext,
    figs: _Figures,
    *,
    action_id: Any,
    kind: Any,
    claim: int,
    candidate: Any,
    cost: Any,
    outcome: Any,
    rationale: Any,
    error: Any,
    view: Any,
    up: list[int] | None,
    down: list[int] | None,
    kappa: Any,
    observed: bool = True,
) -> list[Any]:
    S = ctx.strings
    shapes = view_shapes(view, figs.index, ctx.base_dir)
    v: Any = 0
    if shapes is not None:
        v = [
            S.add(shapes["k"]),
            shapes["f"],
            shapes.get("b", 0),
            shapes.get("m", 0),
            S.add(shapes.get("s")),
            shapes.get("mb", 0),
        ]
    step: list[Any] = [
        S.add(action_id),
        S.add(kind),
        claim,
        -1 if candidate is None else int(candidate),
        _num(cost, 3),
        _OUTCOME.get(outcome, "u"),
        S.add(rationale),
        _num(kappa, 3),
        v,
    ]
    extra: dict[str, Any] = {}
    if error:
        extra["err"] = str(error)
    if up is not None and down is not None:
        extra["up"], extra["dn"] = up, down
    if not observed:
        extra["unobserved"] = 1
    if extra:
        step.append(extra)
    return step
