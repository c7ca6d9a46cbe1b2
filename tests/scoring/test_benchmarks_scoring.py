"""Tests for scoring.stats.benchmarks, .diversification and .inference: reference vectors,
hand-computed cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.stats.benchmarks import (
    RISK_PROFILES,
    RiskProfile,
    capitalbench_score,
    composite_rank,
    historical_var,
    profile_alignment,
    regime_label,
    rolling_k_delta,
    rolling_k_deltas,
    rolling_k_return,
)
from scoring.stats.diversification import diversification_from_returns, s_corr, s_inter, s_intra
from scoring.stats.inference import bootstrap_ci
from scoring.stats.metrics import cumulative_return

# ------------------------------------------------------------------ PortBench reference vector
# equities w .6 rho .48, bonds w .4 rho .77, rho(eq, bond) = -.18
W = {"equities": 0.6, "bonds": 0.4}
RHO_INTRA = {"equities": 0.48, "bonds": 0.77}
RHO_CROSS = {("equities", "bonds"): -0.18}


def test_s_intra_vector() -> None:
    # 1 - (0.6 * 0.48 + 0.4 * 0.77) = 1 - (0.288 + 0.308) = 0.404
    assert round(s_intra(W, RHO_INTRA), 3) == 0.404
    assert s_intra(W, RHO_INTRA) == pytest.approx(0.404)


def test_s_inter_vector() -> None:
    # ordered pairs: 2 * .6 * .4 * (-.18) / (2 * .6 * .4) = -.18 -> (1 + .18) / 2 = 0.59
    assert round(s_inter(W, RHO_CROSS), 3) == 0.59
    assert s_inter(W, {("bonds", "equities"): -0.18}) == pytest.approx(0.59)  # either order


def test_s_corr_vector() -> None:
    # 0.5 * 0.404 + 0.5 * 0.59 = 0.497
    assert round(s_corr(W, RHO_INTRA, RHO_CROSS), 3) == 0.497


def test_s_intra_clips_and_ignores_negative_rho() -> None:
    # negative intra correlation counts as 0 -> 1 - 0 = 1
    assert s_intra({"a": 1.0}, {"a": -0.5}) == 1.0
    assert s_intra({"a": 1.0}, {"a": 1.0}) == 0.0
    with pytest.raises(ValueError):
        s_intra({"a": 1.0}, {})


def test_s_inter_single_class_convention() -> None:
    # one weighted class: no other class to hedge with -> no credit, 0 (issue 17.3; was 0.5)
    assert s_inter({"equities": 1.0}, {}) == 0.0
    assert s_inter({"equities": 1.0, "bonds": 0.0}, {}) == 0.0
    # three classes: pairs (a,b)=.2 w .5*.3, (a,c)=-.4 w .5*.2, (b,c)=0 w .3*.2
    # rho_cross = (.15*.2 + .10*(-.4) + .06*0) / (.15 + .10 + .06) = -0.01 / 0.31
    w3 = {"a": 0.5, "b": 0.3, "c": 0.2}
    pairs = {("a", "b"): 0.2, ("a", "c"): -0.4, ("b", "c"): 0.0}
    assert s_inter(w3, pairs) == pytest.approx((1 + 0.01 / 0.31) / 2)
    with pytest.raises(ValueError):
        s_inter(w3, {("a", "b"): 0.2})


# ------------------------------------------------------------------------------------ CEPS


# ------------------------------------------------------------------------------- rolling-k

# Assets (X, CASH). Prices X: 10, 11, 12.1, 13.31. Rows t = 0..3, so T = 3.
PRICES = np.array([[10.0, 1.0], [11.0, 1.0], [12.1, 1.0], [13.31, 1.0]])
# q_0: 1 X; q_1: all cash (11); q_2: all X (11 / 12.1 units); q_3: unchanged.
HOLD = np.array([[1.0, 0.0], [0.0, 11.0], [11.0 / 12.1, 0.0], [11.0 / 12.1, 0.0]])


def test_rolling_k_hand_case() -> None:
    # CR^(0): t = 0..2. r_0 = 1*(11-10)/10 = 0.1; r_1 = 0 (cash); r_2 = (13.31-12.1)/12.1 = 0.1
    # -> 1.1 * 1 * 1.1 - 1 = 0.21 (= v_3 / v_0 - 1 = 12.1 / 10 - 1)
    assert rolling_k_return(HOLD, PRICES, 0) == pytest.approx(0.21)
    # CR^(1): t = 1..T-2 = 1 only, holding q_0 = 1 X: (12.1 - 11) / 11 = 0.1
    assert rolling_k_return(HOLD, PRICES, 1) == pytest.approx(0.1)
    # Delta_1 = 0.1 - 0.21 = -0.11 (literal Eq. 6)
    assert rolling_k_delta(HOLD, PRICES, 1) == pytest.approx(-0.11)
    # same window (t = 1): CR^(0) holds q_1 = cash -> 0, Delta = 0.1
    assert rolling_k_delta(HOLD, PRICES, 1, same_window=True) == pytest.approx(0.1)
    assert rolling_k_delta(HOLD, PRICES, 0) == 0.0
    # k = 2 needs 2k + 2 = 6 rows -> NaN
    deltas = rolling_k_deltas(HOLD, PRICES)
    assert set(deltas) == {1, 2, 4, 8, 16}
    assert deltas[1] == pytest.approx(-0.11)
    assert all(math.isnan(deltas[k]) for k in (2, 4, 8, 16))


def test_rolling_k_errors_and_short() -> None:
    with pytest.raises(ValueError):
        rolling_k_return(HOLD, PRICES[:, :1], 0)
    with pytest.raises(ValueError):
        rolling_k_return(HOLD, PRICES, -1)
    assert math.isnan(rolling_k_return(HOLD[:1], PRICES[:1], 0))
    zero = np.zeros_like(HOLD)
    assert math.isnan(rolling_k_return(zero, PRICES, 0))  # q . p = 0


def _simulate(prices: np.ndarray, weights: np.ndarray, v0: float) -> np.ndarray:
    """Self-financing, fee-free rebalancing: q_t = v_t * a_t / p_t with v_t = q_{t-1} . p_t."""
    q = np.zeros_like(prices)
    v = v0
    for t in range(prices.shape[0]):
        if t > 0:
            v = float(q[t - 1] @ prices[t])
        q[t] = v * weights[t] / prices[t]
    return q


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=2, max_value=30), st.integers(min_value=0, max_value=2**31 - 1))
def test_rolling_k0_equals_cumulative_return(n_rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_assets = 4  # last column is CASH priced 1
    prices = np.exp(np.cumsum(rng.normal(0, 0.05, size=(n_rows, n_assets)), axis=0)) * 10
    prices[:, -1] = 1.0
    weights = rng.dirichlet(np.ones(n_assets), size=n_rows)
    q = _simulate(prices, weights, 1000.0)
    values = np.einsum("ta,ta->t", q, prices)
    assert rolling_k_return(q, prices, 0) == pytest.approx(cumulative_return(values), rel=1e-9)
    for k in (1, 2, 4):
        d = rolling_k_delta(q, prices, k)
        assert math.isnan(d) == (n_rows < 2 * k + 2)


def test_rolling_k_constant_holdings_same_window_zero() -> None:
    # with a constant position, holding k steps stale changes nothing on the same window
    rng = np.random.default_rng(1)
    prices = np.exp(np.cumsum(rng.normal(0, 0.02, size=(40, 3)), axis=0))
    q = np.tile([1.0, 2.0, 3.0], (40, 1))
    for k, d in rolling_k_deltas(q, prices, same_window=True).items():
        if 2 * k + 2 <= 40:
            assert d == pytest.approx(0.0, abs=1e-12)
        else:
            assert math.isnan(d)


# ------------------------------------------------------------------------- composite rank


def test_composite_rank_hand_case() -> None:
    # CR 0.1, 0, -0.1 -> mean 0, std (ddof 0) sqrt(0.02/3) = 0.08165 -> z = 1.2247, 0, -1.2247
    # MDD 0.3, 0.2, 0.1 -> -MDD -0.3, -0.2, -0.1 -> z = -1.2247, 0, 1.2247
    # Sortino 2, 1, 0 -> z = 1.2247, 0, -1.2247
    # a: (1.2247 - 1.2247 + 1.2247) / 3 = 0.40825; b: 0; c: -0.40825
    z = math.sqrt(1.5)
    out = composite_rank(
        {"a": 0.1, "b": 0.0, "c": -0.1},
        {"a": 0.3, "b": 0.2, "c": 0.1},
        {"a": 2.0, "b": 1.0, "c": 0.0},
    )
    assert out["a"] == pytest.approx(z / 3)
    assert out["b"] == pytest.approx(0.0)
    assert out["c"] == pytest.approx(-z / 3)


def test_composite_rank_lower_drawdown_is_better() -> None:
    out = composite_rank({"a": 0.1, "b": 0.1}, {"a": 0.05, "b": 0.25}, {"a": 1.0, "b": 1.0})
    # CR and Sortino constant -> z = 0; -MDD: -0.05 vs -0.25 -> z = +1, -1 -> score +-1/3
    assert out["a"] == pytest.approx(1 / 3)
    assert out["b"] == pytest.approx(-1 / 3)


def test_composite_rank_edge_cases() -> None:
    assert composite_rank({"a": 0.1}, {"a": 0.2}, {"a": 1.0}) == {"a": 0.0}
    out = composite_rank(
        {"a": 0.1, "b": 0.2, "c": 0.3},
        {"a": 0.1, "b": 0.1, "c": 0.1},
        {"a": float("nan"), "b": 1.0, "c": 2.0},
    )
    assert math.isnan(out["a"])
    # b, c: z(CR) over all three = (0, 1.2247); z(Sortino) over b, c = (-1, 1)
    assert out["c"] == pytest.approx((math.sqrt(1.5) + 0 + 1) / 3)
    with pytest.raises(ValueError):
        composite_rank({"a": 0.1}, {"b": 0.1}, {"a": 1.0})


# ---------------------------------------------------------------------------- CapitalBench

RETS = {"A": 0.10, "B": 0.05, "C": -0.02}


def test_capitalbench_hand_case() -> None:
    # pr = 0.5*0.10 + 0.3*0.05 + 0.2*0 = 0.065 -> score 100 * 0.065 / 0.10 = 65, regret 0.035
    score, regret = capitalbench_score({"A": 0.5, "B": 0.3, "CASH": 0.2}, RETS)
    assert score == pytest.approx(65.0)
    assert regret == pytest.approx(0.035)


def test_capitalbench_best_asset_and_cash() -> None:
    assert capitalbench_score({"A": 1.0}, RETS) == pytest.approx((100.0, 0.0))
    score, regret = capitalbench_score({"CASH": 1.0}, RETS)
    assert score == 0.0
    assert regret == pytest.approx(0.10)
    # CASH may sit in the universe with return 0
    assert capitalbench_score({"CASH": 1.0}, {**RETS, "CASH": 0.0})[0] == 0.0


def test_capitalbench_nonpositive_max_and_errors() -> None:
    score, regret = capitalbench_score({"A": 1.0}, {"A": -0.01, "B": -0.03})
    assert math.isnan(score)
    assert regret == pytest.approx(0.0)
    score, regret = capitalbench_score({"CASH": 1.0}, {"A": 0.0})
    assert math.isnan(score)
    assert regret == 0.0
    assert all(math.isnan(x) for x in capitalbench_score({"CASH": 1.0}, {}))
    with pytest.raises(ValueError):
        capitalbench_score({"Z": 1.0}, RETS)
    with pytest.raises(ValueError):
        capitalbench_score({"CASH": 1.0}, {"CASH": 0.01})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=1, max_size=8),
    st.integers(0, 2**31 - 1),
)
def test_capitalbench_single_best_asset_scores_100(rets: list[float], seed: int) -> None:
    universe = {f"S{i}": r for i, r in enumerate(rets)}
    best = max(universe, key=lambda k: universe[k])
    score, regret = capitalbench_score({best: 1.0}, universe)
    if universe[best] > 0:
        assert score == pytest.approx(100.0)
        w = np.random.default_rng(seed).dirichlet(np.ones(len(rets)))
        s2, r2 = capitalbench_score(dict(zip(universe, w.tolist(), strict=True)), universe)
        assert s2 <= 100.0 + 1e-9
        assert r2 >= -1e-12
    else:
        assert math.isnan(score)
    assert regret == pytest.approx(0.0)


# ------------------------------------------------------------------ diversification (returns)

# Orthogonal zero-mean patterns: x, y, z pairwise uncorrelated.
_X = np.array([1.0, -1.0, 1.0, -1.0])
_Y = np.array([1.0, 1.0, -1.0, -1.0])
_Z = np.array([1.0, -1.0, -1.0, 1.0])
ASSETS = ["A", "B", "C", "CASH"]
CLASSES = {"A": "equities", "B": "equities", "C": "bonds", "CASH": "cash"}
# A = x, B = x + y -> corr = 4 / (2 * sqrt(8)) = 0.70711; C = z uncorrelated; CASH constant
RETURNS = 0.01 * np.column_stack([_X, _X + _Y, _Z, np.zeros(4)])


def test_diversification_from_returns_hand_case() -> None:
    out = diversification_from_returns({"A": 0.3, "B": 0.3, "C": 0.4}, CLASSES, RETURNS, ASSETS)
    # rho_intra: equities 0.70711, bonds single member -> self-correlation 1
    # s_intra = 1 - (0.6 * 0.70711 + 0.4 * 1) = 0.17574; rho_cross = 0 -> s_inter 0.5
    s_i = 1 - (0.6 * math.sqrt(0.5) + 0.4)
    assert out["s_intra"] == pytest.approx(s_i)
    assert out["s_inter"] == pytest.approx(0.5)
    assert out["s_corr"] == pytest.approx(0.5 * s_i + 0.25)
    expected = s_corr(
        {"equities": 0.6, "bonds": 0.4},
        {"equities": math.sqrt(0.5), "bonds": 1.0},
        {("equities", "bonds"): 0.0},
    )
    assert out["s_corr"] == pytest.approx(expected)


def test_diversification_cross_correlation() -> None:
    # A = x (equities), C = -x (bonds): rho(equities, bonds) = mean(corr(A, C), corr(B, C))
    # = mean(-1, -0.70711) over the whole equities class; the bonds class is C alone (rho 1)
    # and equities (A, B) correlate 0.70711 although only A is held (issue 17.3).
    r = 0.01 * np.column_stack([_X, _X + _Y, -_X, np.zeros(4)])
    out = diversification_from_returns({"A": 0.5, "C": 0.5}, CLASSES, r, ASSETS)
    s_i = 1 - 0.5 * math.sqrt(0.5) - 0.5 * 1.0
    s_e = (1 + (1 + math.sqrt(0.5)) / 2) / 2
    assert out["s_intra"] == pytest.approx(s_i)
    assert out["s_inter"] == pytest.approx(s_e)
    assert out["s_corr"] == pytest.approx(0.5 * s_i + 0.5 * s_e)


def test_diversification_single_asset_and_cash_conventions() -> None:
    # Issue 17.3: the whole equities class (A, B: 0.70711) counts, and one class gets no
    # hedging credit: s_intra 1 - 0.70711, s_inter 0 (was 0, 0.5, 0.25 with held-only).
    single = diversification_from_returns({"A": 1.0}, CLASSES, RETURNS, ASSETS)
    s_i = 1 - math.sqrt(0.5)
    assert single == pytest.approx({"s_intra": s_i, "s_inter": 0.0, "s_corr": s_i / 2})
    cash = diversification_from_returns({"CASH": 1.0}, CLASSES, RETURNS, ASSETS)
    assert all(math.isnan(x) for x in cash.values())  # nothing at risk (was 0.75)
    # cash is uncorrelated with everything: A + CASH -> rho_cross 0
    mix = diversification_from_returns({"A": 0.5, "CASH": 0.5}, CLASSES, RETURNS, ASSETS)
    # s_intra = 1 - 0.5 * 0.70711 - 0.5 * 0
    s_m = 1 - 0.5 * math.sqrt(0.5)
    assert mix == pytest.approx({"s_intra": s_m, "s_inter": 0.5, "s_corr": s_m / 2 + 0.25})


def test_diversification_short_and_invalid() -> None:
    out = diversification_from_returns({"A": 1.0}, CLASSES, RETURNS[:1], ASSETS)
    assert all(math.isnan(v) for v in out.values())
    out = diversification_from_returns({}, CLASSES, RETURNS, ASSETS)
    assert all(math.isnan(v) for v in out.values())
    with pytest.raises(ValueError):
        diversification_from_returns({"Q": 1.0}, CLASSES, RETURNS, ASSETS)
    with pytest.raises(ValueError):
        diversification_from_returns({"A": 1.0}, {}, RETURNS, ASSETS)
    with pytest.raises(ValueError):
        diversification_from_returns({"A": 1.0}, CLASSES, RETURNS[:, :2], ASSETS)


# ------------------------------------------------------------------------- VaR and profiles


def test_historical_var() -> None:
    r = [-0.5, -0.03, -0.02, -0.01, 0.0, 0.01]  # -0.5 falls outside a window of 5
    # sorted window -0.03..0.01; 5% quantile at position 4 * 0.05 = 0.2 -> -0.03 + 0.2 * 0.01
    assert historical_var(r, 0.95, window=5) == pytest.approx(-0.028)
    assert math.isnan(historical_var(r[:3], 0.95, window=5))
    assert historical_var(r[:3], 0.95, window=5, min_periods=2) == pytest.approx(
        float(np.quantile(r[:3], 0.05))
    )
    rng = np.random.default_rng(0)
    long = rng.normal(0.0, 0.01, size=200)
    assert historical_var(long) == pytest.approx(float(np.quantile(long[-60:], 0.05)))
    assert historical_var(long) < 0


def test_risk_profiles() -> None:
    assert RISK_PROFILES["conservative"] == RiskProfile("conservative", 0.10, -0.010)
    assert RISK_PROFILES["balanced"] == RiskProfile("balanced", 0.20, -0.020)
    assert RISK_PROFILES["aggressive"] == RiskProfile("aggressive", 0.35, -0.040)


def test_profile_alignment() -> None:
    bal = RISK_PROFILES["balanced"]
    assert profile_alignment(0.15, -0.015, bal) == 1.0
    assert profile_alignment(0.15, -0.025, bal) == 0.5  # VaR worse than -0.020
    assert profile_alignment(0.25, -0.025, bal) == 0.0
    assert profile_alignment(0.20, -0.020, bal) == 1.0  # limits are inclusive
    assert profile_alignment(0.15, float("nan"), bal) == 1.0  # only the evaluable check
    assert math.isnan(profile_alignment(float("nan"), float("nan"), bal))


# ----------------------------------------------------------------------------------- regime


def test_regime_label() -> None:
    # 1.002^20 - 1 = 0.0408 > 3%, vol 0 -> bull
    assert regime_label([0.002] * 20) == "bull"
    # 0.998^20 - 1 = -0.0392 < -3%, drawdown 3.9% < 15% -> bear
    assert regime_label([-0.002] * 20) == "bear"
    assert regime_label([0.0] * 20) == "sideways"
    # +-4% alternating: std ~0.041 * sqrt(252) ~ 0.65 > 40% -> crisis
    assert regime_label([0.04, -0.04] * 10) == "crisis"
    # steady -1% a day: drawdown 1 - 0.99^20 = 18.2% > 15% -> crisis (vol is 0)
    assert regime_label([-0.01] * 20) == "crisis"
    # only the last window counts
    assert regime_label([-0.05] * 50 + [0.002] * 20) == "bull"
    assert regime_label([0.002] * 19) == "unknown"
    assert regime_label([float("nan")] + [0.002] * 19) == "unknown"


# -------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci() -> None:
    rng = np.random.default_rng(42)
    r = rng.normal(0.001, 0.01, size=250)
    lo, hi = bootstrap_ci(r, np.mean, n_boot=500, seed=7)
    assert lo < float(np.mean(r)) < hi
    assert (lo, hi) == bootstrap_ci(r, np.mean, n_boot=500, seed=7)  # deterministic
    assert (lo, hi) != bootstrap_ci(r, np.mean, n_boot=500, seed=8)
    lo90, hi90 = bootstrap_ci(r, np.mean, n_boot=500, level=0.90, seed=7)
    assert lo <= lo90 <= hi90 <= hi
    assert all(math.isnan(x) for x in bootstrap_ci([0.01], np.mean))
    assert all(math.isnan(x) for x in bootstrap_ci([0.01, 0.02], lambda a: float("nan")))
