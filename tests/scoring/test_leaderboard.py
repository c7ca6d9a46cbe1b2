"""Leaderboard integration: benchmark figures on small synthetic stores, hand-computed."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon.config.settings import Config, ConfigError, parse_config
from daemon.core.universe import DEFAULT_ASSET_CLASSES
from daemon.store.reports import leaderboard, live_figures, load_report
from daemon.store.schema import MIGRATIONS
from daemon.store.store import record_probe
from scoring.board.leaderboard import LIVE_FIELDS
from scoring.board.report_html import render_html
from scoring.board.text import to_json, to_table
from scoring.stats.benchmarks import composite_rank, historical_var, regime_label
from scoring.stats.metrics import simple_returns

T0 = datetime(2026, 11, 2, 21, tzinfo=UTC).timestamp()  # a close mark (16:00 ET)
DAY = 86400.0

Plan = Mapping[int, Mapping[str, float]]


def build_store(path: Path, prices: Mapping[str, Sequence[float]], plans: Mapping[str, Plan], *,
                agents_cfg: Sequence[Mapping[str, Any]] = (), classes: Mapping[str, str] | None
                = None, initial: float = 1000.0, rf: float = 0.0,
                min_days: int | None = 1) -> list[float]:
    """Write a zero-cost equity store: one mark a day, fills at the marks; return the marks.

    ``min_days`` goes to the run's ``[leaderboard]`` section (these hand-computed stores are a
    few days long; ``None`` leaves the section out, i.e. the defaults).
    """
    con = sqlite3.connect(path)
    for v in sorted(MIGRATIONS):
        con.executescript(MIGRATIONS[v])
    con.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(max(MIGRATIONS)),))
    assets = sorted(prices)
    n = len(next(iter(prices.values())))
    marks = [T0 + DAY * t for t in range(n)]
    eq: dict[str, Any] = {"initial_cash": initial, "risk_free_rate": rf, "assets": assets}
    if classes is not None:
        eq["asset_classes"] = dict(classes)
    ids = {a["id"] for a in agents_cfg}
    agents = [*agents_cfg, *({"id": a, "kind": "llm"} for a in sorted(plans) if a not in ids)]
    run_cfg: dict[str, Any] = {"markets": {"equity": eq}, "agents": agents}
    if min_days is not None:
        run_cfg["leaderboard"] = {"min_days": min_days}
    con.execute("INSERT INTO runs(started_ts, mode, version, config_json) VALUES(?,?,?,?)",
                (T0 - DAY, "replay", "test", json.dumps(run_cfg)))
    for t, m in enumerate(marks):
        for a in assets:
            con.execute("INSERT INTO market_events(seq, ts, recv_ts, kind, market, asset, price)"
                        " VALUES(?,?,?,'price','equity',?,?)", (t, m - 60, m - 60, a, prices[a][t]))
    for agent, plan in plans.items():
        q = dict.fromkeys(assets, 0.0)
        cash = initial
        for t, m in enumerate(marks):
            p = {a: prices[a][t] for a in assets}
            value = cash + sum(q[a] * p[a] for a in assets)
            target = plan.get(t)
            if target is not None:
                new = {a: value * target.get(a, 0.0) / p[a] for a in assets}
                trades = {a: new[a] - q[a] for a in assets if abs(new[a] - q[a]) > 1e-12}
                q, cash = new, value * target.get("CASH", 0.0)
                weights = {**{a: q[a] * p[a] / value for a in assets}, "CASH": cash / value}
                con.execute(
                    "INSERT INTO fills(agent, market, scheduled_ts, ts, trades_json, traded_value,"
                    " cost, value_before, value_after, weights_json) VALUES(?,?,?,?,?,?,?,?,?,?)",
                    (agent, "equity", m, m, json.dumps(trades),
                     sum(abs(d) * p[a] for a, d in trades.items()), 0.0, value, value,
                     json.dumps(weights)))
            con.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome)"
                        " VALUES(?,?,?,?,?)", (agent, "equity", m, m,
                                               "ok" if target is not None else "hold"))
            con.execute("INSERT INTO equity(agent, market, ts, kind, value, cash) VALUES"
                        "(?,?,?,'daily',?,?)", (agent, "equity", m, value, cash))
    con.commit()
    con.close()
    return marks


PRICES = {"A": [100.0, 110.0, 99.0, 99.0], "B": [50.0, 50.0, 60.0, 66.0]}
PLANS: dict[str, Plan] = {
    "switch": {0: {"A": 1.0}, 1: {"B": 1.0}, 2: {"A": 1.0}},
    "allA": {0: {"A": 1.0}},
    "allB": {0: {"B": 1.0}},
    "half": {0: {"A": 0.5, "B": 0.5}},
    "cash": {0: {"CASH": 1.0}},
}
AGENTS_CFG = [
    {"id": "allA", "kind": "buy_and_hold", "risk_profile": "conservative", "max_drawdown": 0.05},
    {"id": "switch", "kind": "llm", "risk_profile": "aggressive"},
    {"id": "cash", "kind": "cash"},
]


@pytest.fixture()
def hand(tmp_path: Path) -> tuple[Path, list[float]]:
    db = tmp_path / "hand.db"
    marks = build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG, classes={"A": "x", "B": "y"})
    return db, marks


def rows_by_agent(board: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["agent"]: r for r in board["rows"]}


def test_panel_reproduces_the_stored_marks_and_rolling_k_by_hand(
    hand: tuple[Path, list[float]],
) -> None:
    db, _ = hand
    rows = rows_by_agent(leaderboard(db))
    sw = rows["switch"]
    # Values 1000 -> 1000 (mark 0) -> 1100 -> 1320 -> 1320: A +10%, then B +20%, then A flat.
    assert sw["cumulative_return"] == pytest.approx(0.32)
    assert sw["rolling_k"]["cr0"] == pytest.approx(0.32)
    # CR^(1) = q_0 (all A) over mark 1 -> 2 = 99/110 - 1 = -0.1; Delta_1 = -0.1 - 0.32.
    assert sw["rolling_k"]["cr"]["1"] == pytest.approx(-0.1)
    assert sw["rolling_k"]["delta"]["1"] == pytest.approx(-0.42)
    # Same window t = 1..1: CR^(0) = B over mark 1 -> 2 = +0.2.
    assert sw["rolling_k"]["delta_same_window"]["1"] == pytest.approx(-0.3)
    assert sw["rolling_k"]["delta"]["2"] is None  # needs 2k + 2 = 6 marks
    a = rows["allA"]
    assert a["rolling_k"]["delta"]["1"] == pytest.approx(-0.1 - (-0.01))
    assert a["rolling_k"]["delta_same_window"]["1"] == pytest.approx(0.0, abs=1e-12)


def test_rolling_k_zero_equals_the_cumulative_return(hand: tuple[Path, list[float]]) -> None:
    db, marks = hand
    for window in ((None, None), (marks[1], marks[3]), (marks[0], marks[2])):
        for r in leaderboard(db, window=window)["rows"]:
            assert r["rolling_k"]["cr0"] == pytest.approx(r["cumulative_return"], abs=1e-12), (
                r["agent"], window)


def test_capitalbench_best_asset_scores_100_and_cash_0(hand: tuple[Path, list[float]]) -> None:
    db, _ = hand
    board = leaderboard(db)
    # Window returns: A 99/100 - 1 = -1%, B 66/50 - 1 = +32%, CASH 0.
    assert board["markets"]["equity"]["best_asset"] == "B"
    assert board["markets"]["equity"]["best_asset_return"] == pytest.approx(0.32)
    rows = rows_by_agent(board)
    assert rows["allB"]["capitalbench_score"] == pytest.approx(100.0)
    assert rows["allB"]["regret"] == pytest.approx(0.0, abs=1e-12)
    assert rows["cash"]["capitalbench_score"] == 0.0
    assert rows["cash"]["regret"] == pytest.approx(0.32)
    assert rows["allA"]["capitalbench_score"] == pytest.approx(100 * -0.01 / 0.32)
    assert rows["allA"]["regret"] == pytest.approx(0.33)
    # half: 5 A + 10 B -> 1155 at the end.
    assert rows["half"]["capitalbench_score"] == pytest.approx(100 * 0.155 / 0.32)


def test_diversification_conventions(hand: tuple[Path, list[float]], tmp_path: Path) -> None:
    db, _ = hand
    rows = rows_by_agent(leaderboard(db))
    # A single risky asset in a one-asset class: s_intra 0 (rho 1), one class -> s_inter 0,
    # s_corr 0 (issue 17.3; was 0.25); all cash is not scored (was 0.75).
    for agent in ("allA", "allB", "switch"):
        assert rows[agent]["s_intra"] == 0.0
        assert rows[agent]["s_inter"] == 0.0
        assert rows[agent]["s_corr"] == 0.0
    assert rows["cash"]["s_corr"] is None
    # A and B returns (+.1, -.1, 0) and (0, +.2, +.1) correlate at -1: classes x and y give
    # s_intra = 0 (each class is one asset, rho 1), s_inter = (1 - (-1)) / 2 = 1.
    assert rows["half"]["s_intra"] == 0.0
    assert rows["half"]["s_inter"] == pytest.approx(1.0)
    assert rows["half"]["s_corr"] == pytest.approx(0.5)
    # The same pair as one class: rho_intra = -1 -> s_intra 1, single class -> s_inter 0.
    db2 = tmp_path / "one_class.db"
    build_store(db2, PRICES, PLANS, classes={"A": "x", "B": "x"})
    half = rows_by_agent(leaderboard(db2))["half"]
    assert (half["s_intra"], half["s_inter"]) == (pytest.approx(1.0), 0.0)


def test_profile_alignment_and_checks(hand: tuple[Path, list[float]]) -> None:
    db, _ = hand
    rows = rows_by_agent(leaderboard(db))
    a = rows["allA"]  # MDD (1100 - 990) / 1100 = 10%, own cap 5%, VaR undefined (3 returns)
    assert a["risk_profile"] == "conservative" and a["max_drawdown_limit"] == 0.05
    assert a["var_95"] is None
    assert a["profile_alignment"] == 0.0
    assert a["profile_checks"]["aggressive"] == {"alignment": 1.0, "max_drawdown_ok": True,
                                                 "var_ok": None}
    assert rows["switch"]["risk_profile"] == "aggressive"
    assert rows["switch"]["profile_alignment"] == 1.0
    assert rows["half"]["risk_profile"] == "balanced"  # not configured: the default profile


def test_composite_and_ranks(hand: tuple[Path, list[float]]) -> None:
    db, _ = hand
    board = leaderboard(db)
    rows = board["rows"]
    nan = float("nan")

    def v(x: float | None) -> float:
        return nan if x is None else x

    comp = composite_rank({r["agent"]: v(r["cumulative_return"]) for r in rows},
                          {r["agent"]: v(r["max_drawdown"]) for r in rows},
                          {r["agent"]: v(r["sortino_stockbench"]) for r in rows})
    for r in rows:
        want = comp[r["agent"]]
        if math.isnan(want):
            assert r["composite_score"] is None and r["composite_rank"] is None
        else:
            assert r["composite_score"] == pytest.approx(want)
    ranked = [r for r in rows if r["composite_rank"] is not None]
    assert sorted(r["composite_rank"] for r in ranked) == list(range(1, len(ranked) + 1))
    by_rank = sorted(ranked, key=lambda r: r["composite_rank"])
    assert [r["composite_score"] for r in by_rank] == sorted(
        (r["composite_score"] for r in ranked), reverse=True)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["agent"] for r in rows][:2] == ["allB", "switch"]  # 32% each, then by agent id


@pytest.fixture()
def walk(tmp_path: Path) -> tuple[Path, dict[str, list[float]]]:
    rng = np.random.default_rng(3)
    n = 41
    prices = {
        "S": list(100 * np.cumprod(np.r_[1.0, 1.01 + rng.normal(0, 0.001, n - 1)])),
        "N": list(100 * np.cumprod(np.r_[1.0, 0.995 + rng.normal(0, 0.02, n - 1)])),
        "M": list(100 * np.cumprod(np.r_[1.0, 1.0 + rng.normal(0, 0.015, n - 1)])),
    }
    plans: dict[str, Plan] = {"steady": {0: {"S": 1.0}}, "noisy": {0: {"N": 1.0}},
                              "cash": {0: {"CASH": 1.0}},
                              "mix": {t: {"N": 0.5, "M": 0.5} for t in range(n)}}
    db = tmp_path / "walk.db"
    build_store(db, prices, plans, rf=0.04)
    return db, prices


def _arch_draws(excess: np.ndarray, reps: int = 10_000) -> np.ndarray:
    """Return the stationary-bootstrap day indices the report should use, from arch directly.

    Block length: the median Politis-White estimate over the non-constant columns (issue 27).
    """
    from arch.bootstrap import StationaryBootstrap, optimal_block_length

    n = excess.shape[0]
    blocks = [min(max(float(optimal_block_length(c)["stationary"].iloc[0]), 1.0), n)
              for c in excess.T if np.std(c) > 1e-12]
    block = float(np.median(blocks)) if blocks else 1.0
    bs = StationaryBootstrap(block, np.arange(n), seed=0)  # type: ignore[arg-type]
    return np.array([d[0][0] for d in bs.bootstrap(reps)])


def test_confidence_intervals_and_tie_rule(walk: tuple[Path, dict[str, list[float]]]) -> None:
    db, _ = walk
    board = leaderboard(db)
    rows = board["rows"]
    con = sqlite3.connect(db)
    # Every agent fills at mark 0 itself: the series start there (40 returns, issue 27.9).
    rets = {r["agent"]: simple_returns([v for (v,) in con.execute(
        "SELECT value FROM equity WHERE agent=? ORDER BY ts", (r["agent"],))]) for r in rows}
    names = sorted(rets)
    excess = np.column_stack([rets[a] for a in names]) - 0.04 / 252
    idx = _arch_draws(excess)
    q = [0.025, 0.975]
    for r in rows:
        ret = rets[r["agent"]]
        x = ret - 0.04 / 252
        xs = x[idx]
        sd = xs.std(axis=1, ddof=1)
        if r["agent"] == "cash":  # zero std: Sharpe undefined in every resample
            assert r["sharpe_ci"] == [None, None]
        else:
            want = np.quantile(xs.mean(axis=1) / sd * math.sqrt(252), q)
            assert r["sharpe_ci"] == pytest.approx(list(want), rel=1e-9)
        assert r["mean_daily_return_ci"] == pytest.approx(
            list(np.quantile(ret[idx].mean(axis=1), q)), rel=1e-9, abs=1e-15)
        assert r["cumulative_return_ci"] == pytest.approx(
            list(np.quantile(np.prod(1 + ret[idx], axis=1) - 1, q)), rel=1e-9, abs=1e-15)
        assert r["mean_daily_return"] == pytest.approx(float(np.mean(ret)))
        assert r["var_95"] == pytest.approx(historical_var(ret, 0.95, 60, min_periods=20))
    # Ties come from the paired block bootstrap with the next agent, Holm-adjusted over the
    # market's comparisons (tests/scoring/test_significance.py checks the procedure).
    for a, b in itertools.pairwise(rows):
        vs = a["vs_next"]
        assert vs["agent"] == b["agent"] and vs["days"] == 40
        xa, xb = rets[a["agent"]] - 0.04 / 252, rets[b["agent"]] - 0.04 / 252
        d_hat = np.prod(1 + xa) - np.prod(1 + xb)
        d = np.prod(1 + xa[idx], axis=1) - np.prod(1 + xb[idx], axis=1)
        assert vs["difference_ci"] == pytest.approx(list(np.quantile(d, q)), rel=1e-9)
        p = (1 + np.sum(np.abs(d - d_hat) >= abs(d_hat))) / (len(d) + 1)
        assert vs["p_value"] == pytest.approx(p)
        assert vs["p_value_holm"] >= vs["p_value"]
        assert a["tied_with_next"] == (vs["p_value_holm"] >= 0.05)
    assert rows[-1]["tied_with_next"] is False and rows[-1]["vs_next"] is None
    steady = rows_by_agent(board)["steady"]
    assert steady["rank"] == 1 and steady["cumulative_return_ci"][0] > 0
    assert steady["tied_with_next"] is False  # clearly ahead of all cash


def test_regime_of_the_window_and_split(walk: tuple[Path, dict[str, list[float]]]) -> None:
    db, prices = walk
    board = leaderboard(db)
    p = np.array([prices[a] for a in sorted(prices)]).T
    index = np.mean(p[1:] / p[:-1] - 1.0, axis=1)
    assert board["regime"]["label"] == regime_label(index, window=index.size)
    assert board["regime"]["index_return"] == pytest.approx(float(np.prod(1 + index) - 1))
    # Daily labels: trailing min(20, t) index returns, unknown with fewer than 5.
    want = ["unknown"] + [regime_label(index[:t], window=min(20, t)) if t >= 5 else "unknown"
                          for t in range(1, index.size + 1)]
    days: dict[str, int] = {}
    for lab in want:
        days[lab] = days.get(lab, 0) + 1
    assert board["regime"]["days_by_label"] == dict(sorted(days.items()))
    for r in board["rows"]:
        split = r["by_regime"]
        assert sum(x["days"] for x in split.values()) == r["n_periods"]
        total = sum(x["days"] * x["mean_daily_return"] for x in split.values())
        assert total == pytest.approx(r["mean_daily_return"] * r["n_periods"])


def test_window_applies_to_every_figure(hand: tuple[Path, list[float]]) -> None:
    db, marks = hand
    board = leaderboard(db, window=(marks[1], marks[3]))
    rows = rows_by_agent(board)
    a = rows["allA"]  # bought before the window: still held inside it
    assert a["days"] == 3 and a["n_periods"] == 2
    assert a["cumulative_return"] == pytest.approx(-0.1)
    assert a["rolling_k"]["cr0"] == pytest.approx(-0.1)
    assert a["decisions"] == {"hold": 3}
    assert board["markets"]["equity"]["capitalbench_start"] == marks[1]
    assert board["markets"]["equity"]["best_asset_return"] == pytest.approx(0.32)
    assert a["capitalbench_score"] == pytest.approx(100 * -0.1 / 0.32)
    assert rows["switch"]["target_turnover"] == pytest.approx(2.0)  # 2 fills inside
    # Executed: 2200 + 2640 traded over the window's series 1100, 1320, 1320 (2 returns).
    assert rows["switch"]["mean_turnover"] == pytest.approx(4840 / (3740 / 3) / 2)
    assert rows["switch"]["costs"] == 0.0
    assert board["window"] == {"start": marks[1], "end": marks[3]}
    assert leaderboard(db, window=(marks[3] + 1, None))["rows"] == []


def test_consistency_reads_the_probes_table(hand: tuple[Path, list[float]]) -> None:
    db, marks = hand
    assert rows_by_agent(leaderboard(db))["switch"]["consistency"] is None
    for ts, repeats, mean, std in ((marks[1], 5, 0.2, 0.05), (marks[3], 7, 0.1, 0.02)):
        record_probe(str(db), {"agent": "switch", "market": "equity", "scheduled_ts": ts,
                               "repeats": repeats, "valid": repeats, "mean_l1": mean,
                               "std_l1": std}, ts)
    rows = rows_by_agent(leaderboard(db))
    assert rows["switch"]["consistency"] == {"ts": marks[3], "repeats": 7, "mean_l1": 0.1,
                                             "std_l1": 0.02}
    assert rows["allA"]["consistency"] is None
    early = rows_by_agent(leaderboard(db, window=(None, marks[2])))["switch"]
    assert early["consistency"]["mean_l1"] == 0.2
    assert "0.10" in to_table(leaderboard(db))


def test_live_figures(hand: tuple[Path, list[float]]) -> None:
    db, _ = hand
    figs = live_figures(db)
    assert set(figs) == {(a, "equity") for a in PLANS}
    for values in figs.values():
        assert set(values) <= set(LIVE_FIELDS)
        assert all(isinstance(x, float) and math.isfinite(x) for x in values.values())
    sw = figs[("switch", "equity")]
    assert sw["rolling_k_delta_1"] == pytest.approx(-0.42)
    assert "rolling_k_delta_2" not in sw  # undefined figures are left out
    assert sw["cumulative_return"] == pytest.approx(0.32)
    assert sw["capitalbench_score"] == pytest.approx(100.0)
    assert {"sharpe_ci_low", "sharpe_ci_high", "s_corr", "rank"} <= set(sw)


def test_same_store_gives_identical_json_and_html(hand: tuple[Path, list[float]],
                                                  tmp_path: Path) -> None:
    db, _ = hand
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    a, b = to_json(leaderboard(db)), to_json(leaderboard(copy))
    assert a == b
    assert render_html(load_report(db)) == render_html(load_report(copy))
    json.loads(a)


def test_asset_classes_config() -> None:
    assert Config().markets.equity.asset_classes == DEFAULT_ASSET_CLASSES
    assert set(DEFAULT_ASSET_CLASSES) == set(Config().markets.equity.assets)
    cfg = parse_config({"markets": {"equity": {"asset_classes": {"AAPL": "phones"}}}})
    assert cfg.markets.equity.asset_classes == {"AAPL": "phones"}
    with pytest.raises(ConfigError):
        parse_config({"markets": {"equity": {"asset_classes": {"AAPL": " "}}}})


def test_a_market_read_later_gives_the_rows_read_at_once(
        hand: tuple[Path, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    # ``report --json`` reads the first market's agents' rows after the fork (issue 27,
    # point 1): the same series, fills and decisions as one read, and the same report.
    from scoring.board.load import _load_store, one_snapshot, read_later

    db, marks = hand
    con = sqlite3.connect(db)
    at_once = _load_store(con, math.inf)
    with one_snapshot(con):
        later = _load_store(con, math.inf, first_later=True)
        assert later.later == "equity" and not later.series and not later.outcomes
        assert list(later.panels) == ["equity"]  # its panel read at once, from its marks
        assert later.panels["equity"].marks.tolist() == at_once.panels["equity"].marks.tolist()
        read_later(con, later)
    assert later.later is None and at_once.later is None
    assert dict(later.series) == dict(at_once.series) and len(at_once.series) == len(PLANS)
    assert later.outcomes == at_once.outcomes
    assert dict(later.fills.items()) == dict(at_once.fills.items()) and any(at_once.fills.values())
    con.close()
    for window in ((None, None), (marks[1], None), (marks[-1] + DAY, None)):
        want = to_json(load_report(db, window=window).board)
        seen = _calls(monkeypatch)
        assert to_json(load_report(db, window=window, parallel=True).board) == want
        assert seen == ["map", "read"]  # read in the first market's computation
        monkeypatch.undo()


def test_the_rows_read_later_are_of_the_report_s_snapshot(
        hand: tuple[Path, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:
    # One read transaction for the whole report: a mark, a fill's decision and a new agent
    # committed by a writer while the report waits to read the first market's rows are not
    # in it (the report equals the one before the writes, and a later one shows them).
    import scoring.board.leaderboard as board

    db, marks = hand
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA journal_mode=WAL")  # a live store: readers beside a writer
    before = to_json(load_report(db).board)
    real = board.read_later

    def write_then_read(con: sqlite3.Connection, store: Any) -> None:
        with sqlite3.connect(db) as writer:
            writer.execute("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                           " VALUES('late', 'equity', ?, 'daily', 900.0, 900.0)", (marks[-1],))
            writer.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts,"
                           " outcome) VALUES('allA', 'equity', ?, ?, 'ok')",
                           (marks[-1] + 1.0, marks[-1] + 1.0))
            writer.execute("UPDATE equity SET value = value + 1 WHERE agent='half'")
        real(con, store)

    monkeypatch.setattr(board, "read_later", write_then_read)
    assert to_json(load_report(db, parallel=True).board) == before
    monkeypatch.undo()
    after = load_report(db).board
    assert to_json(after) != before and "late" in {r["agent"] for r in after["rows"]}


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the order of ``read_later`` and ``map_forked`` in the leaderboard."""
    import scoring.board.leaderboard as board

    seen: list[str] = []
    for name, tag in (("read_later", "read"), ("map_forked", "map")):
        real = getattr(board, name)
        monkeypatch.setattr(board, name, lambda *a, _r=real, _t=tag, **k: (seen.append(_t),
                                                                           _r(*a, **k))[1])
    return seen


def test_a_first_market_not_configured_first_is_read_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The market left for later must be the first computed; when a market with rows sorts
    # before it, its rows are read before the markets are computed: the same report.
    from scoring.board.load import _load_store

    db = tmp_path / "s.db"
    build_store(db, PRICES, PLANS, agents_cfg=AGENTS_CFG)
    con = sqlite3.connect(db)
    cfg = json.loads(con.execute("SELECT config_json FROM runs").fetchone()[0])
    cfg["markets"] = {"polymarket": cfg["markets"]["equity"]}  # first configured, no rows
    con.execute("UPDATE runs SET config_json=?", (json.dumps(cfg),))
    con.commit()
    con.close()
    with sqlite3.connect(db) as con:
        assert _load_store(con, math.inf, first_later=True).later == "polymarket"
    seen = _calls(monkeypatch)
    got = load_report(db, parallel=True).board
    assert seen == ["read", "map"]  # read before the markets are computed
    assert {r["market"] for r in got["rows"]} == {"equity"}
    assert [r["agent"] for r in got["rows"]] == [r["agent"] for r in leaderboard(db)["rows"]]
    assert to_json(got) == to_json(leaderboard(db)) and len(got["rows"]) == len(PLANS)
