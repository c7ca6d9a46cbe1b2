"""The leaderboard served over HTTP, cached and recomputed only after marks or rounds.

Computing the leaderboard reads the whole store (seconds on a long run), so ``/api/leaderboard``
never computes it per request. A :class:`BoardCache` keeps the last board and a *stamp* of the
tables that change on a mark or a round (the largest row ids of ``equity``, ``decisions``,
``fills``, ``resolutions``, ``probes`` and ``runs``). A request starts a refresh, or joins the one
started after it arrived; the refresh reads the stamp in a worker thread over its own read-only
connection and recomputes the board (in that thread too) only when the stamp moved. At most one
refresh runs at a time however many requests arrive, so a burst of requests costs at most one
computation per commit, and none at all while nothing new was committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: Tables whose growth means a new mark or round (the leaderboard's inputs).
STAMP_TABLES = ("equity", "decisions", "fills", "resolutions", "probes", "runs", "stage_scores",
                "capital_rounds", "capital_submissions")  # CapitalBench prices come with marks

Stamp = tuple[int, ...]


class BoardCache:
    """Serve the leaderboard of the database at ``path`` from a cache refreshed on change."""

    def __init__(self, path: str | Path, compute: Callable[[str | Path], dict[str, Any]]
                 | None = None, serialize: Callable[[dict[str, Any]], str] | None = None
                 ) -> None:
        """Cache ``compute(path)`` (default: :func:`daemon.web.chart.board_with_benchmarks`, the
        leaderboard with each market's benchmark curve for the page's chart).

        With ``serialize``, the board's text is computed in the worker thread too
        (:attr:`text`), so requests do not serialise a large board on the event loop.
        """
        if compute is None:
            from daemon.web.chart import board_with_benchmarks

            compute = board_with_benchmarks
        self.path = path
        self.compute = compute
        self.serialize = serialize
        self.text: str | None = None
        self.computations = 0
        self.board: dict[str, Any] | None = None
        self.stamp: Stamp | None = None
        self.computed_at: float | None = None
        self._con: sqlite3.Connection | None = None
        self._lock = threading.RLock()  # one refresh or close at a time on the connection
        self._refresh: asyncio.Future[None] | None = None

    async def get(self) -> dict[str, Any]:
        """Return a board at least as fresh as this request.

        A refresh already running when the request arrived may have read its stamp before the
        latest commit: the request waits for it, then for one more refresh (a stamp read, and a
        computation only if something was committed meanwhile), shared with every request that
        arrived in the meantime. Raise what the computation raised when no board could be
        computed (e.g. the database does not exist yet); after a failed refresh the previous
        board is served.
        """
        if self._refresh is not None and not self._refresh.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._refresh)
        task = self.refresh()
        with contextlib.suppress(Exception):
            await asyncio.shield(task)
        if self.board is None:
            task.result()  # raises the computation's error
        assert self.board is not None
        return self.board

    def refresh(self) -> asyncio.Future[None]:
        """Start a refresh unless one runs; return the running one."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(asyncio.to_thread(self._refresh_sync))
            self._refresh.add_done_callback(_log_failure)
        return self._refresh

    async def close(self) -> None:
        """Wait for a running refresh, then close the read-only connection."""
        if self._refresh is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._refresh)
        await asyncio.to_thread(self._close_sync)

    # -- worker thread ------------------------------------------------------------------------
    def _refresh_sync(self) -> None:
        with self._lock:
            stamp = self._read_stamp()
            if stamp is not None and stamp == self.stamp and self.board is not None:
                return
            board = self.compute(self.path)
            text = None if self.serialize is None else self.serialize(board)
            self.computations += 1
            self.board, self.text = board, text
            self.stamp, self.computed_at = stamp, time.time()

    def _read_stamp(self) -> Stamp | None:
        """Return the largest row id of each stamp table (None when unreadable)."""
        if str(self.path).startswith(("postgresql://", "postgres://")):
            from daemon.store.pg_snapshot import stamp  # a shared store: commits of every process

            try:
                return stamp(str(self.path))
            except Exception:
                return None
        try:
            if self._con is None:
                p = Path(self.path)
                if not p.exists():
                    return None
                self._con = sqlite3.connect(f"file:{p}?mode=ro", uri=True,
                                            check_same_thread=False)
            con = self._con
            tables = {r[0] for r in
                      con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return tuple(
                int(con.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {t}").fetchone()[0])
                if t in tables else -1
                for t in STAMP_TABLES)
        except sqlite3.Error:
            self._close_sync()
            return None

    def _close_sync(self) -> None:
        # Under the lock: sqlite3 crashes the process (SIGSEGV) when one thread closes a
        # connection another is reading from, and close() runs even when its wait for the
        # running refresh was cancelled.
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None


def _log_failure(task: asyncio.Future[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, FileNotFoundError):
        log.warning("leaderboard refresh failed; serving the previous board",
                    error=f"{type(exc).__name__}: {exc}")
