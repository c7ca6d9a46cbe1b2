"""Benchmark-level measures from the reference papers (pure numpy).

Implements the papers' benchmark measures (docs/scoring.md names them): LiveTradeBench rolling-k
deltas, the StockBench composite rank, CapitalBench round scoring, PortBench correlation-aware
diversification and CEPS, historical VaR and risk-profile alignment, a simple market-regime
label and a seeded bootstrap confidence interval. Every convention is stated in the docstrings
and in ``docs/scoring.md``. Series too short for a measure give NaN rather than raising;
malformed input (mismatched shapes, missing keys) raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.metrics import DDOF, TRADING_DAYS_EQUITY

__all__ = [
    "CASH",
    "REGIME_BULL_RETURN",
    "REGIME_CRISIS_DRAWDOWN",
    "REGIME_CRISIS_VOL",
    "RISK_PROFILES",
    "ROLLING_KS",
    "ClassCorrelations",
    "RiskProfile",
    "bootstrap_ci",
    "capitalbench_score",
    "ceps",
    "class_correlations",
    "composite_rank",
    "diversification",
    "diversification_from_returns",
    "historical_var",
    "paired_bootstrap",
    "profile_alignment",
    "regime_label",
    "relative_figures",
    "rolling_k_delta",
    "rolling_k_deltas",
    "rolling_k_return",
    "s_corr",
    "s_inter",
    "s_intra",
]

CASH = "CASH"
ROLLING_KS: tuple[int, ...] = (1, 2, 4, 8, 16)
CEPS_DROP_PENALTY = 0.1
#: ``s_inter`` of a portfolio with fewer than two weighted classes: no hedging credit.
SINGLE_CLASS_S_INTER = 0.0
REGIME_CRISIS_DRAWDOWN = 0.15
REGIME_CRISIS_VOL = 0.40
REGIME_BULL_RETURN = 0.03
REGIME_BEAR_RETURN = -0.03
REGIME_UNKNOWN = "unknown"

_NAN = float("nan")
_STD_ZERO_RTOL = 1e-12


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
    if not np.all(np.isfinite(den)) or np.any(den <= 0.0) or not np.all(np.isfinite(num)):
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
    if sd <= _STD_ZERO_RTOL * max(1.0, abs(mu)):
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


# ---------------------------------------------------------- PortBench correlation diversification


def s_intra(class_weights: Mapping[str, float], rho_intra: Mapping[str, float]) -> float:
    """Return ``clip(1 - sum_c w_c * max(rho_intra_c, 0), 0, 1)``.

    Classes with zero weight are ignored; a weighted class missing from ``rho_intra`` raises
    ``ValueError``.
    """
    total = 0.0
    for c, w in class_weights.items():
        if float(w) == 0.0:
            continue
        if c not in rho_intra:
            raise ValueError(f"rho_intra missing for class {c!r}")
        total += float(w) * max(float(rho_intra[c]), 0.0)
    return float(np.clip(1.0 - total, 0.0, 1.0))


def _pair_rho(pairs: Mapping[tuple[str, str], float], c: str, d: str) -> float:
    """Look up ``rho(c, d)`` under either key order."""
    if (c, d) in pairs:
        return float(pairs[(c, d)])
    if (d, c) in pairs:
        return float(pairs[(d, c)])
    raise ValueError(f"rho_cross missing for classes ({c!r}, {d!r})")


def s_inter(
    class_weights: Mapping[str, float], rho_cross_pairs: Mapping[tuple[str, str], float]
) -> float:
    """Return ``clip((1 - rho_cross) / 2, 0, 1)``.

    ``rho_cross = sum_{c != d} w_c w_d rho(c, d) / sum_{c != d} w_c w_d`` over ordered pairs of
    weighted classes (``rho`` is symmetric, either key order is accepted). Single-class
    convention (PortBench leaves ``0 / 0`` open): with fewer than two weighted classes there is
    no other class to hedge with, so the hedging credit is ``s_inter = 0``, the value of fully
    correlated classes.
    """
    held = [(c, float(w)) for c, w in class_weights.items() if float(w) != 0.0]
    num = 0.0
    den = 0.0
    for i, (c, wc) in enumerate(held):
        for d, wd in held[i + 1 :]:
            ww = 2.0 * wc * wd  # both orders (c, d) and (d, c)
            num += ww * _pair_rho(rho_cross_pairs, c, d)
            den += ww
    if den == 0.0:
        return SINGLE_CLASS_S_INTER
    rho_cross = num / den
    return float(np.clip((1.0 - rho_cross) / 2.0, 0.0, 1.0))


def s_corr(
    class_weights: Mapping[str, float],
    rho_intra: Mapping[str, float],
    rho_cross_pairs: Mapping[tuple[str, str], float],
) -> float:
    """Return ``0.5 * s_intra + 0.5 * s_inter``."""
    return 0.5 * s_intra(class_weights, rho_intra) + 0.5 * s_inter(class_weights, rho_cross_pairs)


def _corr_matrix(x: np.ndarray) -> np.ndarray:
    """Return the Pearson correlation matrix; pairs involving a zero-variance column give 0.

    The diagonal is 1 for non-constant columns and 0 for constant ones (same rule).
    """
    xc = x - x.mean(axis=0)
    ss = np.einsum("ta,ta->a", xc, xc)
    std = np.sqrt(ss / max(x.shape[0] - 1, 1))
    live = std > _STD_ZERO_RTOL * np.maximum(1.0, np.abs(x.mean(axis=0)))
    cov = xc.T @ xc
    norm = np.sqrt(np.outer(ss, ss))
    c = np.zeros_like(cov)
    mask = np.outer(live, live)
    c[mask] = cov[mask] / norm[mask]
    return np.clip(c, -1.0, 1.0)


def _pairwise_corr(x: np.ndarray) -> np.ndarray:
    """Return Pearson correlations of every column pair over their pairwise-complete rows.

    A pair uses the rows where both columns are finite; fewer than two such rows give NaN. A
    column that is constant over those rows (e.g. CASH) correlates 0 with everything, itself
    included (:func:`_corr_matrix`).
    """
    fin = np.isfinite(x)
    if fin.all():
        return _corr_matrix(x) if x.shape[0] >= 2 else np.full((x.shape[1],) * 2, np.nan)
    a = x.shape[1]
    out = np.full((a, a), np.nan)
    for i in range(a):
        for j in range(i, a):
            rows = fin[:, i] & fin[:, j]
            if int(rows.sum()) < 2:
                continue
            c = _corr_matrix(x[rows][:, [i, j]])
            out[i, j] = out[j, i] = c[0, 1] if i != j else c[0, 0]
    return out


def _nanmean(values: np.ndarray) -> float:
    """Return the mean of the finite values; NaN when there is none."""
    v = values[np.isfinite(values)]
    return float(np.mean(v)) if v.size else _NAN


@dataclass(frozen=True)
class ClassCorrelations:
    """Hold the class correlations of a universe (PortBench: over the whole class)."""

    classes: dict[str, str]
    """Asset -> class."""
    intra: dict[str, float]
    """Class -> mean off-diagonal correlation among all its members (see below)."""
    cross: dict[tuple[str, str], float]
    """(class, class) in sorted order -> mean correlation over all cross member pairs."""
    riskless: frozenset[str]
    """Assets whose return series is constant (CASH): nothing at risk in them."""


def class_correlations(
    returns: ArrayLike, assets: Sequence[str], asset_classes: Mapping[str, str]
) -> ClassCorrelations:
    """Return PortBench's class correlations from a ``T x A`` returns panel (columns = ``assets``).

    As in PortBench (Appendix C.1), ``rho_intra_c`` is the mean off-diagonal Pearson
    correlation over **all** members of class ``c`` in the universe, held or not, and
    ``rho(c, d)`` the mean over all member pairs across ``c`` and ``d``. Correlations use
    pairwise-complete rows (PortBench's estimation); a pair with fewer than two common rows is
    left out of the means (a mean with no pair is NaN). A constant series (CASH) correlates 0
    with everything. A class with a single member has no off-diagonal pair: its
    ``rho_intra`` is that member's self-correlation, 1 for a risky asset (holding one asset
    is the most concentrated holding) and 0 for a constant one. Every asset must have a
    class (else ``ValueError``).
    """
    r = np.asarray(returns, dtype=float)
    if r.ndim != 2 or r.shape[1] != len(assets):
        raise ValueError(f"returns must be T x {len(assets)}, got shape {r.shape}")
    missing = [a for a in assets if a not in asset_classes]
    if missing:
        raise ValueError(f"asset {missing[0]!r} missing from asset_classes")
    corr = _pairwise_corr(r)
    members: dict[str, list[int]] = {}
    for j, a in enumerate(assets):
        members.setdefault(asset_classes[a], []).append(j)
    intra: dict[str, float] = {}
    for c, js in members.items():
        if len(js) == 1:
            intra[c] = float(corr[js[0], js[0]])
        else:
            block = corr[np.ix_(js, js)]
            intra[c] = _nanmean(block[~np.eye(len(js), dtype=bool)])
    cross: dict[tuple[str, str], float] = {}
    names = sorted(members)
    for i, c in enumerate(names):
        for d in names[i + 1 :]:
            cross[(c, d)] = _nanmean(corr[np.ix_(members[c], members[d])].reshape(-1))
    diag = np.diag(corr)
    riskless = frozenset(a for j, a in enumerate(assets) if diag[j] == 0.0)
    return ClassCorrelations({a: asset_classes[a] for a in assets}, intra, cross, riskless)


def diversification(
    weights: Mapping[str, float], corr: ClassCorrelations
) -> dict[str, float]:
    """Return ``{"s_intra", "s_inter", "s_corr"}`` of ``weights`` under class correlations.

    Only held assets (weight > 0) enter; ``w_c`` is the sum of the held weights of class ``c``
    (taken as given, not renormalised). With fewer than two held classes ``s_inter`` is 0 (no
    other class to hedge with, see :func:`s_inter`). All NaN when nothing is held, when every
    held asset is riskless (all cash: nothing at risk, nothing to diversify) or when a held
    class's correlation is undefined. A held asset outside the universe raises ``ValueError``.
    """
    nan_result = {"s_intra": _NAN, "s_inter": _NAN, "s_corr": _NAN}
    class_weights: dict[str, float] = {}
    at_risk = False
    for a, w in weights.items():
        if float(w) <= 0.0:
            continue
        if a not in corr.classes:
            raise ValueError(f"weighted asset {a!r} missing from assets")
        c = corr.classes[a]
        class_weights[c] = class_weights.get(c, 0.0) + float(w)
        at_risk = at_risk or a not in corr.riskless
    if not class_weights or not at_risk:
        return nan_result
    held = sorted(class_weights)
    pairs = {(c, d): corr.cross.get((c, d), _NAN)
             for i, c in enumerate(held) for d in held[i + 1 :]}
    rhos = [corr.intra.get(c, _NAN) for c in held] + list(pairs.values())
    if not all(math.isfinite(x) for x in rhos):
        return nan_result
    si = s_intra(class_weights, corr.intra)
    se = s_inter(class_weights, pairs)
    return {"s_intra": si, "s_inter": se, "s_corr": 0.5 * si + 0.5 * se}


def diversification_from_returns(
    weights: Mapping[str, float],
    asset_classes: Mapping[str, str],
    returns: ArrayLike,
    assets: Sequence[str],
) -> dict[str, float]:
    """Return ``{"s_intra", "s_inter", "s_corr"}`` of ``weights`` from a ``T x A`` returns panel.

    :func:`class_correlations` over the whole universe ``assets`` (the columns of
    ``returns``), then :func:`diversification`. Conventions there: whole-class correlations,
    a one-member class has ``rho_intra`` 1 (0 if riskless), a single held class gets
    ``s_inter = 0``, all cash is NaN.
    """
    return diversification(weights, class_correlations(returns, assets, asset_classes))


def ceps(stage_scores: Sequence[float]) -> float:
    """Return CEPS ``clip(mean(s) - 0.1 * sum_t max(s_t - s_{t+1}, 0), 0, 1)``.

    The drop sum runs over consecutive stage pairs (t = 1..4 for the reference five stages).
    NaN for an empty sequence.
    """
    s = np.asarray(stage_scores, dtype=float).reshape(-1)
    if s.size == 0:
        return _NAN
    drops = float(np.sum(np.maximum(s[:-1] - s[1:], 0.0)))
    return float(np.clip(float(np.mean(s)) - CEPS_DROP_PENALTY * drops, 0.0, 1.0))


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
    return float(np.quantile(r, 1.0 - level))


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
    if var_b > _STD_ZERO_RTOL**2:
        out["beta"] = float(np.cov(r, b, ddof=DDOF)[0, 1]) / var_b
    active = r - b
    sd = float(np.std(active, ddof=DDOF))
    out["tracking_error"] = sd * math.sqrt(periods)
    if sd > _STD_ZERO_RTOL * max(1.0, abs(float(np.mean(active)))):
        out["information_ratio"] = float(np.mean(active)) / sd * math.sqrt(periods)
    return out
