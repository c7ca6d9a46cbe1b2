"""Schema versions on a shared store (issue 19): an older scope is migrated when its process
opens it; a scope newer than this paperarena is refused with one line, by the writers AND the
readers (``report``), as a newer SQLite file is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from daemon.store.dbfile import StoreOpenError
from daemon.store.pg import scope_schema
from daemon.store.reports import load_report
from daemon.store.schema import SCHEMA_VERSION
from daemon.store.store import Store
from tests.pg import pg_database, requires_pg

ROOT = Path(__file__).resolve().parents[2]
pytestmark = requires_pg
CHAINED = ("decisions", "llm_calls", "fills", "market_events", "equity", "resolutions", "runs",
           "capital_rounds", "capital_submissions")


async def _set_version(url: str, scope: str, version: int, undo: tuple[str, ...] = ()) -> None:
    """Set a scope's schema version, undoing a migration with ``undo`` (SQL, ``{s}``: schema)."""
    con = await asyncpg.connect(url)
    try:
        schema = scope_schema(scope)
        await con.execute(f'UPDATE "{schema}".meta SET value=$1 WHERE key=\'schema_version\'',
                          str(version))
        for sql in undo:
            await con.execute(sql.format(s=f'"{schema}"'))
    finally:
        await con.close()


async def test_an_older_scope_is_migrated_and_a_newer_one_refused_by_writers_and_readers(
        ) -> None:
    with pg_database() as url:
        for scope in ("e1", "e2"):
            store = await Store.open(url, scope=scope)
            await store.close()
        # e1 from before the last eleven migrations (v7..v17): opening it migrates it.
        await _set_version(url, "e1", SCHEMA_VERSION - 11, undo=(
            "DROP TABLE {s}.config_reloads", "DROP TABLE {s}.capital_briefings",
            "ALTER TABLE {s}.capital_rounds DROP COLUMN trailing_json",
            *(f"ALTER TABLE {{s}}.{t} DROP COLUMN chain" for t in CHAINED), "DROP TABLE {s}.season",
            "DROP TABLE {s}.capital_round_states",
            "ALTER TABLE {s}.decisions DROP COLUMN reasoning",
            "DROP TABLE {s}.instability_runs", "DROP TABLE {s}.observations",
            "ALTER TABLE {s}.decisions DROP COLUMN observation_sha256",
            "DROP TABLE {s}.stage_scores",
            "DROP TABLE {s}.asset_sets", "ALTER TABLE {s}.fills DROP COLUMN assets_sha256"))
        store = await Store.open(url, scope="e1")
        assert await store.schema_version() == SCHEMA_VERSION == 17
        await store.fetchall("SELECT COUNT(chain) FROM capital_submissions")
        await store.fetchall("SELECT COUNT(*) FROM capital_round_states")
        await store.fetchall("SELECT COUNT(chain) FROM config_reloads")
        await store.fetchall("SELECT COUNT(chain) FROM capital_briefings")
        await store.fetchall("SELECT COUNT(reasoning) FROM decisions")
        await store.fetchall("SELECT COUNT(chain) FROM runs")
        await store.fetchall("SELECT COUNT(chain) FROM market_events")
        await store.fetchall("SELECT COUNT(*) FROM season")
        await store.fetchall("SELECT COUNT(*) FROM stage_scores")
        await store.fetchall("SELECT COUNT(*) FROM asset_sets")
        await store.fetchall("SELECT COUNT(*) FROM instability_runs")
        await store.fetchall("SELECT COUNT(observation_sha256) FROM decisions")
        await store.fetchall("SELECT COUNT(*) FROM observations")
        await store.fetchall("SELECT COUNT(assets_sha256) FROM fills")
        await store.fetchall("SELECT COUNT(*) FROM asset_sets")
        await store.close()
        # e2 written by a newer paperarena: refused by its writer and by every reader.
        await _set_version(url, "e2", SCHEMA_VERSION + 1)
        with pytest.raises(StoreOpenError, match="newer than this paperarena"):
            await Store.open(url, scope="e2")
        with pytest.raises(StoreOpenError, match=r"scope 'e2' has schema v\d+, newer"):
            load_report(url)
        r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "report", "--db", url],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and "newer than this paperarena" in r.stderr, r.stderr


def test_a_database_without_a_store_is_one_line_naming_it_once() -> None:
    with pg_database() as url:
        r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "report", "--db", url],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr == f"paperarena: --db {url}: no paperarena store in this database\n"
