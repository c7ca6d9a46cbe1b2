"""A reload's config is stored and read (issue 32, point 3): ``Store.record_reload`` writes a
chained ``config_reloads`` row on SQLite and PostgreSQL, ``verify`` names an edited one, and
every reader of "the configs the store ran with" (:mod:`daemon.core.run_configs`: the report's
agent table, the page's labels, PortBench's and CapitalBench's scores) sees it in time order."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agents.capitalbench.scores import _latest_cap
from agents.portbench.scores import portbench_agents
from agents.portbench.stage_scoring import _configured
from daemon.core.run_configs import fetch_run_configs, run_configs
from daemon.store.integrity.verify import verify
from daemon.store.records import _dumps
from daemon.store.store import Store, StoreWriteError
from daemon.web.labels import AssetLabels
from scoring.board.load import _load_store
from tests.store.integrity.test_chain import _sql

T0 = 1_700_000_000.0


def _config(n: int, *agents: dict[str, Any]) -> dict[str, Any]:
    return {"n": n, "agents": list(agents),
            "markets": {"polymarket": {"questions": [{"id": f"q{n}", "question": f"Q{n}?"}]}}}


EW = {"id": "ew", "kind": "equal_weight"}
PB = {"id": "pb", "kind": "llm", "protocol": "portbench",
      "asset_classes": {"AAPL": "stock"}}
PB2 = {**PB, "asset_classes": {"AAPL": "tech"}}
CB = {"id": "cb", "kind": "llm", "protocol": "capitalbench"}


async def _write(db: str) -> None:
    """Two runs; the first reloaded twice (a PortBench agent added, then changed), the second
    once (a CapitalBench agent added)."""
    store = await Store.open(db)
    try:
        await store.begin_run(mode="live", version="t", config=_config(0, EW), recording=None,
                              started_ts=T0)
        await store.record_reload(T0 + 10, _config(1, EW, PB))
        await store.record_reload(T0 + 20, _config(2, EW, PB2))
        await store.end_run(T0 + 30)
        await store.begin_run(mode="live", version="t", config=_config(3, EW, PB2),
                              recording=None, started_ts=T0 + 40)
        await store.record_reload(T0 + 50, _config(4, EW, PB2, CB))
    finally:
        await store.close()


async def test_a_reload_is_stored_chained_and_an_edit_is_named(backend: str) -> None:
    await _write(backend)
    rows = await _sql(backend, [("SELECT run_id, ts, config_json FROM config_reloads"
                                 " ORDER BY id", ())])
    assert [(r, t, json.loads(c)["n"]) for r, t, c in rows] == [
        (1, T0 + 10, 1), (1, T0 + 20, 2), (2, T0 + 50, 4)]
    # the config in the form a run's row stores it
    (run_cfg,) = (await _sql(backend, [("SELECT config_json FROM runs WHERE id=2", ())]))[0]
    assert run_cfg == _dumps(_config(3, EW, PB2)) and rows[2][2] == _dumps(_config(4, EW, PB2, CB))
    checks = {c.name.split("/")[-1]: c for c in await asyncio.to_thread(verify, backend)}
    assert (checks["config_reloads"].rows, checks["config_reloads"].problem) == (3, None)
    assert checks["config_reloads"].head
    await _sql(backend, [("UPDATE config_reloads SET config_json=? WHERE id=2",
                          (json.dumps(_config(2, EW)),))])
    checks = {c.name.split("/")[-1]: c for c in await asyncio.to_thread(verify, backend)}
    problem = checks["config_reloads"].problem
    assert problem is not None and "row 2 (" in problem and "was edited" in problem, problem
    assert all(c.problem is None for t, c in checks.items() if t != "config_reloads")


async def test_a_reload_outside_a_run_is_refused(tmp_path: Path) -> None:
    store = await Store.open(str(tmp_path / "s.db"))
    try:
        with pytest.raises(StoreWriteError, match="needs a run"):
            await store.record_reload(T0, _config(0))
    finally:
        await store.close()
    assert sqlite3.connect(tmp_path / "s.db").execute(
        "SELECT COUNT(*) FROM config_reloads").fetchone() == (0,)


async def test_every_reader_sees_the_reload_configs_in_time_order(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    await _write(db)
    con = sqlite3.connect(db)
    try:
        assert [json.loads(c)["n"] for c in run_configs(con)] == [0, 1, 2, 3, 4]
        # the report's agent table: an agent a reload added, with its latest settings
        store = _load_store(con, float("inf"))
        assert set(store.agents_cfg) == {"ew", "pb", "cb"}
        assert store.agents_cfg["pb"]["asset_classes"] == {"AAPL": "tech"}
        # PortBench: its agents and their own classes; CapitalBench: the latest config
        assert portbench_agents([(c,) for c in run_configs(con)]) == (
            {"pb"}, {"pb": {"AAPL": "tech"}})
        cfg, _ = _latest_cap(con)
        assert cfg["n"] == 4 and [a["id"] for a in cfg["agents"]] == ["ew", "pb", "cb"]
    finally:
        con.close()
    store_ = await Store.open(db)
    try:
        assert [json.loads(c)["n"] for c in await fetch_run_configs(store_.fetchall)] == [
            0, 1, 2, 3, 4]
        assert await _configured(store_) == ({"pb"}, {"pb": {"AAPL": "tech"}})
        labels = AssetLabels()
        await labels.refresh(store_.fetchall)
        assert {q: labels.titles[q] for q in ("q1", "q4")} == {"q1": "Q1?", "q4": "Q4?"}
    finally:
        await store_.close()


def test_a_store_before_v17_reads_its_runs_only(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE runs(id INTEGER PRIMARY KEY, started_ts REAL, config_json TEXT)")
    con.executemany("INSERT INTO runs(started_ts, config_json) VALUES(?,?)",
                    [(T0 + 1, '{"n": 1}'), (T0, '{"n": 0}')])
    assert [json.loads(c)["n"] for c in run_configs(con)] == [0, 1]  # by start

    async def fetch(sql: str) -> list[tuple[Any, ...]]:
        return con.execute(sql).fetchall()

    assert [json.loads(c)["n"] for c in asyncio.run(fetch_run_configs(fetch))] == [0, 1]
    con.close()


def test_a_reload_is_replayed_before_a_late_round_that_took_it() -> None:
    from daemon.app.bundle_replay.reloads import StoredReload
    from daemon.app.bundle_replay.rows import StoredRound
    from daemon.app.bundle_replay.run import _reload_point
    from daemon.config.settings import Config

    def at(decided: float, run: int = 1) -> StoredRound:
        return StoredRound(decided, decided + 1, frozenset({"ok"}), (), run)

    reload = StoredReload(1, T0 + 10, Config())
    # rounds read the clock before the reload, or were due after it: the reload's own time
    rounds = {("equity", T0): at(T0 + 0.01), ("equity", T0 + 12): at(T0 + 12.01),
              ("polymarket", T0 + 8): at(T0 + 11, run=2)}
    assert _reload_point(reload, rounds) == T0 + 10
    # a round due at T0 + 8 that read the clock only at T0 + 10.5 took the reloaded agents
    rounds[("equity", T0 + 8)] = at(T0 + 10.5)
    rounds[("polymarket", T0 + 9)] = at(T0 + 10)
    assert _reload_point(reload, rounds) == T0 + 8
