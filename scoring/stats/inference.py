"""Statistical inference on return series (pure numpy).

Implements the seeded percentile bootstrap confidence interval of a statistic, the paired
bootstrap of the difference between two agents over the same days (interval and two-sided
p-value), and an agent's figures relative to a benchmark (excess return, beta, tracking error,
information ratio). Every convention is stated in the docstrings and in ``docs/scoring.md``.
Series too short for a measure give NaN rather than raising; series of different lengths raise
``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.metrics import DDOF, STD_ZERO_RTOL

__all__ = [
    "bootstrap_ci",
    "paired_bootstrap",
    "relative_figures",
]

_NAN = float("nan")


def bootstrap_ci(
    returns: ArrayLike,
    stat: Callable[[np.ndarray], float],
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Return a percentile bootstrap interval ``(lo, hi)`` for ``stat`` over ``returns``.

    Resamples the finite returns i.i.d. with replacement ``n_boot`` times using
    ``numpy.random.default_rng(seed)`` (deterministic given ``seed``) and takes the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the finite statistics.
    ``(NaN, NaN)`` for fewer than two returns or when no resample gives a finite statistic.
    """
    r = np.asarray(returns, dtype=float).reshape(-1)
    r = r[np.isfinite(r)]
    if r.size < 2 or n_boot < 1:
        return _NAN, _NAN
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, r.size, size=(n_boot, r.size))
    stats = np.array([float(stat(r[row])) for row in idx])
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return _NAN, _NAN
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    stat: Callable[[np.ndarray], float],
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    *,
    vectorised: bool = False,
) -> tuple[float, float, float]:
    """Return ``(lo, hi, p)`` of ``stat(a) - stat(b)`` under a paired bootstrap.

    ``a`` and ``b`` are aligned return series (the same days); a day where either is not finite
    is dropped. Each resample draws day indices i.i.d. with replacement, exactly the draws of
    :func:`bootstrap_ci` with the same ``seed`` (so every pair of agents with the same days
    shares the resamples), and applies them to both series, keeping the days paired. The
    interval is the percentile interval of the finite differences; the two-sided p-value is
    ``min(1, 2 * min(P(d <= 0), P(d >= 0)))`` over them. All NaN with fewer than two days or
    no finite difference. With ``vectorised=True`` ``stat`` takes the ``n_boot x days`` matrix
    of resamples and returns one value per row (same result, faster).
    """
    x = np.asarray(a, dtype=float).reshape(-1)
    y = np.asarray(b, dtype=float).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired series differ in length: {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2 or n_boot < 1:
        return _NAN, _NAN, _NAN
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    if vectorised:
        d = np.asarray(stat(x[idx]), dtype=float) - np.asarray(stat(y[idx]), dtype=float)
    else:
        d = np.array([float(stat(x[row])) - float(stat(y[row])) for row in idx])
    d = d[np.isfinite(d)]
    if d.size == 0:
        return _NAN, _NAN, _NAN
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(d, [alpha, 1.0 - alpha])
    p = min(1.0, 2.0 * min(float(np.mean(d <= 0.0)), float(np.mean(d >= 0.0))))
    return float(lo), float(hi), p


def relative_figures(returns: ArrayLike, bench: ArrayLike, periods: int) -> dict[str, float]:
    """Return an agent's figures relative to a benchmark over the same days.

    ``returns`` and ``bench`` are aligned daily returns (a day where either is not finite is
    dropped). ``excess_return = prod(1 + r) - prod(1 + b)`` (cumulative, over those days);
    ``beta = cov(r, b) / var(b)``; active returns ``a = r - b`` give the annualised
    ``tracking_error = std(a) * sqrt(N)`` and ``information_ratio = mean(a) / std(a) * sqrt(N)``
    (ddof 1 throughout). NaN where undefined: fewer than two days, a constant benchmark (beta),
    no active risk (information ratio).
    """
    r = np.asarray(returns, dtype=float).reshape(-1)
    b = np.asarray(bench, dtype=float).reshape(-1)
    if r.shape != b.shape:
        raise ValueError(f"returns and benchmark differ in length: {r.size} and {b.size}")
    keep = np.isfinite(r) & np.isfinite(b)
    r, b = r[keep], b[keep]
    out = {"days": float(r.size), "excess_return": _NAN, "beta": _NAN,
           "tracking_error": _NAN, "information_ratio": _NAN}
    if r.size == 0:
        return out
    out["excess_return"] = float(np.prod(1.0 + r) - np.prod(1.0 + b))
    if r.size < 2:
        return out
    var_b = float(np.var(b, ddof=DDOF))
    if var_b > STD_ZERO_RTOL**2:
        out["beta"] = float(np.cov(r, b, ddof=DDOF)[0, 1]) / var_b
    active = r - b
    sd = float(np.std(active, ddof=DDOF))
    out["tracking_error"] = sd * math.sqrt(periods)
    if sd > STD_ZERO_RTOL * max(1.0, abs(float(np.mean(active)))):
        out["information_ratio"] = float(np.mean(active)) / sd * math.sqrt(periods)
    return out
