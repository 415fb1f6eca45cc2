"""The model-judge evidence tools: one claim on the whole image, one claim on a grounded crop, one whole candidate.

Each judge renders its prompt (candidate text only ever inside escaped
markers), calls the judge model at its own temperature, and reads the
verdict from the fixed alphabet. A failed call or an unreadable reply is an
``unresolved`` outcome with the error recorded.
"""

from __future__ import annotations

import base64
from typing import Any

from boe.errors import ModelError
from boe.prompts import Rendered, load_prompt, options_block
from boe.tools.client import ModelCall, ModelClient
from boe.tools.crop import Box, content_box, crop, location_box
from boe.tools.parse import ReplyError, read_verdict
from boe.tools.protocol import ToolRequest, ToolResult, register_tool

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
    """The judge on one claim over the whole image (cost 4)."""

    kind = "vlm_factor"
    prompt_name = "factor_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        figure = request.image.ref.figure
        rendered = self.prompt.render(
            view_kind="whole", figure=figure, question=request.question, slot=slot, value=value
        )
        return await self._ask(rendered, [request.image.data_url], request, {"kind": "whole", "figure": figure})


@register_tool("grounded_factor")
class GroundedFactorJudge(_Judge):
    """The judge on one claim over a crop of the region the claim names (cost 4)."""

    kind = "grounded_factor"
    prompt_name = "grounded_factor_judge"

    def __init__(self, client: ModelClient, temperature: float = 0.0, pad: float = 0.08, min_frac: float = 0.3) -> None:
        super().__init__(client, temperature)
        if not (0 <= pad < 0.5 and 0 < min_frac <= 1):
            raise ValueError("crop padding must lie in [0, 0.5) and the minimum size in (0, 1]")
        self.pad = pad
        self.min_frac = min_frac

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["args"].update(pad=self.pad, min_frac=self.min_frac)
        return out

    def view_box(self, request: ToolRequest) -> tuple[Box, list[str]]:
        """The crop box for a claim: its location words inside the imaged body."""
        claim = request.claim or {}
        words = [str(w) for w in claim.get("location") or []]
        pixels = request.image.pixels
        h, w = pixels.shape[:2]
        body = content_box(pixels)
        return location_box(words, w, h, within=body, pad=self.pad, min_frac=self.min_frac), words

    async def run(self, request: ToolRequest) -> ToolResult:
        slot, value = _claim_fields(request)
        figure = request.image.ref.figure
        try:
            box, words = self.view_box(request)
            png = crop(request.image.pixels, box)
        except ValueError as exc:  # a degenerate image: no view can be made
            return ToolResult("unresolved", view={"kind": "crop", "figure": figure}, error=f"crop failed: {exc}")
        view = {"kind": "crop", "figure": figure, "box": box.as_list(), "location": words}
        where = " ".join(words) + " part of the imaged body" if words else "the imaged body"
        rendered = self.prompt.render(
            view_kind="crop", figure=figure, location=where, question=request.question, slot=slot, value=value
        )
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        return await self._ask(rendered, [url], request, view)


@register_tool("whole_response")
class WholeResponseJudge(_Judge):
    """The judge on one complete candidate response (cost 8)."""

    kind = "whole_response"
    prompt_name = "whole_judge"

    async def run(self, request: ToolRequest) -> ToolResult:
        cand = request.candidate
        if cand is None:
            raise ValueError(f"action {request.action.get('id')!r} is a whole-response action without a candidate")
        text = cand.get("raw_text")
        if not text:
            text = str(cand.get("answer_text") or cand.get("answer") or "")
        figure = request.image.ref.figure
        rendered = self.prompt.render(
            figure=figure, question=request.question, options_block=options_block(request.options), candidate=text
        )
        return await self._ask(rendered, [request.image.data_url], request, {"kind": "whole", "figure": figure})
