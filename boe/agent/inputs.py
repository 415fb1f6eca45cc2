"""A question's input state: its figures opened, its options read, its id, analysis and costs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from boe.agent.configuration import AgentConfig
from boe.agent.costs import QuestionCosts, cost_kinds
from boe.errors import ConfigError, InputError

if TYPE_CHECKING:
    from boe.agent.state import AgentContext
    from boe.tools.images import LoadedImage

__all__ = [
    "MAX_FIGURES",
    "MAX_IMAGES",
    "ImageInput",
    "QuestionFields",
    "figure_paths",
    "keep_images",
    "open_figures",
    "parse_options",
    "question_input",
    "question_key",
]

#: A question's image(s): a path, or a list of paths or (figure id, path) pairs.
ImageInput = str | Path | Sequence[str | Path | tuple[str, str | Path]]
#: The most figures one question may have (MedXpertQA-MM has 1-6).
MAX_FIGURES = 6


class QuestionFields(TypedDict, total=False):
    """The keywords of a question besides its image(s) and text, as `Agent.ask` and `BoeGraph.input` take them."""

    options: Mapping[str, str] | str | None  # multiple choice: ``{"A": "CT", ...}`` or ``"A=CT,B=MRI"``
    reference: str | None  # the reference answer, stored for scoring; no policy reads it
    question_id: str | None  # default: a hash of the figures, the question and its options
    dataset: str | None  # the calibration namespace, when not the run's
    opened: Sequence[LoadedImage] | None  # the figures already read by `open_figures`


def figure_paths(image: ImageInput) -> list[tuple[str, str | Path]]:
    """(figure id, path) of every image of a question: ``"0"`` for a lone image, file stems for several
    (made unique as MedXpertQA's loader does: ``a``, ``a-2``), or the ids given."""
    if isinstance(image, (str, Path)):
        return [("0", image)]
    items = list(image)
    if not items:
        raise InputError("a question needs at least one image")
    if len(items) > MAX_FIGURES:
        raise InputError(f"a question may have at most {MAX_FIGURES} images, got {len(items)}")
    if len(items) == 1 and not isinstance(items[0], tuple):
        return [("0", items[0])]
    out: list[tuple[str, str | Path]] = []
    seen: set[str] = set()
    for item in items:
        if isinstance(item, tuple):
            fig, path = str(item[0]).strip(), item[1]
            if not fig or fig in seen:
                raise InputError(f"figure ids must be unique and non-empty, got {fig!r} twice or empty")
        else:
            path = item
            base = Path(item).stem or "figure"
            fig, n = base, 2
            while fig in seen:
                fig, n = f"{base}-{n}", n + 1
        seen.add(fig)
        out.append((fig, path))
    return out


def _tags(img: Any) -> dict[str, str]:
    """slot -> the DICOM tag its value came from (empty for other formats)."""
    return dict(((img.ref.dicom or {}).get("sources")) or {})


def open_figures(image: ImageInput, config: AgentConfig) -> list[LoadedImage]:
    """Read and decode every figure of a question, as `Agent.ask` does first (a batch does it ahead, in worker
    processes, and hands the result to ``ask(opened=...)``)."""
    from boe.tools.images import open_image

    return [
        open_image(
            p,
            config.root,
            figure=f,
            frame=config.dicom_frame,
            max_pixels=config.max_pixels or None,
            pixel_limit=config.pixel_limit,
        )
        for f, p in figure_paths(image)
    ]


#: Figures kept decoded in a shared context (older ones are read again from their path when needed).
MAX_IMAGES = 32


def parse_options(text: str | Mapping[str, str] | None) -> dict[str, str] | None:
    """``"A=CT,B=MRI"`` (or a mapping) as ``{"A": "CT", "B": "MRI"}``; None for none."""
    if text is None:
        return None
    if isinstance(text, Mapping):
        items = [(str(k), str(v)) for k, v in text.items()]
    else:
        items = []
        for part in str(text).split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ConfigError(f"--options: expected LETTER=text pairs separated by commas, got {part.strip()!r}")
            items.append((key.strip(), value.strip()))
    out: dict[str, str] = {}
    for k, v in items:
        if k in out:
            raise ConfigError(f"--options: option {k!r} given twice")
        out[k] = v
    if len(out) < 2:
        raise ConfigError("--options: a multiple-choice question needs at least two options")
    return out


def question_input(
    config: AgentConfig,
    image: ImageInput,
    question: str,
    *,
    options: Mapping[str, str] | str | None = None,
    reference: str | None = None,
    question_id: str | None = None,
    dataset: str | None = None,
    opened: Sequence[LoadedImage] | None = None,
    costs: QuestionCosts | None = None,
) -> tuple[dict[str, Any], list[LoadedImage]]:
    """The graph's input state for one question (id, figures, analysis, costs) and its opened figures.

    ``costs`` default to the configuration's design costs (an `Agent` in measured cost mode passes its own).
    """
    from boe.agent.claims import analyse_question

    if not isinstance(question, str) or not question.strip():
        raise InputError("the question is empty")
    opts = parse_options(options)
    imgs = list(opened) if opened else open_figures(image, config)
    img = imgs[0]
    key = img.ref.image_id if len(imgs) == 1 else ",".join(f"{i.ref.figure}:{i.ref.image_id}" for i in imgs)
    qid = question_id or question_key(key, question, opts)
    if costs is None:
        design = {k: config.costs.of(k) for k in cost_kinds()}
        costs = QuestionCosts(design, design, "design")
    if len(imgs) == 1:
        analysis = analyse_question(question, opts, img.ref.metadata, tags=_tags(img))
    else:
        analysis = analyse_question(
            question, opts, figure_metadata={i.ref.figure: (i.ref.metadata, _tags(i)) for i in imgs}
        )
    state_in: dict[str, Any] = {
        "question_id": qid,
        "dataset": dataset or config.dataset,
        "question": question.strip(),
        "options": opts,
        "reference": reference,
        "image": img.ref.as_dict(),
        "images": [i.ref.as_dict() for i in imgs],
        "analysis": analysis,
        "costs": costs.as_dict(),
        "calls": [],
    }
    return state_in, imgs


def question_key(image_id: str, question: str, options: Mapping[str, str] | None) -> str:
    blob = json.dumps([image_id, question, options], sort_keys=True)
    return "q-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def keep_images(ctx: AgentContext, imgs: Sequence[LoadedImage]) -> None:
    """Add decoded figures to a context, dropping the oldest beyond `MAX_IMAGES`."""
    for img in imgs:
        ctx.images.pop(img.ref.image_id, None)
        ctx.images[img.ref.image_id] = img
    while len(ctx.images) > max(MAX_IMAGES, len(imgs)):
        del ctx.images[next(iter(ctx.images))]
