"""Issue 17: the scoring conventions a quant reviewer expects, each on a hand-derived case.

Every test states the arithmetic it checks; where a paper prints a number, the number is used.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from scoring.benchmarks import composite_rank
from scoring.leaderboard import leaderboard, to_table
from scoring.metrics import simple_returns, sortino, sortino_stockbench, summarise
from tests.test_leaderboard import AGENTS_CFG, PLANS, PRICES, build_store, rows_by_agent

SQRT252 = math.sqrt(252)


@pytest.fixture()
def hand(tmp_path: Path) -> Path:
    db = tmp_path / "hand.db"
    build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG, classes={"A": "x", "B": "y"})
    return db


# ----------------------------------------------------------------------------- 1. Sortino


def test_sortino_standard_divides_by_all_days() -> None:
    # r = [0.06, -0.02, -0.04, 0.04], target 0: mean 0.01. Downside deviation over all 4 days:
    # sqrt((0 + 0.0004 + 0.0016 + 0) / 4) = sqrt(0.0005) = 0.0223607.
    # Sortino = 0.01 / 0.0223607 * sqrt(252) = 0.4472136 * 15.874508 = 7.0992957.
    r = [0.06, -0.02, -0.04, 0.04]
    assert sortino(r, 252) == pytest.approx(7.0992957, rel=1e-7)
    # StockBench Eq. 3 divides by the N_d = 2 negative days only: sqrt(0.001) = 0.0316228,
    # 0.01 / 0.0316228 * sqrt(252) = 5.0199602 (a factor sqrt(T / N_d) = sqrt(2) lower).
    assert sortino_stockbench(r, 252) == pytest.approx(5.0199602, rel=1e-7)
    assert sortino(r, 252) / sortino_stockbench(r, 252) == pytest.approx(math.sqrt(2))


def test_sortino_standard_uses_rf_as_the_target() -> None:
    # rf 3.65 % a year over N = 365: 0.0001 a day. Excess returns 0.0599, -0.0201, -0.0401,
    # 0.0399: mean 0.0099; downside sqrt((0.0201**2 + 0.0401**2) / 4) = sqrt(0.00050300500)
    # = 0.02242777. Sortino = 0.0099 / 0.02242777 * sqrt(365) = 8.4332...
    r = [0.06, -0.02, -0.04, 0.04]
    dd = math.sqrt((0.0201**2 + 0.0401**2) / 4)
    assert sortino(r, 365, rf_annual=0.0365) == pytest.approx(0.0099 / dd * math.sqrt(365))
    # A day above 0 but below the target counts as downside: r = [0.0, 0.02] with rf 0.01/day.
    # Excess -0.01, 0.01: mean 0; downside sqrt(0.0001 / 2) > 0 -> Sortino 0, not NaN.
    assert sortino([0.0, 0.02], 1, rf_annual=0.01) == pytest.approx(0.0)


def test_sortino_undefined_without_a_downside_day() -> None:
    assert math.isnan(sortino([0.01, 0.02, 0.0], 252))  # no day below the target
    assert math.isnan(sortino([], 252))
    assert math.isnan(sortino_stockbench([0.01, 0.02, 0.0], 252))


def test_summary_carries_both_sortinos() -> None:
    s = summarise([100, 106, 103.88, 99.7248, 103.713792], 252)
    r = simple_returns([100, 106, 103.88, 99.7248, 103.713792])
    assert s.sortino == pytest.approx(sortino(r, 252))
    assert s.sortino_stockbench == pytest.approx(sortino_stockbench(r, 252))
    assert s.to_dict()["sortino_stockbench"] == pytest.approx(s.sortino_stockbench)


def test_leaderboard_headline_is_standard_and_composite_uses_stockbench(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    build_store(db, {"A": [100.0, 110.0, 99.0, 108.9], "B": [50.0, 50.0, 60.0, 66.0]}, PLANS,
                agents_cfg=AGENTS_CFG, classes={"A": "x", "B": "y"})
    board = leaderboard(db)
    rows = rows_by_agent(board)
    # allA: 1000 (initial), 1000, 1100, 990, 1089 -> r = 0, 0.1, -0.1, 0.1: mean 0.025.
    # Standard: downside sqrt(0.01 / 4) = 0.05 -> 0.5 * sqrt(252) = 7.9372539.
    # StockBench: one loss day, sqrt(0.01) = 0.1 -> 0.25 * sqrt(252) = 3.9686270.
    assert rows["allA"]["sortino"] == pytest.approx(0.5 * SQRT252)
    assert rows["allA"]["sortino_stockbench"] == pytest.approx(0.25 * SQRT252)
    nan = float("nan")

    def v(x: float | None) -> float:
        return nan if x is None else x

    ranked = _ranked(board)
    comp = composite_rank({r["agent"]: v(r["cumulative_return"]) for r in ranked},
                          {r["agent"]: v(r["max_drawdown"]) for r in ranked},
                          {r["agent"]: v(r["sortino_stockbench"]) for r in ranked})
    assert any(math.isfinite(x) for x in comp.values())
    for r in ranked:
        want = comp[r["agent"]]
        got = r["composite_score"]
        assert (got is None) if math.isnan(want) else got == pytest.approx(want)
    assert board["conventions"]["sortino"]["headline"].startswith("standard")
    assert "sortino_stockbench" in board["conventions"]["composite"]


def _ranked(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in board["rows"] if not r["provisional"]]


def test_table_names_both_sortinos(hand: Path) -> None:
    text = to_table(leaderboard(hand))
    assert "sortino" in text
