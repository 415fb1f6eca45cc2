"""The `boe-sim` on-disk dataset: generate it, load it, find the shipped demo set.

Layout of a dataset directory DIR (format "boe-sim", version 1)::

    DIR/dataset.json      {"format": "boe-sim", "version": 1, "seed", "size", "n_questions", "n_images"}
    DIR/questions.jsonl   one question a line: id, image_id, images (paths relative to DIR),
                          dicom (relative path or null), question, options ({"A": text, ...} or null),
                          answer (canonical reference value), answer_type (open | closed | choice),
                          asks (modality | region | plane | finding | side | vertical | size |
                          presence | abnormal), slot (the protocol slot the answer fills)
    DIR/facts.jsonl       the sidecar truth of each image (image_id + ScanFacts); agents never read it
    DIR/images/*.png      8-bit grayscale scans (and *.dcm when generated with DICOM)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from boe.errors import InputError

__all__ = [
    "DATASET_FORMAT",
    "DATASET_VERSION",
    "demo_dir",
    "generate_dataset",
    "load_facts",
    "load_sim_dataset",
]

DATASET_FORMAT = "boe-sim"
DATASET_VERSION = 1


def demo_dir() -> Path:
    """The demo set shipped with the package."""
    return Path(__file__).parent / "data" / "demo"


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def generate_dataset(
    out: str | Path, n: int, seed: int = 0, *, size: int = 384, per_image: int = 1, dicom: bool = False
) -> Path:
    """Write `n` questions about `ceil(n / per_image)` fresh scans into `out` (must be empty or new)."""
    import cv2
    import numpy as np

    from boe.sim.questions import make_question
    from boe.sim.scans import render, sample_facts

    if n < 1:
        raise InputError("--n must be at least 1")
    if not 64 <= size <= 2048:
        raise InputError(f"image size must lie in 64..2048, got {size}")
    if per_image < 1:
        raise InputError("questions per image must be at least 1")
    root = Path(out)
    if root.exists() and any(root.iterdir()):
        raise InputError(f"{root} exists and is not empty; choose a new directory")
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    questions: list[dict[str, Any]] = []
    facts_rows: list[dict[str, Any]] = []
    img_index = 0
    while len(questions) < n:
        f = sample_facts(rng, size)
        image_id = f"img-{seed}-{img_index:05d}"
        pixels = render(f)
        png = f"images/{image_id}.png"
        if not cv2.imwrite(str(root / png), pixels, [cv2.IMWRITE_PNG_COMPRESSION, 9]):
            raise InputError(f"cannot write {root / png}")
        dcm = None
        if dicom:
            from boe.sim.dicom import write_dicom

            dcm = f"images/{image_id}.dcm"
            write_dicom(root / dcm, pixels, f, uid_seed=seed * 1_000_003 + img_index)
        facts_rows.append({"image_id": image_id, **f.to_dict()})
        asked: set[str] = set()
        for _ in range(min(per_image, n - len(questions))):
            q = make_question(rng, f)
            for _retry in range(8):
                if q.question not in asked:
                    break
                q = make_question(rng, f)
            asked.add(q.question)
            qid = f"sim-{seed}-{len(questions):05d}"
            questions.append({"id": qid, "image_id": image_id, "images": [png], "dicom": dcm, **q.to_dict()})
        img_index += 1
    _write_jsonl(root / "questions.jsonl", questions)
    _write_jsonl(root / "facts.jsonl", facts_rows)
    meta = {
        "format": DATASET_FORMAT,
        "version": DATASET_VERSION,
        "seed": seed,
        "size": size,
        "n_questions": len(questions),
        "n_images": img_index,
    }
    (root / "dataset.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return root


def _check_dir(root: Path) -> None:
    meta_path = root / "dataset.json"
    if not meta_path.is_file():
        raise InputError(f"{root} is not a boe-sim dataset (no dataset.json)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{meta_path}: unreadable ({exc})") from exc
    if meta.get("format") != DATASET_FORMAT or meta.get("version") != DATASET_VERSION:
        raise InputError(
            f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r} "
            f"is not {DATASET_FORMAT!r} version {DATASET_VERSION}"
        )


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise InputError(f"{path} is missing")
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{line_no}: invalid JSON ({exc.msg})") from exc


def load_sim_dataset(directory: str | Path) -> list[dict[str, Any]]:
    """The questions of a boe-sim dataset, with absolute image paths (never the facts)."""
    root = Path(directory).resolve()
    _check_dir(root)
    out = []
    for line_no, rec in _read_jsonl(root / "questions.jsonl"):
        missing = {"id", "images", "question", "answer", "answer_type", "asks"} - rec.keys()
        if missing:
            raise InputError(f"{root / 'questions.jsonl'}:{line_no}: missing {sorted(missing)}")
        images = [str((root / p).resolve()) for p in rec["images"]]
        for p in images:
            if not Path(p).resolve().is_relative_to(root) or not Path(p).is_file():
                raise InputError(f"{root / 'questions.jsonl'}:{line_no}: image {p} is missing or outside {root}")
        dcm = rec.get("dicom")
        out.append(
            {**rec, "images": images, "dicom": str((root / dcm).resolve()) if dcm else None, "dataset": DATASET_FORMAT}
        )
    return out


def load_facts(directory: str | Path) -> dict[str, dict[str, Any]]:
    """The sidecar truth per image id (for benchmarks and tests; an agent never calls this)."""
    root = Path(directory).resolve()
    _check_dir(root)
    return {rec["image_id"]: rec for _, rec in _read_jsonl(root / "facts.jsonl")}
