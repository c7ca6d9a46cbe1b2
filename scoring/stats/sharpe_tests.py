"""Tests on Sharpe ratios: PSR, DSR, minimum track record length, a HAC Sharpe difference.

Bailey and López de Prado's Probabilistic Sharpe Ratio and minimum track record length ("The
Sharpe Ratio Efficient Frontier", Journal of Risk 15(2), 2012) and Deflated Sharpe Ratio
("The Deflated Sharpe Ratio", Journal of Portfolio Management 40(5), 2014), and Ledoit and
Wolf's HAC test of the difference of two Sharpe ratios ("Robust performance hypothesis testing
with the Sharpe ratio", Journal of Empirical Finance 15, 2008, Section 3.1). Inputs are
per-period (not annualised) excess returns; the normal quantiles are the standard library's
(:class:`statistics.NormalDist`). Pure numpy otherwise. Undefined figures are NaN, never an
exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.metrics import DDOF, STD_ZERO_RTOL

__all__ = [
    "EULER_GAMMA",
    "Moments",
    "deflated_sharpe",
    "expected_max_sharpe",
    "min_track_record",
    "probabilistic_sharpe",
    "sharpe_difference_hac",
    "sharpe_difference_hac_rows",
    "sharpe_moments",
    "sharpe_moments_many",
    "sharpe_moments_rows",
]

#: The Euler-Mascheroni constant of the expected maximum Sharpe ratio (DSR).
EULER_GAMMA = 0.5772156649015329
_NAN = float("nan")
_STANDARD_NORMAL = NormalDist()
#: ``(SR, skewness, kurtosis, T)`` of :func:`sharpe_moments`.
Moments = tuple[float, float, float, int]


def _norm_cdf(x: float) -> float:
    """Return the standard normal distribution function at ``x``."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _norm_ppf(q: float) -> float:
    """Return the standard normal quantile of ``q``: ``-inf`` at 0, ``inf`` at 1, NaN outside
    ``[0, 1]`` (as ``scipy.stats.norm.ppf``; inside, :class:`statistics.NormalDist`'s, Wichura's
    AS 241, within a few units in the last place of scipy's, which tests compare)."""
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else _NAN
    return _STANDARD_NORMAL.inv_cdf(q)


def sharpe_moments(returns: ArrayLike) -> tuple[float, float, float, int]:
    """Return ``(SR, skewness, kurtosis, T)`` of per-period returns.

    ``SR = mean / std(ddof=1)`` per period (not annualised); skewness ``E[(r - m)^3] / s^3``
    and kurtosis ``E[(r - m)^4] / s^4`` (not excess: 3 for a normal) with the population
    ``s``. SR (and the moments) NaN for fewer than three finite returns or a zero std.
    """
    r = np.asarray(returns, dtype=float).reshape(-1)
    r = r[np.isfinite(r)]
    if r.size < 3:
        return _NAN, _NAN, _NAN, int(r.size)
    m = float(np.mean(r))
    sd = float(np.std(r, ddof=DDOF))
    if sd <= STD_ZERO_RTOL * max(1.0, abs(m)):
        return _NAN, _NAN, _NAN, int(r.size)
    c = r - m
    s0 = math.sqrt(float(np.mean(c**2)))
    return m / sd, float(np.mean(c**3)) / s0**3, float(np.mean(c**4)) / s0**4, int(r.size)


def sharpe_moments_rows(rows: np.ndarray) -> list[Moments]:
    """Return :func:`sharpe_moments` of each row of ``rows`` (``k x T``, every value finite).

    The same figures: numpy reduces each contiguous row as it reduces one series (pairwise
    sums), so the matrix's reductions along its rows replace ``k`` calls.
    """
    x = np.ascontiguousarray(rows, dtype=float)
    k, t = x.shape
    undefined = (_NAN, _NAN, _NAN, t)
    if t < 3:
        return [undefined] * k
    m = np.mean(x, axis=1)
    sd = np.std(x, axis=1, ddof=DDOF)
    c = x - m[:, None]
    m2, m3, m4 = np.mean(c**2, axis=1), np.mean(c**3, axis=1), np.mean(c**4, axis=1)
    out: list[Moments] = []
    for mi, sdi, v2, v3, v4 in zip(m.tolist(), sd.tolist(), m2.tolist(), m3.tolist(),
                                   m4.tolist(), strict=True):
        if sdi <= STD_ZERO_RTOL * max(1.0, abs(mi)):
            out.append(undefined)
            continue
        s0 = math.sqrt(v2)
        out.append((mi / sdi, v3 / s0**3, v4 / s0**4, t))
    return out


