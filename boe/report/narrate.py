"""The evidence log in words: what each purchase did to the scores and why, and how the choice ended up.

Scores follow the spec (section 5): a bought action moves candidate i's logit by
``alpha_ie(outcome) * wt(kappa)``, with ``wt(kappa) = log(kappa / (1 - kappa))``.
A kappa below 0.5 makes ``wt`` negative: the channel is wrong more often than
right, so its confirmation counts against the claim. A check *could not change
the choice* when neither a confirm nor a reject would have moved the selected
answer from the one it had before the purchase (say, a claim every candidate
shares moves them all together).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from boe.core.graph import Question
from boe.core.scoring import cheap_logits, wt

__all__ = ["Narration", "narrate"]


@dataclass
class Narration:
    """One sentence per purchase (in order), which of them could not change the choice, and a closing line."""

    steps: list[str]
    inert: list[bool]
    closing: str


def _select(q: Question, logits: npt.NDArray[np.float64]) -> int:
    if not q.valid.any():
        return 0
    masked = np.where(q.valid, logits, -np.inf)
    return int(np.flatnonzero(masked >= masked.max() - 1e-12)[0])


def _answer(q: Question, i: int) -> str:
    a = q.answers[i] if 0 <= i < len(q.answers) else None
    return a if a is not None and q.valid[i] else "(invalid)"


def _who(q: Question, mask: npt.NDArray[np.bool_]) -> str:
    counts = Counter(_answer(q, int(i)) for i in np.flatnonzero(mask & q.valid))
    return " ".join(f"{a}×{n}" for a, n in counts.most_common()) or "none"


def _target(q: Question, a: int) -> str:
    c = int(q.action_claim[a])
    if c >= 0:
        return f"the claim {q.claim_ids[c]}"
    k = int(q.action_candidate[a])
    return f"candidate #{k}'s whole answer ({_answer(q, k)})"


def narrate(q: Question, steps: Sequence[tuple[int, int, float]], cheap_kappa: float) -> Narration:
    """Words for ``steps`` = (action index, outcome +1/-1/0, kappa) bought in this order on question ``q``."""
    logits = cheap_logits(q.counts.astype(np.float64), cheap_kappa)
    raw = _select(q, logits)
    raw_answer = _answer(q, raw)
    lines: list[str] = []
    inert: list[bool] = []
    changed_at: list[tuple[int, str, str]] = []
    for n, (a, o, kappa) in enumerate(steps, 1):
        w = wt(min(max(kappa, 1e-9), 1 - 1e-9))
        alpha = q.alpha[a].astype(np.float64)
        before = _answer(q, _select(q, logits))
        could = any(_answer(q, _select(q, logits + sign * alpha * w)) != before for sign in (1.0, -1.0))
        inert.append(not could)
        delta = o * alpha * w
        verb = {1: "confirmed", -1: "rejected", 0: "left unresolved"}[o]
        head = f"The check {verb} {_target(q, a)}"
        if o == 0:
            text = f"{head}: an unresolved outcome moves no score."
        elif abs(w) < 1e-12:
            text = f"{head}, but its channel has κ {kappa:.3f} = 0.5 (no better than a coin): nothing moves."
        else:
            up, down = delta > 0, delta < 0
            moved = f"{_who(q, up)} rise, {_who(q, down)} fall" if down.any() else f"{_who(q, up)} rise"
            if not up.any():
                moved = f"{_who(q, down)} fall"
            if w > 0:
                why = f"κ {kappa:.3f} > 0.5: the channel is right more often than wrong"
                text = f"{head} ({why}): {moved}."
            else:
                word = "confirmation" if o > 0 else "rejection"
                opposite = "lowers" if o > 0 else "raises"
                text = (
                    f"{head}, but a {word} from a channel that is wrong more often than right (κ {kappa:.3f} < 0.5) "
                    f"{opposite} the candidates that make the claim: {moved}."
                )
            if int(np.count_nonzero(delta[q.valid])) == int(q.valid.sum()) and np.ptp(delta[q.valid]) < 1e-12:
                text += " Every candidate moved together: the ranking cannot change."
        logits = logits + delta
        after = _answer(q, _select(q, logits))
        if after != before:
            text += f" The choice changes: {before} → {after}."
            changed_at.append((n, before, after))
        if not could:
            text += " [could not change the choice, whatever the outcome]"
        lines.append(text)
    final = _answer(q, _select(q, logits))
    n_inert = sum(inert)
    tail = f" ({n_inert} of {len(steps)} checks could not change the choice)" if steps and n_inert else ""
    if not steps:
        closing = f"No evidence was bought: the choice is the raw majority, {raw_answer}."
    elif final == raw_answer:
        flips = f", though it changed {len(changed_at)} time(s) on the way" if changed_at else ""
        closing = f"The evidence kept the raw majority answer {raw_answer}{flips}{tail}."
    else:
        votes = Counter(_answer(q, int(i)) for i in np.flatnonzero(q.valid))
        last = changed_at[-1][0] if changed_at else len(steps)
        closing = (
            f"The evidence overturned the raw majority {raw_answer} ({votes.get(raw_answer, 0)} of {q.k} candidates) "
            f"in favour of {final} ({votes.get(final, 0)} of {q.k}); the last change came at check {last}{tail}."
        )
    return Narration(lines, inert, closing)
