"""SQLite store (aiosqlite, WAL): runs, market events, decisions, fills, equity, alerts, books.

Durability rules:
- Market events are buffered and written in batches; a kill -9 loses at most the unflushed batch.
- A decision round (its decisions, model calls, fills, the books it changed, equity snapshots and
  the replay checkpoint) is written in ONE transaction, so a rebalance is never half-applied.
- A decision is keyed by (agent, market, scheduled_ts): it is never stored, run or applied twice.
- One daemon per database: an exclusive lock file (next to the resolved file, so a symlinked
  path finds the same lock) refuses a second one with a clear message.
- A write that fails (disk full, a foreign write lock held longer than the busy timeout, I/O
  error) raises :class:`StoreWriteError` with one line, rolls back everything of its transaction
  (buffered market events stay buffered and are written by the next successful write) and sets
  :attr:`Store.fault` until a write succeeds again.

Why one module over 500 lines: the store is one class around one connection and its transaction
rules (one atomic commit per round, fault handling, the spill); schema, records, event rows,
queries, the lock and the backends are modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from daemon.core.events import Event
from daemon.core.faults import report_fault
from daemon.core.price_bursts import columns_row
from daemon.core.price_columns import PriceColumns
from daemon.store.dbfile import (
    StoreOpenError,
    StoreSchemaError,
    check_writable,
    describe_sqlite_error,
    inspect_database,
)
from daemon.store.dblock import abandon_lock, acquire_lock, claim_lock
from daemon.store.events import event_row, insert_event_rows, price_rows
from daemon.store.integrity.capital import append_chained, append_states, chain_existing_capital
from daemon.store.integrity.chain import Chains, chain_existing, with_chains
from daemon.store.queries import StoreQueries
from daemon.store.records import RoundCommit, _dumps
from daemon.store.round_rows import round_rows
from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION, _statements
from daemon.store.spill import (
    DEFAULT_MAX_BUFFERED_EVENTS,
    drop_oldest,
    ingest_spill,
    note_dropped,
    spill_unwritten,
)

log = structlog.get_logger(__name__)


class StoreWriteError(RuntimeError):
    """A write transaction failed and was rolled back; the message is one line."""


#: Default of how long a write waits for another connection's write lock (seconds).
DEFAULT_BUSY_TIMEOUT = 30.0

#: How long opening (migration and the write probe) waits for a foreign write lock (seconds).
OPEN_BUSY_TIMEOUT = 5.0

#: Free space below which the store counts as full (readiness probe; trading halts).
MIN_FREE_BYTES = 1 << 20

async def _enable_wal(db: aiosqlite.Connection, wait: float) -> None:
    """Switch ``db`` to WAL, waiting up to ``wait`` seconds for a foreign write lock.

    SQLite answers ``journal_mode=WAL`` on a database another connection write-locks (a fresh,
    still rollback-journal one) with "database is locked" at once, without its busy handler:
    it is retried here, so a start waits the busy timeout on a fresh database as on an old one.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.05)