def sharpe_moments_many(series: Sequence[np.ndarray]) -> list[Moments]:
    """Return :func:`sharpe_moments` of each 1-D series: those of one length at once
    (:func:`sharpe_moments_rows`, the same figures), a series with a non-finite value alone."""
    out: list[Moments | None] = [None] * len(series)
    by_size: dict[int, list[int]] = {}
    for i, x in enumerate(series):
        by_size.setdefault(x.size, []).append(i)
    for idx in by_size.values():
        block = np.vstack([series[i] for i in idx])
        if np.isfinite(block).all():
            for i, mom in zip(idx, sharpe_moments_rows(block), strict=True):
                out[i] = mom
        else:
            for i in idx:
                out[i] = sharpe_moments(series[i])
    return [m for m in out if m is not None]


def _dispersion(sr: float, skew: float, kurt: float) -> float:
    """Return ``1 - skew SR + (kurt - 1) / 4 SR^2`` (the non-normal variance factor)."""
    return 1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr**2


def probabilistic_sharpe(returns: ArrayLike, benchmark: float = 0.0, *,
                         moments: Moments | None = None) -> float:
    """Return the Probabilistic Sharpe Ratio ``P(SR > benchmark)`` (per-period benchmark).

    ``PSR = Phi((SR - SR*) sqrt(T - 1) / sqrt(1 - g3 SR + (g4 - 1) / 4 SR^2))`` with the
    moments of :func:`sharpe_moments` (``moments``: those of ``returns``, computed already).
    NaN when SR is undefined or the factor is not positive.
    """
    sr, g3, g4, n = sharpe_moments(returns) if moments is None else moments
    if not math.isfinite(sr):
        return _NAN
    f = _dispersion(sr, g3, g4)
    if not f > 0.0:
        return _NAN
    return _norm_cdf((sr - benchmark) * math.sqrt(n - 1) / math.sqrt(f))


def expected_max_sharpe(sr_variance: float, trials: int) -> float:
    """Return the expected maximum per-period SR of ``trials`` unskilled strategies.

    ``SR0 = sqrt(V) ((1 - g) Phi^-1(1 - 1/N) + g Phi^-1(1 - 1/(N e)))`` with ``g`` the
    Euler-Mascheroni constant (Bailey and López de Prado 2014, Eq. 2 of the DSR). 0 for a single
    trial or no dispersion; NaN for a non-finite variance.
    """
    if not math.isfinite(sr_variance) or sr_variance < 0.0:
        return _NAN
    if trials < 2 or sr_variance == 0.0:
        return 0.0
    z1 = _norm_ppf(1.0 - 1.0 / trials)
    z2 = _norm_ppf(1.0 - 1.0 / (trials * math.e))
    return math.sqrt(sr_variance) * ((1.0 - EULER_GAMMA) * z1 + EULER_GAMMA * z2)


def deflated_sharpe(returns: ArrayLike, trials: int, sr_variance: float, *,
                    moments: Moments | None = None) -> float:
    """Return the Deflated Sharpe Ratio: the PSR against :func:`expected_max_sharpe`.

    ``sr_variance`` is the variance of the per-period SRs across the ``trials`` strategies
    tried (the agents of the market).
    """
    sr0 = expected_max_sharpe(sr_variance, trials)
    return (probabilistic_sharpe(returns, sr0, moments=moments) if math.isfinite(sr0)
            else _NAN)


def min_track_record(returns: ArrayLike, benchmark: float = 0.0, level: float = 0.95, *,
                     moments: Moments | None = None) -> float:
    """Return the minimum track record length (in periods) for ``SR > benchmark`` at ``level``.

    ``MinTRL = 1 + (1 - g3 SR + (g4 - 1) / 4 SR^2) (z_level / (SR - SR*))^2``; ``inf`` when the
    observed SR does not exceed the benchmark (no track record is long enough); NaN when SR is
    undefined.
    """
    sr, g3, g4, _ = sharpe_moments(returns) if moments is None else moments
    if not math.isfinite(sr):
        return _NAN
    if sr <= benchmark:
        return math.inf
    f = _dispersion(sr, g3, g4)
    if not f > 0.0:
        return _NAN
    return 1.0 + f * (_norm_ppf(level) / (sr - benchmark)) ** 2


