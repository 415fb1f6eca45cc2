"""The record check (cost 1): vocabulary, option and record-metadata checks of one claim.

No model is called. The check

* rejects a value outside a closed slot's vocabulary (modality, region, plane);
* for multiple-choice questions, rejects an ``option`` claim that names no option;
* confirms or rejects a claim against a value the record itself states
  (DICOM tags, or the question text naming the modality, region or plane);
* rejects a plane the stated modality cannot show (an axial plain film);
* otherwise returns ``unresolved``: the vocabulary admits the value and
  nothing in the record settles it.
"""

from __future__ import annotations

from typing import Any

from boe.tools.protocol import Outcome, ToolRequest, ToolResult
from boe.vocab import CLOSED_SLOTS, Vocabulary, vocabulary

__all__ = ["PLANES_OF_MODALITY", "StructuredCheck"]

#: Planes each modality can show (modalities not listed are not checked).
PLANES_OF_MODALITY: dict[str, frozenset[str]] = {
    "ct": frozenset({"axial", "coronal", "sagittal", "oblique", "transverse", "3d reconstruction"}),
    "mr": frozenset({"axial", "coronal", "sagittal", "oblique", "transverse", "3d reconstruction"}),
    "us": frozenset({"axial", "coronal", "sagittal", "oblique", "transverse", "longitudinal"}),
    "xr": frozenset({"pa", "ap", "lateral", "frontal", "oblique", "decubitus"}),
    "mammography": frozenset({"mlo", "cc", "mag cc", "xcc", "lateral"}),
    "fluoroscopy": frozenset({"pa", "ap", "lateral", "frontal", "oblique", "decubitus"}),
    "angiography": frozenset({"pa", "ap", "lateral", "frontal", "oblique", "3d reconstruction"}),
}


class StructuredCheck:
    """Vocabulary / option / metadata check of one claim (the tool of `boe.kinds.structured`)."""

    kind = ""  # set by `make_tool` to the kind it serves

    def __init__(self, vocab: Vocabulary | None = None) -> None:
        self.vocab = vocab or vocabulary()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.kind, "args": {}}

    async def run(self, request: ToolRequest) -> ToolResult:
        return self.check(request)

    def check(self, request: ToolRequest) -> ToolResult:
        """The synchronous check behind `run`."""
        claim = request.claim
        if claim is None:
            return ToolResult("unresolved", error=f"the {self.kind} check needs a claim", view={"kind": "record"})
        slot, value = str(claim.get("slot")), str(claim.get("value"))
        view: dict[str, Any] = {"kind": "record"}
        if slot == "option":
            view["kind"] = "options"
            options = request.options or {}
            if value not in options:
                return ToolResult("reject", f"{value!r} is not one of the options {', '.join(options)}", view)
            verdict = _option_against_context(self.vocab, options[value], request.context)
            if verdict is not None:
                view["source"] = verdict[2]
                if request.context.get(f"{verdict[3]}:tag"):
                    view["tag"] = request.context[f"{verdict[3]}:tag"]
                return ToolResult(verdict[0], verdict[1], view)
            return ToolResult("unresolved", "the option exists; nothing in the record settles it", view)
        if slot in CLOSED_SLOTS and not self.vocab.is_known(slot, value):
            view["kind"] = "vocabulary"
            return ToolResult("reject", f"{value!r} is not in the {slot} vocabulary", view)
        stated = request.context.get(slot)
        if stated:
            view["source"] = request.context.get(f"{slot}:source", "record")
            if request.context.get(f"{slot}:tag"):
                view["tag"] = request.context[f"{slot}:tag"]
            if stated == value:
                return ToolResult("confirm", f"the record states {slot} {stated}", view)
            return ToolResult("reject", f"the record states {slot} {stated}, not {value}", view)
        modality = request.context.get("modality")
        if slot == "plane" and modality in PLANES_OF_MODALITY and self.vocab.is_known("plane", value):
            view["source"] = request.context.get("modality:source", "record")
            if value not in PLANES_OF_MODALITY[modality]:
                return ToolResult("reject", f"a {modality} image cannot be in the {value} plane", view)
        return ToolResult(
            "unresolved", f"the {slot} vocabulary admits {value!r}; nothing in the record settles it", view
        )


def _option_against_context(vocab: Vocabulary, text: str, context: Any) -> tuple[Outcome, str, str, str] | None:
    """Confirm / reject an option whose text names a closed-slot value the record states (with source and slot)."""
    for slot in sorted(CLOSED_SLOTS):
        stated = context.get(slot)
        if not stated:
            continue
        canon = vocab.canonical(slot, text)
        if canon is not None and canon.known:
            source = context.get(f"{slot}:source", "record")
            if canon.value == stated:
                return "confirm", f"the option names {slot} {stated}, which the record states", source, slot
            return "reject", f"the option names {slot} {canon.value}; the record states {stated}", source, slot
    return None
