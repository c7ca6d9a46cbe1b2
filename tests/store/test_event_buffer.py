"""Market events buffered during a store fault: capped in memory (the oldest dropped and
counted), and on a stop while faulted spilled next to the database and stored by the next start
exactly once; where even the spill cannot be written, the loss is counted and logged.

The fault is real: another SQLite connection holding ``BEGIN IMMEDIATE`` (a foreign write
lock), or a full tmpfs (root only).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from daemon.config.settings import parse_config
from daemon.core.events import PriceEvent
from daemon.engine.engine import Engine
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import SimClock
from daemon.web.metrics import EngineCollector
from tests.store.test_faults import fill, small_disk  # noqa: F401 (fixture)

T0 = 1_793_000_000.0


def price(i: int) -> PriceEvent:
    return PriceEvent(ts=T0 + i, recv_ts=T0 + i, market="equity", asset="AAPL", price=100.0 + i)


def stored_prices(db: Path) -> list[float]:
    con = sqlite3.connect(db)
    try:
        return [r[0] for r in con.execute("SELECT price FROM market_events ORDER BY id")]
    finally:
        con.close()


@pytest.fixture
def foreign_lock(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A database and a connection ready to hold its write lock (``BEGIN IMMEDIATE``)."""
    db = tmp_path / "p.db"
    con = sqlite3.connect(db, isolation_level=None)
    yield db, con
    if con.in_transaction:
        con.execute("ROLLBACK")
    con.close()


async def test_a_full_buffer_drops_the_oldest_and_counts_them(
        foreign_lock: tuple[Path, sqlite3.Connection]) -> None:
    db, holder = foreign_lock
    store = await Store.open(db, busy_timeout=0.05)
    store.max_buffered_events = 100
    try:
        holder.execute("BEGIN IMMEDIATE")
        with capture_logs() as logs:
            for i in range(250):
                store.add_event(price(i))
            with pytest.raises(StoreWriteError):
                await store.flush()
        full = [e for e in logs if e["event"].startswith("store event buffer full")]
        assert len(full) == 1, full  # once per fault, however many drops
        assert 0 < store.pending_events <= 100
        assert store.events_dropped == 250 - store.pending_events
        # the metric says so
        eng = Engine(parse_config({"agents": []}), clock=SimClock(T0), store=store)
        registry = CollectorRegistry()
        registry.register(EngineCollector(eng))
        text = generate_latest(registry).decode()
        assert f"paperarena_store_events_dropped_total {float(store.events_dropped)}" in text
        holder.execute("ROLLBACK")
        await store.flush()
        kept = 250 - store.events_dropped
        assert stored_prices(db) == [100.0 + i for i in range(250 - kept, 250)]  # the newest
    finally:
        await store.close()


async def test_batched_prices_respect_the_cap_too(
        foreign_lock: tuple[Path, sqlite3.Connection]) -> None:
    db, holder = foreign_lock
    store = await Store.open(db, busy_timeout=0.05)
    store.max_buffered_events = 100
    try:
        holder.execute("BEGIN IMMEDIATE")
        for frame in range(25):  # the daemon's price path: one batch per frame
            store.add_prices([price(frame * 10 + i) for i in range(10)])
        assert 0 < store.pending_events <= 100
        assert store.events_dropped == 250 - store.pending_events
        holder.execute("ROLLBACK")
    finally:
        await store.close()


