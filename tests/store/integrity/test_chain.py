"""The store's hash chains (issue 32, point 2): every chained table's rows verify, and an edited,
deleted, reordered or foreign row is named by ``verify``, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.core.events import NewsEvent, PriceEvent
from daemon.store.integrity.chain import STREAMS, chain_rows, content_bytes, link_rows
from daemon.store.integrity.verify import StreamCheck, verify
from daemon.store.pg import is_url, scope_schema
from daemon.store.records import DecisionRecord, FillRecord, RoundCommit
from daemon.store.store import Store
from tests.pg import pg_database, requires_pg

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0

#: A column of each chained table to change, and a new value for it.
EDITS = {"decisions": ("reason", "edited"), "llm_calls": ("raw_response", '{"w": 1}'),
         "fills": ("traded_value", 123.25), "market_events": ("price", 0.51),
         "equity": ("value", 999.5), "resolutions": ("source", "forged"),
         "runs": ("config_json", '{"agents": []}')}


def _round(i: int) -> RoundCommit:
    ts = T0 + 60 * i
    rc = RoundCommit()
    for agent in ("a", "b"):
        rc.decisions.append(DecisionRecord(
            agent, "polymarket", ts, ts + 1, "ok", reason=f"r{i}", input_sha256="x" * 64,
            allocation={"CASH": 1.0}, attempts=1, duration_s=0.5,
            calls=[{"attempt": 1, "ts": ts + 0.5, "model": "m", "raw_response": f'{{"i": {i}}}',
                    "tokens_in": 10, "tokens_out": 5, "latency_s": 0.25, "cost_usd": 0.001,
                    "parsed": {"CASH": 1.0}}]))
        rc.fills.append(FillRecord(agent, "polymarket", ts, ts + 1, {"q1-yes": 2.0}, 1.0, 0.01,
                                   500.0, 499.99, {"q1-yes": 0.2, "CASH": 0.8}))
        rc.equity.append((agent, "polymarket", ts, "round", 500.0 - i, 400 + i))  # ints: REAL
    rc.resolutions.append((f"q{i}", "polymarket", ts, {f"q{i}-yes": 1.0, f"q{i}-no": 0.0}, "gm"))
    return rc


async def _fill(db: str) -> None:
    """Write three rounds and their market events (live prices, replayed ones, news)."""
    store = await Store.open(db)
    try:
        await store.claim_agents(["a", "b"])  # a shared store's scope owns its agents
        for i in range(3):  # a run started three times (restarts), each with its config
            await store.begin_run(mode="live", version="t", config={"agents": ["a", "b"],
                                                                    "n": i},
                                  recording=None, started_ts=T0 + i)
        for i in range(3):
            store.add_event(PriceEvent(ts=T0 + i, recv_ts=T0 + i, market="polymarket",
                                       asset="q1-yes", price=0.5, bid=0.49, ask=None))
            store.add_prices([PriceEvent(ts=T0 + i, recv_ts=T0 + i, market="equity",
                                         asset="AAPL", price=100 + i)], seq=i)
            store.add_event(NewsEvent(ts=T0 + i, id=f"n{i}", headline="h"), seq=i)
            await store.commit_round(_round(i))
        # a resolution paid twice is stored once, and the chain goes on
        rc = RoundCommit()
        rc.resolutions.append(("q0", "polymarket", T0, {"q0-yes": 1.0}, "again"))
        await store.commit_round(rc)
    finally:
        await store.close()


async def _checks(db: str) -> dict[str, StreamCheck]:
    checks = await asyncio.to_thread(verify, db)
    return {c.name.split("/")[-1]: c for c in checks}


async def _sql(db: str, statements: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """Run statements on the store behind paperarena's back; return the last one's rows."""
    rows: list[Any] = []
    if is_url(db):
        import asyncpg  # type: ignore[import-untyped]

        con = await asyncpg.connect(db)
        try:
            await con.execute(f'SET search_path TO "{scope_schema("all")}"')
            for sql, params in statements:
                n = 0
                text = "".join(f"${(n := n + 1)}" if ch == "?" else ch for ch in sql)
                rows = [tuple(r) for r in await con.fetch(text, *params)]
        finally:
            await con.close()
        return rows
    con = sqlite3.connect(db)
    try:
        with con:
            for sql, params in statements:
                rows = con.execute(sql, params).fetchall()
    finally:
        con.close()
    return rows


async def _ids(db: str, table: str) -> list[int]:
    order = STREAMS[table].order
    return [r[0] for r in await _sql(db, [(f"SELECT {order} FROM {table} ORDER BY {order}", ())])]


async def test_every_chain_holds_and_counts_its_rows(backend: str) -> None:
    await _fill(backend)
    checks = await _checks(backend)
    assert {t: (c.rows, c.problem) for t, c in checks.items()} == {
        "decisions": (6, None), "llm_calls": (6, None), "fills": (6, None),
        "market_events": (9, None), "equity": (6, None), "resolutions": (3, None),
        "runs": (3, None), "season": (0, None), "config_reloads": (0, None),
        "capital_briefings": (0, None), "capital_rounds": (0, None),
        "capital_submissions": (0, None), "capital_round_states": (0, None)}
    # a reopened store goes on from its heads
    store = await Store.open(backend)
    try:
        await store.claim_agents(["a", "b"])
        await store.commit_round(_round(7))
    finally:
        await store.close()
    checks = await _checks(backend)
    assert checks["decisions"].rows == 8 and checks["decisions"].problem is None


@pytest.mark.parametrize("table", list(EDITS))
async def test_an_edited_row_is_named(backend: str, table: str) -> None:
    await _fill(backend)
    column, value = EDITS[table]
    order = STREAMS[table].order
    ids = await _ids(backend, table)
    target = ids[1] if table != "market_events" else (await _sql(backend, [(
        "SELECT id FROM market_events WHERE price IS NOT NULL ORDER BY id", ())]))[1][0]
    await _sql(backend, [(f"UPDATE {table} SET {column}=? WHERE {order}=?", (value, target))])
    problem = (await _checks(backend))[table].problem
    assert problem is not None and f"row {target} (" in problem and "was edited" in problem
    assert all(c.problem is None for t, c in (await _checks(backend)).items() if t != table)


@pytest.mark.parametrize("table", ["decisions", "market_events", "resolutions"])
async def test_a_deleted_row_is_named_by_the_row_after_it(backend: str, table: str) -> None:
    await _fill(backend)
    order = STREAMS[table].order
    ids = await _ids(backend, table)
    await _sql(backend, [(f"DELETE FROM {table} WHERE {order}=?", (ids[1],))])
    problem = (await _checks(backend))[table].problem
    assert problem is not None and f"a row was deleted before row {ids[2]} (" in problem


@pytest.mark.parametrize("table", ["llm_calls", "market_events"])
async def test_two_swapped_rows_are_named_out_of_order(backend: str, table: str) -> None:
    await _fill(backend)
    s = STREAMS[table]
    cols = [*s.columns, "chain"]
    ids = await _ids(backend, table)
    a, b = ids[1], ids[2]
    rows = await _sql(backend, [(f"SELECT {', '.join(cols)} FROM {table} WHERE {s.order} IN"
                                 f" (?, ?) ORDER BY {s.order}", (a, b))])
    sets = ", ".join(f"{c}=?" for c in cols)
    await _sql(backend, [(f"UPDATE {table} SET {sets} WHERE {s.order}=?", (*rows[1], a)),
                         (f"UPDATE {table} SET {sets} WHERE {s.order}=?", (*rows[0], b))])
    problem = (await _checks(backend))[table].problem
    assert problem is not None
    assert f"row {a} (" in problem and f"is out of order: it was written after row {b}" in problem


async def test_rows_moved_by_their_row_ids_are_out_of_order(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    await _fill(db)
    ids = await _ids(db, "decisions")
    await _sql(db, [("UPDATE decisions SET rowid=-1 WHERE rowid=?", (ids[0],)),
                    ("UPDATE decisions SET rowid=? WHERE rowid=?", (ids[0], ids[1])),
                    ("UPDATE decisions SET rowid=? WHERE rowid=-1", (ids[1],))])
    problem = (await _checks(db))["decisions"].problem
    assert problem is not None and f"row {ids[0]} (" in problem and "out of order" in problem


async def test_a_row_without_a_hash_after_hashed_ones_is_named(backend: str) -> None:
    await _fill(backend)
    await _sql(backend, [("INSERT INTO equity(agent, market, ts, kind, value, cash)"
                          " VALUES('a', 'polymarket', ?, 'round', 1.0, 1.0)", (T0 + 999,))])
    problem = (await _checks(backend))["equity"].problem
    assert problem is not None and f"ts={T0 + 999}" in problem and "has no hash" in problem


async def test_a_failed_transaction_leaves_the_chain_where_it_was(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = await Store.open(db)
    try:
        await store.commit_round(_round(0))
        with pytest.raises(Exception, match="UNIQUE"):
            await store.commit_round(_round(0))  # the same decisions again: rolled back
        await store.commit_round(_round(1))
        for i in range(4):
            store.add_prices([PriceEvent(ts=T0 + i, recv_ts=T0 + i, market="equity",
                                         asset="AAPL", price=100.0)], seq=i)
        await store.flush()
        await store.delete_events_from(2)  # a replay's resume cuts the tail
        store.add_prices([PriceEvent(ts=T0, recv_ts=T0, market="equity", asset="AAPL",
                                     price=101.0)], seq=2)
        await store.flush()
    finally:
        await store.close()
    checks = await _checks(db)
    assert all(c.problem is None for c in checks.values()), checks
    assert checks["decisions"].rows == 4 and checks["market_events"].rows == 3


async def test_the_chain_is_the_same_for_the_same_rows(tmp_path: Path) -> None:
    heads = []
    for name in ("a.db", "b.db"):
        await _fill(str(tmp_path / name))
        heads.append({t: c.head for t, c in (await _checks(str(tmp_path / name))).items()})
    assert heads[0] == heads[1]
    unwritten = {"season", "config_reloads"}  # and CapitalBench's: none written
    assert all(h for t, h in heads[0].items()
               if t not in unwritten and not t.startswith("capital_"))


def test_content_is_what_the_database_stores() -> None:
    """An int given to a REAL column and a float to an INTEGER one hash as they read back."""
    for s in STREAMS.values():
        assert len(s.kinds) == len(s.columns), s.table
    assert content_bytes("equity", [("a", "m", 5, "round", 1, 2.0)]) == content_bytes(
        "equity", [("a", "m", 5.0, "round", 1.0, 2.0)])
    import numpy as np

    assert content_bytes("equity", [("a", "m", 5.0, "k", np.float64(1.5), 2.0)]) == [
        b'["a","m",5.0,"k",1.5,2.0]']
    rows = [("a", "m", 5, "round", 1, 2.0), ("b", "m", 6.0, "round", 1.5, np.float64(2))]
    assert chain_rows("equity", b"", rows) == link_rows(b"", content_bytes("equity", rows))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


async def test_verify_command_says_ok_or_names_the_row(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    await _fill(db)
    r = await asyncio.to_thread(_cli, "verify", "--db", db)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok: 39 rows in 13 chains hold (decisions 6, llm_calls 6,")
    assert (", resolutions 3, runs 3, season 0, config_reloads 0, capital_briefings 0,"
            " capital_rounds 0,"
            " capital_submissions 0,"
            " capital_round_states 0)\n") in r.stdout
    ids = await _ids(db, "fills")
    await _sql(db, [("DELETE FROM fills WHERE id=?", (ids[0],)),
                    ("UPDATE equity SET cash=cash+1 WHERE rowid=?",
                     ((await _ids(db, "equity"))[3],))])
    r = await asyncio.to_thread(_cli, "verify", "--db", db)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        f"fills: a row was deleted before row {ids[1]} (agent='b', market='polymarket',"
        f" scheduled_ts={T0}) (its hash names a row the table no longer holds)",
        f"equity: row 4 (agent='b', market='polymarket', kind='round', ts={T0 + 60})"
        " was edited: its content does not match its hash"]
    r = await asyncio.to_thread(_cli, "verify", "--db", str(tmp_path / "none.db"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such database" in r.stderr


@requires_pg
async def test_a_store_migrated_into_postgresql_keeps_its_chains(tmp_path: Path) -> None:
    from daemon.store.pg_migrate import migrate

    db = str(tmp_path / "s.db")
    await _fill(db)
    with pg_database() as url:
        await migrate(db, url)
        checks = await asyncio.to_thread(verify, url)
    assert all(c.problem is None for c in checks)
    assert {c.name: c.head for c in checks} == {
        f"migrated-s.db/{t}": c.head for t, c in (await _checks(db)).items()}


async def test_the_configs_of_runs_stored_before_v14_are_chained_by_the_migration(
        tmp_path: Path) -> None:
    """A store of schema v13 (runs unchained) verifies with its runs as rows written before
    the chains; opened once by this version, every run's config is chained, and an edited
    config is named."""
    db = str(tmp_path / "s.db")
    await _fill(db)
    await _sql(db, [("ALTER TABLE runs DROP COLUMN chain", ()),
                    ("ALTER TABLE season DROP COLUMN chain", ()),  # v17's
                    ("ALTER TABLE capital_rounds DROP COLUMN trailing_json", ()),  # v16's
                    ("ALTER TABLE capital_rounds DROP COLUMN chain", ()),  # v15's
                    ("ALTER TABLE capital_submissions DROP COLUMN chain", ()),
                    ("DROP TABLE capital_round_states", ()),
                    ("UPDATE meta SET value='13' WHERE key='schema_version'", ())])
    checks = await _checks(db)
    assert (checks["runs"].rows, checks["runs"].legacy, checks["runs"].problem) == (0, 3, None)
    store = await Store.open(db)  # the migrations to v14, v15 and v16
    try:
        assert await store.schema_version() == 17
        await store.begin_run(mode="live", version="t", config={"n": 3}, recording=None,
                              started_ts=T0 + 3)
    finally:
        await store.close()
    checks = await _checks(db)
    assert (checks["runs"].rows, checks["runs"].legacy, checks["runs"].problem) == (4, 0, None)
    await _sql(db, [("UPDATE runs SET config_json=? WHERE id=2", ('{"n": 9}',))])
    problem = (await _checks(db))["runs"].problem
    assert problem == (f"runs: row 2 (mode='live', started_ts={T0 + 1}) was edited: its content"
                       " does not match its hash"), problem
