"""Issue 27, point 1: order statistics from windows equal a sort's, row by row; rows a window
misses are reported, and the percentiles built on them equal ``np.quantile``'s bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.stats.inference import quantile_rows
from scoring.stats.order_stats import MIN_WINDOW_N, window_order_stats


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=float).view(np.int64)


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(24, n))
    x[1] = np.round(x[1], 1)  # heavy ties
    x[2] = 0.0  # constant: every window holds the whole row
    x[3] = np.sort(x[3])  # sorted: the leading values place the windows wrongly
    x[4] = np.sort(x[4])[::-1]
    x[5, : n // 3] = np.inf  # infinite values in the top window
    x[6] = rng.standard_cauchy(n)
    x[7] = rng.lognormal(size=n) * 1e-300  # tiny magnitudes
    x[8] = np.where(rng.random(n) < 0.5, -0.0, 0.0)
    x[9, : n // 2] = -1.0  # a tie that holds the lower order statistics
    return x


@pytest.mark.parametrize("n", [MIN_WINDOW_N, 10_000, 12_345])
@pytest.mark.parametrize("q", [[0.025, 0.975], [0.5], [0.001, 0.2, 0.8, 0.999]])
def test_window_order_stats_equal_a_sort(n: int, q: list[float]) -> None:
    x = _rows(n)
    positions = [int(np.floor((n - 1) * v)) for v in q]
    low, high, ok = window_order_stats(x, positions)
    s = np.sort(x, axis=1)
    for i in range(x.shape[0]):
        if not ok[i]:
            assert np.isnan(low[i]).all() and np.isnan(high[i]).all()
            continue
        for j, p in enumerate(positions):
            assert low[i, j] == s[i, p] and high[i, j] == s[i, p + 1], (i, p)
    assert ok[0] and ok[6] and ok[7]  # ordinary draws take the windows
    assert not ok[3] or not ok[4]  # a sorted row is reported, not mis-read


@pytest.mark.parametrize("n", [MIN_WINDOW_N, 10_000])
def test_quantile_rows_with_windows_equal_np_quantile(n: int) -> None:
    x = _rows(n)
    x[5, : n // 3] = 7.0  # quantile_rows takes finite draws
    x = np.vstack([x, np.random.default_rng(1).normal(size=(40, n))])  # several passes
    for q in ([0.025, 0.975], [0.975, 0.025], [0.5], [0.0, 1.0]):
        want = np.quantile(x, q, axis=1).T
        assert np.array_equal(_bits(quantile_rows(x, q)), _bits(want)), q


def test_window_order_stats_refuses_short_rows() -> None:
    with pytest.raises(ValueError):
        window_order_stats(np.zeros((2, MIN_WINDOW_N - 1)), [3])
    with pytest.raises(ValueError):
        window_order_stats(np.zeros((2, MIN_WINDOW_N)), [MIN_WINDOW_N - 1])
