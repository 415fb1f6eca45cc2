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
the same few words. `monotone_tables` lives in `boe.core.monotone`, below the
`bayes` model that fits with it (this module reads that model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from boe.core.monotone import VERDICTS, Z_ONE_SIDED, monotone_tables

if TYPE_CHECKING:
    from boe.core.calibration import Calibration, GroupCalibration

__all__ = ["UNDER_SAMPLED", "Z_ONE_SIDED", "calibration_warnings", "channel_status", "kappa_status", "monotone_tables"]

#: A channel fitted on fewer checks than this rests mostly on its kind's table (or its prior).
UNDER_SAMPLED = 30.0


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
    flat = [math.isclose(t1[o], t0[o], rel_tol=1e-9) for o, _ in VERDICTS]
    wrong = [sign * (t1[o] - t0[o]) < 0 and not f for (o, sign), f in zip(VERDICTS, flat, strict=True)]
    if any(wrong):
        words.append("reversed")
    raw_wrong = [sign * (c1[o] / c1.sum() - c0[o] / c0.sum()) < 0 for o, sign in VERDICTS]
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
    from boe.core.bayes import BAYES_KEY

    keep = None if datasets is None else {f"{d}/" for d in datasets}

    def mine(key: str) -> bool:
        return keep is None or any(key.startswith(p) for p in keep)

    out = _kappa_warnings({k: g for k, g in cal.groups.items() if mine(k)}, limit, reader)
    data = cal.extra.get(BAYES_KEY)
    if data is not None and reader != "kappa":
        out += _bayes_warnings(data, mine, limit)
    return out


def _kappa_warnings(groups: Mapping[str, GroupCalibration], limit: int, reader: str | None) -> list[str]:
    """The kappa groups' reversed (with confidence or without) and under-sampled channels."""
    out: list[str] = []
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
    return out


def _bayes_warnings(data: object, mine: Callable[[str], bool], limit: int) -> list[str]:
    """The `bayes` model's channels reversed with confidence (none when ``data`` is not a model)."""
    from boe.core.bayes import BayesModel

    try:
        model = data if isinstance(data, BayesModel) else BayesModel.model_validate(data)
    except ValueError:
        return []
    tables = {k: t for k, t in {**model.factor_channels, **model.whole_channels}.items() if mine(k)}
    status = {k: channel_status(t.given_true, t.given_false, t.counts)[0] for k, t in tables.items()}
    brev = [k for k, w in status.items() if "reversed" in w]
    return [f"bayes channels reversed with confidence: {_names(brev, limit)}"] if brev else []


def _names(keys: list[str], limit: int) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
