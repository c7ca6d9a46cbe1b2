"""Statistical inference on return series: the stationary block bootstrap and its tests.

Resampling is ``arch``'s (:class:`arch.bootstrap.StationaryBootstrap`, Politis and Romano 1994,
with the expected block length of :func:`arch.bootstrap.optimal_block_length`, Politis and White
2004 with Patton, Politis and White 2009's correction), its draws and block lengths reproduced
bit for bit in numpy for every draw at once (tests compare them with arch's; importing arch
alone cost a report more than a second). The draws are seeded and returned as an
index matrix so that one draw serves every agent of a market (each statistic is then a product
of the count matrix with the agents' return matrix). Percentile intervals, two-sided paired
p-values from the resampled null (never below ``1 / (B + 1)``) and an agent's figures relative
to a benchmark (excess return, beta, tracking error, information ratio) are here. Every
convention is stated in the docstrings and in ``docs/scoring.md``. Series too short for a
measure give NaN rather than raising; series of different lengths raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from scoring.stats.blocks import stationary_block_lengths
from scoring.stats.metrics import DDOF, STD_ZERO_RTOL
from scoring.stats.order_stats import MIN_WINDOW_N, window_order_stats

__all__ = [
    "BOOTSTRAP_REPS",
    "MIN_BLOCK_OBS",
    "block_length",
    "bootstrap_ci",
    "finite_quantiles",
    "null_p_value",
    "null_p_values",
    "paired_bootstrap",
    "quantile_rows",
    "relative_figures",
    "resample_counts",
    "stationary_indices",
    "two_pass_variances",
]

_NAN = float("nan")

#: Default number of bootstrap draws (issue 27: at least 10,000).
BOOTSTRAP_REPS = 10_000
#: Fewer observations than this: no Politis-White estimate, the block length is 1 (i.i.d.).
MIN_BLOCK_OBS = 10
_P_ROWS = 16  # rows of draws per pass of null_p_values and quantile_rows


def block_length(x: ArrayLike) -> float:
    """Return the stationary bootstrap's expected block length for ``x`` (Politis-White).

    ``x`` is one series or a ``T x k`` matrix (one column per series); the result is the median
    of :func:`arch.bootstrap.optimal_block_length`'s ``stationary`` column over the columns
    with at least :data:`MIN_BLOCK_OBS` finite, non-constant values (a column's non-finite
    values are dropped), clipped to ``[1, T]``. 1 (i.i.d. resampling) when no column qualifies.
    """
    a = np.asarray(x, dtype=float)
    cols = a.reshape(-1, 1) if a.ndim == 1 else a
    rows = np.ascontiguousarray(cols.T)  # one contiguous row per series: figures as per column
    whole = np.isfinite(rows).all(axis=1)
    by_size: dict[int, list[np.ndarray]] = {}  # series of one length: one batched estimate
    if cols.shape[0] >= MIN_BLOCK_OBS and whole.any():
        full = rows[whole]
        with np.errstate(invalid="ignore", over="ignore"):
            keep = full.std(axis=1) > STD_ZERO_RTOL * np.maximum(1.0, np.abs(full.mean(axis=1)))
        by_size[cols.shape[0]] = list(full[keep])
    for j in np.flatnonzero(~whole).tolist():
        c = rows[j][np.isfinite(rows[j])]
        if c.size < MIN_BLOCK_OBS or float(np.std(c)) <= STD_ZERO_RTOL * max(
                1.0, abs(float(np.mean(c)))):
            continue
        by_size.setdefault(c.size, []).append(c)
    found: list[float] = []
    for size, group in by_size.items():
        if not group:
            continue
        blocks = stationary_block_lengths(np.vstack(group))  # arch's figures, per series
        found += [min(max(float(b), 1.0), float(size)) for b in blocks if math.isfinite(b)]
    return float(np.median(found)) if found else 1.0


def stationary_indices(n_obs: int, block: float, reps: int = BOOTSTRAP_REPS, seed: int = 0
                       ) -> np.ndarray:
    """Return ``reps x n_obs`` day indices of seeded stationary bootstrap draws.

    The draws of ``arch.bootstrap.StationaryBootstrap(block, arange(n_obs), seed=seed)``, in
    order and bit for bit: blocks of geometric length with mean ``block`` starting at uniform
    days, wrapping around the end; ``block = 1`` is i.i.d. resampling. Each draw makes arch's
    two generator calls on ``numpy.random.default_rng(seed)`` (the start days, then the
    uniforms that end a block where ``u <= 1 / block``) in arch's order (their values made for
    every draw at once from the generator's raw outputs, :func:`_drawn_at_once`: about 5x
    faster than 10,000 pairs of calls); the blocks are then laid
    out for every draw at once (arch's compiled loop, vectorised) rather than draw by draw
    through arch, whose import alone (statsmodels, scipy.stats, pandas) cost a report more than
    a second. Tests compare every draw with arch's.
    """
    if n_obs < 1 or reps < 1:
        return np.empty((max(reps, 0), max(n_obs, 0)), dtype=np.int64)
    p = 1.0 / max(float(block), 1.0)  # arch: _p = 1.0 / block_size
    starts, u = _starts_and_uniforms(n_obs, reps, seed)
    # arch's stationary_bootstrap_sample: day t continues day t - 1's block (the next day,
    # wrapping) unless u[t] <= p, when it takes its own start; day 0 always takes its own.
    # So day t is day s's start + (t - s), s the last day at or before t that took its own.
    day = np.arange(n_obs, dtype=np.int64)
    took = u <= p
    took[:, 0] = True
    own = np.where(took, day, 0)
    np.maximum.accumulate(own, axis=1, out=own)
    out = np.take_along_axis(starts, own, axis=1)
    out += day - own
    out %= n_obs
    return out


def _starts_and_uniforms(n_obs: int, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``reps x n_obs`` start days and uniforms of arch's draws: per draw,
    ``gen.integers(n_obs, size=n_obs, dtype=np.int64)`` then ``gen.random(n_obs)`` on
    ``numpy.random.default_rng(seed)``, in that order (:func:`_drawn_at_once`, else one draw
    at a time)."""
    gen = np.random.default_rng(seed)  # arch's generator of an int seed
    if type(gen.bit_generator) is np.random.PCG64:
        drawn = _drawn_at_once(gen, n_obs, reps)
        if drawn is not None and _as_called(drawn, n_obs, seed):
            return drawn
        gen = np.random.default_rng(seed)
    starts = np.empty((reps, n_obs), dtype=np.int64)
    u = np.empty((reps, n_obs))
    integers, uniform = gen.integers, gen.random
    for i in range(reps):  # StationaryBootstrap.update_indices: these two calls, in order
        starts[i] = integers(n_obs, size=n_obs, dtype=np.int64)
        u[i] = uniform(n_obs)
    return starts, u


def _as_called(drawn: tuple[np.ndarray, np.ndarray], n_obs: int, seed: int) -> bool:
    """Return whether the first two draws of ``drawn`` are the generator's own calls: a numpy
    whose mapping of raw outputs differs (another release) gets the calls one draw at a time,
    never other draws than arch's."""
    gen = np.random.default_rng(seed)
    for starts, u in zip(*(a[:2] for a in drawn), strict=True):
        if not (np.array_equal(gen.integers(n_obs, size=n_obs, dtype=np.int64), starts)
                and np.array_equal(gen.random(n_obs), u)):
            return False
    return True


_LOW32 = np.uint64(0xFFFFFFFF)


def _drawn_at_once(gen: np.random.Generator, n_obs: int, reps: int
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Return :func:`_starts_and_uniforms` from one block of ``gen``'s raw 64-bit outputs (a
    fresh PCG64 generator), or None when a start day would need a redraw.

    numpy's calls, in its order: ``random`` makes a uniform of each raw output,
    ``(raw >> 11) * 2**-53``; ``integers`` below ``n_obs`` (< 2**32) takes 32-bit values, the
    low half of a raw output then its high half, kept by the generator for its next 32-bit
    value (a draw of an odd ``n_obs`` leaves one for the next draw's first start, across the
    uniforms between), each mapped to ``(v * n_obs) >> 32`` (Lemire's method), a value with
    ``(v * n_obs) mod 2**32`` below ``2**32 mod n_obs`` redrawn (about one in 2**32 / n_obs:
    then None, and the caller draws one draw at a time). Tested against those calls.
    """
    before = np.arange(reps + 1, dtype=np.int64) * n_obs  # 32-bit values taken before draw i
    took = np.diff(-(-before // 2)) if n_obs > 1 else np.zeros(reps, dtype=np.int64)
    per = took + n_obs  # raw outputs of draw i: its starts' new ones, then its uniforms
    raw = gen.bit_generator.random_raw(int(per.sum()))
    first = np.cumsum(per) - per
    is_start = (np.arange(raw.size) - np.repeat(first, per)) < np.repeat(took, per)
    u = (raw[~is_start].reshape(reps, n_obs) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    if n_obs == 1:  # numpy draws nothing for a range of one value
        return np.zeros((reps, 1), dtype=np.int64), u
    start_raw = raw[is_start]
    halves = np.empty(2 * start_raw.size, dtype=np.uint64)
    halves[0::2] = start_raw & _LOW32
    halves[1::2] = start_raw >> np.uint64(32)
    m = halves[: reps * n_obs] * np.uint64(n_obs)
    if ((m & _LOW32) < np.uint64((2**32 - n_obs) % n_obs)).any():
        return None
    return (m >> np.uint64(32)).astype(np.int64).reshape(reps, n_obs), u


def two_pass_variances(xc: np.ndarray, means: np.ndarray, counts: np.ndarray, n: int
                       ) -> np.ndarray:
    """Return the sample variances (ddof 1) of the resamples ``counts`` (``k x T``, each row
    summing to ``n``) of ``xc`` whose means are ``means``, in two passes:
    ``counts @ (xc - mean)**2 / (n - 1)`` row by row (no cancellation)."""
    dev = xc[None, :] - means[:, None]
    dev *= dev
    dev *= counts
    out: np.ndarray = dev.sum(axis=1) / (n - DDOF)
    return out


def resample_counts(idx: np.ndarray, n_obs: int) -> np.ndarray:
    """Return the ``reps x n_obs`` matrix of how often each day is drawn in each resample.

    A statistic that is a sum over the drawn days is then ``counts @ x``, for every column of
    ``x`` at once.
    """
    reps = idx.shape[0]
    counts = np.zeros((reps, n_obs))
    np.add.at(counts, (np.repeat(np.arange(reps), idx.shape[1]), idx.reshape(-1)), 1.0)
    return counts


def null_p_value(estimate: float, draws: ArrayLike, *, one_sided: bool = False) -> float:
    """Return the bootstrap p-value of ``estimate`` against the resampled null.

    The null distribution is the draws centred on the estimate (``d* - d``): two-sided
    ``(1 + #{|d* - d| >= |d|}) / (B + 1)``, one-sided (H0: ``d <= 0``)
    ``(1 + #{d* - d >= d}) / (B + 1)``, ``B`` the number of finite draws; never below
    ``1 / (B + 1)``. NaN when the estimate or every draw is not finite.
    """
    d = np.asarray(draws, dtype=float).reshape(-1)
    d = d[np.isfinite(d)]
    if d.size == 0 or not math.isfinite(estimate):
        return _NAN
    centred = d - estimate
    hits = (np.count_nonzero(centred >= estimate) if one_sided
            else np.count_nonzero(np.abs(centred) >= abs(estimate)))
    return float((1 + hits) / (d.size + 1))


def null_p_values(estimates: ArrayLike, draws: np.ndarray, *, one_sided: bool = False
                  ) -> np.ndarray:
    """Return the :func:`null_p_value` of each ``estimates[i]`` against ``draws[i]``.

    ``draws`` is ``k x B``; row ``i`` gives exactly
    ``null_p_value(estimates[i], draws[i], one_sided=one_sided)`` (its finite draws only; NaN
    when none is finite or the estimate is not).
    """
    est = np.asarray(estimates, dtype=float).reshape(-1)
    d = np.asarray(draws, dtype=float).reshape(est.size, -1)
    if est.size <= _P_ROWS:
        return _null_p_block(est, d, one_sided)
    out = np.empty(est.size)
    for s in range(0, est.size, _P_ROWS):  # a few rows at a time: the temporaries stay in cache
        out[s : s + _P_ROWS] = _null_p_block(est[s : s + _P_ROWS], d[s : s + _P_ROWS],
                                             one_sided)
    return out


def _null_p_block(est: np.ndarray, d: np.ndarray, one_sided: bool) -> np.ndarray:
    """Return :func:`null_p_values` of the rows of ``d`` (``k x B``) against ``est``."""
    with np.errstate(invalid="ignore", over="ignore"):
        centred = d - est[:, None]
        if one_sided:
            far = centred >= est[:, None]
        else:
            np.abs(centred, out=centred)
            far = centred >= np.abs(est)[:, None]
        # a finite sum: every draw is finite (one fast pass; else the mask, as row by row)
        whole = bool(np.isfinite(d.sum()))
    if whole:
        n = np.full(est.size, d.shape[1])
        # row by row: numpy's count of a whole row is ~2x faster than its count along an axis
        hits = np.array([np.count_nonzero(row) for row in far], dtype=np.intp)
    else:
        fin = np.isfinite(d)
        n = fin.sum(axis=1)
        hits = np.count_nonzero(far & fin, axis=1)
    out = (1 + hits) / (n + 1)
    out[(n == 0) | ~np.isfinite(est)] = np.nan
    return out


def finite_quantiles(x: np.ndarray, level: float) -> np.ndarray:
    """Return the ``level`` percentile intervals (``k x 2``) of the finite values of each row
    of ``x`` (``k x B``); NaN where a row has none."""
    a = (1.0 - level) / 2.0
    q = [a, 1.0 - a]
    with np.errstate(over="ignore", invalid="ignore"):
        total = x.sum()  # finite: every draw is (one pass, about 2x faster than the mask's)
    if math.isfinite(total):
        return quantile_rows(x, q)  # np.quantile's figures, faster
    fin = np.isfinite(x)
    whole = fin.all(axis=1)
    out = np.full((x.shape[0], 2), np.nan)
    if whole.all():
        return quantile_rows(x, q)
    if whole.any():
        out[whole] = quantile_rows(x[whole], q)
    for i in np.flatnonzero(~whole):  # a row with undefined draws: its finite ones only
        row = x[i][fin[i]]
        if row.size:
            out[i] = np.quantile(row, q)
    return out


def quantile_rows(x: np.ndarray, q: Sequence[float]) -> np.ndarray:
    """Return ``np.quantile(x, q, axis=1).T`` (``k x len(q)``) of a ``k x n`` matrix without NaN.

    The same figures bit for bit (numpy's ``linear`` method: the order statistics at
    ``floor((n - 1) q)`` and the next one, interpolated as numpy's ``_lerp`` does), much
    faster on rows of 10,000 draws: rows of at least ``MIN_WINDOW_N`` values take their order
    statistics from windows (:func:`scoring.stats.order_stats.window_order_stats`); the rest,
    and any row a window misses, from a partition of contiguous rows at one position (numpy
    partitions at four positions at once, much slower), the next one the minimum of what lies
    above it. Rows whose two order statistics are both zero take ``np.quantile`` itself (a
    partition may return either of ``0.0`` and ``-0.0``).
    """
    qs = np.asarray(q, dtype=float)
    if x.shape[1] == 0:
        raise ValueError("quantile_rows of an empty row")
    if x.shape[0] <= _P_ROWS:
        return _quantile_block(x, qs)
    out = np.empty((x.shape[0], qs.size))
    for s in range(0, x.shape[0], _P_ROWS):  # a few rows at a time: they stay in cache
        out[s : s + _P_ROWS] = _quantile_block(x[s : s + _P_ROWS], qs)
    return out


def _quantile_block(x: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Return :func:`quantile_rows` of the rows of ``x`` at the quantiles ``qs``."""
    k, n = x.shape
    virtual = (n - 1) * qs
    prev = np.floor(virtual)
    gamma = virtual - prev
    below = np.empty((k, qs.size))
    above = np.empty((k, qs.size))
    positions = prev.astype(np.intp).tolist()
    if n >= MIN_WINDOW_N and all(p + 1 < n for p in positions):
        # the order statistics from windows; a row a window misses takes the partition
        a = np.asarray(x, dtype=float, order="C")
        below, above, ok = window_order_stats(a, positions)
        missed = ~ok
        if missed.any():
            b, c = _partitioned(a[missed], positions)
            below[missed], above[missed] = b, c
    else:
        below, above = _partitioned(x, positions)
    diff = above - below
    out = below + diff * gamma
    np.subtract(above, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    zeros = np.flatnonzero(((below == 0.0) & (above == 0.0)).any(axis=1))
    if zeros.size:
        out[zeros] = np.quantile(np.asarray(x, dtype=float)[zeros], qs, axis=1).T
    return out


def _partitioned(x: np.ndarray, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Return the order statistics ``positions`` and each next one of the rows of ``x``
    (``k x len(positions)`` each), by partitioning a copy of the rows in place."""
    a = np.array(x, dtype=float, order="C", copy=True)
    k, n = a.shape
    below = np.empty((k, len(positions)))
    above = np.empty((k, len(positions)))
    for i, pos in enumerate(positions):
        if pos + 1 >= n:  # numpy takes the largest value for both
            below[:, i] = above[:, i] = a.max(axis=1)
            continue
        a.partition(pos, axis=1)  # in place: each partition is of the whole row
        below[:, i] = a[:, pos]
        above[:, i] = a[:, pos + 1 :].min(axis=1)
    return below, above


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    """Return the percentile interval of the finite ``stats`` (NaN, NaN if none)."""
    lo, hi = finite_quantiles(np.asarray(stats, dtype=float).reshape(1, -1), level)[0]
    return float(lo), float(hi)


def bootstrap_ci(
    returns: ArrayLike,
    stat: Callable[[np.ndarray], float],
    n_boot: int = BOOTSTRAP_REPS,
    level: float = 0.95,
    seed: int = 0,
    *,
    block: float | None = None,
) -> tuple[float, float]:
    """Return a percentile stationary-bootstrap interval ``(lo, hi)`` of ``stat``.

    Resamples the finite returns ``n_boot`` times with :func:`stationary_indices` (block length
    ``block``, default :func:`block_length` of the returns; seeded, so deterministic) and takes
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the finite statistics.
    ``(NaN, NaN)`` for fewer than two returns or when no resample gives a finite statistic.
    """
    r = np.asarray(returns, dtype=float).reshape(-1)
    r = r[np.isfinite(r)]
    if r.size < 2 or n_boot < 1:
        return _NAN, _NAN
    b = block_length(r) if block is None else block
    idx = stationary_indices(r.size, b, n_boot, seed)
    return _quantiles(np.array([float(stat(r[row])) for row in idx]), level)


def paired_bootstrap(
    a: ArrayLike,
    b: ArrayLike,
    stat: Callable[[np.ndarray], float],
    n_boot: int = BOOTSTRAP_REPS,
    level: float = 0.95,
    seed: int = 0,
    *,
    vectorised: bool = False,
    block: float | None = None,
) -> tuple[float, float, float]:
    """Return ``(lo, hi, p)`` of ``stat(a) - stat(b)`` under a paired stationary bootstrap.

    ``a`` and ``b`` are aligned return series (the same days); a day where either is not finite
    is dropped. Each resample draws the same day indices for both series
    (:func:`stationary_indices`, block length ``block`` or :func:`block_length` of both
    columns), keeping the days paired. The interval is the percentile interval of the finite
    resampled differences; ``p`` the two-sided :func:`null_p_value` of the observed
    difference. All NaN with fewer than two days or no finite difference. With
    ``vectorised=True`` ``stat`` takes the ``n_boot x days`` matrix of resamples and returns
    one value per row (same result, faster).
    """
    x = np.asarray(a, dtype=float).reshape(-1)
    y = np.asarray(b, dtype=float).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired series differ in length: {x.size} and {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2 or n_boot < 1:
        return _NAN, _NAN, _NAN
    bl = block_length(np.column_stack([x, y])) if block is None else block
    idx = stationary_indices(x.size, bl, n_boot, seed)
    if vectorised:
        d = np.asarray(stat(x[idx]), dtype=float) - np.asarray(stat(y[idx]), dtype=float)
        est = float(np.asarray(stat(x[None, :]))[0] - np.asarray(stat(y[None, :]))[0])
    else:
        d = np.array([float(stat(x[row])) - float(stat(y[row])) for row in idx])
        est = float(stat(x)) - float(stat(y))
    lo, hi = _quantiles(d, level)
    if not math.isfinite(lo):
        return _NAN, _NAN, _NAN
    return lo, hi, null_p_value(est, d)


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
