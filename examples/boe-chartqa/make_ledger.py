"""Record data/charts-ledger.jsonl: the six chart questions through the real agent, its menu holding only this
plugin's chart lookups (run once with the plugin installed; the output is committed).

The endpoint is a scripted STAND-IN, not a model: it reads no pixels, it knows each chart's data table (from
data/questions.jsonl) and errs on purpose at rates fixed before the first run and never changed:

* the generator reads the bar next to the asked one (a neighbour's value, or the runner-up for "most"/"fewest")
  in 45% of its samples: a poor reader, the case where a check pays;
* the chart lookup (this plugin's check, its own prompt) reads the asked bar and confirms or rejects the claimed
  value, wrongly in 10% of lookups.

Everything else is boe: `boe batch --ledger full` samples K = 8 candidates, extracts the claims, builds the menu
with the plugin's rule, runs every chart lookup through the plugin's tool and stores the records, which declare the
plugin's kind (format boe-ledger/1.2). `boe replay` and `boe show` then read the ledger with no endpoint at all.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from boe.sim.model import ModelInput, SimModel
from boe.sim.protocol import parse_markers, task_of

HERE = Path(__file__).parent / "data"
OUT = HERE / "charts-ledger.jsonl"
MISREAD = 0.45  # generator: share of samples that read the neighbouring bar
LOOKUP_ERROR = 0.10  # chart lookup: share of verdicts that are wrong
K = 8


def _truth() -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in (HERE / "questions.jsonl").read_text().splitlines() if line.strip()]
    return {r["question"]: r for r in rows}


def _misread(row: dict[str, Any], rng: np.random.Generator) -> str:
    """What a reader looking at the wrong bar answers."""
    labels, values = list(row["table"]), list(row["table"].values())
    if re.search(r"\b(most|fewest|least)\b", row["question"]):
        order = sorted(range(len(values)), key=lambda i: values[i], reverse="most" in row["question"])
        return labels[order[1]]  # the runner-up
    asked = next(i for i, label in enumerate(labels) if re.search(rf"\b{re.escape(label)}\b", row["question"]))
    near = [i for i in (asked - 1, asked + 1) if 0 <= i < len(labels)]
    return str(values[int(rng.choice(near))])


class ChartStandIn(SimModel):
    """Answers boe's protocol from the data tables (no pixels), with the error rates above."""

    def complete(self, inp: ModelInput, n: int) -> list[str]:
        from boe.agent.claims import analyse_question

        markers = parse_markers(inp.user)
        task = task_of(inp.response_format, inp.system, inp.user)
        row = _truth()[markers.question or ""]
        key = hashlib.sha256(f"{inp.seed}|{inp.user}".encode()).digest()
        out = []
        for k in range(n):
            rng = np.random.default_rng([int.from_bytes(key[:8], "little"), k])
            if task == "boe_generation":
                answer = _misread(row, rng) if rng.random() < MISREAD else row["answer"]
                slots = dict.fromkeys(("modality", "region", "plane", "finding", "attribute"))
                slots[analyse_question(row["question"])["slot"]] = answer
                out.append(json.dumps({"answer": answer, **slots}))
            elif task == "boe_factor_verdict" and "against a chart" in inp.system + inp.user:
                right = str(markers.claim_value).strip().lower() == str(row["answer"]).lower()
                if rng.random() < LOOKUP_ERROR:
                    right = not right
                verdict = "confirm" if right else "reject"
                out.append(json.dumps({"verdict": verdict, "rationale": "read off the chart's data table"}))
            else:  # the menu holds only chart lookups: nothing else should be asked
                raise ValueError(f"the stand-in answers generations and chart lookups only, not {task!r}")
        return out


def main() -> None:
    import boe
    from boe.db import Store
    from boe.sim import serve_in_thread

    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(model=ChartStandIn(name="chart-stand-in")) as sim:
        config = boe.load_config(
            base_url=sim.base_url,
            model="chart-stand-in",
            k=K,
            ledger="full",
            kinds=["chart_value"],
            calibration="neutral",
            dataset="chartqa",
        )
        db = Path(tmp) / "runs.db"
        summary = boe.run_batch(HERE, db=str(db), run="charts", agent=config)
        if summary.failed:
            sys.exit(f"{summary.failed} question(s) failed")
        order = list(_truth())
        with Store(db) as store:  # in the dataset's order; image paths relative to the ledger's folder
            lines = sorted(
                store.iter_ledger_lines("charts"), key=lambda ln: order.index(json.loads(ln)["task"]["question"])
            )
        here = json.dumps(f"{HERE.resolve()}/")[1:-1]
        OUT.write_text("".join(line.rstrip("\n").replace(here, "") + "\n" for line in lines), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
