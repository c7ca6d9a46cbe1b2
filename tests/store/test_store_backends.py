"""The store's guarantees on both backends: SQLite (embedded) and PostgreSQL (shared).

Every test of the first part runs once per backend (``backend`` fixture): migrations, one
transaction per round, a decision stored once, events and checkpoints, upserts, reads, one
process per database (scope). The second part covers what only a shared PostgreSQL store has:
ownership enforced by the database, concurrent claimers and the merged leaderboard.
"""

from __future__ import annotations

import asyncio

import pytest

from daemon.config.settings import parse_config
from daemon.core.events import PriceEvent
from daemon.engine.engine import Engine
from daemon.store.dbfile import StoreLockedError, StoreOpenError
from daemon.store.pg import quote_reserved, translate_ddl, translate_params
from daemon.store.pg_owners import StoreOwnershipError
from daemon.store.records import DecisionRecord, FillRecord, RoundCommit
from daemon.store.schema import SCHEMA_VERSION
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import SimClock
from tests.pg import pg_database, requires_pg

T0 = 1_793_000_000.0


def _decision(agent: str, ts: float, outcome: str = "ok") -> DecisionRecord:
    return DecisionRecord(agent, "equity", ts, ts + 1, outcome, allocation={"AAPL": 1.0},
                          calls=[{"attempt": 1, "ts": ts, "model": "m", "tokens_in": 3}])


def _fill(agent: str, ts: float, value: float) -> FillRecord:
    return FillRecord(agent, "equity", ts, ts + 1, {"AAPL": 2.0}, 20.0, 0.01, 100.0, value,
                      {"AAPL": 1.0})


async def _open(db: str, **kw: object) -> Store:
    store = await Store.open(db, **kw)  # type: ignore[arg-type]
    await store.claim_agents(["a", "b"])
    return store


# ------------------------------------------------------------------ the same suite on both


async def test_migrates_to_the_current_schema_once(backend: str) -> None:
    store = await _open(backend)
    assert await store.schema_version() == SCHEMA_VERSION
    await store.close()
    store = await _open(backend)  # reopening migrates nothing and keeps the version
    assert await store.schema_version() == SCHEMA_VERSION
    assert await store.fetchall("SELECT COUNT(*) FROM decisions") == [(0,)]
    await store.close()


async def test_run_ids_count_up(backend: str) -> None:
    store = await _open(backend)
    first = await store.begin_run(mode="t", version="0", config={"x": 1}, recording=None,
                                  started_ts=T0)
    second = await store.begin_run(mode="t", version="0", config={}, recording="r",
                                   started_ts=T0 + 1)
    assert second == first + 1 and store.run_id == second
    await store.end_run(T0 + 2)
    assert await store.fetchall("SELECT id, stopped_ts FROM runs ORDER BY id") == [
        (first, None), (second, T0 + 2)]
    await store.close()


async def test_a_round_is_one_transaction_and_a_decision_is_stored_once(backend: str) -> None:
    store = await _open(backend)
    await store.begin_run(mode="t", version="0", config={}, recording=None, started_ts=T0)
    store.add_event(PriceEvent(ts=T0, recv_ts=T0, market="equity", asset="AAPL", price=10.0))
    await store.commit_round(RoundCommit(
        decisions=[_decision("a", T0)], fills=[_fill("a", T0, 101.0)],
        books={"equity": {"cash": {"a": 1.0}}},
        equity=[("a", "equity", T0, "round", 101.0, 1.0)], checkpoint=(1, T0, {"k": 1})))
    assert store.pending_events == 0 and store.events_written == 1
    # The same decision again (a restart re-running a round) fails the WHOLE round: the new
    # decision, its fill, the book, the equity and the buffered event are all rolled back.
    store.add_event(PriceEvent(ts=T0 + 5, recv_ts=T0 + 5, market="equity", asset="AAPL",
                               price=11.0))
    with pytest.raises(StoreWriteError, match="store write failed"):
        await store.commit_round(RoundCommit(
            decisions=[_decision("b", T0), _decision("a", T0)], fills=[_fill("b", T0, 99.0)],
            books={"equity": {"cash": {"a": 2.0}}},
            equity=[("b", "equity", T0, "round", 99.0, 1.0)], checkpoint=(2, T0 + 5, {})))
    assert store.fault is not None and "\n" not in store.fault
    assert await store.fetchall("SELECT agent FROM decisions") == [("a",)]
    assert await store.fetchall("SELECT agent, value_after FROM fills") == [("a", 101.0)]
    assert await store.fetchall("SELECT COUNT(*) FROM llm_calls") == [(1,)]
    assert await store.load_books() == {"equity": {"cash": {"a": 1.0}}}
    assert await store.load_checkpoint() == (1, T0, {"k": 1})
    assert store.pending_events == 1  # kept for the next successful write
    await store.commit_round(RoundCommit(decisions=[_decision("b", T0)]))
    assert store.fault is None and store.pending_events == 0
    assert await store.decided("equity", T0) == {"a", "b"}
    assert await store.last_decision_ts("equity") == T0
    assert await store.fetchall("SELECT COUNT(*) FROM market_events") == [(2,)]
    await store.close()


