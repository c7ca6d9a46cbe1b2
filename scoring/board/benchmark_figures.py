"""What a row is measured against beyond its market's prices: the benchmarks and the regime.

Per market, the benchmarks' daily returns keyed by the mark each ends at (the equal-weight
index of the market's universe and the configured benchmark asset, :func:`_benchmarks`) and
each row's figures relative to them over the days both have (:func:`_relative`, bit for bit
:func:`scoring.stats.inference.relative_figures`); the market regime (trailing label of the
equity universe's equal-weight index at each mark, :func:`_regime_by_mark`), the window's
regime and each row's per-regime split. Imports the store's structures
(:mod:`scoring.board.load`), the returns of :mod:`scoring.board.market_window` and the
statistics (:mod:`scoring.stats`) only; the row that uses them is
:mod:`scoring.board.figures`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scoring.board.load import _NAN, _Store
from scoring.board.market_window import _asset_returns
from scoring.stats.benchmarks import regime_label
from scoring.stats.metrics import DDOF, STD_ZERO_RTOL
from scoring.stats.small_sums import np_mean, np_prod, np_std, np_var

REGIME_WINDOW = 20
REGIME_MIN_RETURNS = 5
REGIME_UNKNOWN = "unknown"


# ----------------------------------------------------------------------------- regime


def _by_regime(r: np.ndarray, labels: Sequence[str]) -> dict[str, dict[str, float | int]]:
    """Group daily returns by regime label: days and mean per label."""
    groups: dict[str, list[float]] = defaultdict(list)
    for x, lab in zip(r.tolist(), labels, strict=True):
        if math.isfinite(x):
            groups[lab].append(x)
    return {lab: {"days": len(xs), "mean_daily_return": np_mean(xs)}
            for lab, xs in sorted(groups.items())}


def _regime_by_mark(store: _Store) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Return (equity marks, trailing regime label at each mark, equal-weight index returns)."""
    panel = store.panels.get("equity")
    if panel is None or panel.marks.size == 0:
        return np.empty(0), [], np.empty(0)
    universe = store.markets_cfg.get("equity", {}).get("assets") or panel.assets
    cols = [j for j, a in enumerate(panel.assets) if a in set(universe)]
    r = _asset_returns(panel.prices[:, cols])
    idx = np.full(panel.marks.size, np.nan)  # idx[t]: index return from mark t-1 to mark t
    for t in range(1, panel.marks.size):
        row = r[t - 1][np.isfinite(r[t - 1])]
        if row.size:
            idx[t] = float(np.mean(row))
    labels = [REGIME_UNKNOWN]
    for t in range(1, panel.marks.size):
        hist = idx[1 : t + 1]
        labels.append(regime_label(hist, window=min(REGIME_WINDOW, t))
                      if t >= REGIME_MIN_RETURNS else REGIME_UNKNOWN)
    return panel.marks, labels, idx


def _labels_at(marks: np.ndarray, labels: Sequence[str], ts: Sequence[float]) -> list[str]:
    """Return the label of the latest equity mark at or before each time of ``ts`` (unknown
    before the first), one ``searchsorted`` for all."""
    if not ts:
        return []
    at = (np.searchsorted(marks, np.asarray(ts, dtype=float), side="right") - 1).tolist()
    return [labels[i] if i >= 0 else REGIME_UNKNOWN for i in at]


def _window_regime(marks: np.ndarray, index: np.ndarray, labels: Sequence[str], lo: float,
                   hi: float) -> dict[str, Any]:
    """Label the window's regime from the index returns between its equity marks."""
    inside = [t for t in range(marks.size) if lo <= marks[t] <= hi]
    r = index[inside[1:]] if len(inside) >= 2 else np.empty(0)
    label = regime_label(r, window=max(r.size, 2)) if r.size >= 2 else REGIME_UNKNOWN
    days: dict[str, int] = defaultdict(int)
    for t in inside:
        days[labels[t]] += 1
    return {"label": label, "index_return": float(np.prod(1.0 + r) - 1.0) if r.size else None,
            "index_days": int(r.size), "days_by_label": dict(sorted(days.items()))}


# ----------------------------------------------------------------------------- benchmarks


def _benchmark_asset(markets_cfg: Mapping[str, Any], market: str) -> str:
    """Return the market's configured benchmark asset (SPY for equities by default)."""
    cfg = markets_cfg.get(market) or {}
    return str(cfg.get("benchmark", "SPY" if market == "equity" else "") or "")


