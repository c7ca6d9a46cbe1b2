"""Issue 27, point 1: the rolling-k figures compounded once equal the one-figure functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scoring.stats.benchmarks import (
    ROLLING_KS,
    rolling_k_delta,
    rolling_k_figures,
    rolling_k_return,
)


def _same(got: float, want: float) -> bool:
    """Tell whether two figures are the same float (NaN equal to NaN)."""
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize(("steps", "bad"), [(1, False), (3, False), (12, False), (40, False),
                                            (40, True), (85, False)])
def test_rolling_k_figures_equal_each_figure_alone(steps: int, bad: bool) -> None:
    rng = np.random.default_rng(steps)
    prices = np.cumprod(1.0 + rng.normal(0.0, 0.02, (steps, 4)), axis=0)
    prices[:, 0] = 1.0  # cash
    held = rng.uniform(0.0, 10.0, (steps, 4))
    if bad:
        held[7] = 0.0  # a step with nothing held: a denominator of 0, NaN from there
    got = rolling_k_figures(held, prices, ROLLING_KS)
    assert _same(got["cr0"], rolling_k_return(held, prices, 0))
    for k in ROLLING_KS:
        assert _same(got["cr"][str(k)], rolling_k_return(held, prices, k))
        assert _same(got["delta"][str(k)], rolling_k_delta(held, prices, k))
        assert _same(got["delta_same_window"][str(k)],
                     rolling_k_delta(held, prices, k, same_window=True))
    finite = [v for v in got["delta_same_window"].values() if math.isfinite(v)]
    assert len(finite) == sum(1 for k in ROLLING_KS if steps - 1 - 2 * k >= 1) or bad
