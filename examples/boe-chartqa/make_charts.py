"""Draw the example's bar charts with OpenCV and write data/questions.jsonl (run once; the output is committed)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).parent / "data"

CHARTS = {
    "rainfall": ("Rainfall (mm)", {"Jan": 78, "Feb": 52, "Mar": 64, "Apr": 41}),
    "visitors": ("Visitors (thousands)", {"2019": 12, "2020": 4, "2021": 7, "2022": 15}),
    "sales": ("Units sold", {"North": 30, "South": 45, "East": 25, "West": 50}),
}
QUESTIONS = [
    ("rainfall-mar", "rainfall", "How much rain fell in Mar, in mm?", "64"),
    ("rainfall-max", "rainfall", "Which month had the most rain?", "Jan"),
    ("visitors-2020", "visitors", "How many thousand visitors came in 2020?", "4"),
    ("visitors-max", "visitors", "Which year had the most visitors?", "2022"),
    ("sales-west", "sales", "How many units were sold in the West?", "50"),
    ("sales-min", "sales", "Which region sold the fewest units?", "East"),
]


def draw(title: str, table: dict[str, int], size: int = 256) -> np.ndarray:
    """A plain bar chart: white background, black axes, grey bars, value labels above the bars."""
    img = np.full((size, size, 3), 255, np.uint8)
    top, bottom, left, right = 36, size - 32, 28, size - 12
    cv2.putText(img, title, (left, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.42, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.line(img, (left, bottom), (right, bottom), (0, 0, 0), 1)
    cv2.line(img, (left, top), (left, bottom), (0, 0, 0), 1)
    peak = max(table.values())
    width = (right - left) // len(table)
    for i, (label, value) in enumerate(table.items()):
        x0 = left + i * width + 6
        x1 = x0 + width - 12
        y = bottom - int((bottom - top - 14) * value / peak)
        cv2.rectangle(img, (x0, y), (x1, bottom - 1), (150, 150, 150), -1)
        cv2.putText(img, str(value), (x0, y - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.putText(img, label, (x0, bottom + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def main() -> None:
    (HERE / "charts").mkdir(parents=True, exist_ok=True)
    for name, (title, table) in CHARTS.items():
        cv2.imwrite(str(HERE / "charts" / f"{name}.png"), draw(title, table))
    with (HERE / "questions.jsonl").open("w", encoding="utf-8") as f:
        for qid, chart, question, answer in QUESTIONS:
            row = {"id": qid, "image": f"charts/{chart}.png", "question": question, "answer": answer}
            f.write(json.dumps({**row, "table": CHARTS[chart][1]}) + "\n")
    (HERE / "chartqa.json").write_text(
        json.dumps({"format": "chartqa", "version": 1, "name": "chartqa-example"}) + "\n"
    )


if __name__ == "__main__":
    main()
