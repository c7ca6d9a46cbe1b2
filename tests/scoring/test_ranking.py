"""A model that never answered is not ranked: valid-decision rate and provisional rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon.config.settings import ConfigError, parse_config
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.store.reports import leaderboard, live_figures, load_report
from scoring.board.report_html import render_html
from scoring.board.text import to_json, to_table
from tests.scoring.test_leaderboard import build_store

PRICES = {"A": [100.0, 104.0, 101.0, 108.0, 110.0, 107.0],
          "B": [50.0, 51.0, 52.0, 51.5, 53.0, 54.0]}
PLANS = {
    "bh": {0: {"A": 1.0}},
    "half": {0: {"A": 0.5, "B": 0.5}},
    "cash": {0: {"CASH": 1.0}},
    "dead": {},  # never answered: every decision an error, 100% cash
    "flaky": {0: {"B": 1.0}},
}


def set_outcomes(db: Path, agent: str, outcomes: list[str]) -> None:
    con = sqlite3.connect(db)
    ids = [r[0] for r in con.execute(
        "SELECT rowid FROM decisions WHERE agent=? ORDER BY scheduled_ts", (agent,))]
    assert len(ids) == len(outcomes)
    for rowid, outcome in zip(ids, outcomes, strict=True):
        con.execute("UPDATE decisions SET outcome=? WHERE rowid=?", (outcome, rowid))
    con.commit()
    con.close()


def set_leaderboard_config(db: Path, section: dict[str, Any]) -> None:
    con = sqlite3.connect(db)
    (cfg,) = con.execute("SELECT config_json FROM runs ORDER BY id DESC LIMIT 1").fetchone()
    cfg = json.loads(cfg) | {"leaderboard": section}
    con.execute("UPDATE runs SET config_json=?", (json.dumps(cfg),))
    con.commit()
    con.close()


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    db = tmp_path / "rank.db"
    build_store(db, PRICES, PLANS, min_days=None)  # the default [leaderboard] settings
    set_outcomes(db, "dead", ["error"] * 6)
    # flaky: 4 valid answers; its skipped and missed rounds are the daemon's, not its own.
    set_outcomes(db, "flaky", ["ok", "hold", "skipped", "missed", "hold", "hold"])
    return db


def rows(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["agent"]: r for r in board["rows"]}


def test_agent_that_never_answered_is_provisional_and_below_the_ranked(store: Path) -> None:
    board = leaderboard(store)
    r = rows(board)
    dead = r["dead"]
    assert dead["valid_decision_rate"] == 0.0
    assert (dead["valid_decisions"], dead["counted_decisions"]) == (0, 6)
    assert dead["provisional"] is True and dead["rank"] is None
    assert dead["composite_rank"] is None and dead["composite_score"] is None
    assert "valid-decision rate 0% (0/6) below 80%" in dead["provisional_reason"]
    # The ranked rows come first and hold ranks 1..n; the provisional one comes last.
    order = [x["agent"] for x in board["rows"]]
    assert order[-1] == "dead"
    assert [x["rank"] for x in board["rows"][:-1]] == [1, 2, 3, 4]
    assert r["cash"]["rank"] == 4 and r["cash"]["provisional"] is False
    # Skipped and missed rounds leave the denominator.
    assert r["flaky"]["valid_decision_rate"] == 1.0
    assert (r["flaky"]["valid_decisions"], r["flaky"]["counted_decisions"]) == (4, 4)
    assert r["flaky"]["provisional_reason"] is None
    conv = board["conventions"]["provisional"]
    assert conv["min_valid_rate"] == 0.8 and conv["min_days"] == 5


def test_errors_below_the_minimum_rate_make_an_agent_provisional(store: Path) -> None:
    set_outcomes(store, "flaky", ["ok", "hold", "error", "invalid", "hold", "paused"])
    r = rows(leaderboard(store))["flaky"]
    assert r["valid_decision_rate"] == pytest.approx(3 / 5)  # paused: not asked, not counted
    assert r["provisional"] and r["rank"] is None
    assert "60% (3/5)" in r["provisional_reason"]
    set_leaderboard_config(store, {"min_valid_rate": 0.5})  # the run's config decides
    assert rows(leaderboard(store))["flaky"]["rank"] is not None


def test_too_few_scored_days_is_provisional(store: Path) -> None:
    board = leaderboard(store, window=(None, build_marks()[2]))
    assert all(r["provisional"] and r["rank"] is None for r in board["rows"])
    assert "3 scored days, fewer than 5" in rows(board)["bh"]["provisional_reason"]
    board = leaderboard(store, window=(None, build_marks()[2]), min_days=3)
    assert rows(board)["bh"]["rank"] is not None and rows(board)["dead"]["rank"] is None


def build_marks() -> list[float]:
    from tests.scoring.test_leaderboard import DAY, T0

    return [T0 + DAY * t for t in range(len(PRICES["A"]))]


def test_table_json_html_and_live_figures_show_rate_and_provisional(store: Path) -> None:
    board = leaderboard(store)
    table = to_table(board)
    dead_line = next(line for line in table.splitlines() if " dead " in line)
    assert dead_line.split()[1] == "-" and "0%" in dead_line
    assert "provisional (not ranked)" in table and "dead (equity): valid-decision rate 0%" in table
    assert to_json(board) == to_json(leaderboard(store))
    page = render_html(load_report(store))
    assert "class='provisional'" in page and "valid-decision rate 0% (0/6)" in page
    assert ">valid</th>" in page  # the header carries its legend as a tooltip (issue 17.9)
    figs = live_figures(store)
    assert figs[("dead", "equity")]["valid_decision_rate"] == 0.0
    assert figs[("dead", "equity")]["provisional"] == 1.0
    assert "rank" not in figs[("dead", "equity")]
    assert figs[("bh", "equity")]["provisional"] == 0.0


def test_leaderboard_settings_are_validated() -> None:
    cfg = parse_config({})
    assert cfg.leaderboard.min_valid_rate == 0.8 and cfg.leaderboard.min_days == 5
    with pytest.raises(ConfigError, match=r"leaderboard\.min_valid_rate"):
        parse_config({"leaderboard": {"min_valid_rate": 2}})
    with pytest.raises(ConfigError, match=r"leaderboard\.min_days"):
        parse_config({"leaderboard": {"min_days": -1}})


async def test_api_and_metrics_expose_rate_and_provisional(tmp_path: Path) -> None:
    from tests.web.test_alerts import T0, tick
    from tests.web.test_metrics_http import start_daemon, stop_daemon

    d = await start_daemon(tmp_path)
    try:
        eng = d.engine
        await tick(eng, T0 + 60, 1.0)
        rc = RoundCommit()
        for i in range(3):
            rc.decisions.append(DecisionRecord("ew", "equity", T0 + i, T0 + i, "error",
                                               reason="model down"))
            rc.decisions.append(DecisionRecord("bh", "equity", T0 + i, T0 + i, "hold"))
        await eng.commit(rc)
        await eng.mark("equity", T0 + 62)
        status, board = await d.get("/api/leaderboard")
        assert status == 200
        r = rows(board)
        assert r["ew"]["valid_decision_rate"] == 0.0 and r["ew"]["provisional"] is True
        assert r["bh"]["valid_decision_rate"] == 1.0
        # Issue 27: the API carries the report's inference (MCS band, rank stability, PSR...).
        mcs = board["markets"]["equity"]["mcs"]
        assert mcs["level"] == pytest.approx(0.9) and set(mcs["agents"]) <= {"bh"}
        assert {"rank_stability", "in_mcs", "psr", "dsr", "min_trl"} <= set(r["bh"])
        assert d.obs.board is not None
        await d.obs.board.refresh()
        m = await d.metrics()
        ratio = {lab["agent"]: v for lab, v in m["paperarena_valid_decision_ratio"]
                 if lab["market"] == "equity"}
        assert ratio["ew"] == 0.0 and ratio["bh"] == 1.0
        prov = {lab["agent"]: v for lab, v in m["paperarena_agent_provisional"]
                if lab["market"] == "equity"}
        assert prov["ew"] == 1.0  # and bh too: one scored day is fewer than 5
    finally:
        await stop_daemon(d)
