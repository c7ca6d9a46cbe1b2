"""Append rows to a store named by path or URL, from a command that runs outside the daemon.

The store is opened (created or migrated) first; a shared PostgreSQL store takes the rows in a
scope of their own, so a daemon writing into that store keeps its scope, and readers merge every
scope (:mod:`daemon.store.pg_snapshot`). A SQLite file takes them without the writer's lock
(the daemon may hold it), in one transaction that waits up to 30 s for the daemon's.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daemon.store.pg import URL_SCHEMES
from daemon.store.store import Store

__all__ = ["append_rows"]


def append_rows(db: str | Path, statements: Sequence[tuple[str, Sequence[Any]]], *,
                scope: str) -> None:
    """Run ``statements`` (SQL with ``?`` placeholders, parameters) on the store ``db`` in one
    transaction; ``scope``: a shared store's scope for them."""
    if str(db).startswith(URL_SCHEMES):
        async def write() -> None:
            store = await Store.open(str(db), scope=scope)
            try:
                await store.execute_atomic(statements)
            finally:
                await store.close()

        asyncio.run(write())
        return

    async def migrate() -> None:
        store = await Store.open(str(db), lock=False)
        await store.close()

    asyncio.run(migrate())  # a sync caller (the CLI): the migration in its own loop
    con = sqlite3.connect(str(db), timeout=30)
    try:
        with con:
            for sql, params in statements:
                con.execute(sql, params)
    finally:
        con.close()
