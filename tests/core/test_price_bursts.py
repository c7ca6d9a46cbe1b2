"""Live prices stored one row per burst: exact round trip, and every reader of prices sees the
same prices whether they were stored a row each or a burst at a time."""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from agents.portbench.scores import daily_closes
from daemon.core.events import PriceEvent, ResolutionEvent
from daemon.core.price_bursts import (
    burst_row,
    burst_ticks,
    columns_row,
    read_prices,
    resolve_asset_sets,
)
from daemon.core.price_columns import AssetTable, PriceColumns
from daemon.store.read import open_for_reading
from daemon.store.spill import read_spill, spill_unwritten
from daemon.store.store import Store
from scoring.board.panels import _load_panel
from tests.pg import pg_database, requires_pg

DAY = 86_400.0
T0 = 1_793_000_000.0


def _events(n: int, market: str = "polymarket", seed: int = 3) -> list[PriceEvent]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = T0 + i * 977.3 + rng.random()  # spans days: closes and panel marks differ
        bid = None if rng.random() < 0.3 else rng.random() * 0.5
        ask = None if rng.random() < 0.3 else 0.5 + rng.random() * 0.5
        out.append(PriceEvent(ts=ts, recv_ts=ts + rng.random(), market=market,
                              asset=f"tok{rng.randrange(7)}", price=rng.random() or 0.5,
                              bid=bid, ask=ask))
    return out


def test_a_burst_keeps_every_field_of_every_price_exactly_in_order() -> None:
    evs = _events(300)
    n, ts, recv, market, payload, chain = burst_row("polymarket", evs)
    assert (n, market) == (300, "polymarket")
    assert ts == min(e.ts for e in evs) and recv == max(e.recv_ts for e in evs)
    assert len(chain) == 1
    key, text = chain[0]
    assert key == hashlib.sha256(text.encode()).hexdigest()
    assets = resolve_asset_sets(dict(chain))[key]
    assert list(assets) == list(dict.fromkeys(e.asset for e in evs))  # the burst's own list
    assert list(burst_ticks(payload, assets)) == [
        (e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask) for e in evs]
    # The same prices as columns: indices into the source's table, the same ticks.
    cols = PriceColumns("polymarket")
    cols.append("unused", T0, T0, 0.5, None, None)
    cols.take()  # the table keeps "unused" at 0: indices are the table's, not the burst's
    for e in evs:
        cols.append(e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask)
    assert cols.events() == evs
    row = columns_row(cols)
    table = resolve_asset_sets(dict(row[5]))[row[5][-1][0]]
    assert row[:4] == (n, ts, recv, market) and table[0] == "unused"
    assert list(burst_ticks(row[4], table)) == list(burst_ticks(payload, assets))


