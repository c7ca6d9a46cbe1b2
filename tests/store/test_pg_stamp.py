"""The readers' cache stamp of a shared store moves with every commit that changes what the
leaderboard shows, CapitalBench's tables included (as ``daemon/web/board_cache.py``'s stamp on a
SQLite file), so the API and page never serve a board older than the last such commit."""

from __future__ import annotations

from daemon.store.pg import STAMP_TABLES
from daemon.store.pg_snapshot import stamp
from daemon.store.store import Store
from daemon.web import board_cache
from tests.pg import pg_database, requires_pg

pytestmark = requires_pg

ROUND = ("INSERT INTO capital_rounds(round_id, track, frozen_ts, deadline_ts, start_day,"
         " start_ts, end_day, end_ts, dir, manifest_json, hashes_sha256, status)"
         " VALUES('weekly-x', 'weekly', 0, 1, '2026-11-02', 2, '2026-11-09', 3, 'd', '{}', 'h',"
         " 'frozen')")
SUBMISSION = (
    "INSERT INTO capital_submissions(round_id, run_id, agent, replicate, official, ts, model,"
    " outcome, reason, raw_responses_json, calls_json, tokens_in, tokens_out, cost_usd)"
    " VALUES('weekly-x', 'official', 'm', 1, 1, 1, 'x', 'ok', '', '[]', '[]', 1, 1, 0.5)")


def test_the_stamp_tables_are_the_board_caches() -> None:
    assert set(board_cache.STAMP_TABLES) == STAMP_TABLES


async def test_capitalbench_writes_move_the_stamp() -> None:
    with pg_database() as url:
        store = await Store.open(url, scope="e1")
        try:
            await store.claim_agents(["m"])
            seen = [stamp(url)]
            for sql in (ROUND, SUBMISSION,
                        "UPDATE capital_rounds SET status='resolved' WHERE round_id='weekly-x'"):
                await store.execute_atomic([(sql, ())])
                seen.append(stamp(url))
            assert len(set(seen)) == len(seen), seen
            await store.fetchall("SELECT COUNT(*) FROM capital_rounds")  # a read moves nothing
            assert stamp(url) == seen[-1]
        finally:
            await store.close()
