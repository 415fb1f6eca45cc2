"""The `bayes` claim model and channels, fitted by EM over the latent claim truths and verdicts, with the
partial pooling of every channel table inside each M-step (see `boe.core.bayes`, "Partial pooling").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from boe.core.bayes_data import _FitData
from boe.core.bayes_model import (
    B_,
    F64,
    I64,
    N_KINDS,
    N_STANDING,
    SMOOTHING,
    TAU_GRID,
    TAU_START,
    ClaimParams,
    Triple,
    _Channels,
    _sigmoid,
    _stance_matrix,
)
from boe.core.monotone import monotone_tables


def _normalise(counts: F64) -> F64:
    c = counts + SMOOTHING
    out: F64 = c / c.sum(axis=-1, keepdims=True)
    return out


def _triple(x: F64) -> Triple:
    return (float(x[0]), float(x[1]), float(x[2]))


def _mixture_weights(loglik: F64, cls: I64, w: F64, n_cls: int, start: F64 | None = None, steps: int = 42) -> F64:
    """Per class k, argmax_t sum_r w_r log(t L1_r + (1 - t) L0_r) + s log t + s log(1 - t) (s = SMOOTHING).

    The objective is concave in t, so its derivative is bisected on (0, 1), to 2^-42 (far below any tolerance).
    The bisection's steps follow from the root, found first by safeguarded Newton: only midpoints within
    `BISECT_NEAR` of it evaluate the derivative, so the result is the plain bisection's to the last bit
    (``start``, a guess of the root, only speeds Newton up).
    """
    # the rows' max as one elementwise maximum: the same numbers, without numpy's slow reduction over an axis of 2
    a = np.exp(loglik - np.maximum(loglik[:, 0], loglik[:, 1])[:, None])  # (R, 2)
    a1, a0 = a[:, 0].copy(), a[:, 1].copy()
    wd = w * (a1 - a0)
    # every evaluation writes into the same row buffers (the same operations, without a fresh array each)
    tr, den, ratio = np.empty(cls.size), np.empty(cls.size), np.empty(cls.size)

    def terms(t: F64) -> tuple[F64, F64]:
        """The derivative at ``t``, and every row's mixture density t L1 + (1 - t) L0 (scaled; valid until
        the next call)."""
        t.take(cls, out=tr)
        np.multiply(tr, a1, out=den)
        np.subtract(1, tr, out=tr)
        np.multiply(tr, a0, out=tr)
        np.add(den, tr, out=den)  # t L1 + (1 - t) L0
        np.divide(wd, den, out=ratio)
        out = np.bincount(cls, weights=ratio, minlength=n_cls).astype(np.float64, copy=False)
        return out + SMOOTHING / t - SMOOTHING / (1 - t), den

    def grad(t: F64) -> F64:
        return terms(t)[0]

    root = _derivative_root(terms, wd, a0, a1, cls, np.full(n_cls, 0.5) if start is None else start)
    # the steps before any midpoint comes near a root follow the root alone: jump over them at once
    first, lo_a, hi_a = _bisect_far(root, steps)
    # the rest of the bisection on Python floats (the same IEEE doubles as numpy's, without an array call per
    # step on a handful of classes); a class's derivative reads only its own t
    lo, hi, roots = lo_a.tolist(), hi_a.tolist(), root.tolist()
    for _ in range(first, steps):
        t = [(a + b) / 2 for a, b in zip(lo, hi, strict=True)]
        up = [x < r for x, r in zip(t, roots, strict=True)]
        near = [abs(x - r) <= BISECT_NEAR for x, r in zip(t, roots, strict=True)]
        if any(near):
            g = grad(np.array(t)).tolist()
            up = [g[k] > 0 if near[k] else up[k] for k in range(n_cls)]
        lo = [x if u else a for x, u, a in zip(t, up, lo, strict=True)]
        hi = [b if u else x for x, u, b in zip(t, up, hi, strict=True)]
    out: F64 = np.array([(a + b) / 2 for a, b in zip(lo, hi, strict=True)])
    return out


#: Midpoints of `_mixture_weights`'s bisection this close to the Newton root evaluate the derivative's sign
#: (far above the root's rounding error, so every other step's sign is known).
BISECT_NEAR = 1e-11


def _bisect_far(root: F64, steps: int) -> tuple[int, F64, F64]:
    """The bisection of (0, 1) towards ``root`` up to the first step whose midpoint, in any class, comes within
    `BISECT_NEAR` of its root: that step's index (``steps`` if none does) and each class's bracket before it.

    Exact: until a midpoint equals the root (it would be near), step j's bracket is [m, m + 1] / 2^j with
    m = floor(root 2^j), and every product, floor and quotient here is of a power of two (no rounding).
    """
    scale = np.ldexp(1.0, np.arange(steps + 1))  # 2^j: step j + 1 halves a bracket of width 1 / 2^j
    m = np.floor(root[:, None] * scale)  # (classes, steps + 1)
    mid = (2 * m[:, :steps] + 1) / (2 * scale[:steps])
    near = np.abs(mid - root[:, None]) <= BISECT_NEAR
    near_at = np.nonzero(near.any(axis=0))[0]  # the steps at which some class is near
    first = int(near_at[0]) if near_at.size else steps
    lo: F64 = m[:, first] / scale[first]
    return first, lo, lo + 1 / scale[first]


def _derivative_root(terms: Callable[[F64], tuple[F64, F64]], wd: F64, a0: F64, a1: F64, cls: I64, start: F64) -> F64:
    """The root in (0, 1) of each class's decreasing derivative (``terms``: it and the rows' mixture densities),
    by Newton's method from ``start`` kept in a bracket."""
    n_cls = start.size
    lo, hi = np.zeros(n_cls), np.ones(n_cls)
    t = np.clip(start, 1e-12, 1 - 1e-12)
    curvature = wd * (a1 - a0)
    buf = np.empty(cls.size)
    for _ in range(100):
        g, den = terms(t)
        np.multiply(den, den, out=buf)
        np.divide(curvature, buf, out=buf)
        slope = -np.bincount(cls, weights=buf, minlength=n_cls).astype(np.float64, copy=False)
        slope -= SMOOTHING / (t * t) + SMOOTHING / ((1 - t) * (1 - t))
        step = g / slope
        if float(np.abs(step).max()) < 1e-14:
            break
        lo = np.where(g > 0, t, lo)
        hi = np.where(g > 0, hi, t)
        t = t - step
        t = np.where((t >= lo) & (t <= hi) & (t > 0) & (t < 1), t, (lo + hi) / 2)
    return t