async def test_live_bursts_are_stored_and_read_back_alike(backend: str) -> None:
    """A burst of live prices is one row on both backends; a failed write keeps it buffered
    (counted as its prices); the restart's last prices read it back."""
    store = await _open(backend)
    burst = [PriceEvent(ts=T0 + i, recv_ts=T0 + i + 0.5, market="polymarket", asset=f"t{i % 3}",
                        price=0.1 * (i + 1), bid=None if i % 2 else 0.05) for i in range(5)]
    store.add_prices(burst)
    assert store.pending_events == 5
    await store.commit_round(RoundCommit(decisions=[_decision("a", T0)]))
    store.add_prices(burst[:2])
    with pytest.raises(StoreWriteError):  # the same decision again: the whole write rolls back
        await store.commit_round(RoundCommit(decisions=[_decision("a", T0)]))
    assert store.pending_events == 2 and store.events_written == 5
    await store.flush()
    assert store.pending_events == 0 and store.events_written == 7
    assert await store.fetchall("SELECT kind, COUNT(*) FROM market_events GROUP BY kind") == [
        ("prices", 2)]
    # The last received per token (what the live book held): t0 and t1 came again, older.
    assert await store.latest_prices_after_checkpoint() == [
        ("polymarket", "t0", T0, 0.1), ("polymarket", "t1", T0 + 1, 0.1 * 2),
        ("polymarket", "t2", T0 + 2, 0.1 * 3)]
    await store.close()


async def test_upserts_replace_and_ignore_alike(backend: str) -> None:
    store = await _open(backend)
    await store.commit_round(RoundCommit(
        equity=[("a", "equity", T0, "daily", 100.0, 5.0)],
        agent_states=[("a", "equity", "halted", "drawdown", T0)],
        resolutions=[("q", "polymarket", T0, {"Y": 1.0}, "src")]))
    await store.commit_round(RoundCommit(
        equity=[("a", "equity", T0, "daily", 104.0, 6.0)],
        agent_states=[("a", "equity", "active", "", T0 + 1)],
        resolutions=[("q", "polymarket", T0 + 9, {"Y": 0.0}, "other")]))
    assert await store.fetchall("SELECT value, cash FROM equity") == [(104.0, 6.0)]
    assert await store.fetchall("SELECT status, ts FROM agent_state") == [("active", T0 + 1)]
    assert await store.fetchall("SELECT ts, source FROM resolutions") == [(T0, "src")]
    await store.set_meta({"k": "1", "j": "2"})
    await store.set_meta({"k": "3"})
    assert (await store.get_meta("k"), await store.get_meta("j")) == ("3", "2")
    assert await store.get_meta("nope") is None
    assert await store.fetchall("WITH t AS (SELECT key FROM meta WHERE key=?) SELECT key FROM t",
                                ("k",)) == [("k",)]
    await store.close()


async def test_readers_follow_new_rows_by_rowid_and_days_by_date(backend: str) -> None:
    """The reads of metrics and budgets: ``rowid`` cursors (a replaced row is new) and
    ``date(ts, 'unixepoch')``."""
    store = await _open(backend)
    await store.commit_round(RoundCommit(equity=[("a", "equity", T0, "daily", 100.0, 1.0),
                                                 ("b", "equity", T0, "daily", 200.0, 1.0)]))
    rows = await store.fetchall("SELECT rowid, agent, value FROM equity WHERE kind='daily'"
                                " AND rowid > ? ORDER BY rowid", (0,))
    assert [(a, v) for _, a, v in rows] == [("a", 100.0), ("b", 200.0)]
    last = max(r[0] for r in rows)
    await store.commit_round(RoundCommit(equity=[("a", "equity", T0, "daily", 101.0, 1.0)]))
    newer = await store.fetchall("SELECT rowid, agent, value FROM equity WHERE kind='daily'"
                                 " AND rowid > ? ORDER BY rowid", (last,))
    assert [(a, v) for _, a, v in newer] == [("a", 101.0)]
    assert await store.fetchall("SELECT COALESCE(MAX(rowid), 0) FROM equity") == [
        (newer[0][0],)]
    await store.commit_round(RoundCommit(decisions=[_decision("a", T0)]))
    day = await store.fetchall("SELECT COUNT(*) FROM llm_calls"
                               " WHERE date(scheduled_ts,'unixepoch')=?", ("2026-10-26",))
    assert day == [(1,)]
    await store.close()


