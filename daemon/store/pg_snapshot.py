"""Read a shared PostgreSQL store as one SQLite database: the readers' single code path.

The report, the HTTP API, the page and the metrics read the store with synchronous ``sqlite3``
(:mod:`scoring.board.leaderboard`). For a ``postgresql://`` store, :func:`snapshot` copies every
process scope (:mod:`daemon.store.pg`) in ONE ``REPEATABLE READ, READ ONLY`` transaction (a
consistent cut across all writers) into an in-memory SQLite database with the schema of the
migrations, and the unchanged scoring code runs on it. Merge rules, per table:

- ``market_events``: the scope holding the most events, a burst of prices counting as its
  prices (the feeds process in a live deployment;
  in a replay every evaluator holds the whole recording), ids kept;
- ``checkpoint``: none (per-process restart state);
- tables with an ``id INTEGER PRIMARY KEY``: every scope's rows, in scope then id order, with
  new ids (``runs`` in ``started_ts`` order, so later configs still override earlier ones);
- every table, ``INSERT OR IGNORE`` in scope order: rows that several scopes hold alike
  (resolutions, a book's listed questions, the decisions and fills of a run migrated twice or of
  an agent moved to a new scope with its history) appear once, by the table's key or unique
  index (``fills`` has an id and a unique (agent, market, scheduled_ts)).

Cost: the copy is linear in the rows of the store (see ``docs/benchmarks.md``); the live
readers recompute only after marks or rounds (``daemon/web/board_cache.py``).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

from daemon.core.price_bursts import BURST_KIND

Rows = list[tuple[Any, ...]]
#: Tables never merged into the snapshot (per-process restart state).
SKIP = frozenset({"checkpoint"})


def snapshot(url: str, *, password_env: str | None = None) -> sqlite3.Connection:
    """Return an in-memory SQLite database holding the merged scopes of ``url`` (one cut)."""
    from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION, _statements

    con = sqlite3.connect(":memory:", check_same_thread=False)
    for version in range(1, SCHEMA_VERSION + 1):
        for stmt in _statements(MIGRATIONS[version]):
            con.execute(stmt)
    con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)",
                (str(SCHEMA_VERSION),))
    tables = {name: [r[1] for r in con.execute(f"PRAGMA table_info({name})")]
              for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    data = _in_thread(_fetch(url, tables, password_env))
    for table, rows in data:
        cols = tables[table]
        # Rows several scopes hold alike (a run migrated twice, an agent moved to a new scope
        # with its history) are kept once: by the table's key, or its unique index.
        con.executemany(f"INSERT OR IGNORE INTO {table}({', '.join(cols)}) VALUES"
                        f"({', '.join('?' * len(cols))})", rows)
    con.commit()
    return con


def stamp(url: str, *, password_env: str | None = None) -> tuple[int, ...]:
    """Return the readers' cache stamp of ``url``: scopes and the commits that changed the
    leaderboard's tables (moves with every such commit of every process; one small query)."""
    return tuple(_in_thread(_stamp(url, password_env)))


def daily_marks(url: str, *, password_env: str | None = None) -> tuple[int, ...]:
    """Return the last daily mark's ``rowid`` of every scope of ``url`` (moves with a daily mark
    of any process: the metrics' leaderboard figures recompute then)."""
    return tuple(_in_thread(_daily_marks(url, password_env)))


async def _daily_marks(url: str, password_env: str | None) -> list[int]:
    import asyncpg  # type: ignore[import-untyped]

    from daemon.store.pg import password_for

    con = await asyncpg.connect(url, password=password_for(url, password_env), timeout=10)
    try:
        out = []
        for (schema,) in await con.fetch(
                "SELECT s.schema_name FROM public.paperarena_scopes s WHERE"
                " to_regclass(quote_ident(s.schema_name) || '.equity') IS NOT NULL"
                " ORDER BY s.scope"):
            out.append(int(await con.fetchval(
                f'SELECT COALESCE(MAX(rowid), 0) FROM "{schema}".equity WHERE kind=\'daily\'')))
        return out
    finally:
        await con.close()


async def _stamp(url: str, password_env: str | None) -> tuple[int, int]:
    import asyncpg  # type: ignore[import-untyped]

    from daemon.store.pg import password_for

    con = await asyncpg.connect(url, password=password_for(url, password_env), timeout=10)
    try:
        row = await con.fetchrow("SELECT COUNT(*), COALESCE(SUM(commits), 0)"
                                 " FROM public.paperarena_scopes")
        return int(row[0]), int(row[1])
    finally:
        await con.close()


