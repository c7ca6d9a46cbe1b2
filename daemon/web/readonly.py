"""``paperarena serve --db F``: the page and the API over any store, read-only, no engine running.

:class:`ReadOnlyEngine` gives :class:`daemon.web.http.HttpServer` what it reads of a daemon's
engine (store, clock, bus, agents, no live books or triggers) over a store opened for reading
(:func:`daemon.store.read.open_for_reading`: a SQLite file read-only, or a snapshot of a shared
PostgreSQL store, taken again at most every :data:`SNAPSHOT_TTL` seconds). :func:`serve` runs the
server until stopped and polls the store every :data:`POLL` seconds: when another process
committed rows (a replay or a daemon writing the same store) the open pages are told to refetch.
Nothing is ever written: ``/readyz`` answers 503 ("read-only") and resume 404.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from daemon.core.bus import Bus
from daemon.store.read import is_store_url, open_for_reading

log = structlog.get_logger(__name__)

#: Seconds between two polls of the store for new rows.
POLL = 2.0
#: Seconds a snapshot of a PostgreSQL store is used at most before it is taken again.
SNAPSHOT_TTL = 30.0
#: The tables whose largest row id (or count) tells that something was committed.
WATCHED = ("equity", "decisions", "fills", "alerts")


class NotAStore(ValueError):
    """The database served holds no paperarena tables."""


class ReadOnlyStore:
    """Answer the server's queries from a store opened for reading (one connection, a lock)."""

    def __init__(self, path: str | Path) -> None:
        """Read ``path`` (opened by the first query, in the store's own thread)."""
        self.path = str(path)
        self.db: Any = None  # no shared-store scopes: every agent's rows are in the tables read
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serve-store")
        self._con: sqlite3.Connection | None = None
        self._opened = 0.0

    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run ``sql`` in the store's thread (a PostgreSQL snapshot taken again when old)."""
        stale = is_store_url(self.path) and time.monotonic() - self._opened > SNAPSHOT_TTL
        if self._con is None or stale:
            con = open_for_reading(self.path)
            if self._con is not None:
                self._con.close()
            self._con, self._opened = con, time.monotonic()
        return [tuple(r) for r in self._con.execute(sql, params).fetchall()]

    async def fetchall(self, sql: str, params: tuple[Any, ...] | list[Any] = ()
                       ) -> list[tuple[Any, ...]]:
        """Return every row of ``sql`` (``?`` placeholders), read in the store's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._fetch, sql, tuple(params))

    async def probe_writable(self) -> None:
        """Refuse: this store is served read-only."""
        raise RuntimeError("read-only (paperarena serve never writes)")

    def close(self) -> None:
        """Close the connection and stop the store's thread."""
        def _close() -> None:
            if self._con is not None:
                self._con.close()
                self._con = None

        self._pool.submit(_close).result()
        self._pool.shutdown()


class FixedClock:
    """The served store's clock: the time of its latest stored mark or decision."""

    def __init__(self) -> None:
        """Start at 0 until the first poll."""
        self.ts = 0.0

    def now(self) -> float:
        """Return the latest stored time."""
        return self.ts


@dataclass(frozen=True)
class StoredAgent:
    """An agent found in the store (the server only needs its id)."""

    id: str
    kind: str = "stored"
    max_drawdown: float | None = None


@dataclass
class StoredConfig:
    """The agents of the store, as the server reads them from a daemon's config."""

    agents: list[StoredAgent] = field(default_factory=list)


class ReadOnlyEngine:
    """What the HTTP server reads of an engine, over a store opened for reading."""

    read_only = True

    def __init__(self, store: ReadOnlyStore) -> None:
        """Serve ``store``; :meth:`poll` reads its agents and clock."""
        self.store = store
        self.bus = Bus()
        self.clock = FixedClock()
        self.config = StoredConfig()
        self.slots: dict[str, dict[str, Any]] = {}
        self.books: dict[str, Any] = {}
        self.rounds: dict[str, Any] = {}
        self.markets: dict[str, Any] = {}
        self.mark_listeners: list[Any] = []

    def triggers(self) -> list[tuple[str, Any]]:
        """Return no triggers: nothing is scheduled by a read-only server."""
        return []

    async def poll(self) -> tuple[Any, ...]:
        """Read the store's agents and latest time; return a stamp of its watched tables."""
        agents = await self.store.fetchall(
            "SELECT DISTINCT agent FROM equity UNION SELECT DISTINCT agent FROM decisions")
        self.config.agents = [StoredAgent(str(a)) for (a,) in sorted(agents) if a is not None]
        latest = await self.store.fetchall(
            "SELECT MAX(ts) FROM (SELECT MAX(ts) AS ts FROM equity"
            " UNION ALL SELECT MAX(decided_ts) FROM decisions)")
        if latest and latest[0][0] is not None:
            self.clock.ts = float(latest[0][0])
        stamp = []
        for table in WATCHED:
            rows = await self.store.fetchall(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}")
            stamp.append(rows[0][0])
        return tuple(stamp)


async def serve(path: str | Path, host: str = "127.0.0.1", port: int = 9464,
                ready: asyncio.Event | None = None, bound: list[str] | None = None) -> None:
    """Serve the page and the API over the store ``path`` until cancelled.

    ``bound`` receives the server's base URL once it listens, then ``ready`` is set.
    """
    from prometheus_client import CollectorRegistry

    from daemon.config.runtime import HttpConfig
    from daemon.web.http import HttpServer

    store = ReadOnlyStore(path)
    tables = {t for (t,) in await store.fetchall(
        "SELECT name FROM sqlite_master WHERE type='table'")}
    missing = sorted(set(WATCHED) - tables)
    if missing:
        store.close()
        raise NotAStore(f"not a paperarena store (no {', '.join(missing)} table)")
    engine = ReadOnlyEngine(store)
    stamp = await engine.poll()
    server = HttpServer(engine, registry=CollectorRegistry(), host=host, port=port,  # type: ignore[arg-type]
                        settings=HttpConfig(host=host, port=port))
    await server.start()
    try:
        url = f"http://{host}:{server.port}"
        log.info("serving the store read-only", db=str(path), url=url)
        if bound is not None:
            bound.append(url)
        if ready is not None:
            ready.set()
        while True:
            await asyncio.sleep(POLL)
            try:
                now = await engine.poll()
            except (sqlite3.Error, OSError) as exc:
                log.warning("store poll failed", error=str(exc).splitlines()[0][:200])
                continue
            if now != stamp:
                stamp = now
                server.page.events.poke()
    finally:
        await server.stop()
        store.close()
