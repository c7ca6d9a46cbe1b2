"""Issue 27, point 1: the batched Ledoit-Wolf HAC test equals the one-pair test, pair by pair."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scoring.stats.sharpe_tests import sharpe_difference_hac, sharpe_difference_hac_rows


def _same(got: float, want: float) -> bool:
    """Tell whether two figures are the same float (NaN equal to NaN)."""
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize("days", [5, 6, 7, 22, 85, 250])
def test_hac_rows_equal_the_one_pair_test(days: int) -> None:
    rng = np.random.default_rng(days)
    a = rng.normal(0.001, 0.01, (40, days))
    b = rng.normal(0.0, 0.02, (40, days))
    for t in range(1, days):  # autocorrelated pairs: the HAC lags matter
        b[:10, t] += 0.6 * b[:10, t - 1]
    a[3] = 0.5  # no variance: NaN
    b[4, 2] = np.nan  # a day dropped: the one-pair test itself
    a[5] = b[5]  # the same series: difference 0
    b[6] *= 1e-9
    got = sharpe_difference_hac_rows(a, b)
    for i in range(a.shape[0]):
        want = sharpe_difference_hac(a[i], b[i])
        assert all(_same(g[i], w) for g, w in zip(got, want, strict=True)), i
    if days >= 6:
        assert np.isfinite(got[2]).sum() > 30 and got[0][5] == 0.0


def test_hac_rows_with_set_lags_and_no_rows() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(8, 30)), rng.normal(size=(8, 30))
    got = sharpe_difference_hac_rows(a, b, lags=4)
    for i in range(8):
        assert all(_same(g[i], w) for g, w in
                   zip(got, sharpe_difference_hac(a[i], b[i], lags=4), strict=True))
    assert all(v.shape == (0,) for v in sharpe_difference_hac_rows(np.empty((0, 9)),
                                                                  np.empty((0, 9))))
    with pytest.raises(ValueError):
        sharpe_difference_hac_rows(a, b[:, :20])
