"""Benchmark-level measures from the reference papers (pure numpy).

Implements the papers' benchmark measures (docs/scoring.md names them): LiveTradeBench rolling-k
deltas, the StockBench composite rank, CapitalBench round scoring, PortBench CEPS, historical VaR
and risk-profile alignment and a simple market-regime label. PortBench's correlation-aware
diversification is in :mod:`.diversification`; bootstrap intervals and the figures relative to a
benchmark are in :mod:`.inference`. Every convention is stated in the docstrings and in
``docs/scoring.md``. Series too short for a measure give NaN rather than raising; malformed input
(mismatched shapes, missing keys) raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.metrics import DDOF, STD_ZERO_RTOL, TRADING_DAYS_EQUITY

__all__ = [
    "CASH",
    "REGIME_BULL_RETURN",
    "REGIME_CRISIS_DRAWDOWN",
    "REGIME_CRISIS_VOL",
    "RISK_PROFILES",
    "ROLLING_KS",
    "RiskProfile",
    "capitalbench_score",
    "composite_rank",
    "historical_var",
    "profile_alignment",
    "regime_label",
    "rolling_k_delta",
    "rolling_k_deltas",
    "rolling_k_figures",
    "rolling_k_figures_rows",
    "rolling_k_return",
]

CASH = "CASH"
ROLLING_KS: tuple[int, ...] = (1, 2, 4, 8, 16)
REGIME_CRISIS_DRAWDOWN = 0.15
REGIME_CRISIS_VOL = 0.40
REGIME_BULL_RETURN = 0.03
REGIME_BEAR_RETURN = -0.03
REGIME_UNKNOWN = "unknown"

_NAN = float("nan")


# --------------------------------------------------------------------------- rolling-k (LTB Eq. 6)


def _check_panel(holdings: ArrayLike, prices: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validate and coerce the holdings/prices panels to equal-shape 2-D float arrays."""
    h = np.asarray(holdings, dtype=float)
    p = np.asarray(prices, dtype=float)
    if h.ndim != 2 or p.ndim != 2 or h.shape != p.shape:
        raise ValueError(
            f"holdings and prices must be 2-D arrays of equal shape, got {h.shape} and {p.shape}"
        )
    return h, p


