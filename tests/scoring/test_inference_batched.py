"""Issue 27, point 1: the batched p-values and block lengths equal the one-at-a-time ones, and
the windows' order statistics by a row sort equal those of the partition they replaced."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from arch.bootstrap import optimal_block_length

from scoring.stats.inference import block_length, null_p_value, null_p_values
from scoring.stats.order_stats import _two_order_stats, stacked


def test_null_p_values_equal_null_p_value_row_by_row() -> None:
    rng = np.random.default_rng(5)
    draws = rng.normal(0.1, 1.0, (6, 500))
    draws[1, ::7] = np.nan  # undefined draws are left out of that row only
    draws[2] = np.nan  # no finite draw: NaN
    draws[5] = rng.normal(5.0, 0.1, 500)  # far from 0: no centred draw reaches |5|
    est = np.array([0.1, -0.3, 0.2, float("nan"), 0.0, 5.0])
    got = null_p_values(est, draws)
    for i in range(6):
        want = null_p_value(float(est[i]), draws[i])
        assert (math.isnan(got[i]) and math.isnan(want)) or got[i] == want
    assert got[5] == 1 / 501  # never below 1 / (B + 1)


def test_block_length_is_the_median_of_arch_per_column() -> None:
    rng = np.random.default_rng(11)
    e = rng.normal(size=(90, 7))
    x = e.copy()
    for t in range(1, 90):  # AR(1) columns with different persistence
        x[t] = np.linspace(0.0, 0.8, 7) * x[t - 1] + e[t]
    x[:20, 3] = np.nan  # a shorter column: its own length
    x[:, 5] = 1.0  # constant: left out
    want = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in (0, 1, 2, 3, 4, 6):
            c = x[:, j][np.isfinite(x[:, j])]
            want.append(min(max(float(optimal_block_length(c)["stationary"].iloc[0]), 1.0),
                            float(c.size)))
    assert block_length(x) == float(np.median(want))


def test_null_p_values_of_many_rows_equal_null_p_value_row_by_row() -> None:
    rng = np.random.default_rng(8)
    draws = rng.normal(0.05, 1.0, (53, 300))  # more rows than one pass takes
    draws[17, ::5] = np.nan  # undefined draws in one pass only
    draws[40] = np.nan
    est = rng.normal(0.0, 0.5, 53)
    est[3] = np.nan
    for one_sided in (False, True):
        got = null_p_values(est, draws, one_sided=one_sided)
        assert got.shape == (53,)
        for i in range(53):
            want = null_p_value(float(est[i]), draws[i], one_sided=one_sided)
            assert (math.isnan(got[i]) and math.isnan(want)) or got[i] == want
        assert np.isnan(got[[3, 40]]).all() and np.isfinite(got).sum() == 51


@pytest.mark.parametrize("width", [300, 901, 2_000])
def test_two_order_stats_equal_the_partition_bit_for_bit(width: int) -> None:
    rng = np.random.default_rng(width)
    packed = rng.normal(size=(40, width))
    packed[1] = np.round(packed[1], 1)  # ties
    packed[2] = np.where(rng.random(width) < 0.5, -0.0, 0.0)  # zeros of both signs
    packed[3, : width // 2] = np.where(rng.random(width // 2) < 0.5, -0.0, 0.0)  # and others
    packed[4, width // 2 :] = np.inf  # the padding of a short window
    packed[5] = -np.abs(packed[5])
    packed[5, :7] = 0.0
    packed[5, 7:14] = -0.0
    for p in (0, 3, width // 4, width // 2 - 1, width - 2):
        want = packed.copy()
        want.partition([p, p + 1], axis=1)
        lo, hi = _two_order_stats(packed.copy(), p)
        bits = np.ascontiguousarray(want[:, [p, p + 1]]).view(np.int64)
        assert np.array_equal(np.column_stack([lo, hi]).view(np.int64), bits), p
        ordered = np.sort(packed, axis=1)  # the values (0.0 == -0.0) of a sort, row by row
        assert np.array_equal(lo, ordered[:, p]) and np.array_equal(hi, ordered[:, p + 1]), p


def test_stacked_rows_equal_vstack_and_share_only_consecutive_rows() -> None:
    m = np.ascontiguousarray(np.random.default_rng(3).normal(size=(50, 12)).T)  # 12 rows
    rows = list(m)
    for pick in ([0, 1, 2], [4, 5, 6, 7, 8], [11], [2, 4], [3, 2, 1], [0, 0], list(range(12))):
        got = stacked([rows[i] for i in pick])
        assert np.array_equal(got.view(np.int64), np.vstack([rows[i] for i in pick]).view(np.int64))
        consecutive = pick == list(range(pick[0], pick[0] + len(pick)))
        assert np.shares_memory(got, m) == consecutive, pick
    other = np.ones((3, 50))
    mixed = stacked([rows[0], other[1]])
    assert not np.shares_memory(mixed, m) and np.array_equal(mixed, np.vstack([rows[0], other[1]]))
    assert not np.shares_memory(stacked([m[1, ::2], m[2, ::2]]), m)  # strided: copied
