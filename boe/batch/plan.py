"""Which questions a batch answers, and what they will cost before anything is paid (``--dry-run``).

**How the estimate is made.** Per question, the calls of each purpose and
the tokens of one call of each purpose come from one of two places:

* *measured*: the mean over the questions a stored run already holds (this
  run when it is being resumed, or ``--estimate-from RUN``); every call
  counts, cached or not, because a fresh run pays for all of them;
* *defaults* otherwise: ``factor claims = 5 + 2.5 log2 K`` per question
  (fitted on the built-in simulator, 30 questions at K = 1, 4, 8, 16; a
  claim gets one call of each judged claim kind, a record check calls no
  model), one answer-level call per distinct
  answer (``1 + 0.3 log2 K``: 2.23 a question measured at K = 16 on 400
  simulator questions) and, assuming short answers, no whole-response call
  (a candidate whose answer has an answer check gets none; without answer
  checks, one whole-response call per candidate), one generation call
  (``n = K``). Prompt tokens are each purpose's prompt rendered for (up to
  32 of) the batch's own questions, counted at 1.3 tokens a word (the usual
  rule for English BPE vocabularies; the simulator counts the same), plus 11
  tokens of chat template (Qwen's role markers), plus ``ceil(w/28) * ceil(h/28)``
  per image from the mean size of up to 32 of the batch's images: every figure
  of the question in every request (they are its shared prefix), and a
  grounded crop counted at half a figure. Completion tokens are a typical
  reply of each prompt's reply schema as models write JSON: each enum's first
  value, each string's first ``e.g.`` example, a dozen words where the schema
  asks for a sentence (per sampled candidate for generation). A kind's
  `boe.kinds.TokenEstimate` gives its purpose, images and calls.

``--ledger full`` runs the whole menu; ``online`` buys at most
``floor(budget / cheapest model-judged cost)`` judge calls per question,
which is what the estimate counts (an upper bound: a policy may stop
earlier). The upper bound of a full ledger assumes every candidate asserts
its own value in every one of the five slots and gives its own answer (``1 + 11 K`` calls: a
candidate gets either a whole-response check or a share of an answer check).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boe.datasets import Dataset, DatasetItem

__all__ = ["BatchItem", "Estimate", "Measured", "estimate", "image_tokens", "measure_records", "select_items"]

_GENERATION_TEXT_TOKENS = 229  # the generation prompt's text (a judge's is in its kind's spec)
_GENERATION_TOKENS = 80  # per sampled candidate
_VERDICT_TOKENS = 40
_SLOTS = 5
_SAMPLE_IMAGES = 32
_CHAT_TOKENS = 11  # a chat template's role markers: two messages and the assistant's turn (Qwen's: 4 + 4 + 3)
_SENTENCE_WORDS = 12  # a schema's "one sentence": about a dozen words


@dataclass(frozen=True)
class BatchItem:
    """One question of the batch: the dataset item, its queue key and the image argument of `Agent.ask`."""

    item: DatasetItem
    key: tuple[str, str]  # (calibration namespace, question id): how the store and the queue know it

    @property
    def image(self) -> str | list[tuple[str, str]]:
        """One path, or ``(figure, path)`` pairs for a question with several figures."""
        ims = self.item.images
        return str(ims[0].path) if len(ims) == 1 else [(im.figure, str(im.path)) for im in ims]


def select_items(ds: Dataset, namespace: str, limit: int | None) -> tuple[list[BatchItem], list[tuple[str, str]]]:
    """The first ``limit`` items in file order, and the (question id, reason) of those that cannot run."""
    out: list[BatchItem] = []
    skipped: list[tuple[str, str]] = []
    for item in ds.items[:limit] if limit is not None else ds.items:
        if not item.images:
            skipped.append((item.question_id, "no image"))
        elif item.missing_images:
            skipped.append((item.question_id, f"image file(s) missing: {', '.join(item.missing_images)}"))
        else:
            out.append(BatchItem(item, (namespace, item.question_id)))
    return out, skipped


@dataclass
class Measured:
    """Per-question call counts and per-call tokens by purpose, measured on stored questions."""

    source: str
    questions: int
    calls: dict[str, float]  # purpose -> calls per question
    prompt: dict[str, float]  # purpose -> prompt tokens per call
    completion: dict[str, float]  # purpose -> completion tokens per call
    ledger: str | None = None  # "full" / "online": what the measured run ran


def measure_records(records: Iterable[dict[str, Any]], source: str) -> Measured | None:
    """Means over stored ledger records (their ``model_calls``); None when there are none."""
    n = 0
    calls: Counter[str] = Counter()
    prompt: Counter[str] = Counter()
    completion: Counter[str] = Counter()
    ledgers: Counter[str] = Counter()
    for rec in records:
        n += 1
        ledgers[str(rec.get("ledger"))] += 1
        for c in rec.get("model_calls") or []:
            p = str(c.get("purpose") or "other")
            calls[p] += 1
            prompt[p] += int(c.get("prompt_tokens") or 0)
            completion[p] += int(c.get("completion_tokens") or 0)
    if n == 0:
        return None
    return Measured(
        source=source,
        questions=n,
        calls={p: calls[p] / n for p in calls},
        prompt={p: prompt[p] / calls[p] for p in calls},
        completion={p: completion[p] / calls[p] for p in calls},
        ledger=ledgers.most_common(1)[0][0],
    )


def image_tokens(width: int, height: int) -> int:
    """Tokens of one image for a VLM with 28-pixel patches (Qwen-VL style; the simulator counts the same)."""
    return max(4, math.ceil(width / 28) * math.ceil(height / 28))


def _sent_tokens(width: int, height: int, max_pixels: int) -> int:
    """Tokens of an image as sent: downscaled to at most ``max_pixels`` (0: no limit) first, as the agent does."""
    scale = math.sqrt(max_pixels / (width * height)) if max_pixels and width * height > max_pixels else 1.0
    return image_tokens(max(1, int(width * scale)), max(1, int(height * scale)))


def _mean_image_tokens(items: Sequence[BatchItem], max_pixels: int = 0) -> tuple[float, float, int]:
    """(mean tokens of a question's images, mean figures per question, images read) from a sample."""
    import cv2
    import numpy as np

    step = max(1, len(items) // _SAMPLE_IMAGES)
    sample = list(items[::step][:_SAMPLE_IMAGES])
    tokens: list[int] = []
    for it in sample:
        path = it.item.images[0].path
        arr = cv2.imdecode(np.fromfile(str(path), np.uint8), cv2.IMREAD_UNCHANGED) if path.is_file() else None
        if arr is None:  # DICOM and the like: count a common 512 x 512 scan
            tokens.append(image_tokens(512, 512))
        else:
            tokens.append(_sent_tokens(arr.shape[1], arr.shape[0], max_pixels))
    figures = sum(len(it.item.images) for it in items) / max(len(items), 1)
    return (sum(tokens) / len(tokens) if tokens else image_tokens(512, 512)), figures, len(tokens)


@dataclass
class Estimate:
    """Expected model calls and tokens of the questions still to do."""

    questions: int  # selected
    stored: int  # already in the run
    todo: int
    calls: dict[str, float]  # purpose -> calls for all questions to do
    prompt_tokens: float
    completion_tokens: float
    upper_calls: float  # a bound on the calls
    basis: str
    notes: list[str] = field(default_factory=list)
    costs: dict[str, float] = field(default_factory=dict)  # the design cost of every kind on the menu

    @property
    def total_calls(self) -> float:
        return sum(self.calls.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "questions": self.questions,
            "stored": self.stored,
            "todo": self.todo,
            "calls": {k: round(v, 1) for k, v in self.calls.items()},
            "total_calls": round(self.total_calls, 1),
            "upper_bound_calls": round(self.upper_calls),
            "prompt_tokens": round(self.prompt_tokens),
            "completion_tokens": round(self.completion_tokens),
            "basis": self.basis,
            "notes": self.notes,
            "costs": self.costs,
        }


def _example_reply(schema: Mapping[str, Any]) -> str:
    """A typical reply of a reply schema, written as models write JSON (``json.dumps`` spacing): each enum's
    first value, a string's first ``e.g.`` example, a sentence where the schema asks for one."""
    import json

    out: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        desc = str(prop.get("description") or "")
        if prop.get("enum"):
            out[name] = prop["enum"][0]
        elif "e.g." in desc:
            out[name] = desc.split("e.g.", 1)[1].split(",")[0].strip()
        elif "sentence" in desc:
            out[name] = " ".join(["word"] * _SENTENCE_WORDS)
        else:
            out[name] = "example"
    return json.dumps(out)


def _rendered_tokens(prompt: str, item: DatasetItem, candidate: str) -> float:
    """Tokens of one call's prompt text as rendered for ``item`` (chat-template tokens included)."""
    from boe.prompts import figures_block, load_prompt, options_block

    tmpl = load_prompt(prompt)
    ids = [im.figure for im in item.images]
    known: dict[str, object] = {
        "question": item.question,
        "options_block": options_block(item.options),
        "figures_block": figures_block(ids, ask=prompt == "generation"),
        "figure": ids[0] if ids else "1",
        "candidate": candidate,
        "slot": "finding",
        "value": "mass",
        "view_kind": "crop",
        "view_image": str(len(ids) + 1),
        "view_text": f"a crop of figure {ids[0] if ids else 1} around the named part of the imaged body",
    }
    r = tmpl.render(**{k: known.get(k, "example") for k in tmpl.placeholders})
    return text_tokens(r.system) + text_tokens(r.user) + _CHAT_TOKENS


def text_tokens(text: str) -> int:
    """Tokens of a text by the usual rule for English BPE vocabularies (about 1.3 a word), line by line."""
    return sum(math.ceil(1.3 * len(line.split())) for line in text.split("\n"))


def _text_tokens(items: Sequence[BatchItem], specs: Sequence[Any]) -> tuple[dict[str, float], dict[str, float]]:
    """(prompt text tokens, completion tokens) of one call of each purpose: the prompts rendered for a sample of
    the batch's questions, the replies a typical instance of each prompt's reply schema."""
    from boe.prompts import load_prompt

    reply = _example_reply(load_prompt("generation").schema)
    prompts = {"generation": "generation"} | {s.estimate.purpose: s.prompt for s in specs if s.estimate is not None}
    step = max(1, len(items) // _SAMPLE_IMAGES)
    sample = [it.item for it in items[::step][:_SAMPLE_IMAGES]]
    text: dict[str, float] = {}
    completion: dict[str, float] = {}
    for purpose, name in prompts.items():
        counts = [_rendered_tokens(name, it, reply) for it in sample] or [0.0]
        text[purpose] = sum(counts) / len(counts)
        completion[purpose] = float(text_tokens(_example_reply(load_prompt(name).schema)))
    return text, completion


def _measured_calls(
    measured: Measured, config: Any, judge_purposes: set[str], max_judged: float, semantic_grader: bool
) -> tuple[dict[str, float], str, list[str]]:
    """Calls per question of purposes measured on a stored run (judge calls scaled to an online budget)."""
    notes: list[str] = []
    per_q = {p: v for p, v in measured.calls.items() if p != "answer_grading" or semantic_grader}
    basis = f"measured on {measured.source} ({measured.questions} stored questions, ledger {measured.ledger})"
    if measured.ledger != config.ledger:
        notes.append(f"the measured run used ledger {measured.ledger!r}, this batch {config.ledger!r}")
    if config.ledger == "online" and measured.ledger == "full":
        per_q = _scaled(per_q, judge_purposes, max_judged)
    return per_q, basis, notes


def _scaled(per_q: dict[str, float], judged: set[str], max_judged: float) -> dict[str, float]:
    """Judge calls scaled down to at most ``max_judged`` a question."""
    n = sum(v for p, v in per_q.items() if p in judged)
    scale = min(1.0, max_judged / n) if n else 1.0
    return {p: v * scale if p in judged else v for p, v in per_q.items()}


def _default_calls(specs: Sequence[Any], k: int, config: Any, max_judged: float) -> dict[str, float]:
    """Calls per question of each purpose from each kind's `TokenEstimate` (no stored run to measure)."""
    targets = {s.name: s.target for s in specs}
    per_q = {"generation": 1.0}
    for spec in specs:
        n = None if spec.estimate is None else spec.estimate.calls(k, targets)
        if n is not None:
            per_q[spec.estimate.purpose] = n
    if config.ledger == "online":
        per_q = _scaled(per_q, set(per_q) - {"generation"}, max_judged)
    return per_q


def _default_tokens(
    items: Sequence[BatchItem], specs: Sequence[Any], k: int, max_pixels: int
) -> tuple[dict[str, float], dict[str, float], str, list[str]]:
    """Prompt and completion tokens of one call of each purpose, from the rendered prompts and the images."""
    img, figures, read = _mean_image_tokens(items, max_pixels) if items else (image_tokens(512, 512), 1.0, 0)
    text, reply = _text_tokens(items, specs) if items else ({}, {})
    claims = 5.0 + 2.5 * math.log2(k)
    basis = (
        f"defaults (claims per question 5 + 2.5 log2 K = {claims:.1f}, fitted on the simulator; prompts rendered "
        f"for the batch's questions; image tokens {img:.0f} from {read} of the batch's images)"
    )
    share = {"figure": 1.0, "figures": figures, "half": 0.5}
    prompt = {"generation": text.get("generation", _GENERATION_TEXT_TOKENS) + img * figures}
    completion = {"generation": reply.get("generation", _GENERATION_TOKENS) * k}
    for spec in specs:
        est = spec.estimate
        if est is not None:
            # every figure of the question is sent first (one shared prefix), then the judged view
            extra = img * share[est.images] if est.images == "half" else 0.0
            prompt[est.purpose] = text.get(est.purpose, est.text_tokens) + img * figures + extra
            completion[est.purpose] = reply.get(est.purpose, _VERDICT_TOKENS)
    targets = {s.name: s.target for s in specs}
    notes = ["slot-less replies add a claim-extraction call per candidate (not counted)"]
    notes += [n for n in (None if s.estimate is None else s.estimate.note(targets) for s in specs) if n]
    return prompt, completion, basis, notes


def _upper_bound(specs: Sequence[Any], k: int, todo: int, config: Any, max_judged: float, grader: bool) -> float:
    """A bound on the calls: every candidate asserts its own value in every slot (each judged claim kind checks
    all of them), and a candidate gets one response-level check (its own, or a share of its answer's)."""
    menu = sum(_SLOTS * k for s in specs if s.target == "claim" and s.estimate is not None)
    menu += k if any(s.target != "claim" and s.estimate is not None for s in specs) else 0
    upper = todo * (1 + (menu if config.ledger == "full" else min(max_judged, menu)))
    return float(upper + (todo * k if grader else 0))


def estimate(
    items: Sequence[BatchItem],
    stored: int,
    config: Any,
    *,
    measured: Measured | None = None,
    semantic_grader: bool = False,
) -> Estimate:
    """Expected calls and tokens for ``items`` (``stored`` of them already done) under an `AgentConfig`."""
    from boe.kinds import KINDS

    todo = max(len(items) - stored, 0)
    k = int(config.k)
    specs = [KINDS.get_obj(kd) for kd in config.kinds]
    max_judged: float = 10**9
    if config.ledger == "online" and not math.isinf(config.budget):
        cheapest = min((config.costs.of(s.name) for s in specs if s.estimate is not None), default=math.inf)
        max_judged = 0 if math.isinf(cheapest) else math.floor(config.budget / cheapest)
    if measured is not None:
        judge_purposes = {s.estimate.purpose for s in (KINDS.get_obj(n) for n in KINDS) if s.estimate is not None}
        per_q, basis, notes = _measured_calls(measured, config, judge_purposes, max_judged, semantic_grader)
        prompt, completion = measured.prompt, measured.completion
    else:
        per_q = _default_calls(specs, k, config, max_judged)
        prompt, completion, basis, notes = _default_tokens(items, specs, k, int(getattr(config, "max_pixels", 0) or 0))
    if semantic_grader and "answer_grading" not in per_q:
        notes.append(f"the LLM grader adds up to {k} calls per question for undecided open answers (not counted)")
    calls = {p: v * todo for p, v in per_q.items()}
    pt = sum(calls[p] * prompt.get(p, 0.0) for p in calls)
    ct = sum(calls[p] * completion.get(p, 0.0) for p in calls)
    upper = _upper_bound(specs, k, todo, config, max_judged, semantic_grader)
    if config.ledger == "online":
        notes.append(f"online: at most {max_judged} judge calls a question (budget {config.budget:g})")
    costs = {kd: config.costs.of(kd) for kd in config.kinds}
    if config.cost_mode == "measured":
        notes.append(f"costs are measured as the run goes ({config.cost_basis}); these are the design costs")
    return Estimate(len(items), stored, todo, calls, pt, ct, upper, basis, notes, costs)


def describe_dataset(ds: Dataset, path: str | Path) -> dict[str, Any]:
    """What a run records about its dataset (the path is where this worker read it)."""
    d = ds.describe()
    return {"name": ds.name, "format": ds.format, "path": str(path), "n_items": d["n_items"]}


def load_batch_dataset(
    path: str, fmt: str | None, split: str | None, columns: Mapping[str, str] | None = None
) -> Dataset:
    """The dataset a batch runs: one published split (``split``), or all of them only when asked (``all``).

    A folder that holds several splits and no ``split`` is refused with the splits and their sizes: a run
    that silently mixes training questions into a test set reports numbers about neither. ``columns`` maps
    fields to columns for the formats that take a mapping (hf).
    """
    from boe.datasets import load_dataset
    from boe.datasets._registry import FORMATS, detect_format
    from boe.errors import ConfigError

    name = fmt or detect_format(path)
    options = FORMATS[name].options if name in FORMATS else {}
    extra: dict[str, Any] = {}
    if columns:
        if "columns" not in options:
            raise ConfigError(f"--columns: the {name} format reads its own layout; a column mapping is for hf")
        extra["columns"] = dict(columns)
    if split is not None and split != "all":
        if "split" not in options:
            raise ConfigError(f"--split: the {name} format has no published splits; leave --split out")
        return load_dataset(path, name, split=split, **extra)
    ds = load_dataset(path, name, **extra)
    if split == "all":
        return ds
    sizes = Counter(str(it.metadata.get("split")) for it in ds.items if it.metadata.get("split"))
    if len(sizes) > 1:
        listing = ", ".join(f"{s} ({n} questions)" for s, n in sorted(sizes.items()))
        first = "test" if "test" in sizes else sorted(sizes)[0]
        dropped = f"; besides, {len(ds.issues)} record(s) could not be loaded ({ds.summary()})" if ds.issues else ""
        raise ConfigError(
            f"{path} holds {len(sizes)} splits: {listing}{dropped}. A run evaluates one: pass --split {first} "
            "(or --split all to run them together)"
        )
    return ds
