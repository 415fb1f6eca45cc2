"""The model-judge evidence tools: one claim on its whole figure, one claim on a segmented view, one whole candidate,
one distinct answer (through a representative candidate that gives it).

Each judge renders its prompt (candidate text only ever inside escaped
markers), calls the judge model at its own temperature, and reads the
verdict from the fixed alphabet. An unreadable reply is an ``unresolved``
outcome with the error recorded; a call that got no reply (the endpoint
failed after retries) is a *failed* check, which is no outcome at all.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from boe.errors import ConfigError, ModelError
from boe.prompts import Rendered, figures_block, load_prompt, options_block
from boe.tools.client import ModelCall, ModelClient
from boe.tools.crop import Box, content_box, location_box
from boe.tools.images import LoadedImage
from boe.tools.logprobs import TOP_LOGPROBS, verdict_probability
from boe.tools.parse import ReplyError, read_verdict
from boe.tools.protocol import ToolRequest, ToolResult
from boe.tools.segment import VIEW_KINDS, WHOLE_SHARE, OpenCVSegmenter, Segmentation, Segmenter, View, make_view

__all__ = ["AnswerResponseJudge", "GroundedFactorJudge", "VlmFactorJudge", "WholeResponseJudge"]

T = TypeVar("T")


class _Judge:
    kind = ""
    prompt_name = ""

    def __init__(self, client: ModelClient, temperature: float = 0.0, prompt: str | None = None) -> None:
        self.client = client
        self.temperature = float(temperature)
        self.prompt = load_prompt(prompt or self.prompt_name)  # the kind's `KindSpec.prompt` when built for a run

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": type(self).__name__,
            "prompt": self.prompt.version,
            "args": {"temperature": self.temperature, "model": self.client.model, "base_url": self.client.safe_url},
        }

    async def _ask(self, rendered: Rendered, urls: list[str], request: ToolRequest, view: dict[str, Any]) -> ToolResult:
        tags = {"action": request.action.get("id")}
        try:
            comp = await self.client.complete(
                rendered,
                urls,
                n=1,
                temperature=self.temperature,
                seed=request.seed,
                tags=tags,
                accept=_verdict_problem,
                top_logprobs=TOP_LOGPROBS,  # the verdict's probability, where the server gives logprobs
            )
        except ModelError as exc:  # the call produced no reply at all: the check failed, it has no outcome
            call: ModelCall | None = getattr(exc, "call", None)
            return ToolResult("unresolved", view=view, error=str(exc), calls=[call] if call else [], failed=True)
        try:
            verdict, rationale = read_verdict(comp.texts[0] if comp.texts else None)
        except ReplyError as exc:
            comp.call.error = f"unreadable verdict: {exc}"
            return ToolResult(
                "unresolved", view=view, error=comp.call.error, calls=[comp.call], raw_reply=comp.texts[0]
            )
        p = verdict_probability(comp.texts[0], comp.logprobs[0] if comp.logprobs else None, verdict)
        return ToolResult(verdict, rationale, view, None, [comp.call], comp.texts[0], p_outcome=p)  # type: ignore[arg-type]


def _verdict_problem(texts: list[str | None]) -> str | None:
    try:
        read_verdict(texts[0] if texts else None)
    except ReplyError as exc:
        return str(exc)
    return None


def _claim_fields(request: ToolRequest) -> tuple[str, str]:
    claim = request.claim
    if claim is None:
        raise ValueError(f"action {request.action.get('id')!r} is a factor action without a claim")
    return str(claim["slot"]), str(claim["value"])


class VlmFactorJudge(_Judge):
    """The judge on one claim over the whole figure it is about (cost 4).

    A claim bound to no figure (a multiple-choice option, a question with one
    figure) is judged on every figure of the question.
    """

    prompt_name = "factor_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        claim_figure = (request.claim or {}).get("figure")
        shown = request.all_figures  # every figure first, as in every request of the question (one shared prefix)
        ids = [f.ref.figure for f in shown]
        judged = [request.image] if claim_figure is not None or len(shown) == 1 else list(shown)
        rendered = self.prompt.render(
            view_kind="whole",
            figure=judged[0].ref.figure,
            question=request.question,
            slot=slot,
            value=value,
            figures_block=figures_block(ids),
        )
        view: dict[str, Any] = {"kind": "whole", "figure": judged[0].ref.figure, "image_id": judged[0].ref.image_id}
        if len(judged) > 1:
            view["figures"] = ids
        return await self._ask(rendered, [f.data_url for f in shown], request, view)


class GroundedFactorJudge(_Judge):
    """The judge on one claim over a segmented view of the region the claim names, on its own figure (cost 4).

    The region box (the claim's location words inside the imaged body) is the
    segmenter's box prompt; the judge sees the tight crop of the mask's box
    (``view="crop"``), that crop with the outside of the mask blacked out
    (``"mask"``) or the figure with the mask overlaid (``"overlay"``). The
    segmentation only chooses the view: it is recorded, never scored.
    """

    prompt_name = "grounded_factor_judge"
    SHARED_VIEWS = 256  # body boxes and views kept for reuse (a batch interleaves many questions)

    def __init__(
        self,
        client: ModelClient,
        temperature: float = 0.0,
        pad: float = 0.08,
        min_frac: float = 0.3,
        segmenter: Segmenter | None = None,
        view: str = "crop",
        prompt: str | None = None,
    ) -> None:
        super().__init__(client, temperature, prompt)
        if not (0 <= pad < 0.5 and 0 < min_frac <= 1):
            raise ValueError("crop padding must lie in [0, 0.5) and the minimum size in (0, 1]")
        if view not in VIEW_KINDS:
            raise ConfigError(f"grounded view must be one of {', '.join(VIEW_KINDS)}, got {view!r}")
        self.pad = pad
        self.min_frac = min_frac
        self.segmenter: Segmenter = segmenter if segmenter is not None else OpenCVSegmenter()
        self.view_kind = view
        self._memo: OrderedDict[tuple[Any, ...], asyncio.Future[Any]] = OrderedDict()
        self._shared_loop: asyncio.AbstractEventLoop | None = None
        self.segmentation_cpu = 0.0  # CPU seconds of the segmentations this judge computed (in worker threads)
        self._cpu_lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["args"].update(pad=self.pad, min_frac=self.min_frac, view=self.view_kind)
        out["segmenter"] = self.segmenter.describe()
        return out

    async def view_box(self, request: ToolRequest) -> tuple[Box, list[str]]:
        """The region box for a claim (the segmenter's prompt): its location words inside the imaged body."""
        claim = request.claim or {}
        words = [str(w) for w in claim.get("location") or []]
        img = request.image
        h, w = img.pixels.shape[:2]
        body, _ = await self._shared(("body", img.ref.image_id, img.pixels.shape), content_box, img.pixels)
        return location_box(words, w, h, within=body, pad=self.pad, min_frac=self.min_frac), words

    def cut_view(self, image: LoadedImage, region: Box) -> tuple[View, dict[str, Any]]:
        """Segment ``region`` of a figure and cut the view (runs in a worker thread); the view's record."""
        part: dict[str, Any] = {}
        c0 = time.thread_time()
        try:
            seg = self.segmenter.segment(image, region)
        except (RuntimeError, ValueError, MemoryError) as exc:  # a segmenter failure: the region itself is the view
            part["segmentation_error"] = f"{type(exc).__name__}: {exc}"
            empty = np.zeros(image.pixels.shape[:2], bool)
            seg = Segmentation(empty, region, getattr(self.segmenter, "name", "segmenter"))
        else:
            part["segmentation"] = seg.describe()
        finally:
            with self._cpu_lock:
                self.segmentation_cpu += time.thread_time() - c0
        view = make_view(
            self.view_kind,
            image.pixels,
            seg,
            pad=self.pad,
            min_frac=self.min_frac,
            max_pixels=image.max_pixels,
            mime=image.ref.mime,  # the figure's own format: a JPEG figure's crop is a JPEG
            whole_share=WHOLE_SHARE,  # a crop of nearly the whole figure: the figure itself (already sent)
        )
        part["box"] = view.box.as_list()
        if view.fallback:
            part["fallback"] = view.fallback
        return view, part

    async def _shared(self, key: tuple[Any, ...], fn: Callable[..., T], *args: Any) -> tuple[T, bool]:
        """``fn(*args)`` in a worker thread, computed once per key for every claim that needs it.

        The image's body box and the view of one region are the same for every
        claim about that place (the finding, its side, its size): the first
        computes it, the others (also those asked at the same moment) await that
        result. Returns the result and whether it was reused.
        """
        loop = asyncio.get_running_loop()
        if self._shared_loop is not loop:  # tasks belong to one event loop
            self._memo, self._shared_loop = OrderedDict(), loop
        task = self._memo.get(key)
        reused = task is not None
        if task is None:
            task = self._memo[key] = asyncio.ensure_future(asyncio.to_thread(fn, *args))
            while len(self._memo) > self.SHARED_VIEWS:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
        try:
            return await asyncio.shield(task), reused
        except BaseException:
            if self._memo.get(key) is task and task.done():
                del self._memo[key]
            raise

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        img = request.image
        figure = img.ref.figure
        try:
            region, words = await self.view_box(request)
            key = ("view", img.ref.image_id, img.pixels.shape, tuple(region.as_list()))
            (view, part), reused = await self._shared(key, self.cut_view, img, region)
        except ValueError as exc:  # a degenerate image: no view can be made
            return ToolResult(
                "unresolved", view={"kind": self.view_kind, "figure": figure}, error=f"view failed: {exc}"
            )
        record: dict[str, Any] = {
            "kind": self.view_kind,
            "figure": figure,
            "image_id": img.ref.image_id,
            "location": words,
            "region": region.as_list(),
            **copy.deepcopy(part),
        }
        if reused and "segmentation" in record:  # computed for another claim of this region: no time of its own
            record["segmentation"].update(seconds=0.0, embedded=False, reused=True)
        where = " ".join(words) + " part of the imaged body" if words else "the imaged body"
        shown = request.all_figures  # the figures first (the question's shared prefix), then the view
        urls = [f.data_url for f in shown]
        if view.kind == "whole":  # each image once per request: the figure is the view
            record["kind"] = "whole"
            record["requested"] = self.view_kind
            index = next((i for i, f in enumerate(shown) if f.ref.image_id == img.ref.image_id), 0) + 1
        else:
            urls.append(view.data_url)
            index = len(urls)
        rendered = self.prompt.render(
            view_kind=view.kind,
            figure=figure,
            view_image=str(index),
            view_text=_view_text(view.kind, figure, where),
            question=request.question,
            slot=slot,
            value=value,
            figures_block=figures_block([f.ref.figure for f in shown]),
        )
        return await self._ask(rendered, urls, request, record)


def _view_text(kind: str, figure: str, where: str) -> str:
    """What the grounded judge's view image is, in the words of its prompt."""
    region = f"the region the claim concerns ({where})"
    if kind == "whole":
        return f"figure {figure} itself: {region} covers nearly all of it"
    if kind == "overlay":
        return f"figure {figure} with the segmented structure in {region} tinted green and outlined"
    if kind == "mask":
        return f"a crop of figure {figure} around {region}, with everything outside the segmented structure black"
    return f"a crop of figure {figure} around {region}"


class WholeResponseJudge(_Judge):
    """The judge on one complete candidate response, shown every figure of the question (cost 8)."""

    prompt_name = "whole_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        cand = request.candidate
        if cand is None:
            raise ValueError(f"action {request.action.get('id')!r} of kind {self.kind} has no candidate")
        text = cand.get("raw_text")
        if not text:
            text = str(cand.get("answer_text") or cand.get("answer") or "")
        figures = request.all_figures
        ids = [f.ref.figure for f in figures]
        rendered = self.prompt.render(
            figure=ids[0],
            question=request.question,
            options_block=options_block(request.options),
            figures_block=figures_block(ids),
            candidate=text,
        )
        view: dict[str, Any] = {"kind": "whole", "figure": ids[0], "image_id": figures[0].ref.image_id}
        if len(figures) > 1:
            view["figures"] = ids
        return await self._ask(rendered, [f.data_url for f in figures], request, view)


class AnswerResponseJudge(WholeResponseJudge):
    """The judge on one distinct answer of the pool, shown the representative response that gives it (cost 8).

    The action's candidate is the representative; its verdict counts for every
    valid candidate with the same normalised answer (the replay engine applies
    it). The prompt asks about the answer only, not the response's other remarks.
    """

    prompt_name = "answer_judge"
