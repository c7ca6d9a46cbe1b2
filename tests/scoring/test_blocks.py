"""Issue 27, point 1: the batched Politis-White block lengths equal arch's, series by series."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from arch.bootstrap import optimal_block_length

from scoring.stats.blocks import stationary_block_lengths
from scoring.stats.inference import block_length


def _series(t: int, k: int, seed: int) -> np.ndarray:
    """Return ``t x k`` series: white noise, random walks, AR(1) and coarse (rounded) ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, k)) * rng.uniform(1e-4, 1.0, k)
    x[:, : k // 4] = np.cumsum(x[:, : k // 4], axis=0) * 0.1
    for s in range(1, t):
        x[s, k // 4 : k // 2] += 0.7 * x[s - 1, k // 4 : k // 2]
    x[:, k // 2 : k // 2 + 5] = np.round(x[:, k // 2 : k // 2 + 5], 1)
    return x


@pytest.mark.parametrize("t", [10, 11, 22, 29, 85, 250])
def test_stationary_block_lengths_equal_arch_column_by_column(t: int) -> None:
    x = _series(t, 60, t)
    got = stationary_block_lengths(x.T)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in range(x.shape[1]):  # arch on one column at a time, the reference
            want = float(optimal_block_length(x[:, j])["stationary"].iloc[0])
            assert (math.isnan(want) and math.isnan(got[j])) or got[j] == want


def test_stationary_block_lengths_of_no_series_is_empty() -> None:
    assert stationary_block_lengths(np.empty((0, 30))).shape == (0,)


def test_block_length_with_many_columns_is_the_median_of_arch_per_column() -> None:
    x = _series(85, 41, 3)
    x[:30, 7] = np.nan  # a shorter column: its own length
    x[::9, 8] = np.nan
    x[:, 9] = 0.25  # constant: left out
    x[:80, 10] = np.nan  # too short: left out
    want = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in range(x.shape[1]):
            c = x[:, j][np.isfinite(x[:, j])]
            if c.size < 10 or float(np.std(c)) <= 1e-12 * max(1.0, abs(float(np.mean(c)))):
                continue
            b = float(optimal_block_length(c)["stationary"].iloc[0])
            if math.isfinite(b):
                want.append(min(max(b, 1.0), float(c.size)))
    assert len(want) == 39
    assert block_length(x) == float(np.median(want))
