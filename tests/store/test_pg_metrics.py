"""The leaderboard figures of /metrics follow the daily marks of EVERY process of a shared store
(issue 19): a process refreshes them when any scope gets a daily mark, not only its own.

Otherwise the feeds process (no agents, so no marks of its own) never refreshes them, and an
evaluator that commits its daily mark before another one keeps the other's agents a day behind.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg  # type: ignore[import-untyped]

from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.engine.engine import Engine
from daemon.store.pg import scope_schema
from daemon.store.store import Store
from daemon.timing.clock import SimClock
from daemon.web.metrics import LeaderboardFigures
from tests.pg import pg_database, requires_pg
from tests.recordings import TINY_CONFIG, make_recording

pytestmark = requires_pg


def _days(board: LeaderboardFigures) -> dict[str, float]:
    return {s.labels["agent"]: s.value for s in next(iter(board.collect())).samples
            if s.labels["figure"] == "days" and s.labels["market"] == "equity"}


async def test_figures_follow_the_daily_marks_of_another_scope(tmp_path: Path) -> None:
    make_recording(tmp_path / "r.jsonl.gz", days=4)
    (tmp_path / "c.toml").write_text(TINY_CONFIG)
    cfg = load_config(tmp_path / "c.toml")
    with pg_database() as url:
        # Another process (scope "all") wrote bh's and ew's rounds and daily marks.
        await replay(tmp_path / "r.jsonl.gz", cfg, url, progress=False, agent_ids=["bh", "ew"])
        # This process has no agents (a feeds process): no daily marks of its own.
        store = await Store.open(url, scope="feeds")
        try:
            board = LeaderboardFigures(Engine(cfg, clock=SimClock(0.0), store=store))
            await board.refresh()
            before = _days(board)
            assert set(before) == {"bh", "ew"}
            con = await asyncpg.connect(url)
            try:  # the other process's next daily mark for bh
                table = f'"{scope_schema("all")}".equity'
                ts, value, cash = await con.fetchrow(
                    f"SELECT ts, value, cash FROM {table} WHERE agent='bh' AND market='equity'"
                    " AND kind='daily' ORDER BY ts DESC LIMIT 1")
                await con.execute(
                    f"INSERT INTO {table}(agent, market, ts, kind, value, cash)"
                    " VALUES('bh', 'equity', $1, 'daily', $2, $3)", ts + 86400, value, cash)
            finally:
                await con.close()
            await board.refresh()
            assert _days(board)["bh"] == before["bh"] + 1
        finally:
            await store.close()