def _in_thread(coro: Any) -> Any:
    """Run ``coro`` to completion on a fresh event loop in its own thread (callers may be
    inside a running loop, or in a worker thread)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, name="pg-snapshot")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _fetch(url: str, tables: dict[str, list[str]], password_env: str | None
                 ) -> list[tuple[str, Rows]]:
    """Return (table, rows) to insert, every scope read in one repeatable-read transaction."""
    import asyncpg  # type: ignore[import-untyped]

    from daemon.store.dbfile import StoreOpenError
    from daemon.store.pg import password_for, pg_errors, redact, url_problem

    problem = url_problem(url)
    if problem:
        raise StoreOpenError(f"{redact(url)}: {problem}")
    try:
        con = await asyncpg.connect(url, password=password_for(url, password_env), timeout=10)
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise StoreOpenError(f"{url}: cannot connect to PostgreSQL ({text})") from None
    out: list[tuple[str, Rows]] = []
    try:
        with pg_errors():
            await _read(con, url, tables, out)
    finally:
        await con.close()
    return out


async def _read(con: Any, url: str, tables: dict[str, list[str]],
                out: list[tuple[str, Rows]]) -> None:
    """Append every scope's rows of ``tables`` to ``out`` (one repeatable-read transaction)."""
    async with con.transaction(isolation="repeatable_read", readonly=True):
        if not await con.fetchval("SELECT to_regclass('public.paperarena_scopes')"
                                  " IS NOT NULL"):
            from daemon.store.dbfile import StoreOpenError  # not an OSError: pg_errors lets it by

            raise StoreOpenError(f"{url}: no paperarena store in this database")
        named = [(r[0], r[1]) for r in await con.fetch(
            "SELECT scope, schema_name FROM public.paperarena_scopes ORDER BY scope")]
        schemas = [s for _, s in named]
        present = {(r[0], r[1]): None for r in await con.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema = ANY($1::text[])", schemas)}
        await _refuse_newer(con, url, [(sc, s) for sc, s in named if (s, "meta") in present])
        have = {(r[0], r[1], r[2]) for r in await con.fetch(
            "SELECT table_schema, table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = ANY($1::text[])", schemas)}
        events = {s: 0 for s in schemas if (s, "market_events") in present}
        for s in events:  # a burst of live prices counts as its prices (its payload's n)
            events[s] = int(await con.fetchval(
                "SELECT COALESCE(SUM(CASE WHEN kind = $1 THEN (payload::json->>'n')::bigint"
                f' ELSE 1 END), 0) FROM "{s}".market_events', BURST_KIND))
        richest = max(events, key=lambda s: (events[s], s)) if events else None
        for table in sorted(tables):
            if table in SKIP or table == "meta":
                continue
            cols = tables[table]
            scopes = ([richest] if table == "market_events" and richest else
                      [s for s in schemas if (s, table) in present])
            if table == "runs":
                out.append((table, await _runs(con, scopes, cols, have)))
                continue
            for s in scopes:
                out.append((table, await _rows(con, s, table, cols, have,
                                               keep_id=table == "market_events")))


async def _refuse_newer(con: Any, url: str, scopes: list[tuple[str, str]]) -> None:
    """Raise :class:`StoreOpenError` (one line) if a scope has a schema newer than this
    paperarena's: its tables may mean what this version cannot read (as a newer SQLite file)."""
    from daemon.store.dbfile import StoreOpenError
    from daemon.store.schema import SCHEMA_VERSION

    for scope, schema in scopes:
        raw = await con.fetchval(
            f'SELECT value FROM "{schema}".meta WHERE key = \'schema_version\'')
        version = int(raw) if raw is not None and str(raw).isdigit() else 0
        if version > SCHEMA_VERSION:
            raise StoreOpenError(
                f"{url}: scope {scope!r} has schema v{version}, newer than this paperarena "
                f"(v{SCHEMA_VERSION}); use the paperarena that wrote it")


def _select(schema: str, table: str, cols: list[str], have: set[tuple[str, str, str]],
            keep_id: bool) -> str:
    """Return the SELECT of ``cols`` (NULL for a column this scope lacks, and for ``id``)."""
    parts = []
    for c in cols:
        if (c == "id" and not keep_id) or (schema, table, c) not in have:
            parts.append("NULL")
        else:
            parts.append(f'"{c}"')
    order = " ORDER BY id" if (schema, table, "id") in have else ""
    return f'SELECT {", ".join(parts)} FROM "{schema}"."{table}"{order}'


async def _rows(con: Any, schema: str, table: str, cols: list[str],
                have: set[tuple[str, str, str]], *, keep_id: bool) -> Rows:
    return [tuple(r) for r in await con.fetch(_select(schema, table, cols, have, keep_id))]


async def _runs(con: Any, scopes: list[str], cols: list[str],
                have: set[tuple[str, str, str]]) -> Rows:
    """Return every scope's runs in start order (ids renumbered)."""
    rows: Rows = []
    for s in scopes:
        rows += await _rows(con, s, "runs", cols, have, keep_id=False)
    at = cols.index("started_ts")
    return sorted(rows, key=lambda r: (r[at], repr(r)))
