"""Templated open, closed and multiple-choice questions about a scan, with reference answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from boe.sim.scans import ScanFacts
from boe.sim.vocab import FINDINGS, LESIONS, MODALITIES, PLANES_BY_FAMILY, REGIONS, surface

__all__ = ["ASKS", "Question", "make_question", "organ"]

# What a question asks -> the protocol slot its answer fills.
ASKS = {
    "modality": "modality",
    "region": "region",
    "plane": "plane",
    "finding": "finding",
    "side": "attribute",
    "vertical": "attribute",
    "size": "attribute",
    "presence": "attribute",
    "abnormal": "attribute",
}
_ASK_WEIGHTS = {
    "modality": 0.13,
    "region": 0.12,
    "plane": 0.1,
    "finding": 0.2,
    "side": 0.1,
    "vertical": 0.06,
    "size": 0.07,
    "presence": 0.14,
    "abnormal": 0.08,
}
_NEEDS_LESION = ("side", "vertical", "size")

_OPEN = {
    "modality": (
        "What imaging modality is this?",
        "What type of imaging was used to acquire this image?",
        "How was this image taken?",
        "What kind of scan is this?",
    ),
    "region": ("Which body region is shown?", "What part of the body is imaged?", "Which part of the body is this?"),
    "plane": ("In which plane is this image taken?", "What is the orientation of this image?", "Which view is shown?"),
    "finding": (
        "What is the main abnormality in this image?",
        "What abnormality is seen?",
        "What is the most likely finding?",
    ),
    "side": ("On which side is the lesion?", "Is the {finding} on the left or the right?", "Which side is affected?"),
    "vertical": (
        "Is the lesion in the upper or lower part of the {organ}?",
        "Is the {finding} located superiorly or inferiorly?",
    ),
    "size": ("Is the {finding} small or large?", "How large is the lesion?"),
}
_CLOSED = {
    "modality": ("Is this {art} {value} image?", "Was this image acquired with {value}?"),
    "region": ("Is this an image of the {value}?", "Does this image show the {value}?"),
    "plane": ("Is this {art} {value} image?", "Was this image taken in the {value} plane?"),
}
_CHOICE = {
    "modality": "Which imaging modality was used?",
    "region": "Which body part is shown?",
    "plane": "In which plane or view was this image acquired?",
    "finding": "Which finding is present?",
    "side": "Which side is affected?",
}
_VALUES = {"modality": MODALITIES, "region": REGIONS, "finding": FINDINGS}


@dataclass(frozen=True)
class Question:
    """One question with its reference answer (a canonical value)."""

    question: str
    options: dict[str, str] | None
    answer: str
    answer_type: str  # open | closed | choice
    asks: str  # modality, region, plane, finding, side, vertical, size, presence, abnormal

    def to_dict(self) -> dict[str, Any]:
        """The question fields of a questions.jsonl record."""
        return {
            "question": self.question,
            "options": self.options,
            "answer": self.answer,
            "answer_type": self.answer_type,
            "asks": self.asks,
            "slot": self.slot,
        }

    @property
    def slot(self) -> str:
        """The protocol slot the answer fills (yes/no answers fill `attribute`)."""
        return "attribute" if self.answer_type == "closed" else ASKS[self.asks]


def organ(region: str) -> str:
    """The word a question uses for the imaged organ of a region."""
    return {
        "head": "brain",
        "chest": "lungs",
        "abdomen": "abdomen",
        "pelvis": "pelvis",
        "spine": "spine",
        "limb": "limb",
    }[region]


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" or word.upper() in ("MRI", "MR", "X-RAY") else "a"


def _values(asks: str, f: ScanFacts) -> tuple[str, ...]:
    if asks == "plane":
        return PLANES_BY_FAMILY[f.modality]
    return _VALUES.get(asks, ())


def _truth(asks: str, f: ScanFacts) -> str:
    return {
        "modality": f.modality,
        "region": f.region,
        "plane": f.plane,
        "finding": f.finding,
        "side": f.side,
        "vertical": f.vertical,
        "size": f.lesion_size,
    }[asks] or ""


def _choice(rng: np.random.Generator, asks: str, f: ScanFacts) -> Question:
    truth = _truth(asks, f)
    pool = ("left", "right") if asks == "side" else _values(asks, f)
    others = [v for v in pool if v != truth]
    picked = [truth, *rng.permutation(others)[: min(3, len(others))]]
    order = rng.permutation(len(picked))
    slot = "attribute" if asks == "side" else asks
    options = {chr(65 + i): surface(slot, picked[j]) for i, j in enumerate(order)}
    return Question(_CHOICE[asks], options, truth, "choice", asks)


def _presence(rng: np.random.Generator, f: ScanFacts) -> Question:
    truthful = f.finding != "normal" and rng.random() < 0.5
    finding = f.finding if truthful else str(rng.choice([x for x in LESIONS if x != f.finding]))
    side = f.side if truthful else (f.side or str(rng.choice(("left", "right"))))
    if not truthful and f.finding != "normal" and rng.random() < 0.4:
        finding, side = f.finding, "right" if f.side == "left" else "left"
    answer = "yes" if (finding == f.finding and side == f.side) else "no"
    word = surface("finding", finding)
    where = f"the {side} lung" if f.region == "chest" else f"the {side} side of the {organ(f.region)}"
    return Question(f"Is there {_article(word)} {word} in {where}?", None, answer, "closed", "presence")


def _abnormal(rng: np.random.Generator, f: ScanFacts) -> Question:
    if rng.random() < 0.5:
        return Question("Is this image normal?", None, "yes" if f.finding == "normal" else "no", "closed", "abnormal")
    return Question(
        "Is there any abnormality in this image?", None, "no" if f.finding == "normal" else "yes", "closed", "abnormal"
    )


def make_question(rng: np.random.Generator, f: ScanFacts) -> Question:
    """Draw one question about the scan `f` with its reference answer."""
    asks_all = [a for a in _ASK_WEIGHTS if f.finding != "normal" or a not in _NEEDS_LESION]
    w = np.array([_ASK_WEIGHTS[a] for a in asks_all])
    asks = str(rng.choice(asks_all, p=w / w.sum()))
    if asks == "presence":
        return _presence(rng, f)
    if asks == "abnormal":
        return _abnormal(rng, f)
    kind = rng.random()
    if asks in _CHOICE and kind < 0.25:
        return _choice(rng, asks, f)
    if asks in _CLOSED and kind < 0.55:
        value = _truth(asks, f) if rng.random() < 0.5 else str(rng.choice(_values(asks, f)))
        word = surface(asks, value)
        template = str(rng.choice(_CLOSED[asks]))
        text = template.format(value=word, art=_article(word))
        return Question(text, None, "yes" if value == _truth(asks, f) else "no", "closed", asks)
    template = str(rng.choice(_OPEN[asks]))
    finding = surface("finding", f.finding) if f.finding != "normal" else "lesion"
    text = template.format(finding=finding, organ=organ(f.region))
    return Question(text, None, _truth(asks, f), "open", asks)
