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


def narrate(
    q: Question,
    steps: Sequence[tuple[int, int, float]],
    cheap_kappa: float,
    *,
    posteriors: Sequence[Sequence[float]] | None = None,
    settled: int | None = None,
) -> Narration:
    """Words for ``steps`` = (action index, outcome +1/-1/0, kappa) bought in this order on question ``q``.

    ``posteriors`` (one score vector per candidate before the first step and after each one) narrate a
    policy that scores by a posterior (`bayes`) instead of the spec's kappa-weighted logits; ``settled``
    (the number of proposals skipped because no outcome could change the answer, or -1 for a policy that
    never proposes such a check) says that the checks left could not change the answer.
    """
    if posteriors is not None:
        return _narrate_posterior(q, steps, posteriors, settled)
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
        text = _step_text(q, a, o, kappa, w, delta)
        logits = logits + delta
        after = _answer(q, _select(q, logits))
        if after != before:
            text += f" The choice changes: {before} → {after}."
            changed_at.append((n, before, after))
        if not could:
            text += " [could not change the choice, whatever the outcome]"
        lines.append(text)
    final = _answer(q, _select(q, logits))
    closing = _closing(q, len(steps), sum(inert), raw_answer, final, changed_at, settled)
    return Narration(lines, inert, closing)


def _step_text(q: Question, a: int, o: int, kappa: float, w: float, delta: npt.NDArray[np.float64]) -> str:
    """What one check's outcome ``o`` did to the scores (``delta``: its weighted move, ``w``: its weight)."""
    verb = {1: "confirmed", -1: "rejected", 0: "left unresolved"}[o]
    head = f"The check {verb} {_target(q, a)}"
    if o == 0:
        return f"{head}: an unresolved outcome moves no score."
    if abs(w) < 1e-12:
        return f"{head}, but its channel has κ {kappa:.3f} = 0.5 (no better than a coin): nothing moves."
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
    return text


def _closing(
    q: Question,
    n_steps: int,
    n_inert: int,
    raw_answer: str,
    final: str,
    changed_at: list[tuple[int, str, str]],
    settled: int | None,
) -> str:
    """The closing words: what the evidence did to the raw majority (and that no check left could change it)."""
    tail = f" ({n_inert} of {n_steps} checks could not change the choice)" if n_steps and n_inert else ""
    if not n_steps and settled:
        closing = _settled(q, final)
    elif not n_steps:
        closing = f"No evidence was bought: the choice is the raw majority, {raw_answer}."
    elif final == raw_answer:
        flips = f", though it changed {len(changed_at)} time(s) on the way" if changed_at else ""
        closing = f"The evidence kept the raw majority answer {raw_answer}{flips}{tail}."
    else:
        votes = Counter(_answer(q, int(i)) for i in np.flatnonzero(q.valid))
        last = changed_at[-1][0] if changed_at else n_steps
        closing = (
            f"The evidence overturned the raw majority {raw_answer} ({votes.get(raw_answer, 0)} of {q.k} candidates) "
            f"in favour of {final} ({votes.get(final, 0)} of {q.k}); the last change came at check {last}{tail}."
        )
    if n_steps and settled:
        closing += _after(settled)
    return closing


def _settled(q: Question, answer: str) -> str:
    """The closing of a question on which no check could change the answer."""
    distinct = {a for i, a in enumerate(q.answers) if q.valid[i]}
    if len(distinct) == 1:
        return f"No check could change this answer: every valid candidate says {answer}. Nothing was bought."
    return (
        f"No check could change this answer ({answer}) under any outcome of the affordable checks: nothing was bought."
    )


def _after(settled: int) -> str:
    skipped = f" ({settled} proposed check(s) not bought)" if settled > 0 else ""
    return f" Then no affordable check could change the answer{skipped}."


def _narrate_posterior(
    q: Question, steps: Sequence[tuple[int, int, float]], post: Sequence[Sequence[float]], settled: int | None
) -> Narration:
    """Words for the steps of a posterior policy: how each outcome moved the answers' probabilities."""
    lines: list[str] = []
    first = np.asarray(post[0], dtype=np.float64)
    start = _answer(q, _select(q, first))
    changed = 0
    for n, (a, o, _) in enumerate(steps):
        before, after = (np.asarray(post[i], dtype=np.float64) for i in (n, n + 1))
        lead_b, lead_a = _answer(q, _select(q, before)), _answer(q, _select(q, after))
        verb = {1: "confirmed", -1: "rejected", 0: "left unresolved"}[o]
        shown = [lead_b] + ([lead_a] if lead_a != lead_b else [])
        moves = ", ".join(f"{x} {_prob(q, before, x)} → {_prob(q, after, x)}" for x in shown)
        text = f"The check {verb} {_target(q, a)}: P({moves})."
        if lead_a != lead_b:
            text += f" The choice changes: {lead_b} → {lead_a}."
            changed += 1
        lines.append(text)
    final = _answer(q, _select(q, np.asarray(post[-1], dtype=np.float64)))
    votes = Counter(_answer(q, int(i)) for i in np.flatnonzero(q.valid))
    raw = _answer(q, _select(q, q.counts.astype(np.float64)))
    prior = (
        f"Before any check the prior (the answer counts and how the candidates' claims agree) preferred "
        f"{start} ({votes.get(start, 0)} of {q.k} candidates) to the raw majority {raw} ({votes.get(raw, 0)} of "
        f"{q.k}). "
        if start != raw
        else ""
    )
    if not steps:
        closing = _settled(q, final) if settled else f"No evidence was bought: the choice is {final}."
        return Narration(lines, [], prior + closing)
    if final == start:
        flips = f", though it changed {changed} time(s) on the way" if changed else ""
        closing = f"The evidence kept {final} ({votes.get(final, 0)} of {q.k} candidates){flips}."
    else:
        closing = (
            f"The evidence moved the choice from {start} ({votes.get(start, 0)} of {q.k} candidates) to {final} "
            f"({votes.get(final, 0)} of {q.k})."
        )
    if settled:
        closing += _after(settled)
    return Narration(lines, [False] * len(lines), prior + closing)


def _prob(q: Question, scores: npt.NDArray[np.float64], answer: str) -> str:
    """The score of ``answer`` (every candidate giving it holds the same posterior)."""
    hit = [float(scores[i]) for i in range(min(len(scores), q.k)) if _answer(q, i) == answer]
    return f"{max(hit):.2f}" if hit else "-"
