"""Decision relevance: which purchases could change the selected answer at all.

A feasible action e is *relevant* when some set S of affordable purchases
containing it, with some outcomes, selects a different answer than S without e
does (e is pivotal somewhere); otherwise buying it cannot change the answer,
whatever the outcomes of everything the remaining budget can still buy. Two
sound, cheap bounds decide this, one per kind of score:

* the spec's logit scores (`score_relevance`, every `ScorePolicy`): a purchase
  moves candidate i's logit by alpha_ie(o) wt(e), so over any affordable set the
  gap between i and the selected candidate i* closes by at most the fractional
  knapsack of |alpha_ie - alpha_i*e| |wt(e)| (capacity: the remaining budget).
  A candidate whose answer differs from i*'s and whose gap cannot close is never
  selected; an action that moves every candidate that can still be selected by
  the same amount cannot change which of them wins;
* the `bayes` posterior (`posterior_relevance`): the checks of latent j multiply
  P(H) by F_j(H) = rho_j(H) A + (1 - rho_j(H)) B with A, B the products of the
  outcomes' likelihoods under a true and a false latent, so F_j(d) / F_j(d*) is
  a Moebius function of r = A / B and lies between its values at the smallest
  and largest r the affordable checks of j can produce. Answers whose log gap
  to the selected d* exceeds the knapsack of these bounds (one item per latent,
  costing its cheapest affordable check) are never selected, and a check whose
  latent has the same rho_j for every answer that can still be selected cannot
  change which of them wins.

Ties follow the spec (scores within 1e-12): the logit bound is applied only
while every score stays inside [sigmoid(-10), sigmoid(10)], where a logit gap of
1e-7 separates two scores by more than the tie tolerance, and the posterior
bound with answers closer than 1e-5 in log posterior counted as reachable while the
selected answer's posterior stays above 1e-6 whatever is bought (below that every
answer is). Outside the logit zone every feasible action counts as relevant.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from boe.core.state import EvidenceState

__all__ = [
    "IRRELEVANT",
    "action_ratios",
    "knapsack_bound",
    "latent_checks",
    "latent_gain",
    "posterior_relevance",
    "relevance_of_gain",
    "score_relevance",
    "selected_terms",
]

F64 = npt.NDArray[np.float64]
B_ = npt.NDArray[np.bool_]

#: The reason stored on a proposal skipped because no outcome of the affordable checks could change the answer.
IRRELEVANT = "irrelevant: no outcome of the affordable checks could change the answer"
#: Logits stay within +-SAFE_LOGIT for the logit bound to apply (there a gap of TIE_LOGIT is not a tie).
SAFE_LOGIT = 10.0
TIE_LOGIT = 1e-7
#: The posterior bound applies while the selected answer keeps at least this posterior.
POSTERIOR_FLOOR = 1e-6
TIE_LOG_POSTERIOR = 1e-5


def knapsack_bound(values: F64, costs: F64, capacity: F64) -> F64:
    """The fractional knapsack optimum over the last axis: no affordable set of items is worth more.

    ``values`` (..., N) >= 0 per item, ``costs`` broadcastable to it (> 0, inf: not available),
    ``capacity`` (...). Items that do not fit alone are left out.
    """
    c = np.broadcast_to(costs, values.shape)
    cap = np.asarray(capacity, dtype=np.float64)[..., None]
    v = np.where((values > 0) & np.isfinite(c) & (c <= cap), values, 0.0)  # inf: not available, at any capacity
    c = np.where(v > 0, c, 0.0)
    ratio = np.where(v > 0, v / np.where(c > 0, c, 1.0), -1.0)
    order = np.argsort(-ratio, axis=-1, kind="stable")
    vs = np.take_along_axis(v, order, axis=-1)
    cs = np.take_along_axis(c, order, axis=-1)
    before = np.cumsum(cs, axis=-1) - cs
    share = np.clip((cap - before) / np.where(cs > 0, cs, 1.0), 0.0, 1.0)
    out: F64 = (vs * np.where(cs > 0, share, 0.0)).sum(axis=-1)
    return out


def score_relevance(state: EvidenceState) -> B_:
    """(Q, A): feasible actions that could change the selected answer under the spec's logit scores."""
    feasible = state.feasible()
    n = state.n
    q = np.arange(n)
    rem = state.budget - state.spent
    cand = state.candidate
    aid = np.where(cand, state.answer_id, -1)  # every invalid candidate gives "no answer"
    sel = state.selection()
    d_star = aid[q, sel]
    logit = state.logit
    eff = np.where(feasible[:, :, None], state.alpha * state.weight[:, :, None], 0.0)  # (Q, A, K)
    cost = state.cost[:, None, :]
    swing = knapsack_bound(np.abs(eff).transpose(0, 2, 1), cost, rem[:, None])  # (Q, K)
    safe = np.all(~cand | ((logit - swing >= -SAFE_LOGIT) & (logit + swing <= SAFE_LOGIT)), axis=1)
    pair = np.abs(eff - eff[q, :, sel][:, :, None])
    closes = knapsack_bound(pair.transpose(0, 2, 1), cost, rem[:, None])  # (Q, K)
    gap = logit[q, sel][:, None] - logit
    reach = cand & ((aid == d_star[:, None]) | (closes >= gap - TIE_LOGIT))
    several = np.any(reach & (aid != d_star[:, None]), axis=1)
    spread = np.where(reach[:, None, :], eff, -np.inf).max(axis=2) - np.where(reach[:, None, :], eff, np.inf).min(
        axis=2
    )
    out: B_ = feasible & (~safe[:, None] | (several[:, None] & (spread > 0)))
    return out


