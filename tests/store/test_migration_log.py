"""Opening a store logs one "store migrated" line per open, naming the version reached (and the
version it started from when the database already existed), not one line per schema version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from structlog.testing import capture_logs

from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION, _statements
from daemon.store.store import Store


def _migrated(logs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in logs if e["event"] == "store migrated"]


async def test_new_database_logs_one_line_with_the_version_reached(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with capture_logs() as logs:
        store = await Store.open(db)
        await store.close()
    lines = _migrated(logs)
    assert len(lines) == 1, lines
    assert lines[0]["version"] == SCHEMA_VERSION
    assert "from_version" not in lines[0]
    assert lines[0]["path"] == store.path


async def test_old_database_logs_one_line_from_and_to(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db, isolation_level=None)  # a database left at schema v2
    con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    for version in (1, 2):
        for stmt in _statements(MIGRATIONS[version]):
            con.execute(stmt)
    con.execute("INSERT INTO meta(key, value) VALUES('schema_version', '2')")
    con.close()
    with capture_logs() as logs:
        store = await Store.open(db)
        await store.close()
    lines = _migrated(logs)
    assert len(lines) == 1, lines
    assert (lines[0]["from_version"], lines[0]["version"]) == (2, SCHEMA_VERSION)


async def test_current_database_logs_no_migration(tmp_path: Path) -> None:
    db = tmp_path / "current.db"
    store = await Store.open(db)
    await store.close()
    with capture_logs() as logs:
        store = await Store.open(db)
        await store.close()
    assert _migrated(logs) == []


async def test_a_v11_store_gains_the_reasoning_column_old_rows_keep_null(tmp_path: Path) -> None:
    """Schema v12 (issue 30): decisions.reasoning; rows written before read NULL."""
    db = tmp_path / "v11.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
    for version in range(1, 12):
        for stmt in _statements(MIGRATIONS[version]):
            con.execute(stmt)
    con.execute("INSERT INTO meta(key, value) VALUES('schema_version', '11')")
    con.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome)"
                " VALUES('old', 'equity', 1.0, 1.0, 'ok')")
    con.close()
    with capture_logs() as logs:
        store = await Store.open(db)
        await store.close()
    assert [(e["from_version"], e["version"]) for e in _migrated(logs)] == [(11, SCHEMA_VERSION)]
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT agent, reasoning FROM decisions").fetchall() == [("old", None)]
    finally:
        con.close()