async def test_events_checkpoint_and_restart_reads(backend: str) -> None:
    store = await _open(backend)
    for k, (asset, price) in enumerate((("AAPL", 1.0), ("MSFT", 2.0), ("AAPL", 3.0))):
        store.add_event(PriceEvent(ts=T0 + k, recv_ts=T0 + k, market="equity", asset=asset,
                                   price=price), seq=k)
    await store.flush(checkpoint=(3, T0 + 2, {"offset": 3}))
    assert await store.latest_prices_after_checkpoint() == []
    for k, (asset, price) in enumerate((("AAPL", 4.0), ("AAPL", 5.0), ("MSFT", 6.0)), start=3):
        store.add_event(PriceEvent(ts=T0 + k, recv_ts=T0 + k, market="equity", asset=asset,
                                   price=price), seq=k)
    await store.flush()
    assert await store.latest_prices_after_checkpoint() == [
        ("equity", "AAPL", T0 + 4, 5.0), ("equity", "MSFT", T0 + 5, 6.0)]
    assert await store.load_checkpoint() == (3, T0 + 2, {"offset": 3})
    await store.delete_events_from(4)
    assert await store.fetchall("SELECT seq FROM market_events ORDER BY seq") == [
        (0,), (1,), (2,), (3,)]
    await store.close()


async def test_recent_allocations_of_many_agents(backend: str) -> None:
    store = await _open(backend)
    for k in range(4):
        await store.commit_round(RoundCommit(
            decisions=[_decision("a", T0 + k), _decision("b", T0 + k)],
            fills=[_fill("a", T0 + k, 100.0 + k), _fill("b", T0 + k, 200.0 + k)]))
    mine = await store.recent_allocations("a", "equity", 2)
    assert [v for _, _, v in mine] == [102.0, 103.0]
    many = await store.recent_allocations_of("equity", ["a", "b", "c"], 2)
    assert {k: [v for _, _, v in rows] for k, rows in many.items()} == {
        "a": [102.0, 103.0], "b": [202.0, 203.0], "c": []}
    await store.close()


async def test_reads_run_beside_a_round_being_written(backend: str) -> None:
    """HTTP, page and metrics read while rounds and flushes write: one connection serves all."""
    store = await _open(backend)
    for k in range(20):
        store.add_event(PriceEvent(ts=T0 + k, recv_ts=T0 + k, market="equity", asset="X",
                                   price=1.0), seq=k)
    reads = [store.fetchall("SELECT COUNT(*) FROM decisions") for _ in range(20)]
    results = await asyncio.gather(
        store.commit_round(RoundCommit(decisions=[_decision("a", T0), _decision("b", T0)])),
        *reads, store.flush(), return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert all(r in ([(0,)], [(2,)]) for r in results[1:21])
    assert await store.fetchall("SELECT COUNT(*) FROM decisions") == [(2,)]
    await store.close()


async def test_a_second_process_on_the_same_database_is_refused(backend: str) -> None:
    first = await Store.open(backend, scope="e1")
    with pytest.raises(StoreLockedError, match="in use by another paperarena"):
        await Store.open(backend, scope="e1")
    await first.close()
    again = await Store.open(backend, scope="e1")  # free again after close
    await again.close()


async def test_engine_applies_a_round_once_and_records_a_missed_one(backend: str) -> None:
    store = await Store.open(backend)
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=T0)
    cfg = parse_config({"markets": {"equity": {"assets": ["AAPL", "MSFT"]}},
                        "agents": [{"id": "ew", "kind": "equal_weight"},
                                   {"id": "bh", "kind": "buy_and_hold"}]})
    eng = Engine(cfg, clock=SimClock(T0), store=store)
    eng.add_equity_universe(["AAPL", "MSFT"])
    eng.build_agents()
    await eng.restore()  # claims the agents in a shared store
    await eng.bus.start()
    for a, p in (("AAPL", 10.0), ("MSFT", 20.0)):
        await eng.bus.publish(PriceEvent(ts=T0, recv_ts=T0, market="equity", asset=a, price=p))
    assert (await eng.rounds["equity"].run(T0)).outcomes == {"ew": "ok", "bh": "ok"}
    assert (await eng.rounds["equity"].run(T0)).outcomes == {}
    eng.clock.advance(T0 + 86400)  # type: ignore[attr-defined]
    missed = await eng.rounds["equity"].run(T0 + 3600, missed=True)
    assert missed.outcomes == {"ew": "missed", "bh": "missed"}
    assert await store.fetchall("SELECT agent, outcome FROM decisions"
                                " ORDER BY scheduled_ts, agent") == [
        ("bh", "ok"), ("ew", "ok"), ("bh", "missed"), ("ew", "missed")]
    assert await store.fetchall("SELECT COUNT(*) FROM fills") == [(2,)]
    await eng.bus.stop()
    await store.close()