def posterior_relevance(
    lpost: F64,
    real: B_,
    rho: F64,
    latent: npt.NDArray[np.intp],
    c1: F64,
    c0: F64,
    feasible: B_,
    cost: F64,
    remaining: F64,
    now: npt.NDArray[np.intp],
) -> B_:
    """(Q, A): feasible actions that could change the selected answer under the `bayes` posterior.

    ``lpost`` (Q, H) log posterior, ``real`` (Q, H) the selectable hypotheses, ``rho`` (Q, L, H)
    P(latent = 1 | H, history), ``latent`` (Q, A) the latent each action reads, ``c1`` / ``c0`` (Q, A, 3)
    P(outcome | latent true / false), ``now`` (Q,) the selected hypothesis.
    """
    hi, lo, informative = action_ratios(c1, c0)
    act = feasible & informative
    log_hi, log_lo, cheapest = latent_checks(hi, lo, act, latent, cost, rho.shape[1])
    log_hi, log_lo = log_hi[:, None, :], log_lo[:, None, :]  # (Q, 1, L)
    r_now = np.take_along_axis(rho, now[:, None, None], axis=2).transpose(0, 2, 1)  # (Q, 1, L)
    gain = latent_gain(log_hi, log_lo, rho.transpose(0, 2, 1), selected_terms(log_hi, log_lo, r_now))
    return relevance_of_gain(gain, cheapest, lpost, real, rho, latent, act, remaining, now)


def action_ratios(c1: F64, c0: F64) -> tuple[F64, F64, B_]:
    """Per action (..., 3 outcomes -> ...): the largest and smallest log likelihood ratio log c1 - log c0 over
    its outcomes, and whether it is informative (some ratio is not 0); they depend on the channel alone."""
    with np.errstate(divide="ignore"):
        lr = np.log(c1) - np.log(c0)
    hi: F64 = np.maximum(np.maximum(lr[..., 0], lr[..., 1]), lr[..., 2])
    lo: F64 = np.minimum(np.minimum(lr[..., 0], lr[..., 1]), lr[..., 2])
    informative: B_ = (lr[..., 0] != 0.0) | (lr[..., 1] != 0.0) | (lr[..., 2] != 0.0)
    return hi, lo, informative


def latent_checks(
    hi: F64, lo: F64, act: B_, latent: npt.NDArray[np.intp], cost: F64, n_lat: int
) -> tuple[F64, F64, F64]:
    """Per latent (Q, L): the sums of the largest and of the smallest log ratios of its actions ``act`` (the
    range of log A / B its checks can produce), and the cheapest of them (inf: none)."""
    n = act.shape[0]
    flat = (latent + np.arange(n)[:, None] * n_lat)[act]
    log_hi = np.asarray(np.bincount(flat, weights=hi[act], minlength=n * n_lat), dtype=np.float64)
    log_lo = np.asarray(np.bincount(flat, weights=lo[act], minlength=n * n_lat), dtype=np.float64)
    cheapest = np.full(n * n_lat, np.inf)
    spent = cost[act]
    prices = np.unique(spent)
    if prices.size <= 4:  # a menu has a few prices: the cheapest of a latent is the first price it has
        for price in prices[::-1].tolist():
            cheapest[np.bincount(flat[spent == price], minlength=n * n_lat) > 0] = price
    else:
        np.minimum.at(cheapest, flat, spent)
    return log_hi.reshape(n, n_lat), log_lo.reshape(n, n_lat), cheapest.reshape(n, n_lat)


def _mix(log_r: F64, log_p: tuple[F64, F64]) -> F64:
    """log(p r + 1 - p) from log r and (log p, log(1 - p))."""
    return np.asarray(np.logaddexp(log_p[0] + log_r, log_p[1]), dtype=np.float64)


def selected_terms(log_hi: F64, log_lo: F64, r_now: F64) -> tuple[F64, F64]:
    """The selected hypothesis' side of `latent_gain`, elementwise: log(r A + 1 - r) at the latent's largest and
    smallest log A / B (``log_hi``, ``log_lo``), ``r_now`` its P(latent = 1 | selected H)."""
    logs = np.log(r_now), np.log1p(-r_now)
    return _mix(log_hi, logs), _mix(log_lo, logs)


