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


def verbatim_copies(candidates: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether the completions are one text K times (what greedy decoding gives); None if they are not recorded."""
    texts = [c.get("raw_text") for c in candidates]
    if len(texts) < 2 or not all(isinstance(t, str) for t in texts):
        return None
    return len(set(texts)) == 1


@dataclass
class PoolDiversity:
    """Counts of pools (questions with K >= 2) and of collapsed ones (fewer than two distinct answers)."""

    share: float = COLLAPSE_SHARE
    pools: int = 0
    collapsed: int = 0
    verbatim: int = 0  # collapsed pools whose K completions are one text (greedy decoding)
    worded: int = 0  # collapsed pools whose completions differ: K wordings of one answer (sampling works)

    def add(self, candidates: Sequence[Mapping[str, Any]]) -> None:
        """Count one question's candidates."""
        if len(candidates) < 2:
            return
        self.pools += 1
        if distinct_answers(candidates) < 2:
            self.collapsed += 1
            same = verbatim_copies(candidates)
            self.verbatim += same is True
            self.worded += same is False

    def warning(self, sampling: Mapping[str, Any] | None = None) -> str | None:
        """A note with the likely cause when more than `share` of the pools collapsed; else None."""
        if not self.pools or self.collapsed / self.pools <= self.share:
            return None
        sent = ", ".join(f"{k}={v}" for k, v in (sampling or {}).items()) or "unknown"
        head = (
            f"{self.collapsed} of {self.pools} questions ({100 * self.collapsed / self.pools:.0f}%) came back with "
            "fewer than two distinct answers among their K candidates: selection has little to choose from. "
        )
        if self.worded > self.verbatim:  # K different completions that agree: sampling works
            return head + (
                f"The samples are worded differently ({self.worded} of these pools), so sampling "
                f"is not collapsed: the model agrees with itself on these questions. Sampling sent: {sent}. A higher "
                "--temperature or a larger --k gives selection more to choose from."
            )
        return head + (
            f"In {self.verbatim} of them the K completions are one text, word for word. Likely "
            "cause: the server fills sampling fields a request leaves out from the model's generation_config.json "
            "(vLLM's default --generation-config auto; Qwen2.5-VL ships top_k 1, i.e. greedy), or a temperature near "
            f"0. Sampling sent: {sent}. Send explicit sampling (--top-k -1 --top-p 1, the defaults; a server of "
            "kind openai gets no top_k) or start vLLM with --generation-config vllm."
        )