# ------------------------------------------------------------------ PostgreSQL only


def test_sqlite_statements_translate_to_postgresql() -> None:
    assert translate_params("SELECT ? , '?', x=?") == "SELECT $1 , '?', x=$2"
    assert translate_ddl("CREATE TABLE t(id INTEGER PRIMARY KEY, n INTEGER, v REAL)") == (
        "CREATE TABLE t(id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, n BIGINT,"
        " v DOUBLE PRECISION)")
    assert quote_reserved("SET offset=excluded.offset LIMIT 1 OFFSET 2") == (
        'SET "offset"=excluded."offset" LIMIT 1 OFFSET 2')


@requires_pg
async def test_the_database_refuses_rows_of_agents_the_scope_does_not_own() -> None:
    with pg_database() as url:
        e1 = await Store.open(url, scope="e1")
        e2 = await Store.open(url, scope="e2")
        await e1.claim_agents(["a"])
        with pytest.raises(StoreOwnershipError, match=r"a owned by e1"):
            await e2.claim_agents(["b", "a"])
        # e2 claimed nothing (not even b), and the trigger refuses its rows of a or b.
        for agent in ("a", "b"):
            with pytest.raises(StoreWriteError, match="not owned by scope"):
                await e2.commit_round(RoundCommit(decisions=[_decision(agent, T0)]))
        await e1.commit_round(RoundCommit(decisions=[_decision("a", T0)]))
        await e1.close()  # the owner is gone: its agents can move
        await e2.claim_agents(["a", "b"])
        await e2.commit_round(RoundCommit(decisions=[_decision("a", T0 + 1)]))
        await e2.close()


@requires_pg
async def test_concurrent_claims_of_one_agent_have_one_winner() -> None:
    with pg_database() as url:
        stores = [await Store.open(url, scope=f"e{k}") for k in range(4)]
        results = await asyncio.gather(*(s.claim_agents(["x", f"own{k}"])
                                         for k, s in enumerate(stores)),
                                       return_exceptions=True)
        assert sum(r is None for r in results) == 1
        assert all(isinstance(r, StoreOwnershipError) for r in results if r is not None)
        for s in stores:
            await s.close()


@requires_pg
async def test_bad_postgresql_urls_fail_with_one_line() -> None:
    with pytest.raises(StoreOpenError, match="must not contain a password"):
        await Store.open("postgresql://u:secret@127.0.0.1/x")
    with pytest.raises(StoreOpenError, match="cannot connect to PostgreSQL") as info:
        await Store.open("postgresql://postgres@127.0.0.1:1/x")
    assert "\n" not in str(info.value) and "secret" not in str(info.value)


@requires_pg
async def test_the_cached_board_of_a_shared_store_moves_with_any_process_commit() -> None:
    from daemon.web.board_cache import BoardCache

    with pg_database() as url:
        e1, e2 = await Store.open(url, scope="e1"), await Store.open(url, scope="e2")
        await e1.claim_agents(["a"])
        await e2.claim_agents(["b"])
        await e1.begin_run(mode="t", version="0", config={}, recording=None, started_ts=T0)
        calls: list[str] = []

        def compute(path: object) -> dict[str, object]:
            calls.append(str(path))
            return {"n": len(calls)}

        cache = BoardCache(url, compute=compute)
        assert await cache.get() == {"n": 1}
        e1.add_event(PriceEvent(ts=T0, recv_ts=T0, market="equity", asset="X", price=1.0))
        await e1.flush()  # market events alone do not move the stamp
        assert await cache.get() == {"n": 1}
        await e2.commit_round(RoundCommit(decisions=[_decision("b", T0)]))
        assert await cache.get() == {"n": 2}
        await cache.close()
        await e1.close()
        await e2.close()


@requires_pg
async def test_a_lost_connection_is_reopened_between_rounds() -> None:
    import asyncpg  # type: ignore[import-untyped]

    with pg_database() as url:
        store = await _open(url, scope="e1")
        await store.commit_round(RoundCommit(decisions=[_decision("a", T0)]))
        pid = store.db.con.get_server_pid()
        admin = await asyncpg.connect(url)
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.2)
        # The next round reconnects (same scope, its lock re-taken) and is written whole.
        await store.commit_round(RoundCommit(decisions=[_decision("b", T0)]))
        assert store.db.con.get_server_pid() != pid
        assert await store.decided("equity", T0) == {"a", "b"}
        with pytest.raises(StoreLockedError):
            await Store.open(url, scope="e1")
        await admin.close()
        await store.close()