def test_a_growing_table_stores_each_name_once_and_every_version_reads_back(
        tmp_path: Path) -> None:
    """A table growing a token at a time: each version holds only the names it adds (not
    the whole table again), and bursts of every version read back their own assets."""
    names = [f"{k:077d}" for k in range(300)]  # Polymarket token ids are ~77 digits
    cols = PriceColumns("polymarket")
    expect: list[tuple[object, ...]] = []

    async def run() -> None:
        store = await Store.open(tmp_path / "g.db")
        for k, name in enumerate(names):  # one new token per burst, flushed every 50
            cols.append(name, T0 + k, T0 + k, 0.5, None, None)
            cols.append(names[k // 2], T0 + k, T0 + k, 0.25, 0.2, None)
            expect.extend([("polymarket", name, T0 + k, T0 + k, 0.5, None, None),
                           ("polymarket", names[k // 2], T0 + k, T0 + k, 0.25, 0.2, None)])
            store.add_price_columns(cols.take())
            if k % 50 == 49:
                await store.flush()
        await store.flush()
        await store.close()

    asyncio.run(run())
    con = sqlite3.connect(tmp_path / "g.db")
    stored = sum(len(t) for (t,) in con.execute("SELECT assets_json FROM asset_sets"))
    n_sets = con.execute("SELECT COUNT(*) FROM asset_sets").fetchone()[0]
    assert n_sets == 300 and stored < 300 * 200  # each name once (a full table: 300 x 40 KB)
    assert read_prices(con, "1") == expect
    con.close()


def test_versions_that_branch_keep_their_own_lists() -> None:
    """Two tables grown from one common version (restarted sources) share their prefix."""
    a = AssetTable()
    for x in ("p", "q"):
        a.add(x)
    base = a.versions()
    b = AssetTable()
    for x in ("p", "q"):
        b.add(x)
    assert b.versions() == base  # the same names: the same version
    a.add("r")
    b.add("s")
    sets = resolve_asset_sets(dict(a.versions() + b.versions()))
    assert list(sets[a.versions()[-1][0]]) == ["p", "q", "r"]
    assert list(sets[b.versions()[-1][0]]) == ["p", "q", "s"]
    assert list(sets[base[-1][0]]) == ["p", "q"]


def test_a_price_that_is_not_a_number_fails_the_columns_guard() -> None:
    cols = PriceColumns("polymarket")
    cols.append("a", T0, T0, 0.5, 0.4, None)
    assert cols.valid() and cols.ask[0] != cols.ask[0]  # a missing ask is NaN in the columns
    assert cols.events()[0].ask is None and cols.events()[0].bid == 0.4
    for bad in ({"price": math.nan}, {"price": -1.0}, {"price": math.inf},
                {"price": -math.inf}, {"ask": math.inf}, {"bid": -0.1}, {"bid": -math.inf}):
        c = PriceColumns("polymarket")
        c.append("a", T0, T0, 0.5, 0.4, 0.6)
        f = {"price": 0.5, "bid": 0.4, "ask": 0.6} | bad
        c.append("b", T0, T0, f["price"], f["bid"], f["ask"])
        assert not c.valid(), bad


async def _store(db: Path, evs: list[PriceEvent], *, bursts: bool) -> None:
    store = await Store.open(db)
    res = ResolutionEvent(ts=evs[len(evs) // 2].ts, recv_ts=evs[len(evs) // 2].ts,
                          market="polymarket", question_id="q", payouts={"tok1": 1.0})
    half = len(evs) // 2
    for first, part in ((True, evs[:half]), (False, evs[half:])):
        if bursts:
            for i in range(0, len(part), 37):
                store.add_prices(part[i:i + 37])  # live bursts
        else:
            for ev in part:
                store.add_event(ev)  # a row per price
        if first:
            store.add_event(res)
            await store.flush((1, evs[half - 1].ts, {}))  # a checkpoint after the first half
    await store.flush()
    assert store.events_written == len(evs) + 1 and store.pending_events == 0
    await store.close()


def test_every_reader_sees_the_same_prices_stored_per_row_or_per_burst(tmp_path: Path) -> None:
    evs = _events(900)
    rows_db, bursts_db = tmp_path / "rows.db", tmp_path / "bursts.db"
    asyncio.run(_store(rows_db, evs, bursts=False))
    asyncio.run(_store(bursts_db, evs, bursts=True))
    read = {}
    for name, db in (("rows", rows_db), ("bursts", bursts_db)):
        con = sqlite3.connect(db)
        kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM market_events")}
        marks = [T0 + k * DAY / 3 for k in range(1, 30)]
        panel = _load_panel(con, "polymarket", marks, [])
        closes = daily_closes(con, "polymarket")
        ticks = read_prices(con, "1")
        con.close()

        async def latest(db: Path = db) -> list[tuple[str, str, float, float]]:
            store = await Store.open(db)
            try:
                return await store.latest_prices_after_checkpoint()
            finally:
                await store.close()

        read[name] = (kinds, panel, closes, ticks, asyncio.run(latest()))
    (k_rows, p_rows, c_rows, t_rows, l_rows) = read["rows"]
    (k_bursts, p_bursts, c_bursts, t_bursts, l_bursts) = read["bursts"]
    assert "prices" in k_bursts and "prices" not in k_rows  # the two layouts really differ
    assert t_rows == t_bursts == [(e.market, e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask)
                                  for e in evs]
    assert p_rows.assets == p_bursts.assets and len(p_rows.assets) == 7
    assert np.array_equal(p_rows.prices, p_bursts.prices, equal_nan=True)
    assert c_rows == c_bursts and sum(map(len, c_rows.values())) > 7
    # After the checkpoint: the last price per asset of the second half only.
    expect: dict[tuple[str, str], tuple[float, float]] = {}
    for e in evs[len(evs) // 2:]:
        if (e.market, e.asset) not in expect or e.ts > expect[(e.market, e.asset)][0]:
            expect[(e.market, e.asset)] = (e.ts, e.price)
    assert l_rows == l_bursts == [(m, a, t, p) for (m, a), (t, p) in sorted(expect.items())]


def test_bursts_count_as_their_events_when_capped_spilled_and_stored_again(
        tmp_path: Path) -> None:
    evs = _events(200)
    db = tmp_path / "s.db"

    async def fill() -> tuple[int, int, int]:
        store = await Store.open(db)
        store.max_buffered_events = 120
        for i in range(0, 200, 40):
            store.add_prices(evs[i:i + 40])
        buffered, dropped = store.pending_events, store.events_dropped
        spill_unwritten(store)  # as a stop while the store is faulted does
        lost = store.events_lost
        store._pending.clear()
        await store.close()
        return buffered, dropped, lost

    buffered, dropped, lost = asyncio.run(fill())
    # 5 bursts of 40 over a cap of 120: at 160 the two oldest go (down to <= 108), the fifth
    # fills it up to the cap again.
    assert (buffered, dropped, lost) == (120, 80, 0)
    spilled = read_spill(str(db))
    assert spilled is not None and [r[0] for r in spilled[1]] == [40, 40, 40]

    async def reopen() -> int:
        store = await Store.open(db)
        written = store.events_written
        await store.close()
        return written

    assert asyncio.run(reopen()) == 120
    con = sqlite3.connect(db)
    assert read_prices(con, "1") == [
        (e.market, e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask) for e in evs[80:]]
    con.close()


def test_among_prices_of_one_time_the_last_received_wins_as_in_the_live_book(
        tmp_path: Path) -> None:
    """Several prices of a token often share a millisecond: the book keeps the last one
    received, and so do the report's panel and the restart's last prices (rows or bursts)."""
    t = T0 + 100.0

    def p(asset: str, price: float, ts: float = t) -> PriceEvent:
        return PriceEvent(ts=ts, recv_ts=ts + 1, market="polymarket", asset=asset, price=price)

    evs = [p("a", 0.1), p("b", 0.5), p("a", 0.2), p("a", 0.3, t - 5), p("b", 0.6)]
    # a: 0.2 is the last of the latest time (0.3 came later with an older time: the live book
    # holds it, the panel at a mark after both uses the latest time); b: 0.6, the last of two.
    for name, bursts in (("rows", False), ("bursts", True)):
        db = tmp_path / f"{name}.db"

        async def fill(db: Path = db, bursts: bool = bursts) -> list[tuple[str, str, float, float]]:
            store = await Store.open(db)
            if bursts:
                store.add_prices(evs[:2])
                store.add_prices(evs[2:])
            else:
                for ev in evs:
                    store.add_event(ev)
            await store.flush()
            try:
                return await store.latest_prices_after_checkpoint()
            finally:
                await store.close()

        latest = asyncio.run(fill())
        assert latest == [("polymarket", "a", t - 5, 0.3), ("polymarket", "b", t, 0.6)], name
        con = sqlite3.connect(db)
        panel = _load_panel(con, "polymarket", [t + 10], [])
        con.close()
        assert panel.assets == ["a", "b"] and panel.prices.tolist() == [[0.2, 0.6]], name


@requires_pg
async def test_a_shared_store_reads_its_prices_from_the_scope_holding_the_most_prices() -> None:
    """The snapshot takes market events from the scope with the most events, a burst counting
    as its prices: 2 bursts of 50 outweigh 10 single rows."""
    evs = _events(100)
    with pg_database() as url:
        feeds = await Store.open(url, scope="feeds")
        other = await Store.open(url, scope="other")
        try:
            feeds.add_prices(evs[:50])
            feeds.add_prices(evs[50:])
            for ev in _events(10, seed=9):
                other.add_event(ev)
            await feeds.flush()
            await other.flush()
        finally:
            await feeds.close()
            await other.close()
        con = open_for_reading(url)
        try:
            assert read_prices(con, "1") == [
                (e.market, e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask) for e in evs]
        finally:
            con.close()


def test_a_damaged_burst_is_one_clear_line_not_a_traceback(tmp_path: Path,
                                                            capsys: Any) -> None:
    """A burst whose asset list is missing, or whose payload is cut short, fails the readers
    (report, restart) with one line naming what is wrong."""
    from daemon.app.cli import main as cli
    from daemon.core.price_bursts import DamagedBurstError
    from daemon.store.records import RoundCommit

    db = tmp_path / "d.db"

    async def fill() -> None:
        store = await Store.open(db)
        store.add_prices(_events(30))
        await store.commit_round(RoundCommit(equity=[
            ("a", "polymarket", T0 + DAY * k, "daily", 100.0 + k, 50.0) for k in range(3)]))
        await store.close()

    asyncio.run(fill())
    for damage, says in (("DELETE FROM asset_sets", "names asset list"),
                         ("UPDATE market_events SET payload = substr(payload, 1, 30)"
                          " WHERE kind = 'prices'", "cannot be read")):
        broken = tmp_path / f"broken{len(says)}.db"
        broken.write_bytes(db.read_bytes())
        con = sqlite3.connect(broken)
        con.execute(damage)
        con.commit()
        try:
            read_prices(con, "1")
            raise AssertionError("a damaged burst was read")
        except DamagedBurstError as exc:
            assert says in str(exc) and "\n" not in str(exc)
        con.close()

        async def restart(path: Path = broken) -> str:
            store = await Store.open(path)
            try:
                await store.latest_prices_after_checkpoint()
            except sqlite3.DatabaseError as exc:  # the start-up's database-error handling
                return str(exc)
            finally:
                await store.close()
            return ""

        assert says in asyncio.run(restart())
        capsys.readouterr()
        assert cli(["report", "--db", str(broken)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "Traceback" not in err and len(err.splitlines()) == 1, err
