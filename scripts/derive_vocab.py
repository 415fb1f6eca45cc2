"""Rebuild the shipped term lists from the VQA-Med 2019 and VQA-RAD files.

    python scripts/derive_vocab.py ../shared/data            # rewrite boe/vocab/data/*.txt
    python scripts/derive_vocab.py ../shared/data --check    # exit 1 if the shipped files differ

Only *terms* are written (answer labels and their synonyms), never the
question-answer pairs. The derivation:

* modality: every label of the official grouped list in
  ``README-VQA-Med-2019-Data.txt`` (``[XR]``, ``[CT]``, ...) and every answer
  string of the modality files that names one (e.g. ``ct with iv contrast``)
  becomes a synonym of the group's canonical value; common clinical names
  (``mri``, ``x-ray``, ...) are added from `EXTRA`.
* plane: the 16 official planes, each its own canonical value.
* region: the 10 official organ systems, mapped to body regions by
  `ORGAN_SYSTEM_REGION` (systems without a single region stay values of
  their own), plus VQA-RAD's ``image_organ`` values (HEAD, CHEST, ABD).
* finding / attribute: curated lists (VQA-Med abnormality answers are
  free text, so only the protocol's finding terms and their synonyms ship).
* question types: VQA-RAD's taxonomy (MODALITY, PLANE, ORGAN, POS, SIZE,
  PRES, ABN, ...), with the keywords that recognise each type.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

__all__ = ["derive", "main"]

DATA_DIR = Path(__file__).resolve().parents[1] / "boe" / "vocab" / "data"

#: Official VQA-Med modality groups -> canonical modality values.
MODALITY_GROUPS = {
    "XR": "xr",
    "CT": "ct",
    "MR": "mr",
    "US": "us",
    "MA": "mammography",
    "GI": "fluoroscopy",
    "AG": "angiography",
    "PT": "nuclear",
}

#: Answer strings of the modality files that name a sequence or contrast rather
#: than a label, mapped to the modality they imply (yes/no answers are skipped).
IMPLIED_MODALITY = {
    "t1": "mr",
    "t2": "mr",
    "flair": "mr",
    "ct noncontrast": "ct",
    "ct with iv contrast": "ct",
    "ct with gi and iv contrast": "ct",
    "ct with gi contrast": "ct",
    "pet-ct fusion": "nuclear",
    "gi": "fluoroscopy",
}

#: Hand-written synonyms added to the derived ones (surface forms a VLM writes).
EXTRA: dict[str, dict[str, list[str]]] = {
    "modality": {
        "xr": [
            "x-ray",
            "xray",
            "x ray",
            "radiograph",
            "radiography",
            "plain film",
            "plain radiograph",
            "chest x-ray",
            "cxr",
            "=film",
            "=cr",
            "=dx",
            "projection radiograph",
            "roentgenogram",
        ],
        "ct": [
            "computed tomography",
            "ct scan",
            "cat scan",
            "=cat",
            "cta",
            "ct angiography",
            "ct angiogram",
            "contrast-enhanced ct",
            "non-contrast ct",
            "noncontrast ct",
            "multidetector ct",
            "mdct",
            "hrct",
        ],
        "mr": [
            "mri",
            "mr imaging",
            "magnetic resonance",
            "magnetic resonance imaging",
            "mra",
            "mr angiography",
            "t1-weighted",
            "t2-weighted",
            "t1 weighted",
            "t2 weighted",
            "dwi",
            "diffusion weighted",
            "adc map",
            "stir",
            "fiesta",
            "swi",
            "gre",
            "mr scan",
            "mri scan",
            "nmr",
        ],
        "us": [
            "ultrasound",
            "ultrasonography",
            "sonography",
            "sonogram",
            "doppler",
            "doppler ultrasound",
            "echography",
            "echocardiogram",
            "=us scan",
            "=usg",
        ],
        "mammography": ["mammogram", "mammograph", "mammography", "=ma"],
        "fluoroscopy": [
            "barium swallow",
            "barium enema",
            "upper gi",
            "small bowel follow through",
            "fluoroscopic",
            "barium study",
            "esophagram",
        ],
        "angiography": [
            "angiogram",
            "angiography",
            "digital subtraction angiography",
            "=dsa",
            "venogram",
            "venography",
            "arteriogram",
        ],
        "nuclear": [
            "nuclear medicine",
            "=nm",
            "=pet",
            "pet scan",
            "pet-ct",
            "pet/ct",
            "positron emission tomography",
            "spect",
            "scintigraphy",
            "bone scan",
        ],
    },
    "plane": {
        "axial": ["axial plane", "axial view", "axial section", "axial slice", "transaxial", "axial image"],
        "sagittal": ["sagittal plane", "sagittal view", "sagittal section", "midsagittal", "parasagittal"],
        "coronal": ["coronal plane", "coronal view", "coronal section", "coronal slice"],
        "pa": ["posteroanterior", "postero-anterior", "posterior-anterior", "pa view", "pa projection", "p-a"],
        "ap": ["anteroposterior", "antero-posterior", "anterior-posterior", "ap view", "ap projection", "a-p"],
        "lateral": ["lateral view", "lateral projection", "=lat", "side view"],
        "frontal": ["frontal view", "frontal projection"],
        "oblique": ["oblique view", "oblique projection"],
        "longitudinal": ["longitudinal view", "long axis", "long-axis"],
        "transverse": ["transverse view", "short axis", "short-axis"],
    },
    "region": {
        "head": [
            "brain",
            "skull",
            "cranium",
            "intracranial",
            "cerebral",
            "cerebrum",
            "cerebellum",
            "face",
            "orbit",
            "sinus",
            "sinuses",
            "head and neck",
        ],
        "neck": ["cervical soft tissue", "thyroid", "larynx", "pharynx"],
        "chest": [
            "thorax",
            "thoracic",
            "lung",
            "lungs",
            "pulmonary",
            "heart",
            "cardiac",
            "mediastinum",
            "pleura",
            "chest wall",
            "=cxr",
        ],
        "abdomen": [
            "abdominal",
            "abd",
            "liver",
            "hepatic",
            "kidney",
            "kidneys",
            "renal",
            "spleen",
            "pancreas",
            "bowel",
            "stomach",
            "gallbladder",
            "adrenal",
            "abdomen and pelvis",
        ],
        "pelvis": ["pelvic", "bladder", "uterus", "ovary", "prostate", "hip", "hips", "sacrum"],
        "spine": [
            "spinal",
            "vertebra",
            "vertebrae",
            "vertebral",
            "spinal cord",
            "lumbar spine",
            "cervical spine",
            "thoracic spine",
            "c-spine",
            "l-spine",
        ],
        "limb": [
            "extremity",
            "extremities",
            "arm",
            "leg",
            "hand",
            "foot",
            "knee",
            "shoulder",
            "elbow",
            "wrist",
            "ankle",
            "femur",
            "tibia",
            "humerus",
            "forearm",
            "upper limb",
            "lower limb",
        ],
        "breast": ["breasts", "mammary"],
    },
}

#: VQA-Med organ systems -> body region (None: the system spans regions and is its own value).
ORGAN_SYSTEM_REGION: dict[str, str | None] = {
    "skull and contents": "head",
    "face, sinuses, and neck": "head",
    "spine and contents": "spine",
    "musculoskeletal": "limb",
    "heart and great vessels": "chest",
    "lung, mediastinum, pleura": "chest",
    "gastrointestinal": "abdomen",
    "genitourinary": None,
    "vascular and lymphatic": None,
    "breast": "breast",
}

#: VQA-RAD image_organ values -> region.
RAD_ORGAN_REGION = {"head": "head", "chest": "chest", "abd": "abdomen"}

FINDINGS: dict[str, list[str]] = {
    "mass": [
        "tumor",
        "tumour",
        "neoplasm",
        "lesion",
        "space-occupying lesion",
        "masses",
        "carcinoma",
        "cancer",
        "malignancy",
        "metastasis",
        "metastases",
        "lymphoma",
        "glioma",
        "meningioma",
    ],
    "nodule": ["nodules", "pulmonary nodule", "lung nodule", "nodular opacity", "coin lesion", "granuloma"],
    "effusion": ["pleural effusion", "effusions", "fluid collection", "pericardial effusion", "fluid", "ascites"],
    "fracture": ["fractures", "fx", "broken bone", "break", "burst fracture", "compression fracture"],
    "hemorrhage": [
        "haemorrhage",
        "bleed",
        "bleeding",
        "hematoma",
        "haematoma",
        "intracranial hemorrhage",
        "subdural hematoma",
        "epidural hematoma",
        "subarachnoid hemorrhage",
        "hemorrhagic",
    ],
    "normal": [
        "no abnormality",
        "no abnormalities",
        "unremarkable",
        "no acute findings",
        "no finding",
        "no findings",
        "no acute abnormality",
        "within normal limits",
        "none",
        "no lesion",
        "nothing abnormal",
        "healthy",
    ],
    "pneumothorax": ["collapsed lung", "ptx"],
    "consolidation": ["pneumonia", "airspace disease", "airspace opacity", "infiltrate"],
    "infarct": ["infarction", "stroke", "ischemia", "ischemic stroke"],
    "cyst": ["cystic lesion", "cysts", "cystic"],
    "edema": ["oedema", "pulmonary edema", "cerebral edema", "swelling"],
    "calcification": ["calcified", "calcifications"],
    "obstruction": ["bowel obstruction", "small bowel obstruction", "blockage"],
    "stone": ["calculus", "calculi", "kidney stone", "gallstone", "nephrolithiasis", "cholelithiasis"],
    "aneurysm": ["aneurysmal dilatation"],
    "abscess": ["abscesses"],
    "atelectasis": ["collapse"],
    "cardiomegaly": ["enlarged heart", "cardiac enlargement"],
}

#: The answer-relevant attribute: families of mutually exclusive values.
ATTRIBUTES: dict[str, dict[str, list[str]]] = {
    "side": {
        "left": ["left side", "left-sided", "lt", "sinistral", "on the left", "on the left side", "left-hand side"],
        "right": ["right side", "right-sided", "rt", "on the right", "on the right side", "right-hand side"],
        "bilateral": ["both sides", "both", "bilaterally"],
    },
    "vertical": {
        "upper": ["superior", "superiorly", "top", "upper part", "apical", "cranial", "in the upper part"],
        "lower": ["inferior", "inferiorly", "bottom", "lower part", "basal", "caudal", "in the lower part"],
    },
    "size": {
        "small": ["tiny", "little", "minor", "subcentimeter"],
        "large": ["big", "huge", "enlarged", "massive", "sizable", "sizeable"],
    },
    "yesno": {
        "yes": ["y", "true", "present", "positive", "affirmative", "correct"],
        "no": ["n", "false", "absent", "negative", "not present", "incorrect"],
    },
}

#: VQA-RAD question types: the slot the answer fills and the keywords that recognise the type.
QUESTION_TYPES: list[tuple[str, str, list[str]]] = [
    (
        "MODALITY",
        "modality",
        [
            "modality",
            "type of imaging",
            "type of image",
            "kind of image",
            "kind of scan",
            "type of scan",
            "imaging technique",
            "what imaging",
            "which imaging",
            "how was this image taken",
            "what kind of imaging",
            "t1",
            "t2",
            "flair",
            "contrast",
            "mri",
            "ct scan",
            "x-ray",
            "xray",
            "ultrasound",
            "image acquired",
            "ct",
            "cxr",
            "film",
            "noncontrast",
            "taken with",
        ],
    ),
    (
        "PLANE",
        "plane",
        [
            "plane",
            "view",
            "projection",
            "orientation",
            "pa position",
            "ap position",
            "anterior-posterior",
            "posterior-anterior",
            "taken in pa",
            "axial",
            "sagittal",
            "coronal",
            "section",
            "ap",
            "pa",
            "slice",
            "cut of",
        ],
    ),
    (
        "ORGAN",
        "region",
        [
            "organ",
            "body part",
            "part of the body",
            "what part of the body",
            "which part of the body",
            "body region",
            "which region",
            "what region",
            "anatomy",
            "anatomical",
            "study of the",
            "what structure",
        ],
    ),
    (
        "POS",
        "attribute",
        [
            "where",
            "which side",
            "what side",
            "location",
            "located",
            "which lobe",
            "what lobe",
            "left or right",
            "right or left",
            "which part",
            "what part",
            "position of",
            "which kidney",
            "which lung",
            "what lung",
            "liver lobe",
            "unilateral",
            "bilateral",
            "one side",
            "both sides",
            "superior or inferior",
            "territory",
            "left or the right",
            "right or the left",
            "upper or lower",
            "lower or upper",
            "superiorly or inferiorly",
        ],
    ),
    (
        "SIZE",
        "attribute",
        ["size", "how big", "how large", "enlarged", "narrowed", "dilated", "diameter", "large", "small", "measure"],
    ),
    ("COUNT", "attribute", ["how many", "number of", "count"]),
    (
        "COLOR",
        "attribute",
        [
            "color",
            "colour",
            "dense",
            "density",
            "hyperdense",
            "hypodense",
            "hyperintense",
            "hypointense",
            "radiopaque",
            "radiolucent",
            "enhancing",
            "bright",
            "dark",
        ],
    ),
    ("ATTRIB", "attribute", ["describe", "shape", "form of", "characteristic", "appearance", "margin", "borders"]),
    (
        "ABN",
        "finding",
        [
            "abnormal",
            "abnormality",
            "normal",
            "pathology",
            "finding",
            "findings",
            "wrong",
            "diagnosis",
            "alarming",
            "primary abnormality",
        ],
    ),
    (
        "PRES",
        "finding",
        [
            "is there",
            "are there",
            "is there evidence",
            "present",
            "presence",
            "seen",
            "visible",
            "evidence of",
            "show",
            "shows",
            "see",
        ],
    ),
]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\t", " ").strip().lower())


def _modality_labels(readme: str) -> dict[str, str]:
    """Official modality labels (lower case) -> canonical value, from the grouped list."""
    section = readme.split("Modalities (36)", 1)[1].split("-------------------", 1)[0]
    out: dict[str, str] = {}
    group = None
    for line in section.splitlines():
        m = re.search(r"\[(\w+)\]", line)
        if m:
            group = MODALITY_GROUPS[m.group(1)]
            continue
        label = _norm(line)
        if label and group and not set(label) <= {"="}:
            out[label] = group
    return out


def _section(readme: str, title: str) -> list[str]:
    """The lines of one ``=====``-framed section of the README."""
    lines = readme.split(title, 1)[1].splitlines()[2:]  # rest of the title line, then the ==== rule
    out = []
    for line in lines:
        if line.strip().startswith("====="):
            break
        if _norm(line):
            out.append(_norm(line))
    return out


def _answers(root: Path, prefix: str) -> list[str]:
    out: list[str] = []
    for split in ("train", "val"):
        for f in sorted((root / "vqa-med-2019" / split / "QAPairsByCategory").glob(f"{prefix}_*.txt")):
            for line in f.read_text(encoding="utf-8").splitlines():
                parts = line.split("|")
                if len(parts) == 3:
                    for alt in parts[2].split("#"):
                        out.append(_norm(alt))
    return out


def _label_group(answer: str, labels: dict[str, str]) -> str | None:
    if answer in labels:
        return labels[answer]
    if answer in IMPLIED_MODALITY:
        return IMPLIED_MODALITY[answer]
    # "mr - flair" style answers: the head before " - " or the best label prefix
    best = None
    for label, group in labels.items():
        prefix = answer.startswith(label) or label.startswith(answer)
        if prefix and (best is None or len(label) > len(best[0])):
            best = (label, group)
    if best is not None:
        return best[1]
    head = answer.split(" - ", 1)[0].strip()
    for code, group in MODALITY_GROUPS.items():
        if head == code.lower():
            return group
    return None


def derive(root: Path) -> dict[str, str]:
    """The text of every shipped vocabulary file, derived from the data under ``root``."""
    readme = (root / "vqa-med-2019" / "README-VQA-Med-2019-Data.txt").read_text(encoding="utf-8")
    labels = _modality_labels(readme)
    modality: dict[str, list[str]] = {v: [] for v in MODALITY_GROUPS.values()}
    for label, group in labels.items():
        modality[group].append(label)
    for ans in sorted(set(_answers(root, "C1"))):
        if ans in ("yes", "no", "contrast", "noncontrast", "iv", "gi and iv"):
            continue  # answers to yes/no and contrast questions are not modality names
        found = _label_group(ans, labels)
        if found is None:
            raise ValueError(f"modality answer {ans!r} maps to no group; extend IMPLIED_MODALITY")
        modality[found].append(ans)
    planes: dict[str, list[str]] = {}
    for p in _section(readme, "Planes (16)"):
        canon = p.replace("mammo - ", "")
        planes.setdefault(canon, [p] if canon != p else [])
    for ans in sorted(set(_answers(root, "C2"))):
        canon = ans.replace("mammo - ", "")
        if canon not in planes:
            raise ValueError(f"plane answer {ans!r} is not an official plane")
    region: dict[str, list[str]] = {
        r: [] for r in ("head", "neck", "chest", "breast", "abdomen", "pelvis", "spine", "limb")
    }
    systems = _section(readme, "Organ Systems (10)")
    answered = set(_answers(root, "C3"))
    for system in systems:
        target = ORGAN_SYSTEM_REGION[system]
        if target is None:
            region.setdefault(system.split(" and ")[0].split(",")[0], []).append(system)
        else:
            region[target].append(system)
    for ans in sorted(answered):
        if ans not in systems:
            raise ValueError(f"organ answer {ans!r} is not an official organ system")
    rad = json.loads((root / "vqa-rad" / "trainset_subset.json").read_text(encoding="utf-8"))
    rad += json.loads((root / "vqa-rad" / "testset_subset.json").read_text(encoding="utf-8"))
    for organ in sorted({_norm(r["image_organ"]) for r in rad}):
        region[RAD_ORGAN_REGION[organ]].append(organ)
    rad_types = sorted({t.strip() for r in rad for t in r["question_type"].split(",")})
    known_types = {t for t, _, _ in QUESTION_TYPES}
    unknown = [t for t in rad_types if t not in known_types and t not in ("OTHER", "PRSE")]
    if unknown:
        raise ValueError(f"VQA-RAD question types without keywords: {unknown}")

    def merge(base: dict[str, list[str]], extra: dict[str, list[str]]) -> dict[str, list[str]]:
        out = {k: list(v) for k, v in base.items()}
        for k, v in extra.items():
            out.setdefault(k, []).extend(v)
        return out

    header = (
        "# derived by `python scripts/derive_vocab.py` from VQA-Med 2019 and VQA-RAD term lists; do not edit by hand\n"
    )
    files = {
        "modality.txt": _render(merge(modality, EXTRA["modality"])),
        "plane.txt": _render(merge(planes, EXTRA["plane"])),
        "region.txt": _render(merge(region, EXTRA["region"])),
        "finding.txt": _render(FINDINGS),
        "attribute.txt": "".join(f"[{family}]\n" + _render(values) for family, values in ATTRIBUTES.items()),
        "question_types.txt": "".join(f"{t} -> {slot}: {' | '.join(kw)}\n" for t, slot, kw in QUESTION_TYPES),
    }
    return {name: header + text for name, text in files.items()}


def _render(values: dict[str, list[str]]) -> str:
    lines = []
    for canon, syns in values.items():
        seen: list[str] = []
        for s in syns:
            s = _norm(s)
            if s and s != canon and s not in seen:
                seen.append(s)
        lines.append(f"{canon}: {' | '.join(seen)}".rstrip() + "\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="the shared data folder (holding vqa-med-2019/ and vqa-rad/)")
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = ap.parse_args(argv)
    files = derive(args.data)
    changed = [
        n
        for n, text in files.items()
        if not (DATA_DIR / n).exists() or (DATA_DIR / n).read_text(encoding="utf-8") != text
    ]
    if args.check:
        for n in changed:
            print(f"differs: {DATA_DIR / n}", file=sys.stderr)
        return 1 if changed else 0
    DATA_DIR.mkdir(exist_ok=True)
    for n, text in files.items():
        (DATA_DIR / n).write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} files to {DATA_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
