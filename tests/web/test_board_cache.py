"""The leaderboard cache's read-only connection is never closed under a running refresh."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

from daemon.web.board_cache import BoardCache


class _Watched(BoardCache):
    """A cache that tells when its close reached the worker thread."""

    closing = threading.Event()

    def _close_sync(self) -> None:
        self.closing.set()
        super()._close_sync()


async def test_a_cancelled_close_still_waits_for_the_running_refresh(tmp_path: Path) -> None:
    db = tmp_path / "arena.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE equity (v REAL)")
        con.execute("INSERT INTO equity VALUES (1.0)")
    entered, release = threading.Event(), threading.Event()
    finished: list[bool] = []

    def compute(path: str | Path) -> dict[str, Any]:
        entered.set()
        release.wait(60)  # hang guard only
        finished.append(True)
        return {"rows": []}

    cache = _Watched(db, compute=compute)
    _Watched.closing = threading.Event()
    refresh = cache.refresh()
    assert await asyncio.to_thread(entered.wait, 60)
    assert cache._con is not None  # the refresh read its stamp over the connection

    closer = asyncio.create_task(cache.close())
    await asyncio.sleep(0)
    closer.cancel()  # a shutdown that stops waiting for the refresh: close goes on to close
    assert await asyncio.to_thread(_Watched.closing.wait, 60)
    await asyncio.sleep(0.05)  # room for an unlocked close to run (it would close under compute)
    assert cache._con is not None and not closer.done(), "closed under a running refresh"

    release.set()
    await refresh
    await asyncio.wait_for(closer, 60)
    assert finished == [True] and cache._con is None
