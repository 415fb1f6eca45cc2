"""The simulator's canonical vocabulary (docs/prompt-protocol.md) and its surface forms."""

from __future__ import annotations

import functools
import re

__all__ = [
    "FINDINGS",
    "LESIONS",
    "MODALITIES",
    "PLANES",
    "PLANES_BY_FAMILY",
    "REGIONS",
    "SIDES",
    "SIZES",
    "SLOTS",
    "VERTICALS",
    "canonical",
    "family",
    "find_values",
    "surface",
]

MODALITIES = ("ct", "mr", "xr", "us")
REGIONS = ("head", "chest", "abdomen", "pelvis", "spine", "limb")
PLANES = ("axial", "coronal", "sagittal", "pa", "ap", "lateral")
FINDINGS = ("mass", "nodule", "effusion", "fracture", "hemorrhage", "normal")
LESIONS = FINDINGS[:-1]
SIDES = ("left", "right")
VERTICALS = ("upper", "lower")
SIZES = ("small", "large")
SLOTS = ("modality", "region", "plane", "finding", "attribute")

# Planes each modality family can show: cross-sectional, projection, ultrasound.
PLANES_BY_FAMILY: dict[str, tuple[str, ...]] = {
    "ct": ("axial", "coronal", "sagittal"),
    "mr": ("axial", "coronal", "sagittal"),
    "xr": ("pa", "ap", "lateral"),
    "us": ("axial", "sagittal"),
}

# Canonical value -> surface forms (the first is the plain display form).
_SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "modality": {
        "ct": ("CT", "CT scan", "computed tomography", "CAT scan"),
        "mr": ("MRI", "MR", "magnetic resonance imaging", "MRI scan"),
        "xr": ("X-ray", "x-ray", "radiograph", "plain film", "xray"),
        "us": ("ultrasound", "US", "sonography", "ultrasonography"),
    },
    "region": {
        "head": ("head", "brain", "skull", "cranium"),
        "chest": ("chest", "thorax", "lungs", "thoracic"),
        "abdomen": ("abdomen", "abdominal", "belly"),
        "pelvis": ("pelvis", "pelvic", "hip"),
        "spine": ("spine", "spinal column", "vertebral column", "vertebrae"),
        "limb": ("limb", "extremity", "arm", "leg", "long bone"),
    },
    "plane": {
        "axial": ("axial", "transverse", "transaxial", "axial plane"),
        "coronal": ("coronal", "frontal plane", "coronal plane"),
        "sagittal": ("sagittal", "longitudinal", "sagittal plane"),
        "pa": ("PA", "posteroanterior", "postero-anterior", "PA view"),
        "ap": ("AP", "anteroposterior", "antero-posterior", "AP view"),
        "lateral": ("lateral", "lateral view", "side view"),
    },
    "finding": {
        "mass": ("mass", "tumor", "tumour", "mass lesion"),
        "nodule": ("nodule", "nodular opacity", "small nodule"),
        "effusion": ("effusion", "fluid collection", "pleural effusion"),
        "fracture": ("fracture", "fracture line", "broken bone", "break"),
        "hemorrhage": ("hemorrhage", "haemorrhage", "bleed", "hematoma", "bleeding"),
        "normal": ("normal", "no abnormality", "none", "unremarkable", "no finding"),
    },
    "attribute": {
        "left": ("left", "left side", "left-sided", "on the left"),
        "right": ("right", "right side", "right-sided", "on the right"),
        "upper": ("upper", "superior", "upper part", "top"),
        "lower": ("lower", "inferior", "lower part", "bottom"),
        "small": ("small", "tiny", "little"),
        "large": ("large", "big", "sizeable"),
        "yes": ("yes", "Yes", "true", "present"),
        "no": ("no", "No", "false", "absent"),
    },
}

_LOOKUP: dict[str, dict[str, str]] = {
    slot: {form.lower(): value for value, forms in table.items() for form in (value, *forms)}
    for slot, table in _SYNONYMS.items()
}


def family(modality: str) -> str:
    """The plane family of a modality (the modality itself: planes depend on it)."""
    return modality if modality in PLANES_BY_FAMILY else "ct"


def surface(slot: str, value: str, pick: int = 0) -> str:
    """A surface form of a canonical value (`pick` indexes the synonym list, wrapping)."""
    forms = _SYNONYMS.get(slot, {}).get(value)
    if not forms:
        return value
    return forms[pick % len(forms)]


def _norm(text: str) -> str:
    return re.sub(r"[\s_]+", " ", re.sub(r"[^\w\s-]", " ", text.lower())).strip()


def canonical(slot: str, text: str | None) -> str | None:
    """The canonical value of a surface form, or None when it names nothing known."""
    if text is None:
        return None
    table = _LOOKUP.get(slot)
    if table is None:
        return None
    key = _norm(text)
    if key in table:
        return table[key]
    found = find_values(slot, key)
    return found[0] if len(found) == 1 else None


@functools.cache
def _patterns(slot: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    """The whole-word pattern of every surface form of `slot` (short forms only for modality), compiled once."""
    return tuple(
        (re.compile(r"(?<![\w-])" + re.escape(form) + r"(?![\w-])"), value)
        for form, value in _LOOKUP.get(slot, {}).items()
        if slot == "modality" or len(form) > 2 or form in ("ap", "pa")
    )


def find_values(slot: str, text: str) -> list[str]:
    """Canonical values of `slot` named anywhere in free text, in order of first mention."""
    low = " " + _norm(text) + " "
    hits: list[tuple[int, str]] = []
    for pattern, value in _patterns(slot):
        m = pattern.search(low)
        if m:
            hits.append((m.start(), value))
    out: list[str] = []
    for _, value in sorted(hits):
        if value not in out:
            out.append(value)
    return out
