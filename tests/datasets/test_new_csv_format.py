"""A new CSV dataset format is detected as itself, not also claimed by PathVQA's detector."""

from __future__ import annotations

from pathlib import Path

from boe.datasets import detect_format
from boe.datasets._registry import FORMATS, register_format


def test_a_csv_with_more_columns_than_pathvqa_is_not_pathvqa(tmp_path: Path) -> None:
    def sniff(p: Path) -> bool:
        return p.suffix == ".csv" and p.read_text(encoding="utf-8").startswith("image,question,answer,modality")

    register_format("test-modality-csv", sniff=sniff)(lambda path, ctx: iter(()))
    try:
        ours = tmp_path / "ours.csv"
        ours.write_text("image,question,answer,modality\na.png,What is seen?,mass,ct\n", encoding="utf-8")
        assert detect_format(ours) == "test-modality-csv"  # before: "matches several dataset formats"
        theirs = tmp_path / "val.csv"
        theirs.write_text(",image,question,answer\n0,val_0001,What is seen?,fibrin\n", encoding="utf-8")
        assert detect_format(theirs) == "pathvqa"  # PathVQA's own columns (and a pandas index) are still its
    finally:
        FORMATS.pop("test-modality-csv")