def gammaln(x: npt.ArrayLike) -> F64:
    """log Gamma(x) for x > 0, elementwise (recurrence up to 8, then Stirling's series; error < 1e-12)."""
    y = np.array(x, dtype=np.float64)
    shift = np.zeros_like(y)
    for _ in range(8):
        low = y < 8.0
        if not low.any():
            break
        shift += np.where(low, np.log(np.where(low, y, 1.0)), 0.0)
        y = np.where(low, y + 1.0, y)
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))
    out: F64 = (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series - shift
    return out


def _evidence(m: F64, parent: F64, owner: I64, n_owner: int) -> F64:
    """log Dirichlet-multinomial evidence of the children's counts ``m`` (n, 3) around their parent
    tables (n, 3), summed per owner, for every pseudo-count of `TAU_GRID`: shape (T, n_owner)."""
    tau = TAU_GRID[:, None, None]
    a = tau * np.clip(parent, 1e-6, None)[None]  # (T, n, 3)
    ev = (
        gammaln(tau[:, :, 0])
        - gammaln(tau[:, :, 0] + m.sum(axis=1)[None])
        + (gammaln(a + m[None]) - gammaln(a)).sum(axis=2)
    )  # (T, n)
    out = np.zeros((TAU_GRID.size, n_owner))
    for t in range(TAU_GRID.size):
        out[t] = np.bincount(owner, weights=ev[t], minlength=n_owner)
    return out


def _tables(
    m1: F64, m0: F64, chan_of_cell: I64, par_of_chan: I64, n_chan: int, tau_g: F64, tau_s: F64
) -> tuple[F64, F64, F64, F64]:
    """Outcome tables of standing cells and of their channels, given a true and a false latent, from the
    expected cell counts ``m1``, ``m0`` (cells, 3).

    Partial pooling: kind -> group -> standing cell, each level the posterior mean of a Dirichlet around
    its parent with ``tau_g`` (per kind) and ``tau_s`` (per channel) pseudo-actions, at most as many as the
    parent has checks; at every level a verdict that points the wrong way without confidence is pooled
    across the latent (`boe.core.monotone.monotone_tables`).
    """
    mc1, mp1 = _parents(m1, chan_of_cell, par_of_chan, n_chan)
    mc0, mp0 = _parents(m0, chan_of_cell, par_of_chan, n_chan)
    k1, k0, _ = monotone_tables(mp1 + SMOOTHING, mp0 + SMOOTHING)
    n_kind = (mp1 + mp0).sum(axis=1)
    tg = np.minimum(tau_g[par_of_chan], n_kind[par_of_chan])[:, None]
    g1, g0, _ = monotone_tables(mc1 + tg * k1[par_of_chan] + 1e-12, mc0 + tg * k0[par_of_chan] + 1e-12)
    n_chan_data = (mc1 + mc0).sum(axis=1)
    ts = np.minimum(tau_s[chan_of_cell], n_chan_data[chan_of_cell])[:, None]
    c1, c0, _ = monotone_tables(m1 + ts * g1[chan_of_cell] + 1e-12, m0 + ts * g0[chan_of_cell] + 1e-12)
    return c1, c0, g1, g0


def _parents(m: F64, chan_of_cell: I64, par_of_chan: I64, n_chan: int) -> tuple[F64, F64]:
    """Channel counts (channels, 3) and kind counts (kinds, 3) of cell counts ``m``."""
    # bincount adds in index order from 0, as np.add.at does: the same sums, without add.at's per-element cost
    mc = np.stack([np.bincount(chan_of_cell, weights=m[:, j], minlength=n_chan) for j in range(3)], axis=1)
    mp = np.stack([np.bincount(par_of_chan, weights=mc[:, j], minlength=N_KINDS) for j in range(3)], axis=1)
    return mc.astype(np.float64, copy=False), mp.astype(np.float64, copy=False)


def _pooling(ms: list[F64], chan_of_cell: I64, par_of_chan: I64, n_chan: int) -> tuple[F64, F64]:
    """Empirical-Bayes pseudo-counts per kind (for its groups) and per channel (for its standing cells)
    from the expected cell counts of both latent values (``ms``)."""
    ev_g = np.zeros((TAU_GRID.size, N_KINDS))
    ev_s = np.zeros((TAU_GRID.size, n_chan))
    for m in ms:
        mc, mp = _parents(m, chan_of_cell, par_of_chan, n_chan)
        ev_g += _evidence(mc, _normalise(mp)[par_of_chan], par_of_chan, N_KINDS)
        ev_s += _evidence(m, _normalise(mc)[chan_of_cell], chan_of_cell, n_chan)
    return TAU_GRID[np.argmax(ev_g, axis=0)], TAU_GRID[np.argmax(ev_s, axis=0)]


@dataclass(frozen=True)
class _Counts:
    """A sparse (rows, cols) count matrix, one unit entry per (row, col) pair (repeats add up)."""

    row: I64
    col: I64
    n_rows: int
    n_cols: int

    def dot(self, y: F64) -> F64:
        """``X @ y`` for y of shape (n_cols, 2)."""
        cols = [np.bincount(self.row, weights=y[:, j].take(self.col), minlength=self.n_rows) for j in range(y.shape[1])]
        return np.stack(cols, axis=1).astype(np.float64, copy=False)

    def rdot(self, t: F64) -> F64:
        """``t @ X`` for t of shape (n_rows,)."""
        return np.bincount(self.col, weights=t.take(self.row), minlength=self.n_cols).astype(np.float64, copy=False)


def _fit_claims(data: _FitData, claim_rows: B_, n_groups: int) -> tuple[ClaimParams, _Channels]:
    """`_em_claims` on the latent rows ``claim_rows`` (and their actions), computed once per training set."""
    key = (n_groups, np.packbits(claim_rows).tobytes())
    got = data.fits.get(key)
    if got is None:
        got = data.fits[key] = _em_claims(data, claim_rows, claim_rows[data.f_row], n_groups)
    return got[0].model_copy(), got[1]


def _small_unique(x: I64) -> tuple[I64, I64]:
    """``np.unique(x, return_inverse=True)`` of small non-negative integers, by counting instead of sorting."""
    present = np.bincount(x) > 0
    values = np.nonzero(present)[0]
    inverse = (np.cumsum(present) - 1).take(x)
    return values, inverse


def _em_claims(
    data: _FitData, claim_rows: B_, act_rows: B_, n_groups: int, iters: int = 500, tol: float = 1e-9
) -> tuple[ClaimParams, _Channels]:
    """EM over the latent claim truths and verdicts for the claim model and every channel.

    Channels are indexed by group id, response-check groups after the factor
    ones (id + n_groups), and split by the standing of the latent they read;
    the M-step pools cells towards their channel and channels towards their
    kind (`_tables`).
    """
    idx = np.nonzero(claim_rows)[0]
    remap = np.full(claim_rows.size, -1, dtype=np.int64)
    remap[idx] = np.arange(idx.size)
    arow = remap[data.f_row[act_rows]]
    chan_act = data.f_group[act_rows] + n_groups * data.f_whole[act_rows]
    cells, cidx = _small_unique(chan_act * N_STANDING + data.f_bin[act_rows])
    nc = cells.size
    chans, chan_of_cell = np.unique(cells // N_STANDING, return_inverse=True)
    n_chan = chans.size
    kind = np.clip(data.f_kind[act_rows], 0, N_KINDS - 1)
    tally = np.bincount(chan_of_cell[cidx] * N_KINDS + kind, minlength=n_chan * N_KINDS).reshape(n_chan, N_KINDS)
    par_of_chan = tally.argmax(axis=1)
    # outcome counts of each latent by (cell, outcome), the sufficient statistic of the channels: a sparse
    # latent x (cell, outcome) matrix, one entry per action, for the free and the aligned latents
    w = data.c_w[idx]
    aligned = data.c_aligned[idx]
    fr, al = np.nonzero(~aligned)[0], np.nonzero(aligned)[0]
    pos = np.empty(idx.size, dtype=np.int64)
    pos[fr], pos[al] = np.arange(fr.size), np.arange(al.size)
    col, on_al = cidx * 3 + data.f_out[act_rows], aligned[arow]
    x_f = _Counts(pos[arow[~on_al]], col[~on_al], fr.size, nc * 3)
    x_a = _Counts(pos[arow[on_al]], col[on_al], al.size, nc * 3)
    counts_f, w_f = data.c_counts[idx][fr].reshape(-1, 6), w[fr]
    cls_a, w_a = data.c_cls[idx][al], w[al]
    # start: assertions by correct candidates and confirmations go with truth
    c1 = np.tile([0.6, 0.2, 0.2], (nc, 1))
    c0 = np.tile([0.2, 0.6, 0.2], (nc, 1))
    theta = np.array([[[0.6, 0.2, 0.2], [0.2, 0.6, 0.2]], [[0.45, 0.35, 0.2], [0.35, 0.45, 0.2]]])
    free_true = 0.3
    al_true = np.array([0.9, 0.1, 0.1, 0.9, 0.1])  # aligned classes, then the verdicts
    m1 = m0 = np.zeros(nc * 3)
    g1 = g0 = np.zeros((n_chan, 3))
    # two phases: EM with moderate pooling, then the pooling chosen by empirical Bayes on its
    # expected counts, then EM again from there (pseudo-counts fixed within a phase, so each converges)
    tau_g = np.full(N_KINDS, TAU_START)
    tau_s = np.full(n_chan, TAU_START)
    logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)  # (3 nc, 2)
    read_a = x_a.dot(logc)  # what the aligned latents' checks say under the current channels
    for phase in range(2):
        if phase:
            tau_g, tau_s = _pooling([m1.reshape(nc, 3), m0.reshape(nc, 3)], chan_of_cell, par_of_chan, n_chan)
        prev = -math.inf
        for _ in range(iters):
            a_f = counts_f @ _stance_matrix(np.log(theta)) + np.log([free_true, 1 - free_true]) + x_f.dot(logc)
            a_a = np.stack([np.log(al_true[cls_a]), np.log1p(-al_true[cls_a])], axis=1) + read_a
            ll = float(w_f @ np.logaddexp(a_f[:, 0], a_f[:, 1]) + w_a @ np.logaddexp(a_a[:, 0], a_a[:, 1]))
            g_f = _sigmoid(a_f[:, 0] - a_f[:, 1])
            g_a = _sigmoid(a_a[:, 0] - a_a[:, 1])
            # M-step: every table in closed form from expected counts
            t_f, t_a = w_f * g_f, w_a * g_a
            m1 = x_f.rdot(t_f) + x_a.rdot(t_a)
            m0 = x_f.rdot(w_f - t_f) + x_a.rdot(w_a - t_a)
            c1, c0, g1, g0 = _tables(
                m1.reshape(nc, 3), m0.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan, tau_g, tau_s
            )
            free_true = (float(t_f.sum()) + SMOOTHING) / (float(w_f.sum()) + 2 * SMOOTHING)
            theta = _normalise(np.stack([t_f @ counts_f, (w_f - t_f) @ counts_f]).reshape(2, 2, 3).swapaxes(0, 1))
            # aligned truth rates: the exact maximiser of the observed likelihood given the new
            # channels (an ECME step; plain EM crawls towards these near-0/1 rates)
            logc = np.stack([np.log(c1).ravel(), np.log(c0).ravel()], axis=1)
            read_a = x_a.dot(logc)
            al_true = _mixture_weights(read_a, cls_a, w_a, 5, start=al_true)
            if ll - prev <= tol * max(1.0, abs(ll)):
                break
            prev = ll
    acts_cell = np.bincount(cidx, weights=w[arow], minlength=nc)
    st1 = np.repeat(g1[:, None, :], N_STANDING, axis=1)
    st0 = np.repeat(g0[:, None, :], N_STANDING, axis=1)
    st_n = np.zeros((n_chan, N_STANDING))
    bins = cells % N_STANDING
    st1[chan_of_cell, bins] = c1
    st0[chan_of_cell, bins] = c0
    st_n[chan_of_cell, bins] = acts_cell
    params = ClaimParams(
        aligned_true=_triple(al_true),
        verdict=(float(al_true[3]), float(al_true[4])),
        free_true=free_true,
        stance=((_triple(theta[0, 0]), _triple(theta[0, 1])), (_triple(theta[1, 0]), _triple(theta[1, 1]))),
        claims=float(w.sum()),
    )
    mc1, _ = _parents(m1.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan)
    mc0, _ = _parents(m0.reshape(nc, 3), chan_of_cell, par_of_chan, n_chan)
    return params, _Channels(chans, g1, g0, st_n.sum(axis=1), st1, st0, st_n, mc1, mc0)
