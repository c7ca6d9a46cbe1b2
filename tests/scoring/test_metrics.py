"""Tests for scoring.stats.metrics: hand-computed vectors, edge cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.stats.metrics import (
    DDOF,
    TRADING_DAYS_EQUITY,
    TRADING_DAYS_POLYMARKET,
    PerformanceSummary,
    annualised_return,
    calmar,
    cumulative_return,
    drawdown_series,
    flip_rate,
    max_drawdown,
    mean_turnover,
    periods_per_year,
    sharpe,
    simple_returns,
    sortino,
    sortino_stockbench,
    summarise,
    turnover,
    volatility,
    win_rate,
)

SQRT252 = math.sqrt(252)
# r = [0.01, 0.03, -0.01, 0.05]: mean 0.02; deviations -0.01, 0.01, -0.03, 0.03;
# sum of squares 0.0001 + 0.0001 + 0.0009 + 0.0009 = 0.002; var (ddof=1) = 0.002 / 3.
R4 = [0.01, 0.03, -0.01, 0.05]
STD4 = math.sqrt(0.002 / 3)  # 0.025819888...


def test_constants() -> None:
    assert TRADING_DAYS_EQUITY == 252
    assert TRADING_DAYS_POLYMARKET == 365
    assert DDOF == 1


def test_periods_per_year() -> None:
    assert periods_per_year("equity") == 252
    assert periods_per_year("Polymarket") == 252  # LiveTradeBench convention (issue 17.2)
    with pytest.raises(ValueError):
        periods_per_year("crypto")


def test_simple_returns() -> None:
    # 110/100 - 1 = 0.1; 99/110 - 1 = -0.1
    np.testing.assert_allclose(simple_returns([100, 110, 99]), [0.1, -0.1])
    assert simple_returns([100]).size == 0
    assert simple_returns([]).size == 0


def test_cumulative_return() -> None:
    # 99 / 100 - 1 = -0.01
    assert cumulative_return([100, 110, 99]) == pytest.approx(-0.01)
    assert math.isnan(cumulative_return([100]))
    assert math.isnan(cumulative_return([]))


def test_volatility() -> None:
    # r = [0.1, -0.1]: mean 0, sum sq 0.02, var (ddof=1) 0.02 -> std 0.141421...
    assert volatility([0.1, -0.1], 252, annualise=False) == pytest.approx(math.sqrt(0.02))
    assert volatility([0.1, -0.1], 252) == pytest.approx(math.sqrt(0.02) * SQRT252)
    assert volatility(R4, 365) == pytest.approx(STD4 * math.sqrt(365))
    assert math.isnan(volatility([0.1], 252))


def test_sharpe() -> None:
    # 0.02 / 0.0258199 * sqrt(252) = 0.7745967 * 15.8745 = 12.2963
    assert sharpe(R4, 252) == pytest.approx(0.02 / STD4 * SQRT252)
    assert sharpe(R4, 252) == pytest.approx(12.29634, rel=1e-5)
    # rf 2.52% a year -> 0.0001 per period: (0.02 - 0.0001) / std * sqrt(252)
    assert sharpe(R4, 252, rf_annual=0.0252) == pytest.approx(0.0199 / STD4 * SQRT252)


def test_sharpe_nan_cases() -> None:
    assert math.isnan(sharpe([0.01], 252))
    assert math.isnan(sharpe([], 252))
    assert math.isnan(sharpe([0.01, 0.01, 0.01], 252))  # std == 0 (numerically)


def test_sortino_stockbench() -> None:
    # StockBench Eq. 3 as its Table 2: a per-day ratio, nothing annualised (the standard
    # headline is in test_scoring_conventions). Only negative return of R4: -0.01 -> sigma_d
    # sqrt(0.0001) = 0.01; R_p = mean 0.02 -> 2.0.
    assert sortino_stockbench(R4, 252) == pytest.approx(0.02 / 0.01)
    # The standard one divides by all 4 days: sqrt(0.0001 / 4) = 0.005 -> 4 * sqrt(252).
    assert sortino(R4, 252) == pytest.approx(4 * SQRT252)
    # Two negatives -0.02, -0.04: mean sq = (0.0004 + 0.0016)/2 = 0.001 -> sigma_d = 0.031623
    # r = [0.06, -0.02, -0.04, 0.04]: mean 0.01; rf 3.65%/365 = 0.0001 -> excess 0.0099
    r = [0.06, -0.02, -0.04, 0.04]
    assert sortino_stockbench(r, 365, rf_annual=0.0365) == pytest.approx(0.0099 / math.sqrt(0.001))
    # Against numpy on a random daily series of StockBench's length (about 80 sessions): the
    # mean return over the root mean square of the losing days; of the order of Table 2's
    # figures (hundredths) for a few percent over the window.
    rng = np.random.default_rng(7)
    x = rng.normal(0.0003, 0.01, 82)
    want = x.mean() / np.sqrt(np.mean(x[x < 0] ** 2))
    assert sortino_stockbench(x, 252) == pytest.approx(float(want), rel=1e-12)
    assert abs(sortino_stockbench(x, 252)) < 0.2
    assert sortino(x, 252) == pytest.approx(float(want) * math.sqrt(252 * x.size
                                                                    / np.sum(x < 0)))


def test_sortino_nan_without_negatives() -> None:
    assert math.isnan(sortino([0.01, 0.02, 0.0], 252))
    assert math.isnan(sortino([], 252))


def test_drawdown_and_mdd() -> None:
    v = [100, 120, 90, 110, 60, 130]
    # peaks 100,120,120,120,120,130 -> dd 0, 0, 30/120, 10/120, 60/120, 0
    np.testing.assert_allclose(drawdown_series(v), [0, 0, 0.25, 10 / 120, 0.5, 0])
    assert max_drawdown(v) == pytest.approx(0.5)
    assert max_drawdown([100, 101, 102]) == 0.0
    assert max_drawdown([100, 0.0]) == pytest.approx(1.0)
    assert math.isnan(max_drawdown([100]))
    assert drawdown_series([]).size == 0


def test_win_rate() -> None:
    # r > 0 for 0.01 and 0.02 only (0 is not a win): 2 / 4
    assert win_rate([0.01, 0.0, -0.01, 0.02]) == pytest.approx(0.5)
    assert math.isnan(win_rate([]))


def test_annualised_return() -> None:
    # prod(1.1 * 0.9) = 0.99; N/T = 2/2 -> -0.01; N/T = 4/2 -> 0.99^2 - 1 = -0.0199
    assert annualised_return([0.1, -0.1], 2) == pytest.approx(-0.01)
    assert annualised_return([0.1, -0.1], 4) == pytest.approx(-0.0199)
    # 1% per period over 252 periods compounds to 1.01^252 - 1
    assert annualised_return([0.01] * 10, 252) == pytest.approx(1.01**252 - 1)
    assert annualised_return([-1.0, 0.1], 252) == pytest.approx(-1.0)
    assert math.isnan(annualised_return([], 252))


def test_calmar() -> None:
    # v = 100, 120, 90, 108 -> r = 0.2, -0.25, 0.2; prod = 1.2 * 0.75 * 1.2 = 1.08
    # N = T = 3 -> ARR = 0.08; MDD = 30/120 = 0.25 -> Calmar 0.32
    v = [100, 120, 90, 108]
    assert calmar(simple_returns(v), v, 3) == pytest.approx(0.32)
    up = [100, 110, 120]
    assert math.isnan(calmar(simple_returns(up), up, 252))  # MDD == 0


def test_turnover() -> None:
    # |0.2-0.5| + |0-0.5| + |0.8-0| = 0.3 + 0.5 + 0.8 = 1.6
    assert turnover({"A": 0.5, "B": 0.5}, {"A": 0.2, "C": 0.8}) == pytest.approx(1.6)
    assert turnover({"A": 1.0}, {"B": 1.0}) == pytest.approx(2.0)
    assert turnover({"A": 1.0}, {"A": 1.0}) == 0.0


def test_mean_turnover() -> None:
    # A -> B: 2.0; B -> B: 0.0; mean 1.0
    assert mean_turnover([{"A": 1.0}, {"B": 1.0}, {"B": 1.0}]) == pytest.approx(1.0)
    assert math.isnan(mean_turnover([{"A": 1.0}]))
    assert math.isnan(mean_turnover([]))


def test_flip_rate() -> None:
    # A: 0.5, 0.6, 0.4, 0.4, 0.7, 0.8 -> dw +0.1, -0.2, 0, +0.3, +0.1
    #   counted changes +, -, +, + ; eligible 3; flips: (- after +), (+ after -) = 2
    # CASH = 1 - A mirrors it: 3 eligible, 2 flips. Total 4 / 6.
    a = [0.5, 0.6, 0.4, 0.4, 0.7, 0.8]
    seq = [{"A": x, "CASH": 1 - x} for x in a]
    assert flip_rate(seq) == pytest.approx(4 / 6)


def test_flip_rate_edge_cases() -> None:
    # B changes once only -> never eligible; A rises twice -> 1 eligible, 0 flips.
    seq = [{"A": 0.1, "B": 0.9}, {"A": 0.2, "B": 0.8}, {"A": 0.3, "B": 0.8}]
    # B: dw -0.1 then 0 -> one counted change; A: +, + -> eligible 1, flips 0.
    # CASH implicit: not a key. Total eligible 1, flips 0.
    assert flip_rate(seq) == 0.0
    # changes below eps are ignored entirely
    assert math.isnan(flip_rate([{"A": 0.5}, {"A": 0.5 + 1e-12}, {"A": 0.5}]))
    assert math.isnan(flip_rate([{"A": 1.0}, {"B": 1.0}]))  # nothing has a previous change
    assert math.isnan(flip_rate([]))
    # always-alternating allocation flips every eligible time
    alt = [{"A": 1.0}, {"B": 1.0}] * 3
    assert flip_rate(alt) == pytest.approx(1.0)


def test_summarise() -> None:
    v = [100, 120, 90, 108]
    w = [{"A": 1.0}, {"B": 1.0}, {"A": 1.0}]
    s = summarise(v, 3, weight_seq=w)
    assert isinstance(s, PerformanceSummary)
    assert s.n_periods == 3
    assert s.cumulative_return == pytest.approx(0.08)
    assert s.annualised_return == pytest.approx(0.08)
    assert s.max_drawdown == pytest.approx(0.25)
    assert s.calmar == pytest.approx(0.32)
    assert s.win_rate == pytest.approx(2 / 3)
    assert s.target_turnover == pytest.approx(2.0)
    assert math.isnan(s.mean_turnover)  # executed turnover needs the traded values
    traded = summarise(v, 3, weight_seq=w, traded_values=[216.0, 216.0])
    # 432 traded over a mean equity of (100 + 120 + 90 + 108) / 4 = 104.5, 3 returns.
    assert traded.mean_turnover == pytest.approx(432 / 104.5 / 3)
    assert s.flip_rate == pytest.approx(1.0)
    r = simple_returns(v)
    assert s.volatility == pytest.approx(float(np.std(r, ddof=1)) * math.sqrt(3))
    assert s.sharpe == pytest.approx(sharpe(r, 3))
    assert s.sortino == pytest.approx(sortino(r, 3))


def test_summarise_short_series_is_nan_not_raise() -> None:
    s = summarise([100.0], 252)
    assert s.n_periods == 0
    d = s.to_dict()
    assert d["n_periods"] == 0
    for key, value in d.items():
        if key != "n_periods":
            assert value is None, key
    d2 = summarise([], 365).to_dict()
    assert d2["cumulative_return"] is None


def test_to_dict_keeps_finite_values() -> None:
    d = summarise([100, 110, 99, 120], 252).to_dict()
    assert d["cumulative_return"] == pytest.approx(0.2)
    assert d["mean_turnover"] is None
    assert set(d) == {
        "cumulative_return",
        "annualised_return",
        "volatility",
        "sharpe",
        "sortino",
        "sortino_stockbench",
        "max_drawdown",
        "calmar",
        "win_rate",
        "mean_turnover",
        "target_turnover",
        "flip_rate",
        "n_periods",
    }


# ----------------------------------------------------------------------------- properties

_positive_values = st.lists(
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=2,
    max_size=60,
)


@st.composite
def _simplex(draw: st.DrawFn, keys: tuple[str, ...] = ("A", "B", "C", "CASH")) -> dict:
    raw = draw(st.lists(st.floats(0.0, 1.0), min_size=len(keys), max_size=len(keys)))
    total = sum(raw)
    if total == 0.0:
        return {"CASH": 1.0}
    return {k: x / total for k, x in zip(keys, raw, strict=True) if x > 0.0}


@settings(max_examples=100, deadline=None)
@given(_positive_values)
def test_mdd_in_unit_interval(values: list[float]) -> None:
    mdd = max_drawdown(values)
    assert 0.0 <= mdd <= 1.0
    dd = drawdown_series(values)
    assert np.all((dd >= 0.0) & (dd <= 1.0))
    assert mdd == pytest.approx(float(dd.max()))


@settings(max_examples=100, deadline=None)
@given(_simplex(), _simplex())
def test_turnover_in_zero_two(a: dict, b: dict) -> None:
    tau = turnover(a, b)
    assert -1e-12 <= tau <= 2.0 + 1e-12
    assert tau == pytest.approx(turnover(b, a))


@settings(max_examples=50, deadline=None)
@given(_positive_values, st.floats(min_value=0.01, max_value=100.0))
def test_scale_invariance(values: list[float], scale: float) -> None:
    scaled = [v * scale for v in values]
    assert max_drawdown(scaled) == pytest.approx(max_drawdown(values), abs=1e-9)
    assert cumulative_return(scaled) == pytest.approx(cumulative_return(values), rel=1e-9)
