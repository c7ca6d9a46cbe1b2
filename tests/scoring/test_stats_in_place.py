"""Issue 27, point 1: the resampled cumulative return and Sharpe of a market's agents, computed
in place chunk by chunk, equal the whole expressions on fresh arrays bit for bit."""

from __future__ import annotations

import math

import numpy as np

from scoring.board.significance import _CHUNK, _Market
from scoring.stats.metrics import DDOF, STD_ZERO_RTOL


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=float).view(np.int64)


def test_stats_equal_fresh_expressions() -> None:
    rng = np.random.default_rng(27)
    days = [float(t) for t in range(40)]
    k = _CHUNK + 9  # two chunks
    returns = {f"a{j:03d}": {t: float(x) for t, x in zip(days, rng.normal(4e-4, 0.01, 40),
                                                         strict=True)} for j in range(k)}
    returns["a001"] = dict.fromkeys(days, 0.0)  # no spread: NaN Sharpe
    returns["a002"] = dict.fromkeys(days, 0.001)  # constant: NaN Sharpe, exact centring
    mk = _Market(returns, 0.02, 252)
    d = mk.draws(mk.has[:, 0])
    assert d is not None
    mk.stats(d, range(k))
    n = len(days)
    x = mk.excess[d.days]
    for s in range(0, k, _CHUNK):  # the expressions as first written, per chunk of columns
        xs = x[:, s : s + _CHUNK]
        cum = np.expm1(d.counts @ np.log1p(np.maximum(xs, -1.0 + 1e-12)))
        centre = xs.mean(axis=0)
        xc = xs - centre
        mc = d.counts @ xc / n
        mean = mc + centre
        var = (d.counts @ xc**2 - n * mc**2) / (n - DDOF)
        sd = np.sqrt(np.maximum(var, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            shp = mean / sd * math.sqrt(252)
        shp[sd <= STD_ZERO_RTOL * np.maximum(1.0, np.abs(mean))] = np.nan
        for i in range(xs.shape[1]):
            j = s + i
            assert np.array_equal(_bits(d.cum[j]), _bits(cum[:, i]))
            assert np.array_equal(_bits(d.shp[j]), _bits(shp[:, i]))
    assert np.isnan(d.shp[1]).all() and np.isnan(d.shp[2]).all()