def latent_gain(log_hi: F64, log_lo: F64, rho: F64, now: tuple[F64, F64]) -> F64:
    """Elementwise, the most the checks of a latent raise log P(H) against log P(selected H): ``log_hi`` /
    ``log_lo`` from `latent_checks`, ``rho`` P(latent = 1 | H), ``now`` the `selected_terms` (0 at the
    selected H itself)."""
    logs = np.log(rho), np.log1p(-rho)  # each computed once
    out: F64 = np.maximum(_mix(log_hi, logs) - now[0], _mix(log_lo, logs) - now[1])
    return out


def relevance_of_gain(
    gain: F64,
    cheapest: F64,
    lpost: F64,
    real: B_,
    rho: F64,
    latent: npt.NDArray[np.intp],
    act: B_,
    remaining: F64,
    now: npt.NDArray[np.intp],
) -> B_:
    """`posterior_relevance` from each latent's `latent_gain` (Q, H, L; it matters only where ``cheapest`` (Q, L)
    is affordable, at hypotheses with a finite ``lpost``) and the informative feasible actions ``act`` (Q, A)."""
    n = lpost.shape[0]
    q = np.arange(n)
    with np.errstate(over="ignore", invalid="ignore"):
        gap = lpost[q, now][:, None] - lpost  # inf for absent answers
    # First a loose bound: no affordable set gains more than all affordable latents together, nor more than
    # the remaining budget at the best gain per cost (with a margin over rounding). Rows where even it leaves
    # no rival within reach have nothing relevant; the knapsack decides the others.
    cheap = cheapest[:, None, :]
    value = np.where((gain > 0) & (cheap <= remaining[:, None, None]), gain, 0.0)  # (Q, H, L)
    per_cost = (value / np.where(value > 0, cheap, 1.0)).max(axis=2)  # (Q, H)
    at_rate = np.multiply(remaining[:, None], per_cost, out=np.zeros_like(per_cost), where=per_cost > 0)
    total = np.zeros(per_cost.shape)  # summed latent after latent (the order of a sum over (Q, L, H)'s L)
    for j in range(value.shape[2]):
        total += value[:, :, j]
    loose = np.minimum(total, at_rate)
    loose += 1e-9 * np.abs(loose) + 1e-12
    out: B_ = np.zeros(act.shape, dtype=bool)
    near, floor = _reach(loose, gap, real, now)
    r = np.nonzero(near.sum(axis=1) >= 2)[0]
    if r.size == 0:
        return out
    # The knapsack of each (row, rival) pair it can change: the knapsack never exceeds the loose bound, so where
    # the selected answer keeps its floor under the loose bound it keeps it under the knapsack, and only rivals
    # the loose bound reaches can be reached (the others' bound, 0 here, weighs less in the floor); elsewhere
    # every rival with a finite gap (the bound of any other reaches nothing and weighs 0 in the floor).
    gap, now, near, floor = gap[r], now[r], near[r], floor[r]
    pr, ph = np.nonzero(
        np.isfinite(gap) & (np.arange(gap.shape[1])[None, :] != now[:, None]) & (near | ~floor[:, None])
    )
    bound = np.zeros(gap.shape)
    bound[pr, ph] = knapsack_bound(gain[r[pr], ph], cheapest[r[pr]], remaining[r[pr]])
    reach, floor = _reach(bound, gap, real[r], now)
    several = np.nonzero(reach.sum(axis=1) >= 2)[0]
    if several.size == 0:
        return out
    r, reach, floor, now = r[several], reach[several], floor[several], now[several]
    moved = reach | (~floor[:, None] & np.isfinite(lpost[r]))
    # per latent (n, L), then read by each action: whether its rho differs among the moved hypotheses (the
    # selected one among them)
    rho_r = rho[r]
    r_now = rho_r[np.arange(r.size), :, now]  # (n, L)
    differs = np.zeros(r_now.shape, dtype=bool)
    for h in np.nonzero(moved.any(axis=0))[0].tolist():
        differs |= (rho_r[:, :, h] != r_now) & moved[:, h, None]
    out[r] = act[r] & np.take_along_axis(differs, latent[r], axis=1)
    return out


def _reach(bound: F64, gap: F64, real: B_, now: npt.NDArray[np.intp]) -> tuple[B_, B_]:
    """The hypotheses an affordable set can lift to the selected one's posterior (gaining at most ``bound``
    (Q, H) on it, from log gap ``gap``), and the rows where the selected one keeps `POSTERIOR_FLOOR`."""
    q = np.arange(bound.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):
        rivals = np.where(np.arange(gap.shape[1])[None, :] == now[:, None], 0.0, np.exp(bound - gap))
    floor = 1.0 / (1.0 + np.nan_to_num(rivals, nan=0.0).sum(axis=1)) >= POSTERIOR_FLOOR
    # below the floor every answer may tie with the selected one, and the normalisation matters too: an action
    # is then irrelevant only if it moves no hypothesis (`none` included) against another
    reach = real & ((bound >= gap - TIE_LOG_POSTERIOR) | ~floor[:, None])
    reach[q, now] = True
    return reach, floor
