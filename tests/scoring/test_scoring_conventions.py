"""Issue 17: the scoring conventions a quant reviewer expects, each on a hand-derived case.

Every test states the arithmetic it checks; where a paper prints a number, the number is used.

Why one module over 500 lines: each convention is one hand-derived case over the same synthetic
store builder.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon.config.settings import Config, ConfigError, parse_config
from daemon.store.reports import leaderboard, live_figures, load_report
from scoring.board.report_html import COLUMNS, render_html
from scoring.board.text import LEGEND, to_table
from scoring.stats.benchmarks import composite_rank
from scoring.stats.diversification import class_correlations, diversification_from_returns
from scoring.stats.inference import paired_bootstrap
from scoring.stats.metrics import (
    mean_daily_turnover,
    periods_per_year,
    sharpe,
    simple_returns,
    sortino,
    sortino_stockbench,
    summarise,
)
from tests.scoring.test_leaderboard import AGENTS_CFG, PLANS, PRICES, build_store, rows_by_agent

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
    # and is the per-day ratio of its Table 2: 0.01 / 0.0316228 = 0.31622777 (a factor
    # sqrt(T / N_d) * sqrt(252) = sqrt(2) * sqrt(252) below the standard figure).
    assert sortino_stockbench(r, 252) == pytest.approx(0.31622777, rel=1e-7)
    assert sortino(r, 252) / sortino_stockbench(r, 252) == pytest.approx(math.sqrt(2 * 252))


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
    # allA fills at mark 0 itself, so its series starts there (issue 27, point 9: no
    # zero-length period from the initial cash at the same time): 1000, 1100, 990, 1089 ->
    # r = 0.1, -0.1, 0.1: mean 0.1/3. Standard: downside sqrt(0.01 / 3) -> Sortino
    # (0.1/3) / sqrt(0.01/3) * sqrt(252) = sqrt(1/3) * sqrt(252) = 9.1651514.
    # StockBench (per day, Table 2): one loss day, sqrt(0.01) = 0.1 -> (0.1/3) / 0.1 = 1/3.
    assert rows["allA"]["sortino"] == pytest.approx(math.sqrt(1 / 3) * SQRT252)
    assert rows["allA"]["sortino_stockbench"] == pytest.approx(1 / 3)
    assert rows["allA"]["n_periods"] == 3
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


# ----------------------------------------------------------------------------- 4. turnover


def test_executed_turnover_by_hand() -> None:
    # Traded 50 + 157.5 on a series 1000, 1050, 1102.5: mean equity 1050.833..., 2 returns.
    # (207.5 / 1050.8333) / 2 = 0.0987312...
    assert mean_daily_turnover([50.0, 157.5], [1000.0, 1050.0, 1102.5]) == pytest.approx(
        207.5 / (3152.5 / 3) / 2)
    assert mean_daily_turnover([], [1000.0, 1010.0]) == 0.0  # no trade: 0, not NaN
    assert math.isnan(mean_daily_turnover([10.0], [1000.0]))  # no return
    assert math.isnan(mean_daily_turnover([10.0], [0.0, 0.0]))  # no equity


def test_daily_rebalanced_equal_weight_turns_over_although_its_target_never_moves(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ew.db"
    build_store(db, PRICES, {"ew": {t: {"A": 0.5, "B": 0.5} for t in range(4)}})
    row = rows_by_agent(leaderboard(db))["ew"]
    # Mark 0: 1000 -> 5 A + 10 B (the first fill builds the portfolio: not counted).
    # Mark 1: A 110, B 50: value 1050, 525 each: sell 25 of A, buy 25 of B -> 50 traded.
    # Mark 2: A 99, B 60: 472.5 + 630 = 1102.5, 551.25 each -> 2 * 78.75 = 157.5 traded.
    # Mark 3: A 99, B 66: 551.25 + 606.375 = 1157.625, 578.8125 each -> 2 * 27.5625 = 55.125.
    # Series 1000 (mark 0: the fill is at the mark, so the initial cash adds no period),
    # 1050, 1102.5, 1157.625: mean 1077.53125; 3 daily returns.
    want = (50 + 157.5 + 55.125) / 1077.53125 / 3  # 0.0812428...
    assert row["mean_turnover"] == pytest.approx(want)
    assert row["target_turnover"] == pytest.approx(0.0, abs=1e-12)


def test_switching_agent_turnover_and_window(hand: Path) -> None:
    board = leaderboard(hand)
    sw = rows_by_agent(board)["switch"]
    # Fills: mark 0 buys 1000 of A (first: not counted), mark 1 swaps 1100 A for B (2200
    # traded), mark 2 swaps 1320 B for A (2640). Series 1000, 1100, 1320, 1320: mean 1185.
    assert sw["mean_turnover"] == pytest.approx(4840 / 1185 / 3)
    assert sw["target_turnover"] == pytest.approx(2.0)
    assert "target_turnover" in board["conventions"]["turnover"]


# ----------------------------------------------------------------------------- 2. annualisation


def _implied_cr(sr: float, vol: float, n: int, days: int) -> float:
    """Return the cumulative return a (log-normal) daily series with these figures implies."""
    mean_d = sr * vol / n  # SR = mean_d / sigma_d * sqrt(N), vol = sigma_d * sqrt(N), rf = 0
    sigma_d = vol / math.sqrt(n)
    return math.exp(days * (mean_d - sigma_d**2 / 2)) - 1


def test_livetradebench_polymarket_table_fits_252_periods() -> None:
    # LiveTradeBench Table 2, Polymarket, 49 daily returns (win rates 25/49 = 51.02 %):
    # Claude-Sonnet-3.7 CR 20.54 %, SR 2.38, sigma 44.64 %; Grok-4 CR 7.38 %, SR 1.01, 46.92 %.
    for cr, sr, vol in ((0.2054, 2.38, 0.4464), (0.0738, 1.01, 0.4692)):
        assert _implied_cr(sr, vol, 252, 49) == pytest.approx(cr, abs=0.005)
        assert abs(_implied_cr(sr, vol, 365, 49) - cr) > 0.02
    assert periods_per_year("polymarket") == 252
    assert periods_per_year("equity") == 252
    assert Config().markets.polymarket.periods_per_year == 252
    assert Config().markets.equity.periods_per_year == 252


def test_periods_per_year_setting_validates() -> None:
    cfg = parse_config({"markets": {"polymarket": {"periods_per_year": 365}}})
    assert cfg.markets.polymarket.periods_per_year == 365
    for bad in (0, -5, 400, "daily"):
        with pytest.raises(ConfigError):
            parse_config({"markets": {"equity": {"periods_per_year": bad}}})


def _as_polymarket(db: Path, periods: int | None) -> None:
    """Move a hand-built equity store to the polymarket market (optionally with a setting)."""
    con = sqlite3.connect(db)
    for table in ("equity", "fills", "decisions", "market_events"):
        con.execute(f"UPDATE {table} SET market='polymarket'")
    (cfg_json,) = con.execute("SELECT config_json FROM runs").fetchone()
    cfg = json.loads(cfg_json)
    poly = cfg["markets"].pop("equity")
    if periods is not None:
        poly["periods_per_year"] = periods
    cfg["markets"]["polymarket"] = poly
    con.execute("UPDATE runs SET config_json=?", (json.dumps(cfg),))
    con.commit()
    con.close()


@pytest.mark.parametrize("periods", [None, 365])
def test_leaderboard_annualises_per_market_and_says_so(tmp_path: Path,
                                                       periods: int | None) -> None:
    db = tmp_path / "p.db"
    build_store(db, PRICES, PLANS)
    _as_polymarket(db, periods)
    board = leaderboard(db)
    n = periods or 252  # an older store without the setting gets the default
    half = rows_by_agent(board)["half"]
    # half: 1000, 1050, 1095, 1155 (it fills at mark 0) -> the Sharpe of these returns.
    r = simple_returns([1000, 1050, 1095, 1155])
    assert half["sharpe"] == pytest.approx(sharpe(r, n))
    assert half["volatility"] == pytest.approx(float(np.std(r, ddof=1)) * math.sqrt(n))
    assert board["conventions"]["periods_per_year"] == {"polymarket": n}
    assert f"polymarket {n}" in to_table(board).splitlines()[0]


# ----------------------------------------------------------------------------- 3. s_corr


def _panel_with_correlation(corr: np.ndarray, rows: int = 40, seed: int = 1) -> np.ndarray:
    """Return daily returns whose sample Pearson correlation matrix is exactly ``corr``."""
    k = corr.shape[0]
    z = np.random.default_rng(seed).normal(size=(rows, k))
    z -= z.mean(axis=0)
    q, _ = np.linalg.qr(z)  # orthonormal, still zero-mean columns
    return 0.001 + 0.01 * q @ np.linalg.cholesky(corr).T


def test_s_corr_worked_example_over_the_whole_class() -> None:
    # The PortBench vector: equities weight .6, intra rho .48; bonds .4, rho .77; rho(eq, bond)
    # -.18 -> s_intra .404, s_inter .59, s_corr .497. Only E1 of the two equities is held: the
    # class correlation is still the whole class's (E1, E2) .48, not E1's self-correlation.
    c = np.array([[1, .48, -.18, -.18], [.48, 1, -.18, -.18],
                  [-.18, -.18, 1, .77], [-.18, -.18, .77, 1]])
    r = _panel_with_correlation(c)
    assets = ["E1", "E2", "B1", "B2"]
    classes = {"E1": "equities", "E2": "equities", "B1": "bonds", "B2": "bonds"}
    out = diversification_from_returns({"E1": 0.6, "B1": 0.2, "B2": 0.2}, classes, r, assets)
    assert round(out["s_intra"], 3) == 0.404
    assert round(out["s_inter"], 3) == 0.59
    assert round(out["s_corr"], 3) == 0.497
    cc = class_correlations(r, assets, classes)
    assert cc.intra == pytest.approx({"equities": 0.48, "bonds": 0.77})
    assert cc.cross[("bonds", "equities")] == pytest.approx(-0.18)


NINE = [f"{c}{i}" for c in "XYZ" for i in (1, 2, 3)]
NINE_CLASSES = {a: a[0] for a in NINE} | {"CASH": "cash"}


def _nine() -> np.ndarray:
    """Three classes of three assets: rho .6 inside a class, .2 across; CASH constant."""
    c = np.full((9, 9), 0.2)
    for k in range(3):
        c[3 * k:3 * k + 3, 3 * k:3 * k + 3] = 0.6
    np.fill_diagonal(c, 1.0)
    r = _panel_with_correlation(c)
    return np.column_stack([r, np.zeros(r.shape[0])])


def test_s_corr_one_asset_per_class_beats_three_correlated_assets_in_one_class() -> None:
    r, assets = _nine(), [*NINE, "CASH"]
    spread = diversification_from_returns({"X1": 1 / 3, "Y1": 1 / 3, "Z1": 1 / 3},
                                          NINE_CLASSES, r, assets)
    # s_intra = 1 - 3 * (1/3 * .6) = .4; rho_cross .2 -> s_inter .4; s_corr .4.
    assert spread == pytest.approx({"s_intra": 0.4, "s_inter": 0.4, "s_corr": 0.4})
    one = diversification_from_returns({"X1": 1 / 3, "X2": 1 / 3, "X3": 1 / 3},
                                       NINE_CLASSES, r, assets)
    # s_intra = 1 - .6 = .4; one class: no class to hedge with -> s_inter 0; s_corr .2.
    assert one == pytest.approx({"s_intra": 0.4, "s_inter": 0.0, "s_corr": 0.2})
    # The same class holding, one asset only: the class's correlation still applies.
    single = diversification_from_returns({"X1": 1.0}, NINE_CLASSES, r, assets)
    assert single == pytest.approx(one)


def test_s_corr_all_cash_is_not_scored() -> None:
    r, assets = _nine(), [*NINE, "CASH"]
    cash = diversification_from_returns({"CASH": 1.0}, NINE_CLASSES, r, assets)
    assert all(math.isnan(x) for x in cash.values())  # nothing at risk: nothing to diversify
    # Half cash: CASH is a class with correlation 0 (PortBench's cash class, riskless).
    # s_intra = 1 - .5 * .6 = .7; rho_cross(x, cash) = 0 -> s_inter .5; s_corr .6.
    half = diversification_from_returns({"X1": 0.5, "CASH": 0.5}, NINE_CLASSES, r, assets)
    assert half == pytest.approx({"s_intra": 0.7, "s_inter": 0.5, "s_corr": 0.6})


def test_leaderboard_s_corr_conventions(hand: Path) -> None:
    rows = rows_by_agent(leaderboard(hand))
    # Classes x = {A}, y = {B}: a one-asset class has rho_intra 1 (the asset with itself).
    # allA: s_intra 1 - 1 = 0; one class -> s_inter 0. The cash agent's marks are all cash.
    assert (rows["allA"]["s_intra"], rows["allA"]["s_inter"], rows["allA"]["s_corr"]) == (
        0.0, 0.0, 0.0)
    assert rows["cash"]["s_corr"] is None


# ----------------------------------------------------------------------------- 11. the docs

ROOT = Path(__file__).resolve().parents[2]


def test_scoring_docs_cite_papers_by_name_and_no_path_outside_the_repo() -> None:
    text = (ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    for name in ("LiveTradeBench", "StockBench", "PortBench", "AlphaForgeBench", "CapitalBench",
                 "arXiv:2511.03628", "arXiv:2605.27887"):
        assert name in text, name
    assert "Where paperarena departs from a paper" in text
    for path in (ROOT / "docs" / "scoring.md", *sorted((ROOT / "scoring").glob("*.py"))):
        assert "/work/" not in path.read_text(encoding="utf-8"), path


# ----------------------------------------------------------------------------- 9. presentation


def test_signs_only_where_a_figure_can_be_either(hand: Path) -> None:
    board = leaderboard(hand)
    a = rows_by_agent(board)["allA"]
    # allA: peak 1100, trough 990 -> max drawdown 10 % (JSON keeps the positive magnitude).
    assert a["max_drawdown"] == pytest.approx(0.1)
    line = next(x for x in to_table(board).splitlines() if " allA " in x)
    assert " 10.00%" in line and "-10.00%" not in line and "+10.00%" not in line
    vol, win = f"{100 * a['volatility']:.2f}%", f"{100 * a['win_rate']:.2f}%"
    assert f" {vol}" in line and f"+{vol}" not in line
    assert f" {win}" in line and f"+{win}" not in line
    assert f"{100 * a['cumulative_return']:+.2f}%" in line  # a return keeps its sign
    html = render_html(load_report(hand))
    assert "<td>10.00%</td>" in html and "0.00%</td>" in html
    assert "<td>-10.00%</td>" not in html and "<td>+10.00%</td>" not in html
    # No drawdown, volatility or share cell of the HTML report carries a sign.
    cols = [name for name, _, _ in COLUMNS]
    for table in re.findall(r"<table class='leaderboard'>.*?</table>", html, re.S):
        heads = re.findall(r"<th[^>]*title='[^']*'>([^<]*)</th>", table)
        for row in re.findall(r"<tr(?: class='provisional')?><td.*?</tr>", table, re.S):
            cells = dict(zip(heads, re.findall(r"<td[^>]*>(.*?)</td>", row), strict=True))
            for name in ("max DD", "now DD", "vol"):
                if name in cells:
                    assert not cells[name].startswith(("+", "-")), (name, cells[name])
            if "cost % / net" in cells:
                assert not cells["cost % / net"].startswith("+"), cells["cost % / net"]
            if "return [95% CI]" in cells and cells["return [95% CI]"] != "–":
                assert cells["return [95% CI]"][0] in "+-", cells["return [95% CI]"]
    assert {h for t in re.findall(r"<tr>(<th[^>]*title.*?)</tr>", html) for h in
            re.findall(r">([^<]*)</th>", t)} == set(cols)  # every column in some table


def test_every_table_column_is_explained_in_table_html_and_docs(hand: Path) -> None:
    board = leaderboard(hand)
    text = to_table(board)
    legend = dict(LEGEND)
    lines = text.splitlines()
    heads = [lines[i] for i in range(1, len(lines)) if lines[i].startswith("-" * 10)]
    assert heads  # the header rows are the lines above the dashes
    header_lines = [lines[i - 1] for i in range(1, len(lines)) if lines[i].startswith("-" * 10)]
    for head in header_lines:
        for token in ("return 95% CI", "sharpe 95% CI", "max dd", "#", "comp", "capb", "align",
                      "d1", "consist", "valid", "turnover", "sortino"):
            if token in head:
                assert token in legend, token
    for key, meaning in LEGEND:
        assert f"  {key}" in text and meaning in text
    html = render_html(load_report(hand))
    docs = (ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    for key, _ in LEGEND:
        assert f"`{key}`" in docs, key
    for name, _, meaning in COLUMNS:  # every HTML column: a tooltip and a legend entry
        assert f"title='{escape(meaning, quote=True)}'>{escape(name)}</th>" in html, name
        assert f"<dt>{escape(name)}</dt><dd>{escape(meaning, quote=True)}</dd>" in html, name


def test_window_real_dates_in_json_table_and_html(hand: Path) -> None:
    board = leaderboard(hand)
    # Marks from 2026-11-02 21:00 UTC, one a day for four days.
    assert board["window_dates"]["first_date"] == "2026-11-02"
    assert board["window_dates"]["last_date"] == "2026-11-05"
    assert "window: 2026-11-02 to 2026-11-05" in to_table(board).splitlines()[1]
    assert "Window: 2026-11-02 → 2026-11-05" in render_html(load_report(hand))


# ----------------------------------------------------------------------------- 7. model cost


def _add_calls(db: Path, marks: list[float]) -> None:
    con = sqlite3.connect(db)
    calls = [  # agent, scheduled_ts, tokens in/out, latency, cost, error
        ("switch", marks[0], 100, 20, 1.0, 0.01, None),
        ("switch", marks[1], 300, 40, 3.0, 0.03, None),
        ("switch", marks[2], 50, 0, 8.0, None, "timeout"),  # failed call: no cost known
        ("half", marks[0], 10, 5, 0.5, 0.0, None),
    ]
    for agent, ts, tin, tout, lat, cost, err in calls:
        con.execute("INSERT INTO llm_calls(agent, market, scheduled_ts, attempt, ts, model,"
                    " error, tokens_in, tokens_out, latency_s, cost_usd)"
                    " VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                    (agent, "equity", ts, 1, ts + lat, "m", err, tin, tout, lat, cost))
    con.commit()
    con.close()


def test_cost_of_intelligence_beside_the_returns(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    marks = build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG, classes={"A": "x", "B": "y"})
    _add_calls(db, marks)
    board = leaderboard(db)
    sw = rows_by_agent(board)["switch"]
    # 3 calls, 450 tokens in, 60 out, $0.04, latency (1 + 3 + 8) / 3 = 4 s; return 32 %.
    # Issue 27.8: the cost as a share of the 1000 USD capital, 0.004 %, and the return net of
    # it, 32 % - 0.004 % (a return divided by dollars depended on the capital and window).
    assert sw["llm_calls"] == 3
    assert (sw["llm_tokens_in"], sw["llm_tokens_out"]) == (450, 60)
    assert sw["llm_cost_usd"] == pytest.approx(0.04)
    assert sw["llm_latency_mean_s"] == pytest.approx(4.0)
    assert sw["llm_cost_share"] == pytest.approx(0.04 / 1000)
    assert sw["net_return"] == pytest.approx(0.32 - 0.04 / 1000)
    assert "return_per_usd" not in sw
    half = rows_by_agent(board)["half"]
    assert half["llm_cost_usd"] == 0.0 and half["llm_cost_share"] == 0.0
    assert half["net_return"] == pytest.approx(half["cumulative_return"])
    cash = rows_by_agent(board)["cash"]
    assert cash["llm_calls"] == 0 and cash["llm_cost_usd"] is None
    assert cash["llm_cost_share"] is None and cash["net_return"] is None
    # The window applies: only the call of mark 2 is inside [mark 2, mark 3].
    late = rows_by_agent(leaderboard(db, window=(marks[2], marks[3])))["switch"]
    assert late["llm_calls"] == 1 and late["llm_cost_usd"] is None
    text = to_table(board)
    assert "model $" in text and "0.0400" in text
    html = render_html(load_report(db))
    assert "model cost" in html and "$0.0400" in html
    figs = live_figures(db)[("switch", "equity")]
    assert figs["llm_cost_usd"] == pytest.approx(0.04)
    assert figs["llm_cost_share"] == pytest.approx(0.04 / 1000)


# ----------------------------------------------------------------------------- 5. significance


def test_paired_bootstrap_by_hand() -> None:
    from arch.bootstrap import StationaryBootstrap

    a = np.array([0.01, -0.02, 0.03, 0.0, 0.015])
    same = paired_bootstrap(a, a.copy(), lambda x: float(np.prod(1 + x) - 1), 2000)
    assert same == (0.0, 0.0, 1.0)  # identical: every resampled difference is 0
    b = a - 0.001  # a beats b on every day: every resample's difference is positive
    lo, hi, p = paired_bootstrap(a, b, lambda x: float(np.prod(1 + x) - 1), 2000)
    # The resamples: arch's seeded stationary bootstrap (5 days: too few for Politis-White,
    # block length 1); the p-value from the centred resampled null, never below 1/(B+1).
    bs = StationaryBootstrap(1, np.arange(5), seed=0)
    idx = np.array([x[0][0] for x in bs.bootstrap(2000)])
    d = np.prod(1 + a[idx], axis=1) - np.prod(1 + b[idx], axis=1)
    d_hat = np.prod(1 + a) - np.prod(1 + b)
    assert 0 < lo <= hi
    assert (lo, hi) == pytest.approx(tuple(np.quantile(d, [0.025, 0.975])))
    assert p == pytest.approx((1 + np.sum(np.abs(d - d_hat) >= d_hat)) / 2001)
    assert p >= 1 / 2001
    assert all(math.isnan(x) for x in paired_bootstrap(a[:1], b[:1], np.mean))


def test_paired_difference_separates_agents_whose_own_intervals_overlap(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 41
    noise = 1.0 + rng.normal(0, 0.02, n - 1)
    prices = {"N": list(100 * np.cumprod(np.r_[1.0, noise])),
              "P": list(100 * np.cumprod(np.r_[1.0, noise * 1.002]))}  # N plus 0.2 % a day
    db = tmp_path / "pair.db"
    build_store(db, prices, {"plus": {0: {"P": 1.0}}, "base": {0: {"N": 1.0}},
                             "bh": {0: {"N": 1.0}}},
                agents_cfg=[{"id": "bh", "kind": "buy_and_hold"}])
    board = leaderboard(db)
    rows = rows_by_agent(board)
    plus, base = rows["plus"], rows["base"]
    ci_p, ci_b = plus["cumulative_return_ci"], base["cumulative_return_ci"]
    assert ci_p[0] <= ci_b[1]  # the agents' own intervals overlap...
    assert plus["rank"] == 1 and plus["vs_next"]["agent"] in ("base", "bh")
    assert plus["vs_next"]["difference_ci"][0] > 0  # ...but the paired difference does not
    assert plus["vs_next"]["p_value"] == pytest.approx(1 / 10_001)  # the floor 1 / (B + 1)
    assert plus["vs_next"]["p_value_holm"] < 0.05 and plus["vs_next"]["days"] == 40
    assert plus["tied_with_next"] is False
    # base and bh hold the same asset: difference 0, p 1, tied.
    first = min(base, rows["bh"], key=lambda r: r["rank"])
    assert first["vs_next"]["p_value"] == 1.0 and first["tied_with_next"] is True
    # Versus each baseline (kind other than llm / http): bh is one.
    assert plus["vs_baselines"]["bh"]["difference_ci"][0] > 0
    assert "bh" not in rows["bh"]["vs_baselines"]
    assert board["conventions"]["significance"]["min_days"] == 20


def test_too_short_a_window_makes_no_claim(hand: Path) -> None:
    rows = rows_by_agent(leaderboard(hand))
    # 4 common daily returns < 20: provisional comparison, never "significantly ahead".
    vs = rows["allB"]["vs_next"]
    assert vs["provisional"] is True and rows["allB"]["tied_with_next"] is True


# ----------------------------------------------------------------------------- 6. benchmarks


def test_relative_to_the_equal_weight_index_by_hand(tmp_path: Path) -> None:
    db = tmp_path / "rel.db"
    build_store(db, {"A": [100.0, 110.0, 110.0, 121.0], "B": [100.0, 100.0, 90.0, 99.0]},
                {"allA": {0: {"A": 1.0}}})
    row = rows_by_agent(leaderboard(db))["allA"]
    rel = row["relative"]["equal_weight"]
    # Index (daily equal weight): (.1 + 0) / 2 = .05, (0 - .1) / 2 = -.05, (.1 + .1) / 2 = .1.
    # allA: .1, 0, .1 on the same 3 days (its first return, from the initial cash, has no
    # index return). Excess 1.21 - 1.05 * .95 * 1.1 = .11275; beta = cov / var = 5 / 7;
    # a - b = .05, .05, 0: mean 1/30, std (ddof 1) .0288675 -> TE .0288675 * sqrt(252),
    # IR (1/30) / .0288675 * sqrt(252).
    assert rel["days"] == 3
    assert rel["excess_return"] == pytest.approx(0.11275)
    assert rel["beta"] == pytest.approx(5 / 7)
    te = math.sqrt((2 * (1 / 60) ** 2 + (1 / 30) ** 2) / 2)
    assert rel["tracking_error"] == pytest.approx(te * SQRT252)
    assert rel["information_ratio"] == pytest.approx((1 / 30) / te * SQRT252)


def test_relative_to_spy_when_it_is_in_the_universe(tmp_path: Path) -> None:
    db = tmp_path / "spy.db"
    build_store(db, {"A": [100.0, 110.0, 99.0, 99.0], "SPY": [400.0, 404.0, 398.0, 410.0]},
                {"spy": {0: {"SPY": 1.0}}, "allA": {0: {"A": 1.0}}})
    board = leaderboard(db)
    rel = rows_by_agent(board)["spy"]["relative"]["SPY"]
    assert rel["beta"] == pytest.approx(1.0)
    assert rel["excess_return"] == pytest.approx(0.0, abs=1e-12)
    assert rel["tracking_error"] == pytest.approx(0.0, abs=1e-12)
    assert rel["information_ratio"] is None  # no active risk: undefined
    assert board["conventions"]["relative"]["benchmarks"]["equity"] == ["equal_weight", "SPY"]
    # Without SPY in the universe only the equal-weight index is used.
    db2 = tmp_path / "nospy.db"
    build_store(db2, PRICES, PLANS)
    assert set(rows_by_agent(leaderboard(db2))["allA"]["relative"]) == {"equal_weight"}
    assert Config().markets.equity.benchmark == "SPY"
    assert Config().markets.polymarket.benchmark == ""


# ----------------------------------------------------------------------------- 8. calibration


def _poly_store(tmp_path: Path) -> tuple[Path, list[float]]:
    db = tmp_path / "brier.db"
    marks = build_store(db, {"Y": [0.5, 0.6, 0.7, 0.8], "N": [0.5, 0.4, 0.3, 0.2]},
                        {"yes": {0: {"Y": 1.0}}, "no": {0: {"N": 1.0}},
                         "half": {0: {"Y": 0.5, "CASH": 0.5}}, "cash": {0: {"CASH": 1.0}}})
    _as_polymarket(db, None)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO books(market, state_json, updated_ts) VALUES(?,?,?)",
                ("polymarket", json.dumps({"questions": {"q1": ["Y", "N"]}}), marks[0]))
    con.execute("INSERT INTO resolutions(question_id, market, ts, payouts_json) VALUES(?,?,?,?)",
                ("q1", "polymarket", marks[2] + 3600, json.dumps({"Y": 1.0, "N": 0.0})))
    con.commit()
    con.close()
    return db, marks


def test_brier_score_of_the_implied_probabilities(tmp_path: Path) -> None:
    db, marks = _poly_store(tmp_path)
    rows = rows_by_agent(leaderboard(db))
    # q1 resolves YES between marks 2 and 3; the forecast is the position at mark 2:
    # p(YES) = (1 + w_YES - w_NO) / 2. yes: all in YES -> p 1, Brier 0; no: p 0 -> 1;
    # half: 1000 YES at .7 = 700 of 1200 -> w .58333, p .791667, (1 - p)^2 = .0434028;
    # cash: no view, p .5 -> .25.
    assert rows["yes"]["brier"] == pytest.approx(0.0)
    assert rows["no"]["brier"] == pytest.approx(1.0)
    assert rows["half"]["brier"] == pytest.approx((1 - (1 + 700 / 1200) / 2) ** 2)
    assert rows["cash"]["brier"] == pytest.approx(0.25)
    assert rows["yes"]["brier_questions"] == 1
    # Before the resolution there is nothing to score.
    early = rows_by_agent(leaderboard(db, window=(None, marks[2])))["yes"]
    assert early["brier"] is None and early["brier_questions"] == 0


def test_no_brier_score_outside_polymarket(hand: Path) -> None:
    assert rows_by_agent(leaderboard(hand))["allA"]["brier"] is None


def test_annualised_figures_are_flagged_under_a_trading_month(hand: Path) -> None:
    board = leaderboard(hand)
    a = rows_by_agent(board)["allA"]
    assert a["n_periods"] == 3 and a["annualised_flag"] is True  # 3 returns < 20
    line = next(x for x in to_table(board).splitlines() if " allA " in x)
    assert "*" in line
    assert board["conventions"]["min_days_annualised"] == 20
    assert "annualised figures over fewer than 20 daily returns" in to_table(board)


def test_json_carries_each_agents_equity_series(hand: Path) -> None:
    board = leaderboard(hand)
    series = board["series"]["equity"]["switch"]
    # One value per daily mark: 1000, 1100, 1320, 1320. The first fill is at mark 0 itself, so
    # the initial cash adds no point at the same time (issue 27, point 9).
    assert [v for _, v in series] == [1000.0, 1100.0, 1320.0, 1320.0]
    ts = [t for t, _ in series]
    assert ts == sorted(set(ts))


def test_allocation_tooltips_name_the_asset_and_its_weight(hand: Path) -> None:
    html = render_html(load_report(hand))
    # half: 5 A at 100 and 10 B at 50 -> 50 % each, set by its only fill.
    assert "<title>A: weight 50.0% after the last fill, 50.0% at most</title>" in html


def test_allocation_colours_stay_distinct_beyond_the_palette() -> None:
    from scoring.board.load import AgentCurves
    from scoring.board.report_html import ASSET_COLOURS, _asset_colours

    assets = [f"T{i:02d}" for i in range(len(ASSET_COLOURS) + 13)]
    curve = AgentCurves("a", "polymarket", (0.0,), (1.0,), (0.0,),
                        ((0.0, {t: 1 / len(assets) for t in assets}),))
    colours = _asset_colours([curve], {})
    assert len({colours[t] for t in assets}) == len(assets)
