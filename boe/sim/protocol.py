"""Reading a request the way docs/prompt-protocol.md writes it: task, markers, question intent."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from boe.sim.vocab import LESIONS, PLANES, canonical, find_values

__all__ = [
    "TASKS",
    "Intent",
    "Markers",
    "judged",
    "json_object",
    "parse_candidate",
    "parse_intent",
    "parse_markers",
    "task_of",
]

#: The tasks that check nothing: answering the question, extracting a reply's claims. Every other task the
#: simulator knows is a judge's: its reply schema has a ``verdict`` of the three outcomes (a kind's own schema
#: included), or, sent without a schema, its name ends in ``_verdict``.
TASKS = ("boe_generation", "boe_claim_extraction")
_OUTCOMES = {"confirm", "reject", "unresolved"}

_QUESTION = re.compile(r"<question>(.*?)</question>", re.S)
_OPTIONS = re.compile(r"<options>(.*?)</options>", re.S)
_CLAIM = re.compile(r"<claim\s+slot=\"([^\"]*)\"\s*>(.*?)</claim>", re.S)
_VIEW = re.compile(r"<view\s+([^>]*?)/?>")
_ATTR = re.compile(r"(\w+)=\"([^\"]*)\"")
_CANDIDATE = re.compile(r"<candidate_response>(.*?)</candidate_response>", re.S)
_FIGURES = re.compile(r"<figures>(.*?)</figures>", re.S)
_FIGURE = re.compile(r"<figure\s+([^>]*?)/?>")
_OPTION_LINE = re.compile(r"^\s*([A-Z])\s*[:.)]\s*(.+?)\s*$")


@dataclass(frozen=True)
class Markers:
    """The protocol markers found in the user text (candidate text is kept apart, unescaped)."""

    question: str | None = None
    options: dict[str, str] | None = None
    claim_slot: str | None = None
    claim_value: str | None = None
    view_kind: str = "whole"
    figure: str | None = None
    candidate: str | None = None
    figures: tuple[str, ...] = ()  # the ids of the attached images, in order (several-figure questions)
    view_image: int | None = None  # which attached image (1-based) the <view> is, when the figures come first


def task_of(response_format: dict[str, Any] | None, system_text: str, user_text: str = "") -> str | None:
    """The protocol task: the JSON-schema name first, then a `TASK: <name>` first line of the system text,
    then of the user text (the agent's templates keep one system text for every task); None when it is no task
    the simulator knows (`TASKS` or a judge's)."""
    if response_format and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        name = spec.get("name")
        if isinstance(name, str) and (
            name in TASKS or name.endswith("_verdict") or _verdict_schema(spec.get("schema"))
        ):
            return name
    for text in (system_text, user_text):
        first = text.strip().splitlines()[0] if text.strip() else ""
        m = re.match(r"\s*TASK:\s*(\w+)", first)
        if m and (m.group(1) in TASKS or m.group(1).endswith("_verdict")):
            return m.group(1)
    return None


def _verdict_schema(schema: Any) -> bool:
    """A reply schema asking for a ``verdict`` among the three outcomes."""
    verdict = (schema or {}).get("properties", {}).get("verdict") if isinstance(schema, dict) else None
    return isinstance(verdict, dict) and set(verdict.get("enum") or ()) == _OUTCOMES


def judged(task: str | None, markers: Markers) -> str | None:
    """What a judge's task judges: ``"response"`` (a candidate response block is shown: the whole-response and
    answer judges, any kind's), ``"claim"`` (a claim block), or None for a task that judges nothing."""
    if task is None or task in TASKS:
        return None
    return "response" if markers.candidate is not None else "claim"


def parse_markers(text: str) -> Markers:
    """Find the markers; the candidate block is cut out first so nothing inside it counts."""
    cand = _CANDIDATE.search(text)
    candidate = html.unescape(cand.group(1)).strip() if cand else None
    rest = _CANDIDATE.sub(" ", text)
    q = _QUESTION.search(rest)
    opts = _OPTIONS.search(rest)
    options = None
    if opts:
        found: dict[str, str] = {}
        for line in opts.group(1).splitlines():
            m = _OPTION_LINE.match(line)
            if m:
                found[m.group(1)] = html.unescape(m.group(2))
        options = found or None
    claim = _CLAIM.search(rest)
    view = _VIEW.search(rest)
    attrs = dict(_ATTR.findall(view.group(1))) if view else {}
    block = _FIGURES.search(rest)
    figures = (
        tuple(html.unescape(dict(_ATTR.findall(m.group(1))).get("id", "")) for m in _FIGURE.finditer(block.group(1)))
        if block
        else ()
    )
    return Markers(
        question=html.unescape(q.group(1)).strip() if q else None,
        options=options,
        claim_slot=claim.group(1).strip().lower() if claim else None,
        claim_value=html.unescape(claim.group(2)).strip() if claim else None,
        view_kind=attrs.get("kind", "whole").lower(),
        figure=html.unescape(attrs["figure"]) if "figure" in attrs else None,
        candidate=candidate,
        figures=figures,
        view_image=int(attrs["image"]) if attrs.get("image", "").isdigit() else None,
    )


@dataclass(frozen=True)
class Intent:
    """What a question asks, and for a yes/no question which claim it tests."""

    asks: str  # modality region plane finding side vertical size presence abnormal
    kind: str  # open | closed | choice
    value: str | None = None  # closed modality/region/plane: the value asked about
    finding: str | None = None  # presence: the finding asked about
    side: str | None = None
    vertical: str | None = None
    normal_means_yes: bool = False  # abnormal: "is this normal?" (yes = normal)
    options: dict[str, str] = field(default_factory=dict)


_CLOSED_START = re.compile(r"^\s*(is|are|does|do|was|were|can|could|has|have|did|will)\b", re.I)


def _open_asks(q: str) -> str:
    if re.search(r"\b(which|what) side\b|left or (the )?right|right or (the )?left|lateralit", q):
        return "side"
    if re.search(r"upper or (the )?lower|lower or (the )?upper|superior(ly)? or inferior|inferior(ly)? or superior", q):
        return "vertical"
    if re.search(r"\bsmall or (the )?large|large or (the )?small|how (large|big)|\bsize\b", q):
        return "size"
    if re.search(
        r"modality|type of (imaging|scan|image)|kind of (scan|image|imaging)|how was (this|the) image"
        r"|imaging (technique|method)|what imaging",
        q,
    ):
        return "modality"
    if re.search(r"\bplane\b|orientation|\bview\b|projection", q):
        return "plane"
    if re.search(r"body (part|region)|part of the body|which (part|region|organ)|what (organ|region)|anatomic", q):
        return "region"
    return "finding"


def parse_intent(question: str, options: dict[str, str] | None = None) -> Intent:
    """Classify a question into what it asks (rules over its wording and options)."""
    q = question.lower()
    if options:
        return _choice_intent(options)
    if not _CLOSED_START.match(q) or re.search(r"\bor\b", q) and _open_asks(q) in ("side", "vertical", "size"):
        return Intent(_open_asks(q), "open")
    return _closed_intent(q)


def _choice_intent(options: dict[str, str]) -> Intent:
    """A multiple-choice question asks for the slot most of its options name a value of."""
    best, hits = "finding", 0
    for slot, asks in (
        ("modality", "modality"),
        ("region", "region"),
        ("plane", "plane"),
        ("finding", "finding"),
        ("attribute", "side"),
    ):
        n = sum(canonical(slot, t) is not None for t in options.values())
        if n > hits:
            best, hits = asks, n
    if best == "side":
        values = {canonical("attribute", t) for t in options.values()}
        best = "vertical" if values & {"upper", "lower"} else "size" if values & {"small", "large"} else "side"
    return Intent(best, "choice", options=dict(options))


def _closed_intent(q: str) -> Intent:
    """A yes/no question (lower case): a named lesion's presence, abnormal or normal, a named value of a slot."""
    findings = [f for f in find_values("finding", q) if f in LESIONS]
    sides = [s for s in find_values("attribute", q) if s in ("left", "right")]
    verticals = [s for s in find_values("attribute", q) if s in ("upper", "lower")]
    if findings:
        return Intent(
            "presence",
            "closed",
            finding=findings[0],
            side=sides[0] if sides else None,
            vertical=verticals[0] if verticals else None,
        )
    if re.search(r"\b(abnormal|abnormality|pathology|lesion|finding)", q):
        return Intent("abnormal", "closed", normal_means_yes=False)
    if re.search(r"\bnormal\b|unremarkable", q):
        return Intent("abnormal", "closed", normal_means_yes=True)
    for slot in ("modality", "plane", "region"):
        named = [v for v in find_values(slot, q) if slot != "plane" or v in PLANES]
        if named:
            return Intent(slot, "closed", value=named[0])
    return Intent(_open_asks(q), "open")


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a text starts with (bare or fenced, prose may follow), scalar values only; else None."""
    stripped = text.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```", stripped, re.S)
    if fenced:
        stripped = fenced.group(1)
    if not stripped.startswith("{"):
        return None
    try:
        data, _ = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool)) or v is None}


def parse_candidate(text: str) -> dict[str, Any]:
    """A candidate's answer and slot values from its (unescaped) text: a leading JSON object with an
    `answer`, else the first "answer is/answer:" phrase, else its first line."""
    data = json_object(text)
    if data is not None and isinstance(data.get("answer"), str):
        return data
    stripped = text.strip()
    m = re.search(r"(?i)\banswer\s*(?:is|:)\s*([^\n.;]+)", stripped)
    answer = (m.group(1) if m else stripped.splitlines()[0] if stripped else "").strip()
    return {**(data or {}), "answer": answer}
