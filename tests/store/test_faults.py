"""Fault injection: full disk, a foreign write lock, a symlinked database, failed event flushes.

A full disk is a small tmpfs when the tests run as root (unmounted in teardown), otherwise a
replay subprocess limited in file size (RLIMIT_FSIZE); a foreign write lock is another SQLite
connection holding ``BEGIN IMMEDIATE``. Every fault must leave books and store consistent, say
so in one line, and never end as a silent success.

Why one module over 500 lines: fault-injection tests sharing the engine and store fixtures they
break.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.config.settings import parse_config
from daemon.core.events import PriceEvent
from daemon.core.sparse_rows import FILLS, fill_map
from daemon.engine.engine import Engine
from daemon.store.dbfile import StoreLockedError
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import SimClock
from tests.recordings import TINY_CONFIG, make_recording

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_793_000_000.0  # 2026-10-26 (a Monday) 07:33 UTC
HOUR = 3600.0


# -- helpers --------------------------------------------------------------------------------------
def cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "daemon.app.cli", *args],
                          cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True, **kw)


def error_lines(stderr: str) -> list[str]:
    """Return stderr without structured (JSON) log lines: what a user reads as the error."""
    return [line for line in stderr.splitlines() if not line.startswith("{")]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a tmpfs mount, which needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` (leaving about ``leave`` bytes free); return the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 16, 1 << 12, 1 << 9):
            while True:
                st = os.statvfs(disk)
                if leave and st.f_bavail * st.f_frsize <= leave:
                    return filler
                try:
                    if os.write(fd, b"\0" * size) < size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def config(busy_timeout: float = 30.0) -> Any:
    return parse_config({
        "markets": {"equity": {"assets": ["AAPL", "MSFT"]}, "polymarket": {"enabled": False}},
        "agents": [{"id": "ew", "kind": "equal_weight"}, {"id": "bh", "kind": "buy_and_hold"}],
        "store": {"busy_timeout": busy_timeout},
    })


@pytest.fixture
async def engine_factory() -> AsyncIterator[Any]:
    engines: list[Engine] = []

    async def make(db: Path, busy_timeout: float = 30.0) -> Engine:
        cfg = config(busy_timeout)
        store = await Store.open(db, busy_timeout=busy_timeout)
        await store.begin_run(mode="test", version="0", config={}, recording=None,
                              started_ts=T0)
        eng = Engine(cfg, clock=SimClock(T0), store=store)
        eng.add_equity_universe(["AAPL", "MSFT"])
        eng.build_agents()
        await eng.bus.start()
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        await eng.bus.stop()
        await eng.store.close()


async def prices(eng: Engine, ts: float, aapl: float, msft: float) -> None:
    clock: SimClock = eng.clock  # type: ignore[assignment]
    if ts > clock.now():
        clock.advance(ts)
    for asset, p in (("AAPL", aapl), ("MSFT", msft)):
        await eng.bus.publish(PriceEvent(ts=ts, recv_ts=ts, market="equity", asset=asset,
                                         price=p))
    await eng.bus.drain()


async def round_at(eng: Engine, ts: float) -> None:
    clock: SimClock = eng.clock  # type: ignore[assignment]
    if ts > clock.now():
        clock.advance(ts)
    await eng.on_job("decide:equity", ts, False)


def assert_books_match_store(eng: Engine, db: Path) -> None:
    """The in-memory book is the stored book, and its holdings are the sum of stored fills."""
    con = sqlite3.connect(db)
    try:
        stored = json.loads(con.execute(
            "SELECT state_json FROM books WHERE market='equity'").fetchone()[0])
        fills = [(agent, fill_map(t, a)) for agent, t, a in con.execute(
            f"SELECT f.agent, f.trades_json, s.assets_json FROM {FILLS}"
            " WHERE f.market='equity'").fetchall()]
    finally:
        con.close()
    book = eng.books["equity"]
    mine = book.state()
    assert mine["cash"] == stored["cash"] and mine["holdings"] == stored["holdings"]
    held: dict[tuple[str, str], float] = {}
    for agent, trades in fills:
        for asset, qty in trades.items():
            held[(agent, asset)] = held.get((agent, asset), 0.0) + qty
    for i, agent in enumerate(book.agents):
        for j, asset in enumerate(book.assets):
            assert book.holdings[i, j] == pytest.approx(held.get((agent, asset), 0.0))


def decisions(db: Path) -> list[tuple[float, str, str, str]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT scheduled_ts, agent, outcome, reason FROM decisions "
                           "ORDER BY scheduled_ts, agent").fetchall()
    finally:
        con.close()


# -- 1. full disk ---------------------------------------------------------------------------------
async def test_full_disk_halts_trading_keeps_books_and_resumes(small_disk: Path,
                                                               engine_factory: Any) -> None:
    db = small_disk / "e.db"
    eng = await engine_factory(db)
    await prices(eng, T0, 10.0, 20.0)
    await round_at(eng, T0)
    await prices(eng, T0 + 60, 14.0, 18.0)  # equal weight would rebalance next round
    before = eng.books["equity"].state()
    filler = fill(small_disk)

    await round_at(eng, T0 + HOUR)  # the commit fails: nothing of the round may stay
    assert eng.store.fault is not None and "full" in eng.store.fault
    assert eng.books["equity"].state() == before
    with pytest.raises(StoreWriteError, match="full"):
        await eng.store.probe_writable()  # what /readyz asks
    await round_at(eng, T0 + 2 * HOUR)  # still full: trading stays halted
    assert eng.books["equity"].state() == before

    filler.unlink()  # space is back
    await prices(eng, T0 + 2 * HOUR + 60, 15.0, 17.0)
    await round_at(eng, T0 + 3 * HOUR)
    assert eng.store.fault is None
    rows = decisions(db)
    assert [(ts - T0, agent, outcome) for ts, agent, outcome, _ in rows] == [
        (0.0, "bh", "ok"), (0.0, "ew", "ok"),
        (HOUR, "bh", "error"), (HOUR, "ew", "error"),
        (2 * HOUR, "bh", "error"), (2 * HOUR, "ew", "error"),
        (3 * HOUR, "bh", "hold"), (3 * HOUR, "ew", "ok"),
    ]
    assert all("round not stored" in r and "full" in r for _, _, o, r in rows if o == "error")
    assert_books_match_store(eng, db)


async def test_readyz_is_not_ready_on_a_full_disk(small_disk: Path) -> None:
    from tests.web.test_alerts import SATURDAY
    from tests.web.test_metrics_http import start_daemon, stop_daemon

    d = await start_daemon(small_disk, t0=SATURDAY)
    try:
        status, body = await d.get("/readyz")
        assert status == 200, body
        filler = fill(small_disk)
        status, body = await d.get("/readyz")
        assert status == 503 and "full" in body["store"], body
        filler.unlink()
        status, body = await d.get("/readyz")
        assert status == 200, body
    finally:
        await stop_daemon(d)


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A recording, its config and the report of a clean replay of it."""
    d = tmp_path_factory.mktemp("rec")
    path = d / "rec.jsonl.gz"
    make_recording(path)
    cfg = d / "tiny.toml"
    cfg.write_text(TINY_CONFIG + '\n[store]\nbusy_timeout = "1s"\n')
    r = cli("replay", str(path), "--config", str(cfg), "--db", str(d / "ref.db"), "--no-progress")
    assert r.returncode == 0, r.stderr
    return path, cfg, cli("report", "--db", str(d / "ref.db"), "--json").stdout


