"""Noticing collapsed candidate pools: K samples that came back as (nearly) one answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COLLAPSE_SHARE", "PoolDiversity", "distinct_answers"]

#: Share of questions with fewer than two distinct answers above which a batch warns.
COLLAPSE_SHARE = 0.5


def distinct_answers(candidates: Sequence[Mapping[str, Any]]) -> int:
    """How many different answers the valid candidates of one question give."""
    return len({str(c.get("answer")).strip().lower() for c in candidates if c.get("valid")})


@dataclass
class PoolDiversity:
    """Counts of pools (questions with K >= 2) and of collapsed ones (fewer than two distinct answers)."""

    share: float = COLLAPSE_SHARE
    pools: int = 0
    collapsed: int = 0

    def add(self, candidates: Sequence[Mapping[str, Any]]) -> None:
        """Count one question's candidates."""
        if len(candidates) < 2:
            return
        self.pools += 1
        if distinct_answers(candidates) < 2:
            self.collapsed += 1

    def warning(self, sampling: Mapping[str, Any] | None = None) -> str | None:
        """A note with the likely cause when more than `share` of the pools collapsed; else None."""
        if not self.pools or self.collapsed / self.pools <= self.share:
            return None
        sent = ", ".join(f"{k}={v}" for k, v in (sampling or {}).items()) or "unknown"
        return (
            f"{self.collapsed} of {self.pools} questions ({100 * self.collapsed / self.pools:.0f}%) came back with "
            "fewer than two distinct answers among their K candidates: selection has little to choose from. Likely "
            "cause: the server fills sampling fields a request leaves out from the model's generation_config.json "
            "(vLLM's default --generation-config auto; Qwen2.5-VL ships top_k 1, i.e. greedy), or a temperature near "
            f"0. Sampling sent: {sent}. Send explicit sampling (--top-k -1 --top-p 1, the defaults; a server of "
            "kind openai gets no top_k) or start vLLM with --generation-config vllm."
        )
