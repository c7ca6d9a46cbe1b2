"""``paperarena migrate --from SQLITE --to URL``: copy a run into a shared PostgreSQL store.

The SQLite file is read only (never migrated or changed). The target is one scope of the
PostgreSQL database (:mod:`daemon.store.pg`; default ``migrated-<file name>``), created and
migrated to the current schema by opening it as a store, and it must be empty. Every table is
copied in ONE transaction with its ids (so ``decisions.run_id`` and the checkpoint's
``events_id`` keep pointing at the same rows) using ``COPY``; identity sequences continue
after the copied ids. The agents found in the file are claimed for the scope first (the
ownership trigger refuses rows of agents a live process owns). Afterwards the row count of
every table is compared; a difference fails the command (the transaction has committed: drop
the scope's schema and run it again).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon.store.dbfile import StoreOpenError, connect_readonly, inspect_database

#: Tables not copied (the target has its own schema version).
SKIP = frozenset({"sqlite_sequence"})


class MigrateError(Exception):
    """The migration cannot run or did not verify (one line)."""


@dataclass
class MigrateSummary:
    """What was copied: rows per table, and where to."""

    scope: str
    schema: str
    rows: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """Return one line for the terminal."""
        total = sum(self.rows.values())
        parts = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items()) if n)
        return (f"copied {total} rows into scope {self.scope!r} (schema {self.schema}); "
                f"counts verified: {parts or 'nothing to copy'}")


async def migrate(source: str | Path, url: str, *, scope: str | None = None,
                  password_env: str | None = None) -> MigrateSummary:
    """Copy the SQLite store ``source`` into ``scope`` of the PostgreSQL store at ``url``."""
    from daemon.store.schema import SCHEMA_VERSION
    from daemon.store.store import Store

    src = Path(source)
    if not src.is_file():
        raise MigrateError(f"--from {source}: no such SQLite database")
    try:
        inspect_database(str(src), create=False, schema_version=SCHEMA_VERSION)
        con = connect_readonly(src)
    except (StoreOpenError, sqlite3.Error) as exc:
        raise MigrateError(f"--from {exc}") from None
    scope = scope or f"migrated-{src.name}"
    try:
        tables = _tables(con)
        agents = _agents(con, tables)
        try:
            store = await Store.open(url, scope=scope, password_env=password_env)
        except StoreOpenError as exc:
            raise MigrateError(f"--to {exc}") from None
        try:
            pg = store.db
            summary = MigrateSummary(scope, pg.schema)
            await _require_empty(pg, url, scope)
            await store.claim_agents(agents)
            await _copy(con, pg, tables, summary)
            await _verify(pg, summary)
        finally:
            await store.close()
    finally:
        con.close()
    return summary


def _tables(con: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    return {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
            for t in names if t not in SKIP}


def _agents(con: sqlite3.Connection, tables: dict[str, list[str]]) -> list[str]:
    out: set[str] = set()
    for t, cols in tables.items():
        if "agent" in cols:
            out |= {r[0] for r in con.execute(f"SELECT DISTINCT agent FROM {t}") if r[0]}
    return sorted(out)


async def _require_empty(pg: Any, url: str, scope: str) -> None:
    for table in ("runs", "decisions", "market_events", "equity"):
        n = await pg.con.fetchval(f'SELECT COUNT(*) FROM "{pg.schema}"."{table}"')
        if n:
            raise MigrateError(
                f"--to {url}: scope {scope!r} already holds {n} {table} rows; migrate into an "
                "empty scope (--scope NAME)")


async def _pg_columns(pg: Any) -> dict[str, dict[str, str]]:
    rows = await pg.con.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema=$1", pg.schema)
    out: dict[str, dict[str, str]] = {}
    for t, c, typ in rows:
        out.setdefault(t, {})[c] = typ
    return out


def _cast(typ: str) -> Any:
    if typ == "double precision":
        return lambda v: None if v is None else float(v)
    if typ == "bigint":
        return lambda v: None if v is None else int(v)
    if typ == "text":
        return lambda v: None if v is None else str(v)
    return lambda v: v


async def _copy(con: sqlite3.Connection, pg: Any, tables: dict[str, list[str]],
                summary: MigrateSummary) -> None:
    target = await _pg_columns(pg)
    async with pg.con.transaction():
        for table, cols in tables.items():
            if table not in target:
                continue  # a table of a newer paperarena: nothing here to receive it
            if table == "meta":
                rows = [r for r in con.execute("SELECT key, value FROM meta")
                        if r[0] != "schema_version"]
                await pg.con.executemany(
                    f'INSERT INTO "{pg.schema}".meta(key, value) VALUES($1, $2)'
                    " ON CONFLICT(key) DO UPDATE SET value=excluded.value", rows)
                continue
            common = [c for c in cols if c in target[table]]
            casts = [_cast(target[table][c]) for c in common]
            quoted = ", ".join(f'"{c}"' for c in common)
            cur = con.execute(f"SELECT {quoted} FROM {table}")
            n = 0
            while batch := cur.fetchmany(20_000):
                records = [tuple(f(v) for f, v in zip(casts, row, strict=True)) for row in batch]
                await pg.con.copy_records_to_table(table, records=records, columns=common,
                                                   schema_name=pg.schema)
                n += len(records)
            summary.rows[table] = n
            if "id" in target[table]:
                await pg.con.execute(
                    f"SELECT setval(pg_get_serial_sequence('\"{pg.schema}\".\"{table}\"', 'id'),"
                    f' COALESCE((SELECT MAX(id) FROM "{pg.schema}"."{table}"), 0) + 1, false)'
                    f" WHERE pg_get_serial_sequence('\"{pg.schema}\".\"{table}\"', 'id')"
                    " IS NOT NULL")


async def _verify(pg: Any, summary: MigrateSummary) -> None:
    wrong = []
    for table, n in summary.rows.items():
        got = int(await pg.con.fetchval(f'SELECT COUNT(*) FROM "{pg.schema}"."{table}"'))
        if got != n:
            wrong.append(f"{table}: {n} in the file, {got} in PostgreSQL")
    if wrong:
        raise MigrateError("row counts differ after the copy: " + "; ".join(wrong))
