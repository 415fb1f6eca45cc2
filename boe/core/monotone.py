"""Channel tables that reverse a verdict only with confidence (see `boe.core.channels` for what they are for).

Below the `bayes` model, which fits its tables with `monotone_tables`, and below `boe.core.channels`, which
says in words how sure a calibration (that model's included) is of each channel.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["UNSEEN", "VERDICTS", "Z_ONE_SIDED", "monotone_tables"]

F64 = npt.NDArray[np.float64]
B_ = npt.NDArray[np.bool_]

#: One-sided 95% normal quantile: a reversal is kept only when its upper bound stays below no information.
Z_ONE_SIDED = 1.6448536269514722
#: A verdict with at most this many observations in all (Jeffreys' 0.5 per cell included) is pooled.
UNSEEN = 1.0
#: The verdicts: confirm should favour a true latent (sign +1), reject a false one (sign -1).
VERDICTS = ((0, 1.0), (1, -1.0))
_SIGNS = np.array([sign for _, sign in VERDICTS])


def monotone_tables(n1: F64, n0: F64) -> tuple[F64, F64, B_]:
    """P(o | latent true) and P(o | false) from counts ``n1``, ``n0`` (..., 3: confirm, reject, unresolved).

    A verdict whose likelihood ratio points the wrong way without one-sided 95% support, or that was never
    seen (`UNSEEN`), is pooled across the latent. Returns the two tables and which verdicts were pooled
    (..., 2: confirm, reject).
    """
    tot1, tot0 = n1.sum(axis=-1), n0.sum(axis=-1)
    # both verdicts at once (`VERDICTS`: columns 0 and 1, `_SIGNS`), each cell computed as verdict by verdict;
    # a verdict not seen once (pseudo-counts included) has no sample: it carries no information either way
    pooled = (n1[..., :2] + n0[..., :2]) <= UNSEEN
    share = (n1 + n0) / (tot1 + tot0)[..., None]
    # nothing pooled: each latent's own shares (`_pooled`'s 1.0 * n / total, the same numbers)
    t1, t0 = _pooled(n1, n0, pooled, share) if pooled.any() else (n1 / tot1[..., None], n0 / tot0[..., None])
    var = np.maximum(1 / n1[..., :2] - 1 / tot1[..., None], 0.0) + np.maximum(
        1 / n0[..., :2] - 1 / tot0[..., None], 0.0
    )
    bound = Z_ONE_SIDED * np.sqrt(var)
    for _ in range(2):  # pooling one verdict moves the other's ratio: look again once
        with np.errstate(divide="ignore"):
            llr = _SIGNS * (np.log(t1[..., :2]) - np.log(t0[..., :2]))
        more = pooled | ((llr < 0) & (llr + bound >= 0))
        if not (more ^ pooled).any():
            break
        pooled = more
        t1, t0 = _pooled(n1, n0, pooled, share)
    return t1, t0, pooled


def _pooled(n1: F64, n0: F64, pooled: B_, share: F64) -> tuple[F64, F64]:
    """The maximum-likelihood tables with the ``pooled`` verdicts equal under a true and a false latent (``share``:
    each outcome's share of both latents' counts)."""
    mask = np.zeros(share.shape, dtype=bool)  # the unresolved outcome (column 2) is never pooled
    mask[..., :2] = pooled
    left = 1.0 - np.where(mask, share, 0.0).sum(axis=-1, keepdims=True)
    rest = np.where(mask, 0.0, np.array([n1, n0]))  # both latents at once
    tot = rest.sum(axis=-1, keepdims=True)
    out = np.where(mask, share, left * rest / np.where(tot > 0, tot, 1.0))
    return out[0], out[1]
