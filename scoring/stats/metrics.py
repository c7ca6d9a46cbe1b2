"""Per-agent performance metrics over an equity (portfolio value) series.

Pure numpy functions: the measures of LiveTradeBench, AlphaForgeBench and StockBench.

Conventions (see ``docs/scoring.md`` for the full table):

* Simple returns ``r_t = v_t / v_{t-1} - 1``; a series of ``T`` values gives ``T - 1`` returns.
* Annualisation factor ``N``: a per-market setting, 252 by default for both markets
  (LiveTradeBench's convention).
* Sample statistics use ``ddof = 1``.
* The risk-free rate is given per year; the per-period rate is ``rf_annual / N`` (simple, not
  compounded).
* Drawdowns are positive fractions (0 = at the peak, 1 = total loss).
* Series too short for a statistic give ``NaN``; these functions never raise for short input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from itertools import accumulate, chain, pairwise

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.small_sums import np_mean, np_prod, np_std

__all__ = [
    "DDOF",
    "DEFAULT_PERIODS_PER_YEAR",
    "TRADING_DAYS_EQUITY",
    "TRADING_DAYS_POLYMARKET",
    "PerformanceSummary",
    "annualised_return",
    "calmar",
    "cumulative_return",
    "drawdown_series",
    "flip_rate",
    "max_drawdown",
    "mean_daily_turnover",
    "mean_turnover",
    "periods_per_year",
    "sharpe",
    "simple_returns",
    "sortino",
    "sortino_stockbench",
    "starts_at_initial",
    "summarise",
    "summary_parts",
    "turnover",
    "volatility",
    "win_rate",
]

TRADING_DAYS_EQUITY = 252
#: Polymarket trades every day of the year; not the default annualisation (see below).
TRADING_DAYS_POLYMARKET = 365
#: Default annualisation per market: LiveTradeBench's convention, 252 for both (its Polymarket
#: table fits 252, not 365). ``[markets.<m>] periods_per_year`` overrides it.
DEFAULT_PERIODS_PER_YEAR: dict[str, int] = {"equity": 252, "polymarket": 252}
DDOF = 1

# Relative tolerance under which a standard deviation counts as zero.
STD_ZERO_RTOL = 1e-12

_NAN = float("nan")


def periods_per_year(market: str) -> int:
    """Return the default annualisation factor N for a market kind.

    ``"equity"`` and ``"polymarket"`` -> 252 (:data:`DEFAULT_PERIODS_PER_YEAR`,
    case-insensitive); anything else raises ``ValueError``. The configured
    ``periods_per_year`` of a market takes precedence where a config is at hand.
    """
    key = market.strip().lower()
    if key in DEFAULT_PERIODS_PER_YEAR:
        return DEFAULT_PERIODS_PER_YEAR[key]
    raise ValueError(f"unknown market {market!r}; expected 'equity' or 'polymarket'")


def starts_at_initial(first_mark_ts: float | None, first_fill_ts: float | None) -> bool:
    """Tell whether the initial cash starts an equity series before its first mark.

    Issue 27, point 9: only a first fill strictly before the first daily mark adds a period
    (from the initial cash at that fill to the first mark); a first mark at or before the
    first fill (or no fill, or no mark) starts the series itself, so no zero-length period
    repeats the starting value. The report and the live ``/metrics`` figures both use this.
    """
    return first_mark_ts is not None and first_fill_ts is not None and (
        first_fill_ts < first_mark_ts)


def _as_1d(values: ArrayLike) -> np.ndarray:
    """Coerce input to a 1-D float array."""
    return np.asarray(values, dtype=float).reshape(-1)


def simple_returns(values: ArrayLike) -> np.ndarray:
    """Return simple returns ``r_t = v_t / v_{t-1} - 1`` (length ``T - 1``).

    Fewer than two values give an empty array. A zero previous value yields ``inf``/``nan``
    for that step (no warning is emitted).
    """
    v = _as_1d(values)
    if v.size < 2:
        return np.empty(0, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return v[1:] / v[:-1] - 1.0


def cumulative_return(values: ArrayLike) -> float:
    """Return ``CR = v_T / v_0 - 1``; NaN for fewer than two values or ``v_0 == 0``."""
    v = _as_1d(values)
    if v.size < 2 or v[0] == 0.0:
        return _NAN
    return float(v[-1] / v[0] - 1.0)


def _std_is_zero(std: float, mean: float) -> bool:
    """Tell whether a standard deviation is numerically zero relative to the mean."""
    return std <= STD_ZERO_RTOL * max(1.0, abs(mean))


def volatility(returns: ArrayLike, periods: int, *, annualise: bool = True) -> float:
    """Return ``std(r, ddof=1)``, times ``sqrt(periods)`` when ``annualise``.

    NaN for fewer than two returns.
    """
    r = _as_1d(returns)
    if r.size < 2:
        return _NAN
    sigma = float(np.std(r, ddof=DDOF))
    return sigma * math.sqrt(periods) if annualise else sigma


def sharpe(returns: ArrayLike, periods: int, rf_annual: float = 0.0) -> float:
    """Return the annualised Sharpe ratio.

    ``SR = (mean(r) - rf_annual / N) / std(r, ddof=1) * sqrt(N)`` with ``N = periods``.
    NaN for fewer than two returns or a (numerically) zero standard deviation.
    """
    r = _as_1d(returns)
    if r.size < 2:
        return _NAN
    mean = float(np.mean(r))
    std = float(np.std(r, ddof=DDOF))
    if not math.isfinite(std) or _std_is_zero(std, mean):
        return _NAN
    return (mean - rf_annual / periods) / std * math.sqrt(periods)


def sortino(returns: ArrayLike, periods: int, rf_annual: float = 0.0) -> float:
    """Return the standard Sortino ratio (the headline figure), annualised once.

    With the per-period target ``rf = rf_annual / N``: the downside deviation
    ``DD = sqrt(mean_t min(r_t - rf, 0)**2)`` runs over **all** ``T`` returns (a day at or above
    the target contributes 0), and Sortino ``= (mean(r) - rf) / DD * sqrt(N)``. This is the
    convention of AlphaForgeBench (Table 10, with its DD read per period) and of the reference
    libraries (e.g. empyrical's ``sortino_ratio`` with ``required_return = rf``). NaN when there
    are no returns or no return below the target (``DD`` numerically zero: an all-cash agent
    whose cash accrues ``rf`` is never below it, whatever the rounding of its marks).
    """
    r = _as_1d(returns)
    if r.size == 0:
        return _NAN
    target = rf_annual / periods
    down = np.minimum(r - target, 0.0)
    dd = math.sqrt(float(np.mean(down**2)))
    if not math.isfinite(dd) or _std_is_zero(dd, float(np.mean(r)) - target):
        return _NAN
    return (float(np.mean(r)) - target) / dd * math.sqrt(periods)


def sortino_stockbench(returns: ArrayLike, periods: int, rf_annual: float = 0.0) -> float:
    """Return the Sortino ratio of StockBench Eq. 3: the per-period ratio, as its Table 2.

    ``R_p = mean(r) - rf_annual / N`` (the mean excess return of one period) and ``sigma_d =
    sqrt(mean_{r_t < 0} r_t**2)``, where the mean runs over the ``N_d`` strictly negative raw
    returns only (target 0); nothing is annualised (the paper's figures are daily ratios of a
    few hundredths). With rf 0 the standard :func:`sortino` is this ratio times
    ``sqrt(N * T / N_d)``. The StockBench composite rank uses this variant
    (its z-scores do not depend on the scale). NaN when there are no returns or no negative
    returns.
    """
    r = _as_1d(returns)
    if r.size == 0:
        return _NAN
    neg = r[r < 0.0]
    if neg.size == 0:
        return _NAN
    r_p = float(np.mean(r)) - rf_annual / periods
    return r_p / math.sqrt(float(np.mean(neg**2)))


def drawdown_series(values: ArrayLike) -> np.ndarray:
    """Return ``(peak_t - v_t) / peak_t`` per step with ``peak_t = max_{s<=t} v_s``.

    Values lie in ``[0, 1]`` for non-negative series; a zero peak gives NaN at that step.
    """
    v = _as_1d(values)
    if v.size == 0:
        return np.empty(0, dtype=float)
    peak = np.maximum.accumulate(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        dd = (peak - v) / peak
    dd[peak == 0.0] = np.nan
    return dd


def max_drawdown(values: ArrayLike) -> float:
    """Return the maximum drawdown as a positive fraction; NaN for fewer than two values."""
    v = _as_1d(values)
    if v.size < 2:
        return _NAN
    dd = drawdown_series(v)
    if np.isnan(dd).any():
        return _NAN
    return float(np.max(dd))


def win_rate(returns: ArrayLike) -> float:
    """Return the share of returns strictly above zero (over all ``T - 1`` steps); NaN if empty."""
    r = _as_1d(returns)
    if r.size == 0:
        return _NAN
    return float(np.count_nonzero(r > 0.0) / r.size)


def annualised_return(returns: ArrayLike, periods: int) -> float:
    """Return ``ARR = prod(1 + r) ** (N / T) - 1`` with ``T = len(returns)``; NaN if empty."""
    r = _as_1d(returns)
    if r.size == 0:
        return _NAN
    growth = float(np.prod(1.0 + r))
    if not math.isfinite(growth) or growth < 0.0:
        return _NAN
    return growth ** (periods / r.size) - 1.0


def calmar(returns: ArrayLike, values: ArrayLike, periods: int) -> float:
    """Return ``annualised_return(returns) / max_drawdown(values)``; NaN if MDD is 0 or NaN."""
    mdd = max_drawdown(values)
    if not math.isfinite(mdd) or mdd == 0.0:
        return _NAN
    return annualised_return(returns, periods) / mdd


def turnover(prev_weights: Mapping[str, float], new_weights: Mapping[str, float]) -> float:
    """Return ``sum_i |w_new,i - w_old,i|`` over the union of keys (missing = 0).

    For two long-only allocations on the simplex the result lies in ``[0, 2]``. The terms are
    summed exactly (``math.fsum``): a plain sum followed the key set's iteration order, which
    string hashing changes from one process to the next, so the same store's report could
    differ in a last digit between two runs.
    """
    keys = set(prev_weights) | set(new_weights)
    return float(
        math.fsum(abs(float(new_weights.get(k, 0.0)) - float(prev_weights.get(k, 0.0)))
                  for k in keys)
    )


def mean_turnover(weight_seq: Sequence[Mapping[str, float]]) -> float:
    """Return the mean turnover between consecutive allocations; NaN for fewer than two.

    The initial allocation (from nothing) is not counted as a turnover step.
    """
    if len(weight_seq) < 2:
        return _NAN
    return _mean_turnover_of(_weight_steps(weight_seq)[1])


def _weight_steps(weight_seq: Sequence[Mapping[str, float]]
                  ) -> tuple[np.ndarray, list[list[float]]]:
    """Return the changes ``w_t - w_{t-1}`` of two or more allocations (steps x the union of
    their keys, a missing weight 0.0) and their absolute values, as lists.

    The keys are in the allocations' own order when they all list the same keys in the same
    order (then their values are read as they are), else sorted: neither figure made of the
    changes depends on the order of the assets (a turnover is an exact sum over them, a flip
    a change of one asset's sign).
    """
    first = list(weight_seq[0])
    if all(list(a) == first for a in weight_seq):
        width = len(first)
        flat = chain.from_iterable([a.values() for a in weight_seq])
    else:
        keys = sorted(set().union(*weight_seq))
        width, zeros = len(keys), [0.0] * len(keys)
        flat = chain.from_iterable([map(a.get, keys, zeros) for a in weight_seq])
    w = np.fromiter(flat, dtype=float, count=len(weight_seq) * width)
    w = w.reshape(len(weight_seq), width)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, silently, as in Python
        dw = w[1:] - w[:-1]
        return dw, np.abs(dw).tolist()


def _mean_turnover_of(steps: list[list[float]]) -> float:
    """Return :func:`mean_turnover` from the ``|w_new - w_old|`` terms of each step.

    Each step's turnover is :func:`turnover`'s exact sum of the same terms (plus ``|0 - 0|``
    for the keys neither allocation has, which an exact sum ignores); the mean is numpy's.
    """
    return np_mean([math.fsum(terms) for terms in steps])


def mean_daily_turnover(traded_values: Iterable[float], values: ArrayLike) -> float:
    """Return the executed turnover per period: ``sum(traded) / mean(values) / (T - 1)``.

    ``traded_values`` are the gross values traded (buys plus sells, ``sum_i |dq_i| p_i``) of the
    fills counted; ``values`` is the equity series (``T`` points, ``T - 1`` periods). Selling
    everything to buy another asset trades twice the portfolio's value, so the figure shares the
    ``[0, 2]`` per-rebalance scale of :func:`turnover`. 0 without a trade; NaN for fewer than
    two values or a non-positive mean equity.
    """
    return _mean_daily_turnover(traded_values, _as_1d(values).tolist())


def _mean_daily_turnover(traded_values: Iterable[float], values: list[float]) -> float:
    """Return :func:`mean_daily_turnover` of the equity series as a list of floats."""
    if len(values) < 2:
        return _NAN
    mean_equity = np_mean(values)
    if not math.isfinite(mean_equity) or mean_equity <= 0.0:
        return _NAN
    return float(sum(float(x) for x in traded_values)) / mean_equity / (len(values) - 1)


def flip_rate(weight_seq: Sequence[Mapping[str, float]], eps: float = 1e-9) -> float:
    """Return the share of weight changes that reverse the asset's previous non-zero change.

    For every asset ``i`` (union of keys, missing weight = 0) and step ``t >= 1`` let
    ``dw = w_t,i - w_{t-1},i``. A change counts only if ``|dw| > eps``. A counted change is
    *eligible* if the same asset had an earlier counted change; it is a *flip* if its sign is
    opposite to that asset's most recent counted change. Flip rate = flips / eligible changes.
    Holding (``|dw| <= eps``) neither breaks nor resets the chain. NaN when nothing is eligible
    (e.g. fewer than three allocations).
    """
    if len(weight_seq) < 2:
        return _NAN
    return _flip_rate_of(_weight_steps(weight_seq), eps)


def _flip_rate_of(steps: tuple[np.ndarray, list[list[float]]], eps: float = 1e-9) -> float:
    """Return :func:`flip_rate` of two or more allocations from their :func:`_weight_steps`."""
    if steps[0].shape[1] == 0:
        return _NAN
    # All steps of all assets at once (the same float differences and counts as a loop per
    # step and asset): an asset's counted changes in step order, column by column.
    dw = steps[0].T  # assets x steps
    counted = ~(np.abs(dw) <= eps)  # a NaN change counts (and is negative), as it always did
    col = np.nonzero(counted)[0]  # row-major over assets x steps: each asset's steps in order
    up = dw[counted] > 0.0
    same = col[1:] == col[:-1]  # a change with an earlier counted change of the same asset
    eligible = int(np.count_nonzero(same))
    if eligible == 0:
        return _NAN
    return int(np.count_nonzero(same & (up[1:] != up[:-1]))) / eligible


def _none_if_nan(x: float | int) -> float | int | None:
    """Map NaN to None for JSON output."""
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


@dataclass(frozen=True)
class PerformanceSummary:
    """Hold the per-agent performance metrics of one equity series."""

    cumulative_return: float
    annualised_return: float
    volatility: float
    sharpe: float
    sortino: float
    sortino_stockbench: float
    max_drawdown: float
    calmar: float
    win_rate: float
    mean_turnover: float
    target_turnover: float
    flip_rate: float
    n_periods: int

    def to_dict(self) -> dict[str, float | int | None]:
        """Return the fields as a dict with NaN replaced by None."""
        return {k: _none_if_nan(getattr(self, k)) for k in _SUMMARY_FIELDS}


_SUMMARY_FIELDS = tuple(f.name for f in fields(PerformanceSummary))


def summarise(
    values: ArrayLike,
    periods: int,
    rf_annual: float = 0.0,
    weight_seq: Iterable[Mapping[str, float]] = (),
    traded_values: Iterable[float] | None = None,
) -> PerformanceSummary:
    """Compute every per-agent metric for an equity series (and optional trading history).

    ``volatility`` is annualised; ``n_periods`` is the number of returns (``T - 1``).
    ``mean_turnover`` is the executed turnover per period (:func:`mean_daily_turnover` of
    ``traded_values``; NaN when they are not given); ``target_turnover`` is the mean
    target-to-target turnover of ``weight_seq`` (:func:`mean_turnover`).
    """
    return summary_parts(values, periods, rf_annual, weight_seq, traded_values)[0]


def summary_parts(
    values: ArrayLike,
    periods: int,
    rf_annual: float = 0.0,
    weight_seq: Iterable[Mapping[str, float]] = (),
    traded_values: Iterable[float] | None = None,
) -> tuple[PerformanceSummary, np.ndarray, np.ndarray]:
    """Return :func:`summarise` with the returns and the drawdown series it was computed from.

    Each figure is its function's (:func:`sharpe`, :func:`sortino`, ...) bit for bit: the same
    expressions on the same operands, with the mean and standard deviation of the returns, the
    drawdowns and the growth ``prod(1 + r)`` computed once instead of once per figure, on
    Python floats in numpy's order (:mod:`scoring.stats.small_sums`: a few dozen returns cost
    less so than through numpy's calls).
    """
    v = _as_1d(values)
    vl: list[float] = v.tolist()
    if all(0.0 < x < math.inf for x in vl):  # numpy's operations, in Python: no 0, inf or NaN
        rl = [b / a - 1.0 for a, b in pairwise(vl)]
        peaks = list(accumulate(vl, max))
        ddl = [(p - x) / p for p, x in zip(peaks, vl, strict=True)]
        r, dd = np.array(rl, dtype=float), np.array(ddl, dtype=float)
        mdd = max(ddl) if len(vl) >= 2 else _NAN  # no NaN, no -0.0 (np.max's pick of zeros)
    else:
        r, dd = simple_returns(v), drawdown_series(v)
        rl = r.tolist()
        mdd = _NAN if v.size < 2 or np.isnan(dd).any() else float(np.max(dd))
    weights = list(weight_seq)
    n = len(rl)
    root = math.sqrt(periods)
    target = rf_annual / periods
    mean = np_mean(rl) if n else _NAN
    std = np_std(rl, DDOF) if n >= 2 else _NAN
    if n < 2 or not math.isfinite(std) or _std_is_zero(std, mean):
        sharpe_ = _NAN
    else:
        sharpe_ = (mean - rf_annual / periods) / std * root
    sortino_ = sortino_sb = annualised = _NAN
    if n:
        down = [d if not d > 0.0 else 0.0 for d in [x - target for x in rl]]  # np.minimum
        ddev = math.sqrt(np_mean([d * d for d in down]))
        if math.isfinite(ddev) and not _std_is_zero(ddev, mean - target):
            sortino_ = (mean - target) / ddev * root
        neg = [x for x in rl if x < 0.0]
        if neg:
            sortino_sb = (mean - rf_annual / periods) / math.sqrt(np_mean([x * x for x in neg]))
        growth = np_prod([1.0 + x for x in rl])
        if math.isfinite(growth) and growth >= 0.0:
            annualised = growth ** (periods / n) - 1.0
    calmar_ = _NAN if not math.isfinite(mdd) or mdd == 0.0 else annualised / mdd
    steps = _weight_steps(weights) if len(weights) >= 2 else None  # for both figures
    summary = PerformanceSummary(
        cumulative_return=(_NAN if len(vl) < 2 or vl[0] == 0.0 else vl[-1] / vl[0] - 1.0),
        annualised_return=annualised,
        volatility=std * root if n >= 2 else _NAN,
        sharpe=sharpe_,
        sortino=sortino_,
        sortino_stockbench=sortino_sb,
        max_drawdown=mdd,
        calmar=calmar_,
        win_rate=sum(x > 0.0 for x in rl) / n if n else _NAN,
        mean_turnover=(_mean_daily_turnover(traded_values, vl) if traded_values is not None
                       else _NAN),
        target_turnover=_mean_turnover_of(steps[1]) if steps is not None else _NAN,
        flip_rate=_flip_rate_of(steps) if steps is not None else _NAN,
        n_periods=n,
    )
    return summary, r, dd
