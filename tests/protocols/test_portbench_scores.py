"""PortBench's stage scores and CEPS, with delayed scoring, against hand-derived numbers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from agents.portbench.scores import (
    ceps,
    format_table,
    max_sharpe,
    s1_score,
    s2_score,
    s4_score,
    s5_score,
    score_decision,
    summarise,
)
from scoring.stats.diversification import diversification_from_returns

T = 1_714_600_000.0
DAY = 86_400.0


def test_stage_formulas() -> None:
    assert s1_score({"A": 0.5, "B": 0.3, "C": -0.4}, {"A": 1.0, "B": 0.0, "C": -0.5}) == (
        pytest.approx(1 - 0.9 / 6))
    assert s2_score({"A": "buy", "B": "buy", "C": "sell"},
                    {"A": 1.0, "B": 0.0, "C": -0.5}) == pytest.approx(2 / 3)
    assert s4_score(0.4, 0.5) == pytest.approx(0.8)
    assert s4_score(0.0, 0.0) == 1.0 and s4_score(0.0, 0.7) == 0.0
    # d = 1; e_VaR = 0.5, e_DD = 0: 0.5 + 0.5 * (1 - 0.25).
    assert s5_score({"rebalance": True, "var_95": -0.015, "max_drawdown": -0.04},
                    {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.04}) == (
        pytest.approx(0.875))
    assert math.isnan(s5_score({"rebalance": True, "var_95": -0.01, "max_drawdown": -0.01},
                               {"rebalance": True, "var_95": None, "max_drawdown": None}))


def test_ceps_of_the_papers_trace() -> None:
    # Stages .792 .506 .714 .136 .480: drops .286 + .578 = .864, penalty .0864.
    assert ceps([0.792, 0.506, 0.714, 0.136, 0.480]) == pytest.approx(0.5256 - 0.0864)


def test_max_sharpe_is_the_tangency_portfolio() -> None:
    # Uncorrelated: w ∝ excess / variance = (1e-3 / 1e-4, 2e-3 / 4e-4) = (10, 5).
    w = max_sharpe(np.array([1e-3, 2e-3]), np.diag([1e-4, 4e-4]), 0.0)
    assert w == pytest.approx([2 / 3, 1 / 3], abs=1e-6)
    # An asset below the risk-free rate gets nothing; none above it: cash (None).
    w = max_sharpe(np.array([1e-3, -1e-3]), np.diag([1e-4, 4e-4]), 0.0)
    assert w == pytest.approx([1.0, 0.0])
    assert max_sharpe(np.array([-1e-3]), np.diag([1e-4]), 0.0) is None


def closes(horizon_days: int) -> dict[str, list[tuple[float, float]]]:
    """Six closes before T, then ``horizon_days`` after: SPY +10 %, TLT flat, GLD -5 %."""
    before = {"SPY": [100, 101, 99, 100.5, 100.5, 101.5], "TLT": [100, 99.5, 100.5, 100, 100.2,
              100.2], "GLD": [100, 100, 100.4, 100.6, 100.5, 100.8]}
    out = {}
    for a, ps in before.items():
        pts = [(T - (6 - i) * DAY, float(p)) for i, p in enumerate(ps)]
        end = {"SPY": 1.10, "TLT": 1.0, "GLD": 0.95}[a]
        for k in range(1, horizon_days + 1):
            pts.append((T + k * DAY - 3600, ps[-1] * end ** (k / 5)))
        out[a] = pts
    return out


SUMMARY = {
    "protocol": "portbench", "profile": "balanced", "regime": "bull",
    "current": {"SPY": 0.5, "TLT": 0.0, "GLD": 0.0, "CASH": 0.5},
    "views": {"SPY": 0.5, "TLT": 0.3, "GLD": -0.4},
    "signals": {"SPY": "buy", "TLT": "buy", "GLD": "sell"},
    "weights": {"SPY": 0.6, "TLT": 0.3, "GLD": 0.0, "CASH": 0.1},
    "execution": {"turnover": 0.4, "cost_usd": 0.6, "cost_bps": 15.0, "drift": 0.3},
    "risk": {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.02},
    "risk_truth": {"rebalance": True, "var_95": -0.01, "max_drawdown": -0.02},
    "applied": True,
}
CLASSES = {"SPY": "equities", "TLT": "bonds", "GLD": "commodities"}


def test_scores_wait_for_the_horizon() -> None:
    early = score_decision(SUMMARY, T, closes(3), CLASSES, horizon=5)
    assert early.pending and early.ceps is None
    # S5's ground truth comes from the oracle's weights (issue 29): pending like S1..S4.
    assert [early.scores[s] for s in ("S1", "S2", "S3", "S4", "S5")] == [None] * 5


def test_scores_after_the_horizon() -> None:
    sc = score_decision(SUMMARY, T, closes(5), CLASSES, horizon=5)
    assert not sc.pending
    # v* = (1, 0, -0.5): S1 = 1 - 0.9 / 6; signals truth buy / hold / sell: S2 = 2/3.
    assert sc.scores["S1"] == pytest.approx(0.85)
    assert sc.scores["S2"] == pytest.approx(2 / 3)
    # Buys SPY, TLT; only SPY beats the risk-free rate, but TLT moved against SPY over the
    # lookback: the tangency portfolio holds both (w* from every support, independently).
    past = np.array([[p for _, p in closes(0)[a]] for a in ("SPY", "TLT", "GLD")]).T
    hist = past[1:] / past[:-1] - 1.0
    fut = np.array([[p for _, p in closes(5)[a][5:]] for a in ("SPY", "TLT")]).T
    mu = (fut[1:] / fut[:-1] - 1.0).mean(axis=0)
    cov = np.cov(hist[:, :2], rowvar=False, ddof=1)
    w_star = _tangency_by_supports(mu, cov, 0.04 / 252, weights=True)
    assert 0.0 < w_star[1] < 1.0  # the hedge gets weight
    s_acc = 1.0 - (abs(0.6 - w_star[0]) + abs(0.3 - w_star[1]) + 0.1) / 2.0
    corr = diversification_from_returns({"SPY": 0.6, "TLT": 0.3, "GLD": 0.0}, CLASSES, hist,
                                        ["SPY", "TLT", "GLD"])["s_corr"]
    assert sc.scores["S3"] == pytest.approx(0.5 * s_acc + 0.5 * corr)
    tau_star = abs(w_star[0] - 0.5) + w_star[1]  # from SPY 50 % / CASH 50 % to w*
    assert sc.scores["S4"] == pytest.approx(1.0 - abs(0.4 - tau_star) / max(0.4, tau_star))
    # S5 against the oracle: its portfolio's returns over the lookback (CASH earns 0), the
    # 5th percentile (linear interpolation, by hand), its drawdown, its drift from the current.
    port = [w_star[0] * r[0] + w_star[1] * r[1] for r in hist]
    srt, k = sorted(port), 0.05 * (len(port) - 1)
    var = srt[int(k)] + (k - int(k)) * (srt[int(k) + 1] - srt[int(k)])
    nav, peak, dd = 1.0, 1.0, 0.0
    for r in port:
        nav *= 1.0 + r
        peak = max(peak, nav)
        dd = min(dd, nav / peak - 1.0)
    drift = max(abs(w_star[0] - 0.5), abs(w_star[1]))
    e = (abs(-0.01 - var) / abs(var) + abs(-0.02 - dd) / abs(dd)) / 2.0
    s5 = 0.5 * float(drift > 0.05) + 0.5 * min(1.0, max(0.0, 1.0 - e))
    assert sc.scores["S5"] == pytest.approx(s5)
    s = [sc.scores[k] for k in ("S1", "S2", "S3", "S4", "S5")]
    assert sc.ceps == pytest.approx(ceps(s))
    m = summarise([sc, score_decision(SUMMARY, T + 3 * DAY, closes(5), CLASSES, horizon=5)])
    assert m["pending"] == 1 and m["S1_pending"] == 1 and m["S5_pending"] == 1
    assert m["S1"] == pytest.approx(0.85) and m["CEPS"] == pytest.approx(sc.ceps)
    table = format_table({"pb": [sc]})
    assert table.splitlines()[1].startswith("pb") and "0.850" in table


def test_unexecuted_target_has_zero_turnover() -> None:
    kept = SUMMARY | {"applied": False}
    sc = score_decision(kept, T, closes(5), CLASSES, horizon=5)
    assert sc.scores["S4"] == 0.0  # tau = 0 against tau* = 0.5


def test_failed_workflow_is_not_pending() -> None:
    failed = {"protocol": "portbench", "views": SUMMARY["views"], "failed_step": "signals"}
    sc = score_decision(failed, T, closes(5), CLASSES, horizon=5)
    assert sc.failed and not sc.pending and sc.scores["S1"] is None
    m = summarise([sc])
    assert (m["pending"], m["failed"], m["S1_pending"]) == (0, 1, 0)


def _tangency_by_supports(mu: np.ndarray, cov: np.ndarray, rf: float, weights: bool = False
                          ) -> Any:
    """Return the best long-only Sharpe ratio (or its weights) by trying every support (exact,
    small n)."""
    import itertools

    ex = mu - rf
    best = -math.inf
    best_w = np.zeros(mu.size)
    for k in range(1, mu.size + 1):
        for sub in itertools.combinations(range(mu.size), k):
            idx = list(sub)
            x = np.linalg.solve(cov[np.ix_(idx, idx)], ex[idx])
            if (x < 0).any() or x.sum() <= 0:
                continue
            w = np.zeros(mu.size)
            w[idx] = x / x.sum()
            sharpe = float(w @ ex / np.sqrt(w @ cov @ w))
            if sharpe > best:
                best, best_w = sharpe, w
    return best_w if weights else best


def test_max_sharpe_reaches_the_optimum_on_an_ill_conditioned_window() -> None:
    """A covariance from a short window of the PortBench sample (one near-riskless asset):
    the solver must reach the tangency portfolio, not stop at its iteration cap short of it."""
    mu = np.array([0.00018224071746217874, -0.0008657879146676706, 0.002079777621389378,
                   -0.0005198419524386378, 0.0007235209889710382])
    cov = np.array([
        [3.941326433263322e-09, 2.9571226776544304e-07, -2.9895216312785695e-07,
         8.133509584983047e-08, -1.889575697737731e-07],
        [2.9571226776544304e-07, 9.330575321986933e-05, 2.8815240550213782e-05,
         -1.142490259066771e-05, 5.292981021639268e-05],
        [-2.9895216312785695e-07, 2.8815240550213782e-05, 6.164196641928584e-05,
         -2.0502666205469847e-05, 6.035858289339336e-05],
        [8.133509584983047e-08, -1.142490259066771e-05, -2.0502666205469847e-05,
         1.3089426100677885e-05, -2.3706039356955347e-05],
        [-1.889575697737731e-07, 5.292981021639268e-05, 6.035858289339336e-05,
         -2.3706039356955347e-05, 8.047521261245507e-05],
    ])
    rf = 0.04 / 252
    w = max_sharpe(mu, cov, rf)
    assert w is not None and w.min() >= 0 and w.sum() == pytest.approx(1.0)
    got = float(w @ (mu - rf) / np.sqrt(w @ cov @ w))
    assert got == pytest.approx(_tangency_by_supports(mu, cov, rf), abs=1e-9)


def test_an_agent_whose_workflows_all_failed_is_not_shown_pending() -> None:
    """Nothing waits for a horizon when every workflow failed: the tables say so, not
    'pending' (which would suggest scores are on their way)."""
    from agents.portbench.report import portbench_lines
    from scoring.board.extras import extras_html

    failed = [score_decision({"protocol": "portbench", "failed_step": "views"}, T + i * DAY,
                             closes(5), CLASSES) for i in range(3)]
    row = format_table({"pb": failed}).splitlines()[1]
    assert "pending" not in row and row.split()[-3:] == ["3", "0", "3"]
    m = summarise(failed)
    line = portbench_lines({"pb": m})[-1]
    assert "pending" not in line
    html = extras_html({"portbench": {"pb": m}})
    assert "pending (" not in html and "<td>pending</td>" not in html
    # a stage still waiting is shown pending, with its count in the HTML
    early = [score_decision(SUMMARY, T, closes(3), CLASSES, horizon=5)]
    assert "pending" in format_table({"pb": early}).splitlines()[1]
    assert "pending (1)" in extras_html({"portbench": {"pb": summarise(early)}})


def test_cli_refuses_a_horizon_below_one(tmp_path: Any, capsys: Any) -> None:
    from daemon.app.cli import main as cli

    assert cli(["stage-scores", "--db", str(tmp_path / "x.db"), "--horizon", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--horizon" in err[-1]


def test_ceps_vectors() -> None:
    # mean = 2.628 / 5 = 0.5256; drops .286 + .578 = .864 -> 0.5256 - 0.0864 = 0.4392
    assert ceps([0.792, 0.506, 0.714, 0.136, 0.480]) == pytest.approx(0.4392)
    assert ceps([0.526] * 5) == pytest.approx(0.526)


def test_ceps_clipping_and_empty() -> None:
    # mean 0.2, drop 1.0 -> 0.2 - 0.1 = 0.1; large drops clip to 0
    assert ceps([1.0, 0.0, 0.0, 0.0, 0.0]) == pytest.approx(0.1)
    assert ceps([0.1, 0.0, 0.1, 0.0, 0.1, 0.0]) == pytest.approx(0.05 - 0.03)
    assert ceps([0.05, 0.0] * 10) == 0.0  # 0.025 - 0.1 * 0.5 < 0 -> clipped
    assert math.isnan(ceps([]))
