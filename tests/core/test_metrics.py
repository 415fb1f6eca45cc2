"""Metrics: exact McNemar, paired bootstrap, summary rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from boe.core.metrics import mcnemar_exact, paired_bootstrap


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        pytest.param(0, 0, 1.0, id="no-discordant"),
        pytest.param(0, 5, 2 * 0.5**5, id="all-one-way"),
        pytest.param(3, 3, 1.0, id="balanced"),
        pytest.param(1, 9, 2 * (1 + 10) / 2**10, id="1-vs-9"),
        pytest.param(38, 32, None, id="paper-vqamed"),
    ],
)
def test_mcnemar_exact(b, c, p):
    n = b + c
    expected = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n) if p is None else p
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_mcnemar_large_counts_are_finite():
    p = mcnemar_exact(5000, 5400)
    assert 0 < p < 0.01


def test_paired_bootstrap_reproducible_and_sane():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 500).astype(float)
    b = np.where(rng.random(500) < 0.1, 1 - a, a)
    m1 = paired_bootstrap(a, b, resamples=500, seed=4)
    m2 = paired_bootstrap(a, b, resamples=500, seed=4)
    m3 = paired_bootstrap(a, b, resamples=500, seed=5)
    assert m1 == m2 and m1 != m3
    diff, lo, hi = m1
    assert diff == pytest.approx(float((a - b).mean()))
    assert lo <= diff <= hi and hi - lo < 0.1
    same = paired_bootstrap(a, a, resamples=100, seed=0)
    assert same == (0.0, 0.0, 0.0)
