"""The judge on one distinct short answer, through a representative response that gives it (cost 8)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

from boe.kinds import (
    SHORT_CHARS,
    SHORT_WORDS,
    KindSpec,
    MenuContext,
    Prior,
    TokenEstimate,
    answer_key,
    judge_args,
    register_kind,
)

NAME = "answer_response"


def menu(kind: str, ctx: MenuContext) -> list[dict[str, Any]]:
    """One check per distinct short valid answer, in order of first appearance (see `boe.agent.claims`)."""

    first: dict[str, int] = {}
    share: Counter[str] = Counter()
    for cand in ctx.cands:
        key = answer_key(cand)
        if key is None or not key:
            continue
        share[key] += 1
        first.setdefault(key, int(cand["index"]))
    out = []
    for key, rep in first.items():
        if len(key) > SHORT_CHARS or len(key.split()) > SHORT_WORDS:
            continue
        act = ctx.action(kind, f"a:{rep}", claim=None, candidate=rep, group="answer")
        out.append({**act, "answer": key, "share": share[key]})
    return out


def calls(k: int, _targets: Mapping[str, str]) -> float | None:
    """Distinct answers a question gets: 1 + 0.3 log2 K (2.23 measured at K = 16 on 400 simulator questions)."""
    return min(float(k), 1.0 + 0.3 * math.log2(k))


SPEC = register_kind(
    KindSpec(
        name=NAME,
        target="answer",
        cost=8.0,
        label="judge, answer",
        order=50,
        ledger="boe-ledger/1.1",
        priors={"answer": Prior(0.64, (0.50, 0.45, 0.05))},  # a response-level judgement, as whole_response's
        menu=menu,
        tool="boe.tools.judges:AnswerResponseJudge",
        tool_args=judge_args,
        prompt="answer_judge",
        estimate=TokenEstimate("answer_judge", 214, "figures", calls),
        report_label="answer check",
        description="the judge on one distinct answer, shown a representative response",
    )
)
