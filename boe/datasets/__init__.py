"""Benchmark datasets read from their published layouts, and answer evaluation.

    >>> from boe.datasets import load_dataset, grade
    >>> ds = load_dataset("../shared/data/vqa-rad")          # format detected: "vqa-rad"
    >>> item = ds[0]
    >>> item.for_generator()                                # what a generator may see
    >>> grade("yes", item).score                            # 1.0 or 0.0, with .method

Formats (``format=``): ``vqa-rad``, ``vqa-med``, ``slake``, ``pathvqa``,
``pmc-vqa`` (option-hidden by default), ``medxpertqa``, ``boe-sim``, and
``hf`` (Hugging Face parquet / arrow / ``save_to_disk`` / imagefolder
layouts, its columns named with ``columns={"question": "query", ...}``);
more can be added with `register_format`. A malformed record is skipped and
reported in ``Dataset.issues`` (``strict=True`` raises
`DatasetRecordError`); images must lie inside the dataset root.

Importing this package is light (no OpenCV, no model client).
"""

from boe.datasets._context import Drop, LoadContext, RecordProblem
from boe.datasets._item import Dataset, DatasetItem, DatasetRecordError, ImageFile, LoadIssue
from boe.datasets._pmcvqa import is_placeholder_answer
from boe.datasets._registry import available_formats, detect_format, load_dataset, register_format
from boe.datasets.evaluate import (
    AnswerEvaluator,
    Grade,
    MatchConfig,
    SemanticGrader,
    grade,
    normalise,
    option_letter,
    score,
)

__all__ = [
    "AnswerEvaluator",
    "Dataset",
    "DatasetItem",
    "DatasetRecordError",
    "Drop",
    "Grade",
    "ImageFile",
    "LoadContext",
    "LoadIssue",
    "MatchConfig",
    "RecordProblem",
    "SemanticGrader",
    "available_formats",
    "detect_format",
    "grade",
    "is_placeholder_answer",
    "load_dataset",
    "normalise",
    "option_letter",
    "register_format",
    "score",
]