def _limit_file_size(limit: int) -> Any:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_replay_on_a_full_disk_stops_with_one_line_then_resumes(
        rec: tuple[Path, Path, str], tmp_path: Path) -> None:
    path, cfg, reference = rec
    room = 800 * 1024  # enough to start (schema v16: 600 KiB), not enough to finish (> 1.5 MiB)
    if os.geteuid() == 0:
        disk = tmp_path / "disk"
        disk.mkdir()
        assert subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                              capture_output=True).returncode == 0
        filler: Path | None = fill(disk, leave=room)
        kw: dict[str, Any] = {}
    else:  # a size-limited file instead of a small disk
        disk, filler = tmp_path, None
        kw = {"preexec_fn": _limit_file_size(room)}
    try:
        db = disk / "full.db"
        r = cli("replay", str(path), "--config", str(cfg), "--db", str(db), "--no-progress", **kw)
        assert r.returncode == 2, r.stderr
        lines = error_lines(r.stderr)
        assert len(lines) == 1 and "store write failed" in lines[0], r.stderr
        assert "run the same command again to resume" in lines[0]
        assert "cannot rollback" not in r.stderr and "Traceback" not in r.stderr
        if filler is not None:
            filler.unlink()  # space is back
        r = cli("replay", str(path), "--config", str(cfg), "--db", str(db), "--no-progress")
        assert r.returncode == 0, r.stderr
        assert "resumed at 0)" not in r.stderr
        assert cli("report", "--db", str(db), "--json").stdout == reference
    finally:
        if filler is not None:
            subprocess.run(["umount", "-l", str(disk)], check=False)


