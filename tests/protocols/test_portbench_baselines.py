"""PortBench's classical baselines, checked against hand-derived weights."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from agents.base import CASH, Observation, PricePoint
from agents.config import DEFAULT_CLASS_ROLES, AgentConfig
from agents.factory import build_agent
from agents.portfolio_baselines import (
    covariance,
    erc_weights,
    inverse_vol_weights,
    min_variance_weights,
    project_simplex,
    returns_panel,
    sixty_forty,
)

T = 1_714_600_000.0
DAY = 86_400.0


def closes_from(returns: list[float], start: float = 100.0) -> list[float]:
    out = [start]
    for r in returns:
        out.append(out[-1] * (1.0 + r))
    return out


def obs_with(returns: dict[str, list[float]]) -> Observation:
    """An equity observation whose daily closes produce exactly ``returns`` per asset."""
    history = {}
    for a, rs in returns.items():
        cl = closes_from(rs)
        history[a] = tuple(PricePoint(T - (len(cl) - i) * DAY, p) for i, p in enumerate(cl))
    assets = tuple(returns)
    return Observation(
        agent="b", market="equity", decision_ts=T, assets=assets,
        prices={a: PricePoint(T - 60, 100.0) for a in assets}, history=history, holdings={},
        cash=1000.0, value=1000.0, initial_value=1000.0, weights={CASH: 1.0},
    )


# Uncorrelated by construction: zero means, cov(A, B) = 0, sigma_B = 2 sigma_A.
UNCORRELATED = {"A": [0.01, -0.01, 0.01, -0.01], "B": [0.02, 0.02, -0.02, -0.02]}


def test_returns_panel_uses_the_last_common_closes() -> None:
    rets = returns_panel(obs_with(UNCORRELATED), ("A", "B"), window=3)
    assert rets.shape == (3, 2)
    assert rets[:, 0] == pytest.approx([-0.01, 0.01, -0.01])
    assert rets[:, 1] == pytest.approx([0.02, -0.02, -0.02])


def test_inverse_vol_is_one_over_sigma() -> None:
    cov = np.diag([0.01**2, 0.02**2])
    assert inverse_vol_weights(cov) == pytest.approx([2 / 3, 1 / 3])
    # Correlation is ignored by construction.
    cov[0, 1] = cov[1, 0] = 0.9 * 0.01 * 0.02
    assert inverse_vol_weights(cov) == pytest.approx([2 / 3, 1 / 3])


def test_erc_two_assets_is_inverse_vol_whatever_the_correlation() -> None:
    cov = np.array([[1e-4, 0.5 * 1e-2 * 2e-2], [0.5 * 1e-2 * 2e-2, 4e-4]])
    assert erc_weights(cov) == pytest.approx([2 / 3, 1 / 3], abs=1e-9)


def test_erc_three_assets_equalises_risk_contributions() -> None:
    # Assets 1 and 2 correlated (rho = 0.44), 3 independent, unit variances: by symmetry
    # w1 = w2 = x, w3 = y with x * (1 + rho) x = y * y, so y = 1.2 x: x = 1/3.2, y = 1.2/3.2.
    cov = np.array([[1.0, 0.44, 0.0], [0.44, 1.0, 0.0], [0.0, 0.0, 1.0]]) * 1e-4
    w = erc_weights(cov)
    assert w == pytest.approx([0.3125, 0.3125, 0.375], abs=1e-9)
    rc = w * (cov @ w)
    assert rc == pytest.approx(np.full(3, rc.mean()), rel=1e-8)


def test_min_variance_interior_is_inverse_variance_for_uncorrelated_assets() -> None:
    cov = np.diag([1.0, 4.0, 4.0]) * 1e-4
    assert min_variance_weights(cov) == pytest.approx([2 / 3, 1 / 6, 1 / 6], abs=1e-9)


def test_min_variance_is_long_only() -> None:
    # sigma 1 %, 2 %, rho 0.9: the unconstrained optimum shorts B (w_A = 2.2 / 1.4 > 1).
    c = 0.9 * 0.01 * 0.02
    cov = np.array([[1e-4, c], [c, 4e-4]])
    assert min_variance_weights(cov) == pytest.approx([1.0, 0.0], abs=1e-9)
    # rho 0.25: interior, w_A = (4 - 0.5) / (1 + 4 - 1) = 0.875.
    c = 0.25 * 0.01 * 0.02
    cov = np.array([[1e-4, c], [c, 4e-4]])
    assert min_variance_weights(cov) == pytest.approx([0.875, 0.125], abs=1e-9)


def test_project_simplex() -> None:
    assert project_simplex(np.array([0.5, 0.5])) == pytest.approx([0.5, 0.5])
    assert project_simplex(np.array([2.0, 0.0])) == pytest.approx([1.0, 0.0])
    assert project_simplex(np.array([0.4, 0.3, -1.0])) == pytest.approx([0.55, 0.45, 0.0])


def test_sixty_forty_splits_by_class_role() -> None:
    classes = {"SPY": "equities", "QQQ": "equities", "TLT": "bonds", "GLD": "commodities"}
    w = sixty_forty(["SPY", "QQQ", "TLT", "GLD"], classes, DEFAULT_CLASS_ROLES)
    assert w == pytest.approx({"SPY": 0.3, "QQQ": 0.3, "TLT": 0.4, "GLD": 0.0, CASH: 0.0})
    # The default stock universe has no bonds: their 40 % stays in cash.
    w = sixty_forty(["AAPL", "JPM"], {"AAPL": "tech", "JPM": "financials"}, DEFAULT_CLASS_ROLES)
    assert w == pytest.approx({"AAPL": 0.3, "JPM": 0.3, CASH: 0.4})


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("risk_parity", {"A": 2 / 3, "B": 1 / 3}),
        ("equal_risk_contribution", {"A": 2 / 3, "B": 1 / 3}),
        ("min_variance", {"A": 0.8, "B": 0.2}),
    ],
)
async def test_covariance_baselines_run_as_agents(kind: str, expected: dict[str, float]) -> None:
    agent = build_agent(AgentConfig(id=kind, kind=kind, markets=("equity",)))
    d = await agent.decide(obs_with(UNCORRELATED))
    assert d.outcome == "ok"
    assert d.allocation == pytest.approx(expected | {CASH: 0.0}, abs=1e-9)
    assert "over 4 daily returns" in d.reasoning


async def test_rolling_window_keeps_the_last_returns() -> None:
    # Over the last 2 returns only: sigma_B = 3 sigma_A, so w_A = 3 / 4.
    agent = build_agent(AgentConfig(id="rp", kind="risk_parity", cov_window=2))
    d = await agent.decide(obs_with({"A": [0.5, -0.5, 0.01, -0.01], "B": [0.0, 0.0, 0.03, -0.03]}))
    assert d.allocation is not None
    assert d.allocation["A"] == pytest.approx(0.75)
    assert "over 2 daily returns" in d.reasoning


async def test_too_little_history_falls_back_to_equal_weight() -> None:
    agent = build_agent(AgentConfig(id="mv", kind="min_variance"))
    d = await agent.decide(obs_with({"A": [0.01], "B": [0.02]}))
    assert d.allocation == pytest.approx({"A": 0.5, "B": 0.5, CASH: 0.0})
    assert "fewer than 2" in d.reasoning


async def test_sixty_forty_agent_uses_the_configured_classes() -> None:
    cfg = AgentConfig(id="6040", kind="sixty_forty",
                      asset_classes={"A": "equities", "B": "bonds"})
    d = await build_agent(cfg).decide(obs_with(UNCORRELATED))
    assert d.allocation == pytest.approx({"A": 0.6, "B": 0.4, CASH: 0.0})


def test_class_roles_are_checked() -> None:
    with pytest.raises(ValidationError, match="role of class 'gold' must be one of"):
        AgentConfig(id="x", kind="sixty_forty", class_roles={"gold": "metal"})
    cov = covariance(np.array([[0.01, 0.02], [-0.01, 0.02], [0.01, -0.02]]))
    assert cov.shape == (2, 2)


def test_agents_take_the_markets_asset_classes_unless_given() -> None:
    from daemon.config.settings import parse_config

    cfg = parse_config({
        "markets": {"equity": {"assets": ["SPY", "TLT"],
                               "asset_classes": {"SPY": "equities", "TLT": "bonds"}}},
        "agents": [{"id": "a", "kind": "sixty_forty", "markets": ["equity"]},
                   {"id": "b", "kind": "sixty_forty", "markets": ["equity"],
                    "asset_classes": {"SPY": "bonds"}}],
    })
    assert cfg.agents[0].asset_classes == {"SPY": "equities", "TLT": "bonds"}
    assert cfg.agents[1].asset_classes == {"SPY": "bonds"}


def test_returns_panel_counts_a_previous_days_latest_price_as_its_close() -> None:
    """On daily bars the latest price is yesterday's close (no tick of today yet): the rolling
    window must end at it, as it does live where today's ticks have already moved it into the
    history; an intraday price of the decision's own day is not a close."""
    closes = [100.0, 101.0, 99.0]  # closes of the three sessions before the decision day
    day0 = T - 4 * DAY
    hist = {a: tuple(PricePoint(day0 + i * DAY, p * k) for i, p in enumerate(closes[:2]))
            for a, k in (("A", 1.0), ("B", 2.0))}
    yesterday = {a: PricePoint(day0 + 2 * DAY, closes[2] * k) for a, k in (("A", 1.0), ("B", 2.0))}
    obs = Observation(
        agent="b", market="equity", decision_ts=T, assets=("A", "B"), prices=yesterday,
        history=hist, holdings={}, cash=1000.0, value=1000.0, initial_value=1000.0,
        weights={CASH: 1.0},
    )
    rets = returns_panel(obs, ("A", "B"), window=60)
    assert rets[:, 0] == pytest.approx([0.01, 99.0 / 101.0 - 1.0])
    # the same price stamped on the decision's day stays out (an intraday price, not a close)
    today = {a: PricePoint(T - 60, p.price) for a, p in yesterday.items()}
    intraday = Observation(
        agent="b", market="equity", decision_ts=T, assets=("A", "B"), prices=today,
        history=hist, holdings={}, cash=1000.0, value=1000.0, initial_value=1000.0,
        weights={CASH: 1.0},
    )
    assert returns_panel(intraday, ("A", "B"), window=60)[:, 0] == pytest.approx([0.01])
