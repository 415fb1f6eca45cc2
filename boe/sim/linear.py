"""A small multinomial logistic regression (numpy) for the simulator's perception heads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SoftmaxModel", "expand", "fit_softmax"]


def expand(x: np.ndarray, kind: str) -> np.ndarray:
    """Feature expansion: `linear` keeps the rows, `quadratic` appends every pairwise product."""
    x = np.atleast_2d(np.asarray(x, np.float64))
    if kind == "linear":
        return x
    i, j = np.triu_indices(x.shape[1])
    return np.hstack([x, x[:, i] * x[:, j]])


@dataclass(frozen=True)
class SoftmaxModel:
    """Standardise features, then a linear map to one logit per class."""

    classes: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # (n_expanded_features, n_classes)
    bias: np.ndarray  # (n_classes,)
    expansion: str = "linear"

    def logits(self, x: np.ndarray) -> np.ndarray:
        """Log-probabilities (rows sum to one after exp) for feature rows `x`."""
        z = ((expand(x, self.expansion) - self.mean) / self.scale) @ self.weights + self.bias
        z = z - z.max(axis=1, keepdims=True)
        return np.asarray(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready parameters."""
        return {
            "classes": list(self.classes),
            "mean": self.mean.round(6).tolist(),
            "scale": self.scale.round(6).tolist(),
            "weights": self.weights.round(6).tolist(),
            "bias": self.bias.round(6).tolist(),
            "expansion": self.expansion,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SoftmaxModel:
        """Rebuild from `to_dict` output."""
        return cls(
            tuple(d["classes"]),
            np.asarray(d["mean"], np.float64),
            np.asarray(d["scale"], np.float64),
            np.asarray(d["weights"], np.float64),
            np.asarray(d["bias"], np.float64),
            d.get("expansion", "linear"),
        )


def fit_softmax(
    x: np.ndarray,
    y: np.ndarray,
    classes: tuple[str, ...],
    l2: float = 1e-2,
    iters: int = 800,
    lr: float = 0.5,
    expansion: str = "linear",
) -> SoftmaxModel:
    """Fit by full-batch gradient descent on the L2-penalised cross-entropy."""
    x = expand(x, expansion)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-8] = 1.0
    xs = (x - mean) / scale
    n, d = xs.shape
    k = len(classes)
    onehot = np.zeros((n, k))
    onehot[np.arange(n), y] = 1.0
    w = np.zeros((d, k))
    b = np.zeros(k)
    for _ in range(iters):
        z = xs @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) / n
        w -= lr * (xs.T @ g + l2 * w)
        b -= lr * g.sum(axis=0)
    return SoftmaxModel(classes, mean, scale, w, b, expansion)