class Store(StoreQueries):
    """Async SQLite store with one writer connection (its read queries: :class:`StoreQueries`)."""

    def __init__(self, path: str, db: Any, lock_fd: int | None,
                 busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = path
        self.db = db
        """aiosqlite.Connection, or :class:`daemon.store.pg.PgConnection` (same calls)."""
        self.busy_timeout = busy_timeout
        self._lock_fd = lock_fd
        self._pending: list[tuple[Any, ...]] = []
        """Buffered rows: a live price (7 fields), a replayed one (8), any other event (10) or a
        live burst of prices (:data:`~daemon.core.price_bursts.BURST_FIELDS`, its count first)."""
        self._buffered = 0
        """How many events :attr:`_pending` holds (a burst row holds many)."""
        self._writing = 0
        """How many of the first buffered rows the open transaction writes."""
        self._writing_events = 0
        """How many events those rows hold."""
        self._sets_written: set[str] = set()
        """Keys of the asset-list versions of bursts a committed transaction stored."""
        self._sets_new: set[str] = set()
        """Those the open transaction stores (written once it commits)."""
        self.chains = Chains()
        """The heads of the store's hash chains (:mod:`daemon.store.integrity.chain`)."""
        self.run_id: int | None = None
        self.events_written = 0
        self.fault: str | None = None
        """Why the last write failed (one line), None once a write succeeded again."""
        self._tx = asyncio.Lock()
        self._inflight: set[asyncio.Task[None]] = set()
        self._orphans: set[asyncio.Task[None]] = set()
        """In-flight writes whose caller was cancelled (nobody awaits their outcome)."""
        self._flush_task: asyncio.Task[None] | None = None
        # -- bounded event buffer and spill at stop (daemon/store/spill.py) --
        self.max_buffered_events = DEFAULT_MAX_BUFFERED_EVENTS
        self.events_dropped = 0
        """Buffered events dropped because the buffer was full (the oldest ones)."""
        self.events_lost = 0
        """Events neither written nor spilled when the store closed."""
        self._drop_logged_at = -1

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, lock: bool = True,
                   busy_timeout: float = DEFAULT_BUSY_TIMEOUT, scope: str = "all",
                   password_env: str | None = None) -> Store:
        """Open (creating and migrating) the database at ``path``; lock it for this process.

        ``busy_timeout``: how long a write waits for another connection's write lock. Anything
        that is not a writable paperarena database of this or an older schema is refused with
        :class:`StoreOpenError` (one line), and everything opened is closed again.
        ``path`` may be a ``postgresql://`` URL (:mod:`daemon.store.pg`): this process then writes
        into its ``scope`` of the shared database, with the password from ``password_env``.
        """
        p = str(path)
        if p.startswith(("postgresql://", "postgres://")):
            from daemon.store.pg import open_store

            return await open_store(cls, p, scope=scope, password_env=password_env,
                                    busy_timeout=busy_timeout)
        if p != ":memory:":
            check_writable(p)  # a read-only database is refused before anything is created
            inspect_database(p, create=True, schema_version=SCHEMA_VERSION)  # touches nothing
        created: list[Path] = []  # the lock file and directories this open made
        try:
            lock_fd = acquire_lock(p, created) if lock and p != ":memory:" else None
        except OSError as exc:
            abandon_lock(None, created)
            raise StoreOpenError(f"{p}: cannot create its lock file {p}.lock: "
                                 f"{exc.strerror or exc}") from None
        if lock_fd is not None and not os.path.exists(p):  # removed again if refused
            real = Path(os.path.realpath(p))
            created += [real.with_name(real.name + s) for s in ("", "-wal", "-shm", "-journal")]
        db: aiosqlite.Connection | None = None
        try:
            db = await aiosqlite.connect(p, isolation_level=None)
            # A foreign lock at start fails the start quickly; rounds then wait busy_timeout.
            opening = min(busy_timeout, OPEN_BUSY_TIMEOUT)
            await db.execute(f"PRAGMA busy_timeout={int(opening * 1000)}")
            await _enable_wal(db, opening)
            await db.execute("PRAGMA synchronous=NORMAL")
            await db.execute("PRAGMA foreign_keys=ON")
            store = cls(p, db, lock_fd, busy_timeout)
            await store._migrate()
            await store._probe_write()
            await ingest_spill(store)  # events a stop while faulted could not write
            await db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        except BaseException as exc:
            if db is not None:
                with contextlib.suppress(Exception):
                    await db.close()  # else its thread keeps the process alive
            abandon_lock(lock_fd, created)  # a refused open leaves no lock file behind
            if isinstance(exc, sqlite3.Error):
                raise StoreOpenError(describe_sqlite_error(p, exc)) from None
            raise
        if lock_fd is not None:
            claim_lock(lock_fd)
        return store

    async def _probe_write(self) -> None:
        """Write and roll back one row, so a read-only database is refused at open, not later."""
        await self.db.execute("BEGIN IMMEDIATE")
        try:
            await self.db.execute("UPDATE meta SET value=value WHERE key='schema_version'")
        finally:
            await self.db.execute("ROLLBACK")

    async def _migrate(self) -> None:
        await self.db.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
        async with self.db.execute("SELECT value FROM meta WHERE key='schema_version'") as cur:
            row = await cur.fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{self.path} has schema v{current}, newer than this paperarena (v{SCHEMA_VERSION})"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _statements(MIGRATIONS[version]):
                    await self.db.execute(stmt)
                if version == 14:  # the configs stored before are chained too
                    await chain_existing(self.db, "runs")
                if version == 15:  # and CapitalBench's rounds and submissions
                    await chain_existing_capital(self.db)
                if version == 17:  # and the season's start and amendments
                    await chain_existing(self.db, "season")
                await self.db.execute(
                    "INSERT INTO meta(key, value) VALUES('schema_version', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (str(version),),
                )
                await self.db.execute("COMMIT")
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
        await self.chains.load(self.db)
        if current < SCHEMA_VERSION:  # one line per open, not one per schema version
            if current == 0:
                log.info("store migrated", path=self.path, version=SCHEMA_VERSION)
            else:
                log.info("store migrated", path=self.path, from_version=current,
                         version=SCHEMA_VERSION)

    async def claim_agents(self, agents: Iterable[str]) -> None:
        """Own ``agents`` in a shared (PostgreSQL) store; a SQLite file is owned by its lock."""
        claim = getattr(self.db, "claim_agents", None)
        if claim is not None:
            await claim(agents)

    async def schema_version(self) -> int:
        """Return the schema version recorded in the database."""
        async with self.db.execute("SELECT value FROM meta WHERE key='schema_version'") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def close(self) -> None:
        """Flush pending events and close the database and its lock."""
        try:
            with contextlib.suppress(Exception):
                await self.wait_flushed()
                await self.flush()
            spill_unwritten(self)  # still faulted: keep them beside the database, or count the loss
        finally:  # whatever failed: the connection's thread would keep the process alive
            try:
                await self.db.close()
            finally:
                if self._lock_fd is not None:
                    os.close(self._lock_fd)
                    self._lock_fd = None

    # -- runs ---------------------------------------------------------------------------------
    async def begin_run(self, *, mode: str, version: str, config: dict[str, Any],
                        recording: str | None, started_ts: float) -> int:
        """Record the start of a process run and return its id."""

        async def insert() -> None:
            row = (started_ts, mode, version, _dumps(config), recording)
            cur = await self.db.execute(
                "INSERT INTO runs(started_ts, mode, version, config_json, recording, chain) "
                "VALUES(?,?,?,?,?,?)", with_chains([row], self.chains.link("runs", [row]))[0])
            self.run_id = cur.lastrowid

        await self._atomic(insert)
        return int(self.run_id or 0)

    async def end_run(self, stopped_ts: float) -> None:
        """Record a clean stop of the current run."""
        if self.run_id is not None:
            await self._atomic(self.db.execute, "UPDATE runs SET stopped_ts=? WHERE id=?",
                               (stopped_ts, self.run_id))

    async def record_season(self, row: tuple[Any, ...]) -> None:
        """Store a season row (name, kind, ts, lineup_json, lineup_sha256, changes_json: its
        start or an amendment), chained (:mod:`daemon.store.integrity.season`)."""
        await self._atomic(append_chained, self.db, self.chains, "season", [row])

    async def record_reload(self, ts: float, config: dict[str, Any]) -> None:
        """Store the config a reload applied at ``ts`` in the current run (``config_reloads``,
        chained; the form of :meth:`begin_run`'s config), so a replay applies it there too."""
        if self.run_id is None:
            raise StoreWriteError(f"{self.path}: a reload's config needs a run to belong to")
        await self._atomic(append_chained, self.db, self.chains, "config_reloads",
                           [(self.run_id, ts, _dumps(config))])

    async def get_meta(self, key: str) -> str | None:
        """Return the value of ``key`` in the meta table, if set."""
        rows = await self.fetchall("SELECT value FROM meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    async def set_meta(self, items: dict[str, str]) -> None:
        """Set meta ``key = value`` pairs in one transaction."""

        async def write() -> None:
            for key, value in items.items():
                await self.db.execute(
                    "INSERT INTO meta(key, value) VALUES(?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

        await self._atomic(write)

    # -- market events --------------------------------------------------------------------------
    def add_event(self, ev: Event, seq: int | None = None) -> None:
        """Buffer one market-data event for the next flush (hot path)."""
        self._pending.append(event_row(ev, seq))
        self._buffered += 1
        if self._buffered > self.max_buffered_events:
            self._cap_buffer()

    def _cap_buffer(self) -> None:
        """Drop the oldest buffered events beyond ``max_buffered_events`` (counted, logged)."""
        n = drop_oldest(self._pending, self._writing, self.max_buffered_events, self._buffered)
        if n:
            self._buffered -= n
            note_dropped(self, n)

    def add_prices(self, events: Sequence[Event], seq: int | None = None) -> None:
        """Buffer a batch of price events (a burst's) for the next flush, in order: live plain
        prices of one market as one burst row (:mod:`daemon.core.price_bursts`), replayed ones (with
        ``seq``) a row each."""
        if not events:
            return
        rows = price_rows(events, seq)
        if rows is None:
            for ev in events:
                self.add_event(ev, seq)
            return
        self._pending.extend(rows)
        self._buffered += len(events)
        if self._buffered > self.max_buffered_events:
            self._cap_buffer()

    def add_price_columns(self, prices: PriceColumns) -> None:
        """Buffer a batch of live prices given as columns as one burst row."""
        if not len(prices):
            return
        self._pending.append(columns_row(prices))
        self._buffered += len(prices)
        if self._buffered > self.max_buffered_events:
            self._cap_buffer()

    def flush_soon(self) -> None:
        """Start writing the buffered events in the background (ordered by the write lock).

        A failed background write keeps the events buffered (the next write retries them) and
        sets :attr:`fault`; it never raises into the event loop.
        """
        if not self._pending or (self._flush_task is not None and not self._flush_task.done()):
            return
        self._flush_task = asyncio.get_running_loop().create_task(self._background_flush())

    async def _background_flush(self) -> None:
        if not self._pending:
            return
        try:
            await self._atomic(self._write_pending)
        except StoreWriteError:
            pass  # logged and kept in self.fault; the events stay buffered
        except Exception as exc:  # never "Task exception was never retrieved"
            log.error("store flush failed; events stay buffered", error=str(exc))

    async def _atomic(self, fn: Any, *args: Any) -> None:
        """Run ``fn`` as one transaction to completion under the write lock, even if the caller
        is cancelled: aiosqlite runs statements on its own thread, so abandoning a transaction
        half-way would leave it open for the next one.

        A failure rolls everything back (SQLite may already have done so itself, e.g. on a full
        disk), keeps the buffered events and raises :class:`StoreWriteError` with one line.
        """

        async def run() -> None:
            async with self._tx:
                self._writing = 0
                try:
                    await self.db.execute("BEGIN IMMEDIATE")
                    await fn(*args)
                    await self.db.execute("COMMIT")
                except BaseException as exc:
                    self._writing = 0
                    self._sets_new.clear()
                    self.chains.rollback()
                    if self.db.in_transaction:
                        with contextlib.suppress(sqlite3.Error, ValueError):
                            await self.db.execute("ROLLBACK")
                    if isinstance(exc, sqlite3.Error | OSError):
                        raise self._failed(exc) from None
                    raise
                self._sets_written |= self._sets_new
                self._sets_new.clear()
                self.chains.commit()
                if self._writing:
                    self.events_written += self._writing_events
                    self._buffered -= self._writing_events
                    del self._pending[: self._writing]
                    self._writing = 0
                if self.fault is not None:
                    log.warning("store writable again; trading resumes", path=self.path)
                    self.fault = None

        task = asyncio.ensure_future(run())
        self._inflight.add(task)
        task.add_done_callback(self._settled)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self._orphans.add(task)  # finishes without its caller: see _settled
            raise

    def _settled(self, task: asyncio.Task[None]) -> None:
        """Forget a finished write. One whose caller was cancelled meanwhile (a stop) has
        nobody to raise its failure to: it is reported here in one line and counted (never
        asyncio's "Task exception was never retrieved" and a traceback)."""
        self._inflight.discard(task)
        orphan = task in self._orphans
        self._orphans.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved whatever happens
        if exc is not None and orphan:
            report_fault(log, "background_write", "store write of a stopped caller failed",
                         exc, path=self.path)

    def _failed(self, exc: BaseException | str) -> StoreWriteError:
        """Return the one-line error of a failed write; log it once per fault (until a write
        succeeds again), however its text varies meanwhile."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        if "locked" in text or "busy" in text:
            text += (f" (another process held the write lock for more than "
                     f"{self.busy_timeout:g}s: store.busy_timeout)")
        msg = f"{self.path}: store write failed: {text}"
        if self.fault is None:
            report_fault(log, "store_write", "store write failed; trading halts until the "
                         "store is writable again", error=msg, buffered_events=self._buffered)
        self.fault = msg
        return StoreWriteError(msg)

    async def probe_writable(self) -> None:
        """Write the buffered events and a probe row in one committed transaction (readiness
        probe): raise :class:`StoreWriteError` if the store cannot be written (lock, I/O error)
        or its disk has less than :data:`MIN_FREE_BYTES` free (SQLite reuses WAL space, so a
        small write can still succeed on a disk too full for a round).
        """
        free = _free_bytes(self.path)
        if free is not None and free < MIN_FREE_BYTES:
            raise self._failed(f"database or disk is full ({free} bytes free, "
                               f"{MIN_FREE_BYTES} needed)")

        async def probe() -> None:
            await self._write_pending()
            await self.db.execute(
                "INSERT INTO meta(key, value) VALUES('write_probe', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (str(os.getpid()),))

        await self._atomic(probe)

    async def wait_flushed(self) -> None:
        """Wait for background flushes started by :meth:`flush_soon` (a failed one raises
        nothing: see :attr:`fault`)."""
        if self._flush_task is not None:
            await asyncio.gather(self._flush_task, return_exceptions=True)
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def add_events(self, events: Iterable[Event], seq: int | None = None) -> None:
        """Buffer market-data events for the next flush."""
        for ev in events:
            self.add_event(ev, seq)

    @property
    def pending_events(self) -> int:
        """Return the number of buffered, unwritten market events."""
        return self._buffered

    async def _write_pending(self) -> None:
        """Insert the buffered events; they leave the buffer only when the transaction commits."""
        self._cap_buffer()  # also bounds events buffered by other paths than add_event
        n = len(self._pending)
        if n:
            self._writing = n  # set before the await: a cap drop meanwhile keeps these rows
            self._writing_events = self._buffered
            await self._insert_events(self._pending[:n])

    async def _insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        self._sets_new |= await insert_event_rows(self.db, rows, self._sets_written,
                                                  self.chains)

    async def flush(self, checkpoint: tuple[int, float, dict[str, Any]] | None = None) -> None:
        """Write buffered events (and optionally a checkpoint) in one transaction."""
        if not self._pending and checkpoint is None:
            return
        await self._atomic(self._flush, checkpoint)

    async def _flush(self, checkpoint: tuple[int, float, dict[str, Any]] | None) -> None:
        await self._write_pending()
        if checkpoint is not None:
            await self._write_checkpoint(checkpoint)

    async def _write_checkpoint(self, cp: tuple[int, float, dict[str, Any]]) -> None:
        offset, clock, state = cp
        async with self.db.execute("SELECT COALESCE(MAX(id), 0) FROM market_events") as cur:
            row = await cur.fetchone()
        await self.db.execute(
            "INSERT INTO checkpoint(id, offset, clock, state_json, events_id) VALUES(1,?,?,?,?) "
            "ON CONFLICT(id) DO UPDATE SET offset=excluded.offset, clock=excluded.clock, "
            "state_json=excluded.state_json, events_id=excluded.events_id",
            (offset, clock, _dumps(state), int(row[0]) if row else 0),
        )

    # -- rounds ---------------------------------------------------------------------------------
    async def commit_round(self, rc: RoundCommit) -> None:
        """Write one round atomically together with every buffered market event."""
        await self._atomic(self._commit_round, rc)

    async def _commit_round(self, rc: RoundCommit) -> None:
        db = self.db
        await self._write_pending()
        # Rows and chain links built in a worker thread (issue 31 point 3): tens of ms at
        # 5,000 agents that would stall prices on the event loop. Still inside this
        # transaction (the lock is held): the chain heads move as they did on the loop.
        rows = await asyncio.to_thread(round_rows, rc, self.run_id, self.chains)
        if rows.observation_sets:
            await db.executemany(
                "INSERT INTO asset_sets(sha256, assets_json) VALUES(?,?)"
                " ON CONFLICT(sha256) DO NOTHING", rows.observation_sets)
        if rows.observations:
            await db.executemany(
                "INSERT INTO observations(sha256, market, decision_ts, market_json,"
                " assets_sha256) VALUES(?,?,?,?,?) ON CONFLICT(sha256) DO NOTHING",
                rows.observations,
            )
        await db.executemany(
            "INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome,"
            " reason, input_json, input_sha256, raw_output, allocation_json,"
            " template_version, attempts, duration_s, run_id, observation_sha256, reasoning,"
            " chain) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows.decisions)
        if rows.calls:
            await db.executemany(
                "INSERT INTO llm_calls(agent, market, scheduled_ts, attempt, ts, model,"
                " raw_response, error, finish_reason, tokens_in, tokens_out, latency_s,"
                " cost_usd, step, input_sha256, outcome, parsed_json, chain)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows.calls)
        if rows.fill_sets:
            await db.executemany(
                "INSERT INTO asset_sets(sha256, assets_json) VALUES(?,?)"
                " ON CONFLICT(sha256) DO NOTHING", rows.fill_sets)
        await db.executemany(
            "INSERT INTO fills(agent, market, scheduled_ts, ts, trades_json, traded_value,"
            " cost, value_before, value_after, weights_json, assets_sha256, chain)"
            " VALUES(?,?,?,?,?,?,?,?,?,?,?,?)", rows.fills)
        for book in rows.books:
            await db.execute(
                "INSERT INTO books(market, state_json, updated_ts) VALUES(?,?,?) "
                "ON CONFLICT(market) DO UPDATE SET state_json=excluded.state_json, "
                "updated_ts=excluded.updated_ts", book)
        if rows.equity:
            await db.executemany(
                "INSERT OR REPLACE INTO equity(agent, market, ts, kind, value, cash, chain) "
                "VALUES(?,?,?,?,?,?,?)", rows.equity)
        for row in rc.agent_states:
            await db.execute(
                "INSERT INTO agent_state(agent, market, status, reason, ts) VALUES(?,?,?,?,?) "
                "ON CONFLICT(agent, market) DO UPDATE SET status=excluded.status, "
                "reason=excluded.reason, ts=excluded.ts",
                row,
            )
        if rc.resolutions:
            await self._write_resolutions(rc.resolutions)
        if rc.checkpoint is not None:
            await self._write_checkpoint(rc.checkpoint)

    async def _write_resolutions(
            self, resolutions: list[tuple[str, str, float, dict[str, float], str]]) -> None:
        """Insert resolutions not stored yet (a question pays once), chained in insert order."""
        rows: list[tuple[Any, ...]] = []
        seen: set[str] = set()
        for qid, market, ts, payouts, source in resolutions:
            async with self.db.execute("SELECT 1 FROM resolutions WHERE question_id=?",
                                       (qid,)) as cur:
                stored = await cur.fetchone()
            if stored is None and qid not in seen:
                seen.add(qid)
                rows.append((qid, market, ts, _dumps(payouts), source))
        if rows:
            await self.db.executemany(
                "INSERT INTO resolutions(question_id, market, ts, payouts_json, source, chain)"
                " VALUES(?,?,?,?,?,?)", with_chains(rows, self.chains.link("resolutions", rows)))

    async def execute_atomic(self, statements: Sequence[tuple[str, Sequence[Any]]], *,
                             appends: Sequence[tuple[str, Sequence[tuple[Any, ...]]]] = (),
                             states: Sequence[str] = ()) -> None:
        """Run ``(sql, params)`` write statements in one transaction (e.g. CapitalBench rows),
        then insert the chained rows of ``appends`` ((table, rows of its hashed columns)) and
        append the state of each CapitalBench round of ``states`` (:mod:`.integrity.capital`)."""
        async def run() -> None:
            for sql, params in statements:
                await self.db.execute(sql, params)
            for table, rows in appends:
                await append_chained(self.db, self.chains, table, rows)
            await append_states(self.db, self.chains, states)

        await self._atomic(run)

    async def record_alert(self, ts: float, kind: str, severity: str, agent: str, market: str,
                           value: float, limit: float, message: str) -> None:
        """Persist one alert."""
        await self._atomic(
            self.db.execute,
            "INSERT INTO alerts(ts, kind, severity, agent, market, value, limit_value, message)"
            " VALUES(?,?,?,?,?,?,?,?)",
            (ts, kind, severity, agent, market, value, limit, message),
        )

    # -- reads ----------------------------------------------------------------------------------
    async def delete_events_from(self, seq: int) -> None:
        """Delete replayed market events at or after recording offset ``seq`` (resume)."""
        async def delete() -> None:
            await self.db.execute("DELETE FROM market_events WHERE seq >= ?", (seq,))
            await self.chains.reload(self.db, "market_events")  # the tail went: a new head

        await self._atomic(delete)


def record_probe(db_path: str, result: dict[str, Any], ts: float) -> None:
    """Append a probe result to ``db_path`` (works while a daemon holds the database)."""
    import sqlite3

    con = sqlite3.connect(db_path, timeout=30)
    try:
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None or int(row[0]) < 4:
            raise StoreSchemaError(f"{db_path}: run the daemon once to migrate it before probing")
        with con:
            con.execute(
                "INSERT INTO probes(agent, market, scheduled_ts, ts, repeats, valid, mean_l1,"
                " std_l1, min_l1, max_l1, input_sha256, result_json)"
                " VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                (result["agent"], result["market"], result["scheduled_ts"], ts,
                 result["repeats"], result["valid"], result.get("mean_l1"),
                 result.get("std_l1"), result.get("min_l1"), result.get("max_l1"),
                 result.get("input_sha256"), json.dumps(result, sort_keys=True, default=str)),
            )
    finally:
        con.close()


def _free_bytes(path: str) -> int | None:
    """Return the bytes available to us on the file system of ``path`` (None: unknown)."""
    if path == ":memory:":
        return None
    try:
        st = os.statvfs(os.path.dirname(os.path.realpath(path)) or ".")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