def _hold_cr(q: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> float:
    """Compound per-step returns ``q . (p1 - p0) / (q . p0)`` row-wise; NaN on bad values."""
    if q.shape[0] == 0:
        return _NAN
    den = np.einsum("ta,ta->t", q, p0)
    num = np.einsum("ta,ta->t", q, p1 - p0)
    if not np.isfinite(den).all() or (den <= 0.0).any() or not np.isfinite(num).all():
        return _NAN
    return float(np.prod(1.0 + num / den) - 1.0)


def rolling_k_return(holdings: ArrayLike, prices: ArrayLike, k: int) -> float:
    """Return ``CR^(k)`` of LiveTradeBench Eq. 6 (hold the position taken ``k`` steps earlier).

    ``holdings`` and ``prices`` are ``(T + 1) x A`` panels for times ``0..T`` (rows), units and
    prices of every asset including a CASH column priced 1; row ``t`` of ``holdings`` is ``q_t``,
    the position held from ``t`` to ``t + 1``. Then
    ``r_t^(k) = q_{t-k} . (p_{t+1} - p_t) / (q_{t-k} . p_t)`` and
    ``CR^(k) = prod_{t=k}^{T-k-1} (1 + r_t^(k)) - 1``.

    ``k = 0`` spans ``t = 0..T-1`` (all ``T`` steps), so ``CR^(0)`` equals the plain cumulative
    return ``v_T / v_0 - 1`` of a self-financing (fee-free) portfolio. NaN when the window is
    empty (fewer than ``2k + 2`` rows) or a denominator ``q_{t-k} . p_t`` is not positive.
    """
    h, p = _check_panel(holdings, prices)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    n = h.shape[0]
    steps = n - 1 - 2 * k  # t = k .. n-2-k
    if steps < 1:
        return _NAN
    return _hold_cr(h[0:steps], p[k : n - 1 - k], p[k + 1 : n - k])


def rolling_k_delta(
    holdings: ArrayLike, prices: ArrayLike, k: int, *, same_window: bool = False
) -> float:
    """Return ``Delta_k = CR^(k) - CR^(0)``; negative means timely decisions matter.

    By default ``CR^(0)`` is taken literally from Eq. 6 over ``t = 0..T-1`` (so ``k = 0`` gives
    0.0). Note that ``CR^(k)`` spans only ``t = k..T-k-1``; with ``same_window=True`` ``CR^(0)``
    is computed over that same window instead, isolating the timing effect from the window
    effect. NaN when ``CR^(k)`` is NaN.
    """
    h, p = _check_panel(holdings, prices)
    cr_k = rolling_k_return(h, p, k)
    if math.isnan(cr_k):
        return _NAN
    if same_window:
        n = h.shape[0]
        cr_0 = _hold_cr(h[k : n - 1 - k], p[k : n - 1 - k], p[k + 1 : n - k])
    else:
        cr_0 = rolling_k_return(h, p, 0)
    return cr_k - cr_0


def rolling_k_figures(holdings: ArrayLike, prices: ArrayLike, ks: Iterable[int] = ROLLING_KS
                      ) -> dict[str, Any]:
    """Return ``CR^(0)`` and, per ``k`` of ``ks`` (keys ``str(k)``), ``CR^(k)`` and both
    ``Delta_k`` variants, each compounded once.

    ``{"cr0": rolling_k_return(h, p, 0), "cr": {k: rolling_k_return(h, p, k)},
    "delta": {k: rolling_k_delta(h, p, k)}, "delta_same_window": {k: rolling_k_delta(h, p, k,
    same_window=True)}}``, the same figures: each delta reuses the ``CR^(k)`` and ``CR^(0)``
    computed for the others instead of compounding them again.
    """
    h, p = _check_panel(holdings, prices)
    n = h.shape[0]
    cr0 = rolling_k_return(h, p, 0)
    cr: dict[str, float] = {}
    delta: dict[str, float] = {}
    same: dict[str, float] = {}
    for k in ks:
        cr_k = rolling_k_return(h, p, k)
        cr[str(k)] = cr_k
        if math.isnan(cr_k):
            delta[str(k)] = same[str(k)] = _NAN
            continue
        delta[str(k)] = cr_k - cr0
        same[str(k)] = cr_k - _hold_cr(h[k : n - 1 - k], p[k : n - 1 - k], p[k + 1 : n - k])
    return {"cr0": cr0, "cr": cr, "delta": delta, "delta_same_window": same}


def rolling_k_figures_rows(panels: Sequence[tuple[ArrayLike, ArrayLike]],
                           ks: Iterable[int] = ROLLING_KS) -> list[dict[str, Any]]:
    """Return :func:`rolling_k_figures` of each ``(holdings, prices)`` panel, the same figures.

    Panels of one shape are stacked and each ``CR^(k)`` of all of them compounded in one pass:
    every step's dot products are the same ``einsum`` sums of products over the assets (one per
    stacked row and step, as per panel), the products the same sequential ``prod`` along each
    panel's steps, a panel with a bad denominator or value NaN as alone.
    """
    ks = tuple(ks)
    checked = [_check_panel(h, p) for h, p in panels]
    out: list[dict[str, Any]] = [{} for _ in checked]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (h, _) in enumerate(checked):
        groups.setdefault(h.shape, []).append(i)
    for idx in groups.values():
        h = np.stack([checked[i][0] for i in idx])
        p = np.stack([checked[i][1] for i in idx])
        for i, fig in zip(idx, _rolling_k_stacked(h, p, ks), strict=True):
            out[i] = fig
    return out


def _hold_cr_rows(q: np.ndarray, p0: np.ndarray, p1: np.ndarray) -> list[float]:
    """Return :func:`_hold_cr` of each stacked panel (``panels x steps x assets``)."""
    if q.shape[1] == 0:
        return [_NAN] * q.shape[0]
    den = np.einsum("rta,rta->rt", q, p0)
    num = np.einsum("rta,rta->rt", q, p1 - p0)
    ok = np.isfinite(den).all(axis=1) & ~(den <= 0.0).any(axis=1) & np.isfinite(num).all(axis=1)
    with np.errstate(all="ignore"):  # the rows left out were never divided alone
        cr = np.prod(1.0 + num / den, axis=1) - 1.0
    return [x if good else _NAN for x, good in zip(cr.tolist(), ok.tolist(), strict=True)]


def _rolling_k_stacked(h: np.ndarray, p: np.ndarray, ks: tuple[int, ...]
                       ) -> list[dict[str, Any]]:
    """Return :func:`rolling_k_figures` of each of the stacked panels ``h`` and ``p``."""
    rows, n = h.shape[0], h.shape[1]
    nan = [_NAN] * rows
    cr0 = _hold_cr_rows(h[:, 0 : n - 1], p[:, 0 : n - 1], p[:, 1:n]) if n - 1 >= 1 else nan
    out: list[dict[str, Any]] = [{"cr0": c, "cr": {}, "delta": {}, "delta_same_window": {}}
                                 for c in cr0]
    for k in ks:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        steps = n - 1 - 2 * k
        cr_k = (_hold_cr_rows(h[:, 0:steps], p[:, k : n - 1 - k], p[:, k + 1 : n - k])
                if steps >= 1 else nan)
        same = (_hold_cr_rows(h[:, k : n - 1 - k], p[:, k : n - 1 - k], p[:, k + 1 : n - k])
                if steps >= 1 else nan)
        key = str(k)
        for fig, c, c0, s in zip(out, cr_k, cr0, same, strict=True):
            fig["cr"][key] = c
            if math.isnan(c):
                fig["delta"][key] = fig["delta_same_window"][key] = _NAN
            else:
                fig["delta"][key] = c - c0
                fig["delta_same_window"][key] = c - s
    return out


def rolling_k_deltas(
    holdings: ArrayLike,
    prices: ArrayLike,
    ks: Iterable[int] = ROLLING_KS,
    *,
    same_window: bool = False,
) -> dict[int, float]:
    """Return ``{k: Delta_k}`` for each ``k``; NaN where ``T`` is too short for that ``k``."""
    h, p = _check_panel(holdings, prices)
    return {int(k): rolling_k_delta(h, p, int(k), same_window=same_window) for k in ks}


# --------------------------------------------------------------------- composite rank (SB Eq. 4)


def _zscores(values: Sequence[float]) -> list[float]:
    """Return population z-scores (ddof=0) over finite entries; constant column -> 0, NaN kept."""
    x = np.asarray(values, dtype=float)
    finite = np.isfinite(x)
    out = np.full(x.shape, np.nan)
    if not finite.any():
        return out.tolist()
    mu = float(np.mean(x[finite]))
    sd = float(np.std(x[finite], ddof=0))
    if sd <= STD_ZERO_RTOL * max(1.0, abs(mu)):
        out[finite] = 0.0
    else:
        out[finite] = (x[finite] - mu) / sd
    return out.tolist()


def composite_rank(
    cr: Mapping[str, float], mdd: Mapping[str, float], sortino: Mapping[str, float]
) -> dict[str, float]:
    """Return the StockBench Eq. 4 composite score per agent (higher is better).

    ``mdd`` is given as a positive drawdown fraction; StockBench prints MDD as a negative number,
    so it enters as ``-MDD``: ``score = (z(CR) + z(-MDD) + z(Sortino)) / 3``. z-scores are taken
    across agents with the population standard deviation (ddof=0); a constant column gives
    z = 0 for everyone. Non-finite inputs are excluded from that column's mean/std and the
    agent's score is NaN. The three mappings must have the same keys (else ``ValueError``).
    """
    agents = list(cr)
    if set(agents) != set(mdd) or set(agents) != set(sortino):
        raise ValueError("cr, mdd and sortino must have the same agents")
    z_cr = _zscores([float(cr[a]) for a in agents])
    z_mdd = _zscores([-float(mdd[a]) for a in agents])
    z_so = _zscores([float(sortino[a]) for a in agents])
    return {a: (z_cr[i] + z_mdd[i] + z_so[i]) / 3.0 for i, a in enumerate(agents)}


# ------------------------------------------------------------------------ CapitalBench scoring


def capitalbench_score(
    weights: Mapping[str, float], asset_returns: Mapping[str, float]
) -> tuple[float, float]:
    """Return ``(score, regret)`` for one CapitalBench-style round.

    Portfolio return ``pr = sum_i w_i * r_i`` with CASH returning 0 by definition (CASH may be
    absent from ``asset_returns``; if present its return must be 0). The scored universe is the
    keys of ``asset_returns``; ``best = max`` over it. ``score = 100 * pr / best`` and
    ``regret = best - pr``. ``score`` is NaN when ``best <= 0`` (no positive opportunity to
    normalise by); regret is still returned. Both are NaN for an empty universe. A weighted
    asset outside the universe (other than CASH) raises ``ValueError``.
    """
    rets = {k: float(v) for k, v in asset_returns.items()}
    if CASH in rets and rets[CASH] != 0.0:
        raise ValueError("CASH return must be 0")
    pr = 0.0
    for asset, w in weights.items():
        if asset == CASH:
            continue
        if asset not in rets:
            raise ValueError(f"weighted asset {asset!r} missing from asset_returns")
        pr += float(w) * rets[asset]
    if not rets:
        return _NAN, _NAN
    best = max(rets.values())
    regret = best - pr
    score = 100.0 * pr / best if best > 0.0 else _NAN
    return score, regret


# -------------------------------------------------------------------------------- PortBench CEPS


# ------------------------------------------------------------------------- risk and regime


@dataclass(frozen=True)
class RiskProfile:
    """Hold a risk profile's drawdown tolerance and daily 95% VaR limit (negative return)."""

    name: str
    max_drawdown: float
    var_limit: float


RISK_PROFILES: dict[str, RiskProfile] = {
    "conservative": RiskProfile("conservative", 0.10, -0.010),
    "balanced": RiskProfile("balanced", 0.20, -0.020),
    "aggressive": RiskProfile("aggressive", 0.35, -0.040),
}


def historical_var(
    returns: ArrayLike,
    level: float = 0.95,
    window: int = 60,
    *,
    min_periods: int | None = None,
) -> float:
    """Return the historical-simulation VaR as a return (losses negative, e.g. -0.012).

    Uses the last ``window`` returns and their ``1 - level`` empirical quantile with numpy's
    default linear interpolation; the value is not clipped (it is positive if even the tail is
    a gain). NaN when fewer than ``min_periods`` (default: ``window``) finite returns exist.
    """
    r = np.asarray(returns, dtype=float).reshape(-1)
    r = r[np.isfinite(r)][-window:]
    need = window if min_periods is None else min_periods
    if r.size < max(need, 1):
        return _NAN
    return linear_quantile(r.tolist(), 1.0 - level)


def linear_quantile(values: Sequence[float], q: float) -> float:
    """Return ``float(np.quantile(values, q))`` of a short list of finite floats, bit for bit.

    numpy's ``linear`` method (the order statistics at ``floor((n - 1) q)`` and the next one,
    interpolated as numpy's ``_lerp`` does) on a sorted copy, without numpy's overhead on a
    short series; when an order statistic is a zero (a sort and numpy's partition may order
    ``0.0`` and ``-0.0`` differently) or ``q`` is an end, ``np.quantile`` itself.
    """
    s = sorted(values)
    n = len(s)
    virtual = (n - 1) * float(q)
    prev = math.floor(virtual)
    if not 0 <= prev < n - 1 or not 0.0 <= q <= 1.0:
        return float(np.quantile(np.asarray(values, dtype=float), q))
    below, above = s[prev], s[prev + 1]
    if below == 0.0 or above == 0.0:
        return float(np.quantile(np.asarray(values, dtype=float), q))
    gamma = virtual - prev
    diff = above - below
    return above - diff * (1.0 - gamma) if gamma >= 0.5 else below + diff * gamma


def profile_alignment(max_dd: float, var95: float, profile: RiskProfile) -> float:
    """Return the share of the profile's checks that pass, in ``[0, 1]``.

    Checks: ``max_dd <= profile.max_drawdown`` (positive fraction) and
    ``var95 >= profile.var_limit`` (VaR no worse than the limit). A check whose input is NaN is
    not evaluable and is left out of the share; NaN when no check is evaluable.
    """
    results: list[bool] = []
    if math.isfinite(max_dd):
        results.append(max_dd <= profile.max_drawdown)
    if math.isfinite(var95):
        results.append(var95 >= profile.var_limit)
    if not results:
        return _NAN
    return sum(results) / len(results)


def regime_label(
    index_returns: ArrayLike, window: int = 20, *, periods: int = TRADING_DAYS_EQUITY
) -> str:
    """Label the market regime over the last ``window`` index returns.

    In order: ``"crisis"`` if the drawdown of the compounded index over the window (starting
    level included as a peak) exceeds 15% or the annualised volatility
    ``std(r, ddof=1) * sqrt(periods)`` exceeds 40%; ``"bull"`` if the window's compounded return
    exceeds +3%; ``"bear"`` if it is below -3%; else ``"sideways"``. Returns ``"unknown"`` when
    fewer than ``window`` (or fewer than 2) returns are available or any is non-finite.
    """
    r = np.asarray(index_returns, dtype=float).reshape(-1)
    w = max(window, 2)
    if r.size < w:
        return REGIME_UNKNOWN
    r = r[-w:]
    if not np.all(np.isfinite(r)):
        return REGIME_UNKNOWN
    level = np.concatenate(([1.0], np.cumprod(1.0 + r)))
    peak = np.maximum.accumulate(level)
    drawdown = float(np.max((peak - level) / peak))
    vol = float(np.std(r, ddof=DDOF)) * math.sqrt(periods)
    if drawdown > REGIME_CRISIS_DRAWDOWN or vol > REGIME_CRISIS_VOL:
        return "crisis"
    total = float(level[-1] - 1.0)
    if total > REGIME_BULL_RETURN:
        return "bull"
    if total < REGIME_BEAR_RETURN:
        return "bear"
    return "sideways"