def _benchmarks(store: _Store, market: str) -> dict[str, dict[float, float]]:
    """Return the market's benchmark daily returns keyed by the mark each ends at.

    ``equal_weight``: the mean of the mark-to-mark returns of the market's assets priced at
    both marks (the configured equity universe; every Polymarket token), rebalanced daily;
    the benchmark asset's own returns when it is in the universe.
    """
    panel = store.panels[market]
    universe = set(store.markets_cfg.get(market, {}).get("assets") or panel.assets)
    cols = [j for j, a in enumerate(panel.assets) if a in universe]
    r = _asset_returns(panel.prices[:, cols])
    ew: dict[float, float] = {}
    for t in range(1, panel.marks.size):
        row = r[t - 1][np.isfinite(r[t - 1])]
        if row.size:
            ew[float(panel.marks[t])] = float(np.mean(row))
    out = {"equal_weight": ew}
    asset = _benchmark_asset(store.markets_cfg, market)
    if asset and asset in universe and asset in panel.assets:
        j = panel.assets.index(asset)
        own = _asset_returns(panel.prices[:, [j]])[:, 0]
        out[asset] = {float(panel.marks[t]): float(own[t - 1])
                      for t in range(1, panel.marks.size) if math.isfinite(own[t - 1])}
    return out


def _relative(r: np.ndarray, ends: Sequence[float], bench: Mapping[str, Mapping[float, float]],
              n: int, cache: dict[Any, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Return the agent's figures relative to each benchmark over the days both have.

    Each benchmark's :func:`scoring.stats.inference.relative_figures` bit for bit
    (:func:`_relative_figures`), its side computed once per set of days with ``cache``.
    """
    out: dict[str, dict[str, Any]] = {}
    rl = r.tolist()
    for name, series in bench.items():
        days = [(x, t) for x, t in zip(rl, ends, strict=True) if t in series]
        fig = _relative_figures([a for a, _ in days], [series[t] for _, t in days], n,
                                (name, id(series), tuple(t for _, t in days)), cache)
        fig["days"] = len(days)
        out[name] = fig
    return out


def _relative_figures(r: list[float], b: list[float], periods: int, key: tuple[Any, ...],
                      cache: dict[Any, Any] | None) -> dict[str, Any]:
    """Return :func:`scoring.stats.inference.relative_figures` of ``r`` and ``b``, bit for bit.

    Its means, variances and products on Python floats in numpy's order
    (:mod:`scoring.stats.small_sums`) and its covariance by :func:`numpy.cov`'s own operations;
    the benchmark's product and variance from ``cache`` when its days (``key``) were seen.
    """
    keep = [math.isfinite(x) and math.isfinite(y) for x, y in zip(r, b, strict=True)]
    if not all(keep):
        r = [x for x, k in zip(r, keep, strict=True) if k]
        b = [y for y, k in zip(b, keep, strict=True) if k]
        key = (*key, tuple(keep))
    m = len(r)
    out = {"days": float(m), "excess_return": _NAN, "beta": _NAN,
           "tracking_error": _NAN, "information_ratio": _NAN}
    if m == 0:
        return out
    side = cache.get(("bench_side", key)) if cache is not None else None
    if side is None:
        side = (np_prod([1.0 + y for y in b]), np_var(b, DDOF) if m >= 2 else _NAN)
        if cache is not None:
            cache[("bench_side", key)] = side
    prod_b, var_b = side
    out["excess_return"] = np_prod([1.0 + x for x in r]) - prod_b
    if m < 2:
        return out
    if var_b > STD_ZERO_RTOL**2:
        out["beta"] = _cov(r, b) / var_b
    active = [x - y for x, y in zip(r, b, strict=True)]
    sd = np_std(active, DDOF)
    mean = np_mean(active)
    out["tracking_error"] = sd * math.sqrt(periods)
    if sd > STD_ZERO_RTOL * max(1.0, abs(mean)):
        out["information_ratio"] = mean / sd * math.sqrt(periods)
    return out


def _cov(r: list[float], b: list[float]) -> float:
    """Return ``float(np.cov(r, b, ddof=1)[0, 1])`` by :func:`numpy.cov`'s own operations: the
    rows centred on their means (numpy's, :func:`np_mean`), the same ``dot`` of the centred rows
    with their transpose, scaled by ``1 / (n - 1)``; without its checks."""
    mr, mb = np_mean(r), np_mean(b)
    x = np.array([[v - mr for v in r], [v - mb for v in b]], dtype=float)
    c = np.dot(x, x.T.conj())
    return float(c[0, 1]) * (1 / (len(r) - 1))
