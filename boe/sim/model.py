"""The simulated VLM: reads the task from the prompt, looks at the pixels, writes K replies.

It never reads any sidecar facts. Every reply is drawn from a `Percept` sampled
from the pixel beliefs (see `boe.sim.percept`); choice k of a request is seeded
by (request seed, k), so the same request with the same seed gives the same reply.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from boe.sim.percept import NoiseConfig, Percept, PerceptSampler, image_bias
from boe.sim.perception import Belief, perceive
from boe.sim.protocol import (
    Intent,
    Markers,
    json_object,
    judged,
    parse_candidate,
    parse_intent,
    parse_markers,
    task_of,
)
from boe.sim.schema_fill import bound_strings, fill_schema
from boe.sim.vision import decode_image
from boe.sim.vocab import SLOTS, canonical, find_values, surface

__all__ = ["DEFAULT_REF", "ModelInput", "SimModel", "View"]

MODEL_NAME = "boe-sim-vlm"
#: Percepts drawn per judge reply to estimate the model's verdict distribution (logprobs).
VERDICT_DRAWS = 32
_VERDICT_TASKS = ("boe_factor_verdict", "boe_whole_verdict", "boe_answer_verdict")
DEFAULT_REF = 384  # assumed pixel size of the whole figure when a crop arrives alone
_PRESUPPOSE = ("side", "vertical", "size")


@dataclass(frozen=True)
class ModelInput:
    """The parts of a chat request the model reads."""

    system: str
    user: str
    images: tuple[bytes, ...]
    temperature: float
    response_format: dict[str, Any] | None = None
    seed: int = 0
    logprobs: bool = False  # also give each verdict reply the model's verdict distribution (`complete_scored`)


@dataclass(frozen=True)
class View:
    """One decoded, perceived image with its fixed per-image bias."""

    belief: Belief
    bias: dict[str, np.ndarray]
    kind: str


@dataclass
class SimModel:
    """Turns a request into n reply texts (each a JSON document or prose)."""

    noise: NoiseConfig = field(default_factory=NoiseConfig)
    synonym_rate: float = 0.3  # at T = 1: how often a surface form other than the plain one is used
    invalid_rate: float = 0.02  # at T = 1: how often a generation is malformed or invalid
    cache_size: int = 256
    name: str = MODEL_NAME
    # seeds this model's fixed per-image bias apart from another model's (b"": the generator's own)
    salt: bytes = b""
    # perceived views by content (read-only once made); models that share it perceive each view once
    _cache: OrderedDict[bytes, Belief] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _inflight: dict[bytes, threading.Event] = field(default_factory=dict, repr=False)

    def view(self, data: bytes, kind: str = "whole") -> View:
        """Decode and perceive an image (cached by content) with this model's fixed bias; ValueError if not an image.

        Requests about one image arriving together wait for the first to
        perceive it instead of each doing the work.
        """
        key = hashlib.sha256(data + kind.encode()).digest()
        with self._lock:
            belief = self._cache.get(key)
            if belief is not None:
                self._cache.move_to_end(key)
                first = None
            else:
                first = self._inflight.get(key)
                if first is None:
                    self._inflight[key] = threading.Event()
        if belief is None and first is not None:
            first.wait(60)
            with self._lock:
                belief = self._cache.get(key)  # None when the first failed: perceive it here (and fail alike)
        if belief is None:
            try:
                belief = self._perceive(data, kind, key)
            finally:
                with self._lock:
                    done = self._inflight.pop(key, None)
                if done is not None:
                    done.set()
        bias_key = hashlib.sha256(key + self.salt).digest() if self.salt else key
        return View(belief, image_bias(bias_key, len(belief.blobs), self.noise), kind)

    def _perceive(self, data: bytes, kind: str, key: bytes) -> Belief:
        gray = decode_image(data)
        if gray is None:
            raise ValueError("image_url does not hold a decodable image")
        if min(gray.shape) < 8:
            raise ValueError(f"image of {gray.shape[1]}x{gray.shape[0]} pixels is too small")
        crop = kind != "whole"
        seen = perceive(gray, crop=crop, ref=DEFAULT_REF if crop else None)
        with self._lock:
            self._cache[key] = seen
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return seen

    def complete(self, inp: ModelInput, n: int) -> list[str]:
        """n reply texts; see `complete_scored`."""
        return [text for text, _ in self.complete_scored(inp, n)]

    def complete_scored(self, inp: ModelInput, n: int) -> list[tuple[str, dict[str, float] | None]]:
        """n replies, each with the model's verdict distribution (``inp.logprobs`` and a judge task; else None);
        choice k is drawn from a generator seeded by (seed, k).

        With several images named by a ``<figures>`` block, the model looks at
        one figure per reply: the one the ``<view>`` marker names (judges), the
        one the candidate names (whole-response and answer judges), the one the question
        names ("... in figure B"), or else, for a generation, a figure drawn per
        reply (and says which in its ``figure`` key). Otherwise it looks at the
        first image.
        """
        markers = parse_markers(inp.user)
        task = task_of(inp.response_format, inp.system, inp.user)
        figures = markers.figures if len(markers.figures) == len(inp.images) > 1 else ()
        shown = markers.view_image
        if shown is not None and 1 <= shown <= len(inp.images) and len(inp.images) > 1:
            figures = ()  # the figures come first for context; the <view> names the image judged
        views: dict[int, View] = {}
        samplers: dict[int, PerceptSampler] = {}

        def view_of(i: int) -> View:
            if i not in views:
                views[i] = self.view(inp.images[i], markers.view_kind)
            return views[i]

        def sampler_of(i: int) -> PerceptSampler:  # the n replies share their view's distributions
            if i not in samplers:
                samplers[i] = self._sampler(task, markers, view_of(i), inp.temperature, intent)
            return samplers[i]

        intent = parse_intent(markers.question or _last_paragraph(inp.user), markers.options)  # once per request
        fixed = self._fixed_figure(task, markers, figures) if figures else 0
        if shown is not None and 1 <= shown <= len(inp.images):
            fixed = shown - 1
        out: list[tuple[str, dict[str, float] | None]] = []
        for k in range(n):
            rng = np.random.default_rng([inp.seed & (2**63 - 1), k])
            if not inp.images:
                out.append((self._one(task, markers, inp, None, rng, intent, None), None))
                continue
            index = fixed if fixed is not None else int(rng.integers(len(figures)))
            reply = self._one(task, markers, inp, view_of(index), rng, intent, sampler_of(index))
            if figures and task == "boe_generation":
                reply = _with_figure(reply, figures[index])
            dist = None
            if inp.logprobs and task in _VERDICT_TASKS:
                dist = self._verdicts(task, markers, inp, view_of(index), k, intent)
            out.append((bound_strings(reply, inp.response_format), dist))
        return out

    def _verdicts(
        self, task: str, markers: Markers, inp: ModelInput, view: View, k: int, intent: Intent
    ) -> dict[str, float]:
        """The model's own verdict distribution for a judge request: the share of `VERDICT_DRAWS` percepts drawn at
        temperature 1 (its sampling distribution, as a server's raw logprobs are) that give each verdict, with half
        a draw added to each (no verdict is impossible). Its own generator: the reply's draws are untouched."""
        rng = np.random.default_rng([inp.seed & (2**63 - 1), k, 1])
        at_one = replace(inp, temperature=1.0)
        sampler = self._sampler(task, markers, view, 1.0, intent)
        counts = {"confirm": 0.5, "reject": 0.5, "unresolved": 0.5}
        for _ in range(VERDICT_DRAWS):
            verdict = json.loads(self._one(task, markers, at_one, view, rng, intent, sampler))["verdict"]
            counts[verdict] += 1
        total = sum(counts.values())
        return {v: c / total for v, c in counts.items()}

    def _sampler(
        self, task: str | None, markers: Markers, view: View, temperature: float, intent: Intent
    ) -> PerceptSampler:
        """What the model sees in ``view`` at ``temperature``, ready to draw from."""
        # a question that presupposes a finding ("which side is the lesion on?") is read as presupposing it by the
        # answer judges too, so a judge's verdict agrees with the answer it would give itself
        presupposes = task == "boe_generation" or judged(task, markers) == "response"
        lesion = presupposes and intent.asks in _PRESUPPOSE
        return PerceptSampler(view.belief, view.bias, temperature, self.noise, assume_lesion=lesion)

    @staticmethod
    def _fixed_figure(task: str | None, markers: Markers, figures: tuple[str, ...]) -> int | None:
        """The index of the figure a request is about, or None: a generation that names none (drawn per reply)."""
        if markers.figure in figures and task != "boe_generation":
            return figures.index(markers.figure)
        if judged(task, markers) == "response":
            named = parse_candidate(markers.candidate or "").get("figure")
            return figures.index(named) if named in figures else 0
        q = markers.question or ""
        for i, f in enumerate(figures):
            if re.search(rf"\b(?:figure|image|panel)\s+{re.escape(f)}\b", q, re.IGNORECASE):
                return i
        return None if task == "boe_generation" else 0

    def _one(
        self,
        task: str | None,
        markers: Markers,
        inp: ModelInput,
        view: View | None,
        rng: np.random.Generator,
        intent: Intent,
        sampler: PerceptSampler | None,
    ) -> str:
        """One reply; ``intent`` is what the request's question asks (`parse_intent`), ``sampler`` draws what the
        model sees in ``view`` (`_sampler`; None without an image)."""
        t = inp.temperature
        if task == "boe_claim_extraction":
            return json.dumps(_extract(markers.candidate or ""))
        percept = None if sampler is None else sampler.sample(rng)
        if task == "boe_generation":
            spec = (inp.response_format or {}).get("json_schema") or {}
            return self._generation(intent, percept, t, rng, strict=bool(spec.get("strict")))
        if judged(task, markers) == "claim":
            return json.dumps(_factor_verdict(markers, intent, percept, view, self.noise))
        if judged(task, markers) == "response":
            return json.dumps(_whole_verdict(markers, intent, percept))
        answer_text = _answer_text(intent, percept, rng, 0.0) if percept else "I cannot see an image."
        fmt = inp.response_format or {}
        if fmt.get("type") == "json_schema" and percept is not None:
            schema = (fmt.get("json_schema") or {}).get("schema") or {}
            return json.dumps(fill_schema(schema, percept, answer_text, t, rng))
        if fmt.get("type") == "json_object":
            return json.dumps(self._slots(intent, percept, answer_text, rng, 0.0) if percept else {})
        return _prose(answer_text, percept)

    def _slots(self, intent: Intent, p: Percept, answer: str, rng: np.random.Generator, syn: float) -> dict[str, Any]:
        def form(slot: str, value: str | None) -> str | None:
            if value is None:
                return None
            return surface(slot, value, int(rng.integers(1, 4))) if rng.random() < syn else value

        if _intent_slot(intent) == "attribute":
            attribute: str | None = answer_value(intent, p) or None
        else:
            attribute = p.side if p.finding != "normal" else None
        return {
            "answer": answer,
            "modality": form("modality", p.modality),
            "region": form("region", p.region),
            "plane": form("plane", p.plane),
            "finding": form("finding", p.finding),
            "attribute": form("attribute", attribute),
        }

    def _generation(self, intent: Intent, p: Percept | None, t: float, rng: np.random.Generator, strict: bool) -> str:
        if p is None:
            return json.dumps({"answer": "no image was given", **{s: None for s in SLOTS}})
        syn = self.synonym_rate * min(1.0, t)
        reply = self._slots(intent, p, _answer_text(intent, p, rng, syn), rng, syn)
        if rng.random() < self.invalid_rate * min(2.0, t):
            return _spoil(reply, rng, strict)
        return json.dumps(reply)


def _with_figure(reply: str, figure: str) -> str:
    """A generation reply with the figure it describes (left alone when it is not a JSON object)."""
    try:
        obj = json.loads(reply)
    except json.JSONDecodeError:
        return reply
    if not isinstance(obj, dict):
        return reply
    return json.dumps({**obj, "figure": figure})


def _last_paragraph(text: str) -> str:
    parts = [p.strip() for p in text.strip().split("\n\n") if p.strip()]
    return parts[-1] if parts else ""


def answer_value(intent: Intent, p: Percept) -> str:
    """The canonical answer this percept gives to the question."""
    a = intent.asks
    if a in ("modality", "region", "plane") and intent.kind == "closed":
        return "yes" if getattr(p, a) == intent.value else "no"
    if a in ("modality", "region", "plane", "finding"):
        return str(getattr(p, a))
    if a in ("side", "vertical", "size"):
        return str(getattr(p, a) or "")
    if a == "presence":
        hit = p.finding == intent.finding
        hit = hit and (intent.side is None or p.side == intent.side)
        hit = hit and (intent.vertical is None or p.vertical == intent.vertical)
        return "yes" if hit else "no"
    abnormal = p.finding != "normal"
    return "yes" if abnormal != intent.normal_means_yes else "no"


def _intent_slot(intent: Intent) -> str:
    if intent.kind == "closed" or intent.asks in ("side", "vertical", "size", "presence", "abnormal"):
        return "attribute"
    return intent.asks


def _answer_text(intent: Intent, p: Percept, rng: np.random.Generator, syn: float) -> str:
    """The answer as written: a surface form of the value, or for multiple choice mostly the letter."""
    value = answer_value(intent, p)
    slot = _intent_slot(intent)
    if intent.kind == "choice":
        letters = [k for k, text in intent.options.items() if canonical(slot, text) == value]
        letter = letters[0] if letters else list(intent.options)[int(rng.integers(len(intent.options)))]
        style = rng.random()
        if style < syn / 2:
            return intent.options[letter]
        return f"{letter}: {intent.options[letter]}" if style < syn else letter
    pick = int(rng.integers(1, 4)) if rng.random() < syn else 0
    return surface(slot, value, pick) if value else "unknown"


def candidate_answer(intent: Intent, text: str) -> str | None:
    """The canonical answer a candidate gives, read from its JSON `answer` or its prose."""
    parsed = parse_candidate(text)
    raw = parsed.get("answer")
    if not isinstance(raw, str):
        return None
    slot = _intent_slot(intent)
    if intent.kind == "choice":
        letter = raw.strip().rstrip(".):").upper()
        if letter in intent.options:
            raw = intent.options[letter]
        elif len(raw) > 2 and raw[1:2] in ":.)" and raw[:1].upper() in intent.options:
            raw = intent.options[raw[:1].upper()]
    value = canonical(slot, raw)
    if value is None:
        found = find_values(slot, raw)
        value = found[0] if found else None
    return value


def _extract(candidate: str) -> dict[str, Any]:
    data = json_object(candidate)
    prose = candidate if data is None else " ".join(str(v) for v in data.values() if isinstance(v, str))
    data = data or {}
    out: dict[str, Any] = {}
    for slot in SLOTS:
        raw = data.get(slot)
        if isinstance(raw, str) and raw.strip():
            out[slot] = canonical(slot, raw) or raw.strip().lower()
        elif slot in data:
            out[slot] = None
        else:
            found = find_values(slot, prose)
            out[slot] = found[0] if found else None
    return out


def _verdict(verdict: str, rationale: str) -> dict[str, str]:
    return {"verdict": verdict, "rationale": rationale}


def _seen(p: Percept) -> str:
    if p.finding == "normal":
        return f"{surface('modality', p.modality)} view with no focal abnormality"
    return f"{surface('modality', p.modality)} view with a {p.size} {p.finding} ({p.vertical} {p.side})"


def _factor_verdict(
    m: Markers, intent: Intent, p: Percept | None, view: View | None, cfg: NoiseConfig
) -> dict[str, str]:
    slot = (m.claim_slot or "").lower()
    if p is None or view is None:
        return _verdict("unresolved", "No image was attached.")
    if slot not in SLOTS or not m.claim_value:
        return _verdict("unresolved", "The claim names no known slot or value.")
    value = canonical(slot, m.claim_value)
    if value is None:
        return _verdict("unresolved", f"'{m.claim_value}' is not something I can check in the image.")
    seen = _seen(p)
    if slot in ("region", "plane") and p.outline_visible < cfg.unresolved_outline:
        return _verdict("unresolved", "The view does not show the body outline.")
    if slot in ("modality", "region", "plane", "finding"):
        ok = getattr(p, slot) == value
    elif value in ("yes", "no"):
        ok = answer_value(intent, p) == value
    elif value in ("left", "right", "upper", "lower"):
        if view.kind != "whole":
            ok = p.finding != "normal"  # the crop was cut around the claimed location
        else:
            ok = value in (p.side, p.vertical)
    else:  # small / large
        ok = p.finding != "normal" and p.size == value
    return _verdict("confirm" if ok else "reject", f"I see a {seen}.")


def _whole_verdict(m: Markers, intent: Intent, p: Percept | None) -> dict[str, str]:
    if p is None:
        return _verdict("unresolved", "No image was attached.")
    claimed = candidate_answer(intent, m.candidate or "")
    if claimed is None:
        return _verdict("unresolved", "I cannot tell which answer the candidate gives.")
    mine = answer_value(intent, p)
    ok = canonical(_intent_slot(intent), mine) == claimed or mine == claimed
    return _verdict("confirm" if ok else "reject", f"I see a {_seen(p)}; my answer is {mine}.")


def _spoil(reply: dict[str, Any], rng: np.random.Generator, strict: bool) -> str:
    """A messy generation. Under a strict schema it stays valid JSON of the schema (odd values,
    chatty answers); otherwise it may be malformed: fenced, with trailing prose, a key missing,
    a wrong type or cut off. Parsers and canonicalisers must cope with both."""
    if strict:
        kind = int(rng.integers(3))
        if kind == 0:
            slot = str(rng.choice(["modality", "region", "plane", "finding", "attribute"]))
            return json.dumps({**reply, slot: str(rng.choice(["unclear", "N/A", "not applicable", "see answer"]))})
        if kind == 1:
            return json.dumps({**reply, "answer": f"{reply['answer']}."})
        return json.dumps({k: (v.upper() if isinstance(v, str) else v) for k, v in reply.items()})
    kind = int(rng.integers(5))
    text = json.dumps(reply)
    if kind == 0:
        return "```json\n" + text + "\n```"
    if kind == 1:
        return text + "\nI hope this helps."
    if kind == 2:
        return json.dumps({k: v for k, v in reply.items() if k != "plane"})
    if kind == 3:
        return json.dumps({**reply, "attribute": [reply["attribute"]]})
    return text[: max(1, len(text) // 2)]


def _prose(answer: str, p: Percept | None) -> str:
    if p is None:
        return answer
    return f"Answer: {answer}. I see a {_seen(p)}, {surface('plane', p.plane)} view of the {p.region}."