# -- 2. a foreign write lock ----------------------------------------------------------------------
async def test_foreign_write_lock_records_the_round_as_error(tmp_path: Path,
                                                             engine_factory: Any) -> None:
    db = tmp_path / "l.db"
    eng = await engine_factory(db, busy_timeout=0.2)
    await prices(eng, T0, 10.0, 20.0)
    await round_at(eng, T0)
    await prices(eng, T0 + 60, 14.0, 18.0)
    before = eng.books["equity"].state()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        await round_at(eng, T0 + HOUR)
        assert eng.store.fault is not None and "locked" in eng.store.fault
        assert "store.busy_timeout" in eng.store.fault
        assert eng.books["equity"].state() == before
    finally:
        other.execute("ROLLBACK")
        other.close()
    await round_at(eng, T0 + 2 * HOUR)
    rows = decisions(db)
    assert [(ts - T0, outcome) for ts, _, outcome, _ in rows] == [
        (0.0, "ok"), (0.0, "ok"), (HOUR, "error"), (HOUR, "error"),
        (2 * HOUR, "hold"), (2 * HOUR, "ok")]
    assert all("locked" in reason for _, _, outcome, reason in rows if outcome == "error")
    assert_books_match_store(eng, db)


def test_replay_under_a_foreign_lock_fails_then_a_rerun_converges(
        rec: tuple[Path, Path, str], tmp_path: Path) -> None:
    path, cfg, reference = rec
    db = tmp_path / "locked.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.app.cli", "replay", str(path), "--config", str(cfg),
         "--db", str(db), "--no-progress", "--speed", "100000"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    other = None
    try:
        for _ in range(600):
            if db.exists():
                try:
                    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1)
                    row = con.execute("SELECT offset FROM checkpoint").fetchone()
                    con.close()
                except sqlite3.Error:
                    row = None
                if row and row[0] > 0:
                    break
            assert proc.poll() is None, "replay finished before the lock was taken"
            import time

            time.sleep(0.05)
        other = sqlite3.connect(db, isolation_level=None, timeout=10)
        other.execute("BEGIN IMMEDIATE")  # held for longer than the 1 s busy timeout
        _, stderr = proc.communicate(timeout=60)
    finally:
        if other is not None:
            other.execute("ROLLBACK")
            other.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1 and "locked" in lines[0] and "resume" in lines[0], stderr
    r = cli("replay", str(path), "--config", str(cfg), "--db", str(db), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert cli("report", "--db", str(db), "--json").stdout == reference


def test_run_on_a_locked_database_exits_2_with_one_line(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[store]\nbusy_timeout = "0.5s"\n[http]\nenabled = false\n'
                   '[markets.equity]\nenabled = false\n[markets.polymarket]\nenabled = false\n')

    async def create() -> None:  # an existing paperarena database
        await (await Store.open(db)).close()

    asyncio.run(create())
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "2", timeout=60)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "locked" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_run_on_a_fresh_locked_database_waits_busy_timeout(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[store]\nbusy_timeout = "1s"\n[http]\nenabled = false\n'
                   '[markets.equity]\nenabled = false\n[markets.polymarket]\nenabled = false\n')
    other = sqlite3.connect(db, isolation_level=None)  # creates the empty database file
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        r = cli("run", "--config", str(cfg), "--db", str(db), "--duration", "2", timeout=60)
        waited = time.monotonic() - started
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "locked" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert waited >= 1.0  # the busy timeout, as on an existing database


# -- 3. a symlinked database ----------------------------------------------------------------------
async def test_second_daemon_through_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "data" / "x.db"
    real.parent.mkdir()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    s1 = await Store.open(real)
    try:
        with pytest.raises(StoreLockedError, match="in use by another paperarena daemon"):
            await Store.open(link)
    finally:
        await s1.close()
    s2 = await Store.open(link)  # free again after close
    await s2.close()


