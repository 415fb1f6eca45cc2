"""Cheap prior, discrimination weights and the logistic score map (spec sections 3 and 5)."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["TIE_TOL", "binary_entropy", "cheap_logits", "first_max", "sigmoid", "wt"]

#: Values within this distance of the maximum are ties (spec section 6).
TIE_TOL = 1e-12


def wt(kappa: float) -> float:
    """The score weight of a discrimination index: log(kappa / (1 - kappa))."""
    return math.log(kappa / (1.0 - kappa))


def sigmoid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """s = 1 / (1 + exp(-logit)), elementwise; -inf maps to 0."""
    with np.errstate(over="ignore"):
        den: npt.NDArray[np.float64] = 1.0 + np.exp(-x)
    return np.asarray(1.0 / den, dtype=np.float64)


def cheap_logits(counts: npt.NDArray[np.float64], cheap_kappa: float) -> npt.NDArray[np.float64]:
    """logit s_i(0) = wt(kappa_cheap) * (n_i - K/2)."""
    k = counts.shape[-1]
    out: npt.NDArray[np.float64] = wt(cheap_kappa) * (counts - k / 2)
    return out


def first_max(values: npt.NDArray[np.float64], mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.intp]:
    """Index of the first value within TIE_TOL of the row maximum (-1 where no entry is allowed).

    Works on the last axis; ``mask`` marks allowed entries.
    """
    if mask is not None:
        values = np.where(mask, values, -np.inf)
    top = values.max(axis=-1, keepdims=True)
    hit = values >= top - TIE_TOL
    if mask is not None:
        hit &= mask
    idx: npt.NDArray[np.intp] = np.argmax(hit, axis=-1)
    if mask is not None:
        idx = np.where(hit.any(axis=-1), idx, -1)
    return idx


def binary_entropy(s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """H_b(s) in bits, with H_b(0) = H_b(1) = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(s * np.log2(s) + (1.0 - s) * np.log2(1.0 - s))
    return np.where((s > 0.0) & (s < 1.0), h, 0.0)
