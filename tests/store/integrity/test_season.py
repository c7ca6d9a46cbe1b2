"""Seasons (issue 32, point 1): a lineup frozen in the store, a change refused or recorded as a
dated amendment, and one season per store."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon.config.season import lineup
from daemon.config.settings import ConfigError, parse_config
from daemon.store.integrity.season import (
    SeasonError,
    open_season,
    read_season,
    season_lines,
    store_season,
)
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.store.store import Store

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC

BASE: dict[str, Any] = {"agents": [{"id": "ew", "kind": "equal_weight"},
                                   {"id": "cash", "kind": "cash"}]}


def _lineup(**changes: Any) -> dict[str, Any]:
    return lineup(parse_config({**BASE, **changes}))


def test_the_lineup_holds_what_a_season_freezes_and_names_what_changed() -> None:
    from daemon.store.integrity.season import diff_paths

    base = _lineup()
    assert {"agents", "markets", "scheduler", "leaderboard", "prompt_templates",
            "config_sha256"} <= set(base)
    assert "equity.txt" in base["prompt_templates"]
    assert _lineup(logging={"level": "debug"}) == base  # not part of the method
    costs = _lineup(markets={"equity": {"cost": {"fee_bps": 7}}})
    assert diff_paths(base, costs)[0] == "config_sha256"
    assert "markets.equity.cost.fee_bps" in diff_paths(base, costs)
    other = _lineup(agents=[{"id": "ew", "kind": "equal_weight"}])
    assert "agents.cash" in diff_paths(base, other)
    assert _lineup(leaderboard={"min_days": 9})["leaderboard"]["min_days"] == 9


def test_season_config_is_validated() -> None:
    assert parse_config({"season": {"name": "2027-Q1"}}).season.amendments == "refuse"
    for bad in ({"name": ""}, {"name": " x"}, {"amendments": "sometimes"}, {"nme": "x"}):
        with pytest.raises(ConfigError):
            parse_config({"season": bad})


async def test_a_frozen_lineup_refuses_a_change_or_records_an_amendment(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = await Store.open(db)
    try:
        line = await open_season(store, db, "2027-Q1", _lineup(), amendments="refuse", ts=T0)
        assert line is not None and line.startswith("season '2027-Q1' started: lineup frozen")
        assert await open_season(store, db, "2027-Q1", _lineup(), amendments="refuse",
                                 ts=T0 + 60) is None  # the same lineup: nothing to record
        changed = _lineup(markets={"equity": {"cost": {"fee_bps": 7}}})
        with pytest.raises(SeasonError) as refused:
            await open_season(store, db, "2027-Q1", changed, amendments="refuse", ts=T0 + 60)
        assert "\n" not in str(refused.value)
        assert str(refused.value).startswith(
            f"{db}: season '2027-Q1': the lineup is frozen and config_sha256, "
            "markets.equity.cost.fee_bps changed")
        line = await open_season(store, db, "2027-Q1", changed, amendments="allow",
                                 ts=T0 + 86_400)
        assert line is not None and "amendment recorded 2027-01-16 08:00 UTC" in line
        # the amended lineup is the current one now
        assert await open_season(store, db, "2027-Q1", changed, amendments="refuse",
                                 ts=T0 + 2 * 86_400) is None
        season = await store_season(store)
    finally:
        await store.close()
    con = sqlite3.connect(db)
    try:
        assert read_season(con) == season
    finally:
        con.close()
    assert season is not None and season["name"] == "2027-Q1"
    assert season["started"] == "2027-01-15 08:00 UTC"
    assert [(a["date"], a["changes"]) for a in season["amendments"]] == [
        ("2027-01-16 08:00 UTC", ["config_sha256", "markets.equity.cost.fee_bps"])]
    assert season["current_lineup_sha256"] != season["lineup_sha256"]
    lines = season_lines(season)
    assert lines[0].startswith("season 2027-Q1: lineup frozen 2027-01-15 08:00 UTC (sha256 ")
    assert lines[0].endswith("; 1 amendment(s)")
    assert lines[1].startswith("  amendment 2027-01-16 08:00 UTC: config_sha256, "
                               "markets.equity.cost.fee_bps (lineup sha256 ")


async def test_a_store_holds_one_season_and_starts_it_with_clean_books(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = await Store.open(db)
    try:
        assert await open_season(store, db, None, _lineup(), amendments="refuse", ts=T0) is None
        assert await store_season(store) is None  # no [season]: no lineup frozen
        await open_season(store, db, "A", _lineup(), amendments="refuse", ts=T0)
        with pytest.raises(SeasonError, match="holds season 'A', not season 'B': a new season "
                           "starts clean books, so use a new --db"):
            await open_season(store, db, "B", _lineup(), amendments="allow", ts=T0)
        with pytest.raises(SeasonError, match="not no \\[season\\] name"):
            await open_season(store, db, None, _lineup(), amendments="allow", ts=T0)
    finally:
        await store.close()
    db2 = str(tmp_path / "t.db")
    store = await Store.open(db2)
    try:
        rc = RoundCommit()
        rc.decisions.append(DecisionRecord("ew", "equity", T0, T0, "hold"))
        await store.commit_round(rc)
        with pytest.raises(SeasonError, match="already holds 1 decisions outside any season"):
            await open_season(store, db2, "A", _lineup(), amendments="refuse", ts=T0)
        assert await store_season(store) is None
    finally:
        await store.close()


async def test_a_store_older_than_seasons_shows_none(tmp_path: Path) -> None:
    """``paperarena serve`` reads an older store without migrating it: no season table."""
    db = str(tmp_path / "old.db")
    store = await Store.open(db)
    try:
        await store.execute_atomic([("DROP TABLE season", ())])
        assert await store_season(store) is None
    finally:
        await store.close()
    con = sqlite3.connect(db)
    try:
        assert read_season(con) is None
    finally:
        con.close()