# -- 4. market events -----------------------------------------------------------------------------
async def test_failed_background_flush_keeps_events_and_retries(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    store = await Store.open(db, busy_timeout=0.2)
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
    try:
        events = [PriceEvent(ts=T0 + i, recv_ts=T0 + i, market="equity", asset="AAPL",
                             price=10.0 + i) for i in range(50)]
        store.add_events(events[:30])
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            store.flush_soon()
            await asyncio.sleep(0)
            await store.wait_flushed()  # a failed background write raises nothing
            assert store.fault is not None and "locked" in store.fault
            assert store.pending_events == 30
        finally:
            other.execute("ROLLBACK")
            other.close()
        store.add_events(events[30:])
        store.flush_soon()
        await asyncio.sleep(0)
        await store.wait_flushed()
        assert store.fault is None and store.pending_events == 0
        rows = await store.fetchall("SELECT ts FROM market_events ORDER BY id")
        assert [r[0] for r in rows] == [e.ts for e in events]  # each once, in order
    finally:
        await store.close()
        import gc

        gc.collect()
        await asyncio.sleep(0)
        loop.set_exception_handler(None)
    assert not unhandled, unhandled


def test_resume_after_a_kill_before_the_first_checkpoint_stores_events_once(
        rec: tuple[Path, Path, str], tmp_path: Path) -> None:
    path, cfg, reference = rec
    clean = tmp_path / "clean.db"
    assert cli("replay", str(path), "--config", str(cfg), "--db", str(clean),
               "--no-progress").returncode == 0
    db = tmp_path / "killed.db"

    async def first_batch() -> None:  # what a kill right after the first batch leaves
        from feeds.recording import iter_events

        store = await Store.open(db)
        for i, ev in iter_events(path):
            if i >= 500:
                break
            if ev.topic_class != "clock":
                store.add_event(ev, i)
        await store.flush()
        await store.close()

    asyncio.run(first_batch())
    r = cli("replay", str(path), "--config", str(cfg), "--db", str(db), "--no-progress")
    assert r.returncode == 0, r.stderr

    def count(p: Path) -> int:
        con = sqlite3.connect(p)
        try:
            return int(con.execute("SELECT COUNT(*) FROM market_events").fetchone()[0])
        finally:
            con.close()

    assert count(db) == count(clean)
    assert cli("report", "--db", str(db), "--json").stdout == reference


# -- concurrent jobs during and after a fault ---------------------------------------------------
async def test_concurrent_commits_after_a_fault_store_each_failed_slot_once(
        tmp_path: Path, engine_factory: Any) -> None:
    db = tmp_path / "c.db"
    eng = await engine_factory(db, busy_timeout=0.2)
    await prices(eng, T0, 10.0, 20.0)
    await round_at(eng, T0)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        await round_at(eng, T0 + HOUR)  # not stored: its slots wait to be recorded as error
    finally:
        other.execute("ROLLBACK")
        other.close()
    await prices(eng, T0 + HOUR + 60, 14.0, 18.0)
    eng.clock.advance(T0 + 2 * HOUR)  # type: ignore[attr-defined]
    # Two jobs at one instant (two markets, or a round and a mark) both commit.
    await asyncio.gather(eng.on_job("decide:equity", T0 + 2 * HOUR, False),
                         eng.on_job("mark:equity", T0 + 2 * HOUR, False))
    assert eng.store.fault is None
    rows = decisions(db)
    assert [(ts - T0, outcome) for ts, _, outcome, _ in rows] == [
        (0.0, "ok"), (0.0, "ok"), (HOUR, "error"), (HOUR, "error"),
        (2 * HOUR, "hold"), (2 * HOUR, "ok")]
    assert not [r for *_, r in rows if "UNIQUE" in r]
    assert_books_match_store(eng, db)


async def test_a_commit_never_stores_another_rounds_uncommitted_trades(
        tmp_path: Path, engine_factory: Any) -> None:
    db = tmp_path / "d.db"
    eng = await engine_factory(db)
    await prices(eng, T0, 10.0, 20.0)
    await round_at(eng, T0)
    await prices(eng, T0 + 60, 14.0, 18.0)  # equal weight rebalances next round
    before = eng.books["equity"].state()
    real = eng.store.commit_round

    marks: list[asyncio.Future[None]] = []

    async def slow_failing_write(rc: Any) -> None:
        if rc.fills:  # the round's own write: a mark job starts meanwhile, then the disk is full
            marks.append(asyncio.ensure_future(eng.on_job("mark:equity", T0 + HOUR, False)))
            await asyncio.sleep(0.2)
            raise StoreWriteError("store write failed: database or disk is full")
        await real(rc)

    eng.store.commit_round = slow_failing_write  # type: ignore[method-assign]
    eng.clock.advance(T0 + HOUR)  # type: ignore[attr-defined]
    await eng.on_job("decide:equity", T0 + HOUR, False)
    assert len(marks) == 1
    await marks[0]
    assert eng.books["equity"].state() == before  # the round was rolled back ...
    assert_books_match_store(eng, db)  # ... and the mark stored no trade of it


async def test_a_lasting_fault_is_logged_once(small_disk: Path, engine_factory: Any) -> None:
    from structlog.testing import capture_logs

    db = small_disk / "o.db"
    eng = await engine_factory(db)
    await prices(eng, T0, 10.0, 20.0)
    await round_at(eng, T0)
    filler = fill(small_disk)
    with capture_logs() as logs:
        for k in range(1, 6):  # rounds and readiness probes fail with varying texts
            await round_at(eng, T0 + k * HOUR)
            with pytest.raises(StoreWriteError):
                await eng.store.probe_writable()
    halts = [e for e in logs if e["event"].startswith("store write failed")]
    assert len(halts) == 1, halts
    filler.unlink()
    await round_at(eng, T0 + 6 * HOUR)
    assert eng.store.fault is None