async def test_stop_while_faulted_spills_and_the_next_start_stores_them_once(
        foreign_lock: tuple[Path, sqlite3.Connection]) -> None:
    db, holder = foreign_lock
    store = await Store.open(db, busy_timeout=0.05)
    await store.flush()
    for i in range(3):
        store.add_event(price(i))
    await store.flush()  # stored before the fault
    holder.execute("BEGIN IMMEDIATE")
    for i in range(3, 53):
        store.add_event(price(i))
    with pytest.raises(StoreWriteError):
        await store.flush()
    await store.close()  # a stop while still faulted
    holder.execute("ROLLBACK")
    spill = Path(f"{db}.spill.jsonl")
    assert spill.exists() and len(spill.read_text().splitlines()) == 50
    assert stored_prices(db) == [100.0, 101.0, 102.0]
    kept = spill.read_bytes()

    store = await Store.open(db)
    await store.close()
    assert stored_prices(db) == [100.0 + i for i in range(53)]
    assert not spill.exists()
    # a crash between the ingest's commit and the spill's removal: not stored twice
    spill.write_bytes(kept)
    store = await Store.open(db)
    await store.close()
    assert stored_prices(db) == [100.0 + i for i in range(53)]
    assert not spill.exists()


async def test_stop_on_a_full_disk_counts_and_logs_what_is_lost(
        small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    db = small_disk / "p.db"
    store = await Store.open(db)
    await store.flush()
    filler = fill(small_disk)
    try:
        for i in range(2000):
            store.add_event(price(i))
        with pytest.raises(StoreWriteError):
            await store.flush()
        await store.close()
        assert store.events_lost == 2000
        out = capsys.readouterr()
        assert "market events lost" in out.out + out.err
        spill = Path(f"{db}.spill.jsonl")
        assert not spill.exists() or spill.stat().st_size == 0
    finally:
        filler.unlink()
    assert shutil.disk_usage(small_disk).free > 0


async def test_a_daemon_stopped_while_faulted_loses_no_market_event(
        foreign_lock: tuple[Path, sqlite3.Connection]) -> None:
    """The real stop path: its last commit fails (exit 2 in the CLI), the events are spilled,
    and the next daemon on the database stores them before it starts."""
    import time

    from daemon.app.live import LiveDaemon

    db, holder = foreign_lock
    cfg = parse_config({
        "sources": {"enabled": False}, "http": {"enabled": False},
        "markets": {"polymarket": {"enabled": False}},
        "store": {"busy_timeout": "0.2s", "max_buffered_events": 5000},
        "agents": [{"id": "c", "kind": "cash"}],
    })
    d = LiveDaemon(cfg, db=str(db))
    await d.start()
    try:
        assert d.engine is not None and d.engine.store.max_buffered_events == 5000
        holder.execute("BEGIN IMMEDIATE")
        now = time.time()
        for i in range(40):
            await d.engine.bus.publish(PriceEvent(ts=now + i, recv_ts=now + i, market="equity",
                                                  asset="AAPL", price=100.0 + i))
        await d.engine.bus.drain()
    finally:
        with pytest.raises(StoreWriteError):
            await d.stop()
    holder.execute("ROLLBACK")
    assert stored_prices(db) == []
    d = LiveDaemon(cfg, db=str(db))
    await d.start()
    await d.stop()
    assert stored_prices(db) == [100.0 + i for i in range(40)]
    assert not Path(f"{db}.spill.jsonl").exists()


def test_dropping_keeps_the_rows_being_written_and_the_newest() -> None:
    from daemon.store.spill import drop_oldest

    rows: list[tuple[object, ...]] = [(i,) for i in range(120)]
    assert drop_oldest(rows, 0, 200, 120) == 0 and len(rows) == 120
    assert drop_oldest(rows, 30, 100, 120) == 30  # down to 90 % of the cap
    assert rows == [(i,) for i in range(30)] + [(i,) for i in range(60, 120)]
    rows = [(i,) for i in range(120)]
    assert drop_oldest(rows, 115, 100, 120) == 5  # only rows after those being written can go
    assert rows == [(i,) for i in range(115)]
    # A burst of prices (its count first) counts as its events and goes whole.
    burst = (50, 1.0, 2.0, "polymarket", "{}", (("key", "[]"),))
    rows = [(0,), burst, (1,), burst, (2,)]
    assert drop_oldest(rows, 1, 100, 103) == 50  # 103 events: the first burst after row 0 goes
    assert rows == [(0,), (1,), burst, (2,)]
