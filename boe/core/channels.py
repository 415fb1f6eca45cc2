"""How sure a calibration is of each channel: tables that reverse a verdict only with confidence, and words.

A channel reads a binary latent (a claim's truth, a judge's verdict on an answer)
and says confirm, reject or unresolved. Its table P(o | latent true), P(o | false)
is estimated from (expected) counts, so it carries a sample size. A *reversed*
verdict -- a confirm more likely when the latent is false, or a reject more likely
when it is true -- turns a check's word against itself; `monotone_tables` keeps such
a reversal only when the counts support it at one-sided 95% (the log likelihood
ratio of that outcome, delta-method standard error) and otherwise pools that
outcome across the latent: the maximum-likelihood table under "this verdict
carries no information", the other outcomes keeping their proportions.

`channel_status` and `kappa_status` say in words which channels of a fitted
`bayes` model or of a plug-in kappa calibration are weak, reversed or
under-sampled; `calibration_warnings` gives every output that names a calibration
the same few words.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from boe.core.calibration import Calibration, GroupCalibration

__all__ = ["UNDER_SAMPLED", "Z_ONE_SIDED", "calibration_warnings", "channel_status", "kappa_status", "monotone_tables"]

F64 = npt.NDArray[np.float64]
B_ = npt.NDArray[np.bool_]

#: One-sided 95% normal quantile: a reversal is kept only when its upper bound stays below no information.
Z_ONE_SIDED = 1.6448536269514722
#: A channel fitted on fewer checks than this rests mostly on its kind's table (or its prior).
UNDER_SAMPLED = 30.0
#: A verdict with at most this many observations in all (Jeffreys' 0.5 per cell included) is pooled.
UNSEEN = 1.0
#: The verdicts: confirm should favour a true latent (sign +1), reject a false one (sign -1).
_VERDICTS = ((0, 1.0), (1, -1.0))


def monotone_tables(n1: F64, n0: F64) -> tuple[F64, F64, B_]:
    """P(o | latent true) and P(o | false) from counts ``n1``, ``n0`` (..., 3: confirm, reject, unresolved).

    A verdict whose likelihood ratio points the wrong way without one-sided 95% support, or that was never
    seen (`UNSEEN`), is pooled across the latent. Returns the two tables and which verdicts were pooled
    (..., 2: confirm, reject).
    """
    tot1, tot0 = n1.sum(axis=-1), n0.sum(axis=-1)
    # a verdict not seen once (pseudo-counts included) has no sample: it carries no information either way
    pooled = np.stack([n1[..., o] + n0[..., o] <= UNSEEN for o, _ in _VERDICTS], axis=-1)
    t1, t0 = _pooled(n1, n0, pooled)
    for _ in range(2):  # pooling one verdict moves the other's ratio: look again once
        before = pooled.copy()
        for o, sign in _VERDICTS:
            with np.errstate(divide="ignore"):
                llr = sign * (np.log(t1[..., o]) - np.log(t0[..., o]))
            var = np.maximum(1 / n1[..., o] - 1 / tot1, 0.0) + np.maximum(1 / n0[..., o] - 1 / tot0, 0.0)
            pooled[..., o] |= (llr < 0) & (llr + Z_ONE_SIDED * np.sqrt(var) >= 0)
        if np.array_equal(before, pooled):
            break
        t1, t0 = _pooled(n1, n0, pooled)
    return t1, t0, pooled


def _pooled(n1: F64, n0: F64, pooled: B_) -> tuple[F64, F64]:
    """The maximum-likelihood tables with the ``pooled`` verdicts equal under a true and a false latent."""
    mask = np.concatenate([pooled, np.zeros((*pooled.shape[:-1], 1), dtype=bool)], axis=-1)
    share = (n1 + n0) / (n1.sum(axis=-1) + n0.sum(axis=-1))[..., None]
    left = 1.0 - np.where(mask, share, 0.0).sum(axis=-1, keepdims=True)
    out = []
    for n in (n1, n0):
        rest = np.where(mask, 0.0, n)
        tot = rest.sum(axis=-1, keepdims=True)
        out.append(np.where(mask, share, left * rest / np.where(tot > 0, tot, 1.0)))
    return out[0], out[1]


def channel_status(
    given_true: Iterable[float], given_false: Iterable[float], counts: tuple[Iterable[float], Iterable[float]] | None
) -> tuple[list[str], float, float]:
    """Words for a fitted channel table, and the log diagnostic odds ratio of its verdicts with its standard error.

    ``counts`` are the checks the table was fitted on (expected outcome counts under a true and a false
    latent; None: not recorded). Words: ``under-sampled``, ``reversed`` (a verdict confidently points the wrong
    way and is kept so), ``no information`` (a verdict pointed the wrong way without support: pooled), ``weak``
    (the verdicts' odds ratio is within its 95% interval of 1).
    """
    t1, t0 = np.asarray(list(given_true), dtype=np.float64), np.asarray(list(given_false), dtype=np.float64)
    words: list[str] = []
    if counts is None:
        return words, float("nan"), float("nan")
    c1 = np.asarray(list(counts[0]), dtype=np.float64) + 0.5
    c0 = np.asarray(list(counts[1]), dtype=np.float64) + 0.5
    n = float(c1.sum() + c0.sum() - 3.0)
    log_dor = float(np.log(c1[0] * c0[1] / (c1[1] * c0[0])))
    se = float(np.sqrt(1 / c1[0] + 1 / c1[1] + 1 / c0[0] + 1 / c0[1]))
    if n < UNDER_SAMPLED:
        words.append("under-sampled")
    flat = [math.isclose(t1[o], t0[o], rel_tol=1e-9) for o, _ in _VERDICTS]
    wrong = [sign * (t1[o] - t0[o]) < 0 and not f for (o, sign), f in zip(_VERDICTS, flat, strict=True)]
    if any(wrong):
        words.append("reversed")
    raw_wrong = [sign * (c1[o] / c1.sum() - c0[o] / c0.sum()) < 0 for o, sign in _VERDICTS]
    if any(f and w for f, w in zip(flat, raw_wrong, strict=True)):
        words.append("no information")
    if not any(wrong) and abs(log_dor) < 1.959964 * se:
        words.append("weak")
    return words, log_dor, se


def kappa_status(g: GroupCalibration) -> list[str]:
    """Words for a plug-in group: ``under-sampled``, ``reversed`` (kappa < 0.5 with one-sided 95% support),
    ``reversal not supported`` (kappa < 0.5 without it), ``weak`` (kappa within its 95% interval of 0.5).

    The standard error treats the checks (not the candidate pairs, which share a check's verdict) as the
    sample: se = 0.25 sqrt(1 / n+ + 1 / n-), n+- the checks behind the support / contradict pairs.
    """
    pairs = g.pairs or {}
    acts = float(pairs.get("actions", 0.0))
    pos, neg = float(pairs.get("support", 0.0)), float(pairs.get("contradict", 0.0))
    words: list[str] = []
    if not pairs:
        return words
    if acts < UNDER_SAMPLED:
        words.append("under-sampled")
    if pos == 0 or neg == 0:
        return [*words, "no information"]
    share = pos / (pos + neg)
    se = 0.25 * math.sqrt(1 / max(acts * share, 1e-9) + 1 / max(acts * (1 - share), 1e-9))
    if g.kappa < 0.5:
        words.append("reversed" if g.kappa + Z_ONE_SIDED * se < 0.5 else "reversal not supported")
    elif g.kappa - 1.959964 * se < 0.5:
        words.append("weak")
    return words


def calibration_warnings(
    cal: Calibration, limit: int = 4, datasets: Iterable[str] | None = None, reader: str | None = None
) -> list[str]:
    """What to distrust in a calibration: its reversed and under-sampled channels, in a few lines (only the
    groups of ``datasets`` when given; with ``reader`` "kappa" or "bayes", only the reversed channels that
    reader weighs by)."""
    from boe.core.bayes import BAYES_KEY, BayesModel

    keep = None if datasets is None else {f"{d}/" for d in datasets}

    def mine(key: str) -> bool:
        return keep is None or any(key.startswith(p) for p in keep)

    out: list[str] = []
    groups = {k: g for k, g in cal.groups.items() if mine(k)}
    rev = [k for k, g in groups.items() if "reversed" in kappa_status(g)]
    unsup = [k for k, g in groups.items() if "reversal not supported" in kappa_status(g)]
    few = [k for k, g in groups.items() if "under-sampled" in kappa_status(g)]
    if rev and reader != "bayes":
        out.append(f"kappa < 0.5 with confidence (boe reverses their verdicts): {_names(rev, limit)}")
    if unsup and reader != "bayes":
        out.append(
            f"kappa < 0.5 without confidence (boe, the paper's controller, still reverses them; bayes does not): "
            f"{_names(unsup, limit)}"
        )
    if few and reader is None:
        out.append(f"under-sampled (< {UNDER_SAMPLED:.0f} checks): {_names(few, limit)}")
    data = cal.extra.get(BAYES_KEY)
    if data is not None and reader != "kappa":
        try:
            model = data if isinstance(data, BayesModel) else BayesModel.model_validate(data)
        except ValueError:
            return out
        tables = {k: t for k, t in {**model.factor_channels, **model.whole_channels}.items() if mine(k)}
        status = {k: channel_status(t.given_true, t.given_false, t.counts)[0] for k, t in tables.items()}
        brev = [k for k, w in status.items() if "reversed" in w]
        if brev:
            out.append(f"bayes channels reversed with confidence: {_names(brev, limit)}")
    return out


def _names(keys: list[str], limit: int) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