def sharpe_difference_hac(a: ArrayLike, b: ArrayLike, lags: int | None = None
                          ) -> tuple[float, float, float]:
    """Return ``(difference, standard error, two-sided p)`` of ``SR(a) - SR(b)`` (HAC).

    Ledoit and Wolf (2008, Section 3.1): the delta method on ``(mean a, mean b, E[a^2],
    E[b^2])`` (population moments, per period), with a Bartlett-kernel HAC estimate of their
    covariance over ``lags`` lags (default the Newey-West rule ``floor(4 (T/100)^(2/9))``) and
    the small-sample factor ``T / (T - 4)``; ``p = 2 (1 - Phi(|d| / se))``. A day where either
    series is not finite is dropped. NaN with fewer than 6 days or a zero variance.
    """
    x = np.asarray(a, dtype=float).reshape(-1)
    y = np.asarray(b, dtype=float).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired series differ in length: {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = x.size
    if n < 6:
        return _NAN, _NAN, _NAN
    mx, my = float(np.mean(x)), float(np.mean(y))
    gx, gy = float(np.mean(x**2)), float(np.mean(y**2))
    vx, vy = gx - mx**2, gy - my**2
    if vx <= STD_ZERO_RTOL**2 or vy <= STD_ZERO_RTOL**2:
        return _NAN, _NAN, _NAN
    diff = mx / math.sqrt(vx) - my / math.sqrt(vy)
    grad = np.array([gx / vx**1.5, -gy / vy**1.5, -mx / (2.0 * vx**1.5), my / (2.0 * vy**1.5)])
    v = np.column_stack([x - mx, y - my, x**2 - gx, y**2 - gy])
    lag = int(4.0 * (n / 100.0) ** (2.0 / 9.0)) if lags is None else int(lags)
    psi = v.T @ v / n
    for j in range(1, min(lag, n - 1) + 1):
        g = v[j:].T @ v[:-j] / n
        psi += (1.0 - j / (lag + 1.0)) * (g + g.T)
    psi *= n / (n - 4.0)
    var = float(grad @ psi @ grad) / n
    if not var > 0.0:
        return diff, _NAN, _NAN
    se = math.sqrt(var)
    return diff, se, 2.0 * (1.0 - _norm_cdf(abs(diff) / se))


def sharpe_difference_hac_rows(a: np.ndarray, b: np.ndarray, lags: int | None = None
                               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return :func:`sharpe_difference_hac` of every row pair ``(a[i], b[i])``, batched.

    ``a`` and ``b`` are ``P x T``; row ``i`` gives exactly
    ``sharpe_difference_hac(a[i], b[i], lags)``: the moments are row reductions of contiguous
    rows (numpy's sums of one series), the HAC matrices one stacked product per lag (the same
    BLAS call per pair) and the scalar steps Python floats, as there. A row pair with a value
    that is not finite takes :func:`sharpe_difference_hac` itself.
    """
    x = np.ascontiguousarray(a, dtype=float)
    y = np.ascontiguousarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"row pairs differ in shape: {x.shape} and {y.shape}")
    pairs, n = x.shape
    diff, se, p = np.full(pairs, _NAN), np.full(pairs, _NAN), np.full(pairs, _NAN)
    if pairs == 0 or n < 6:
        return diff, se, p
    whole = np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1)
    for i in np.flatnonzero(~whole).tolist():
        diff[i], se[i], p[i] = sharpe_difference_hac(x[i], y[i], lags)
    rows = np.flatnonzero(whole)
    x, y = x[rows], y[rows]
    x2, y2 = x**2, y**2
    mx, my = x.mean(axis=1), y.mean(axis=1)
    gx, gy = x2.mean(axis=1), y2.mean(axis=1)
    ok: list[int] = []
    grads: list[list[float]] = []
    for i, (mxi, myi, gxi, gyi) in enumerate(zip(mx.tolist(), my.tolist(), gx.tolist(),
                                                  gy.tolist(), strict=True)):
        vx, vy = gxi - mxi**2, gyi - myi**2
        if vx <= STD_ZERO_RTOL**2 or vy <= STD_ZERO_RTOL**2:
            continue
        diff[rows[i]] = mxi / math.sqrt(vx) - myi / math.sqrt(vy)
        ok.append(i)
        grads.append([gxi / vx**1.5, -gyi / vy**1.5, -mxi / (2.0 * vx**1.5),
                      myi / (2.0 * vy**1.5)])
    if not ok:
        return diff, se, p
    k = np.asarray(ok, dtype=np.intp)
    v = np.empty((k.size, n, 4))
    v[:, :, 0] = x[k] - mx[k][:, None]
    v[:, :, 1] = y[k] - my[k][:, None]
    v[:, :, 2] = x2[k] - gx[k][:, None]
    v[:, :, 3] = y2[k] - gy[k][:, None]
    lag = int(4.0 * (n / 100.0) ** (2.0 / 9.0)) if lags is None else int(lags)
    vt = v.transpose(0, 2, 1)
    psi = vt @ v / n
    for j in range(1, min(lag, n - 1) + 1):
        g = vt[:, :, j:] @ v[:, :-j] / n
        psi += (1.0 - j / (lag + 1.0)) * (g + g.transpose(0, 2, 1))
    psi *= n / (n - 4.0)
    grad = np.asarray(grads)
    var = ((grad[:, None, :] @ psi) @ grad[:, :, None])[:, 0, 0]
    for i, d, vi in zip(rows[k].tolist(), diff[rows[k]].tolist(), (var / n).tolist(),
                        strict=True):
        if vi > 0.0:
            s = math.sqrt(vi)
            se[i], p[i] = s, 2.0 * (1.0 - _norm_cdf(abs(d) / s))
    return diff, se, p
