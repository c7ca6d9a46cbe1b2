"""Open a store for reading, whichever backend holds it (the report, export and scoring read
through one sqlite3 connection)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from daemon.store.dbfile import connect_readonly


def is_store_url(db: str | Path) -> bool:
    """Return whether ``db`` names a shared PostgreSQL store rather than a SQLite file."""
    return str(db).startswith(("postgresql://", "postgres://"))


def open_for_reading(db: str | Path) -> sqlite3.Connection:
    """Open a store for reading: a SQLite file read-only, or a consistent snapshot of every
    process of a shared PostgreSQL store (:mod:`daemon.store.pg_snapshot`) as an in-memory
    database."""
    if is_store_url(db):
        from daemon.store.pg_snapshot import snapshot  # asyncpg only where a shared store is read

        return snapshot(str(db))
    if not Path(db).exists():
        raise FileNotFoundError(f"{db}: no such database")
    return connect_readonly(db)
