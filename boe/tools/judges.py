"""The model-judge evidence tools: one claim on its whole figure, one claim on a segmented view, one whole candidate.

Each judge renders its prompt (candidate text only ever inside escaped
markers), calls the judge model at its own temperature, and reads the
verdict from the fixed alphabet. A failed call or an unreadable reply is an
``unresolved`` outcome with the error recorded.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np

from boe.errors import ConfigError, ModelError
from boe.prompts import Rendered, figures_block, load_prompt, options_block
from boe.tools.client import ModelCall, ModelClient
from boe.tools.crop import Box, content_box, location_box
from boe.tools.parse import ReplyError, read_verdict
from boe.tools.protocol import ToolRequest, ToolResult, register_tool
from boe.tools.segment import VIEW_KINDS, OpenCVSegmenter, Segmentation, Segmenter, View, make_view

__all__ = ["GroundedFactorJudge", "VlmFactorJudge", "WholeResponseJudge"]


class _Judge:
    kind = ""
    prompt_name = ""

    def __init__(self, client: ModelClient, temperature: float = 0.0) -> None:
        self.client = client
        self.temperature = float(temperature)
        self.prompt = load_prompt(self.prompt_name)

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
                rendered, urls, n=1, temperature=self.temperature, seed=request.seed, tags=tags, accept=_verdict_problem
            )
        except ModelError as exc:
            call: ModelCall | None = getattr(exc, "call", None)
            return ToolResult("unresolved", view=view, error=str(exc), calls=[call] if call else [])
        try:
            verdict, rationale = read_verdict(comp.texts[0] if comp.texts else None)
        except ReplyError as exc:
            comp.call.error = f"unreadable verdict: {exc}"
            return ToolResult(
                "unresolved", view=view, error=comp.call.error, calls=[comp.call], raw_reply=comp.texts[0]
            )
        return ToolResult(verdict, rationale, view, None, [comp.call], comp.texts[0])  # type: ignore[arg-type]


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


@register_tool("vlm_factor")
class VlmFactorJudge(_Judge):
    """The judge on one claim over the whole figure it is about (cost 4).

    A claim bound to no figure (a multiple-choice option, a question with one
    figure) is judged on every figure of the question.
    """

    kind = "vlm_factor"
    prompt_name = "factor_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        claim_figure = (request.claim or {}).get("figure")
        figures = [request.image] if claim_figure is not None or len(request.all_figures) == 1 else request.all_figures
        ids = [f.ref.figure for f in figures]
        rendered = self.prompt.render(
            view_kind="whole",
            figure=ids[0],
            question=request.question,
            slot=slot,
            value=value,
            figures_block=figures_block(ids),
        )
        view: dict[str, Any] = {"kind": "whole", "figure": ids[0], "image_id": figures[0].ref.image_id}
        if len(figures) > 1:
            view["figures"] = ids
        return await self._ask(rendered, [f.data_url for f in figures], request, view)


@register_tool("grounded_factor")
class GroundedFactorJudge(_Judge):
    """The judge on one claim over a segmented view of the region the claim names, on its own figure (cost 4).

    The region box (the claim's location words inside the imaged body) is the
    segmenter's box prompt; the judge sees the tight crop of the mask's box
    (``view="crop"``), that crop with the outside of the mask blacked out
    (``"mask"``) or the figure with the mask overlaid (``"overlay"``). The
    segmentation only chooses the view: it is recorded, never scored.
    """

    kind = "grounded_factor"
    prompt_name = "grounded_factor_judge"

    def __init__(
        self,
        client: ModelClient,
        temperature: float = 0.0,
        pad: float = 0.08,
        min_frac: float = 0.3,
        segmenter: Segmenter | None = None,
        view: str = "crop",
    ) -> None:
        super().__init__(client, temperature)
        if not (0 <= pad < 0.5 and 0 < min_frac <= 1):
            raise ValueError("crop padding must lie in [0, 0.5) and the minimum size in (0, 1]")
        if view not in VIEW_KINDS:
            raise ConfigError(f"grounded view must be one of {', '.join(VIEW_KINDS)}, got {view!r}")
        self.pad = pad
        self.min_frac = min_frac
        self.segmenter: Segmenter = segmenter if segmenter is not None else OpenCVSegmenter()
        self.view_kind = view

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["args"].update(pad=self.pad, min_frac=self.min_frac, view=self.view_kind)
        out["segmenter"] = self.segmenter.describe()
        return out

    def view_box(self, request: ToolRequest) -> tuple[Box, list[str]]:
        """The region box for a claim (the segmenter's prompt): its location words inside the imaged body."""
        claim = request.claim or {}
        words = [str(w) for w in claim.get("location") or []]
        pixels = request.image.pixels
        h, w = pixels.shape[:2]
        body = content_box(pixels)
        return location_box(words, w, h, within=body, pad=self.pad, min_frac=self.min_frac), words

    def make_view(self, request: ToolRequest) -> tuple[View, dict[str, Any]]:
        """Segment the claim's region on its figure and cut the view (runs in a worker thread)."""
        img = request.image
        region, words = self.view_box(request)
        record: dict[str, Any] = {
            "kind": self.view_kind,
            "figure": img.ref.figure,
            "image_id": img.ref.image_id,
            "location": words,
            "region": region.as_list(),
        }
        try:
            seg = self.segmenter.segment(img, region)
        except (RuntimeError, ValueError, MemoryError) as exc:  # a segmenter failure: the region itself is the view
            record["segmentation_error"] = f"{type(exc).__name__}: {exc}"
            empty = np.zeros(img.pixels.shape[:2], bool)
            seg_like = Segmentation(empty, region, getattr(self.segmenter, "name", "segmenter"))
            view = make_view(self.view_kind, img.pixels, seg_like, pad=self.pad, min_frac=self.min_frac)
        else:
            record["segmentation"] = seg.describe()
            view = make_view(self.view_kind, img.pixels, seg, pad=self.pad, min_frac=self.min_frac)
        record["box"] = view.box.as_list()
        if view.fallback:
            record["fallback"] = view.fallback
        return view, record

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        figure = request.image.ref.figure
        try:
            view, record = await asyncio.to_thread(self.make_view, request)
        except ValueError as exc:  # a degenerate image: no view can be made
            return ToolResult(
                "unresolved", view={"kind": self.view_kind, "figure": figure}, error=f"view failed: {exc}"
            )
        words = record["location"]
        where = " ".join(words) + " part of the imaged body" if words else "the imaged body"
        rendered = self.prompt.render(
            view_kind=view.kind, figure=figure, location=where, question=request.question, slot=slot, value=value
        )
        url = "data:image/png;base64," + base64.b64encode(view.png).decode("ascii")
        return await self._ask(rendered, [url], request, record)


@register_tool("whole_response")
class WholeResponseJudge(_Judge):
    """The judge on one complete candidate response, shown every figure of the question (cost 8)."""

    kind = "whole_response"
    prompt_name = "whole_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        cand = request.candidate
        if cand is None:
            raise ValueError(f"action {request.action.get('id')!r} is a whole-response action without a candidate")
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
