"""``paperarena verify --db F``: walk a store's hash chains and name the first bad row of each.

Each chained table (:data:`~daemon.store.integrity.chain.STREAMS`) is read in row-id order and
every row's chain recomputed from the chain before it and the row's stored content. The first row
of a stream that does not fit is named, with why:

- its back tag fits the row before but its link does not: the row was **edited** (its content,
  or its chain, changed after it was written);
- its back tag names no row of the table: a row before it was **deleted**;
- its back tag names another row of the table: it is **out of order** (rows were moved, or one
  was inserted among them);
- it has no chain but follows chained rows: it was **inserted** by something other than
  paperarena.

A CapitalBench round's status and prices, updated after it was written, are chained as rows of
``capital_round_states``: a round whose present ones are not its last state's was **edited**.
A season row (v17) whose lineup does not hash to its ``lineup_sha256`` was **edited**, and a
row without a hash in a table whose every row is hashed at the store's schema version
(:attr:`~daemon.store.integrity.chain.Stream.since`: ``runs`` v14, CapitalBench's v15,
``season``, ``config_reloads`` and ``capital_briefings`` v17) had its hash **removed**.
A CapitalBench briefing (``capital_briefings``, v17) whose text does not hash to its ``sha256``
was **edited** (even with its chain recomputed), and a round whose manifest names a briefing no
row holds names it as **deleted** (:func:`~daemon.store.integrity.capital.briefing_problem`).

What a chain cannot show by itself is a cut tail (the last rows deleted): compare the heads
:func:`verify` returns with heads published earlier (docs/operations.md).

A SQLite file is read read-only; a shared PostgreSQL store is checked scope by scope (each scope
has its own streams).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.store.dbfile import connect_readonly
from daemon.store.integrity.capital import BRIEFINGS_SQL, briefing_problem, state_problem
from daemon.store.integrity.chain import NO_BACK, STREAMS, Stream, content_bytes, link_rows
from daemon.store.read import is_store_url

__all__ = ["RowSource", "StreamCheck", "VerifyError", "summary", "verify", "walk"]

_CHUNK = 2000
#: A season row as :func:`_check_season` reads it.
_SEASON_SQL = "SELECT id, kind, ts, lineup_json, lineup_sha256 FROM season ORDER BY id"
#: A CapitalBench round's state: what capital_round_states chains of it.
_STATE_COLS = ", ".join(STREAMS["capital_round_states"].columns)

#: A source of a stream's rows: (row id, chain, *hashed columns) in row-id order, in chunks.
RowSource = Callable[[], Iterator[Sequence[tuple[Any, ...]]]]


class VerifyError(Exception):
    """The store cannot be checked at all (one line)."""


@dataclass
class StreamCheck:
    """What the walk of one stream found."""

    name: str
    """The table (``scope/table`` in a shared store)."""
    rows: int = 0
    """Chained rows checked (up to the first problem)."""
    legacy: int = 0
    """Rows written before the chain began (schema v13)."""
    first_legacy: str | None = None
    """The first of them, named."""
    head: bytes = b""
    """The chain of the last row checked."""
    problem: str | None = None


def _key(stream: Stream, rid: Any, cols: Sequence[Any]) -> str:
    named = ", ".join(f"{c}={cols[stream.columns.index(c)]!r}" for c in stream.key)
    return f"row {rid} ({named})"


def _locate(source: RowSource, tag: bytes) -> Any:
    """Return the id of the row whose link begins with ``tag`` (None if no row's does)."""
    for chunk in source():
        for rid, chain, *_ in chunk:
            if chain is not None and bytes(chain)[4:8] == tag:
                return rid
    return None


def walk(stream: Stream, name: str, source: RowSource) -> StreamCheck:
    """Walk one stream's rows and return what it found (the first problem only)."""
    out = StreamCheck(name)
    prev = b""
    for chunk in source():
        contents = content_bytes(stream.table, [r[2:] for r in chunk])
        for (rid, chain, *cols), data in zip(chunk, contents, strict=True):
            if chain is None:
                if not prev:
                    out.legacy += 1
                    if out.first_legacy is None:
                        out.first_legacy = _key(stream, rid, cols)
                    continue
                out.problem = (f"{name}: {_key(stream, rid, cols)} has no hash but follows "
                               "hashed rows: inserted by something other than paperarena")
                return out
            chain = bytes(chain)
            back = prev[4:8] if prev else NO_BACK
            if chain[:4] != back:
                found = None if chain[:4] == NO_BACK else _locate(source, chain[:4])
                where = _key(stream, rid, cols)
                if found is None:
                    out.problem = (f"{name}: a row was deleted before {where} (its hash "
                                   "names a row the table no longer holds)")
                else:
                    out.problem = (f"{name}: {where} is out of order: it was written after "
                                   f"row {found}")
                return out
            if link_rows(prev, (data,))[0] != chain:
                out.problem = (f"{name}: {_key(stream, rid, cols)} was edited: its content "
                               "does not match its hash")
                return out
            prev = chain
            out.rows += 1
            out.head = chain
    return out


# ------------------------------------------------------------------------------ SQLite


def _columns(stream: Stream, present: set[str]) -> str:
    """Return the stream's hashed columns to select, NULL for one a store of an older schema
    lacks (an optional one, :attr:`Stream.optional`)."""
    return ", ".join(c if c in present else "NULL" for c in stream.columns)


def _sqlite_source(con: sqlite3.Connection, stream: Stream) -> RowSource:
    # A table chained since a later schema (runs: v14, CapitalBench's: v15) has rows written
    # before it, unchained; one created since (capital_round_states) may be missing.
    cols = {r[1] for r in con.execute(f"PRAGMA table_info({stream.table})")}
    if not cols:
        return lambda: iter(())
    chained = "chain" in cols
    sql = (f"SELECT {stream.order}, {'chain' if chained else 'NULL'},"
           f" {_columns(stream, cols)} FROM {stream.table} ORDER BY {stream.order}")

    def rows() -> Iterator[Sequence[tuple[Any, ...]]]:
        cur = con.execute(sql)
        while chunk := cur.fetchmany(_CHUNK):
            yield chunk

    return rows


def _verify_sqlite(path: str) -> list[StreamCheck]:
    if not Path(path).is_file():
        raise VerifyError(f"{path}: no such database")
    try:
        con = connect_readonly(path)
    except Exception as exc:  # a file that is no database: one line
        raise VerifyError(f"{path}: cannot be read as a store ({exc})") from None
    try:
        try:
            cols = {r[1] for r in con.execute("PRAGMA table_info(decisions)")}
        except sqlite3.DatabaseError as exc:
            raise VerifyError(f"{path}: not a paperarena store ({exc})") from None
        if "chain" not in cols:
            raise VerifyError(f"{path}: no hash chains in this store (written by a paperarena "
                              "before schema v13); open it once with this version to add them")
        checks = [walk(s, s.table, _sqlite_source(con, s)) for s in STREAMS.values()]
        if "chain" in {r[1] for r in con.execute("PRAGMA table_info(capital_rounds)")}:
            _check_states(checks, "", con.execute(
                f"SELECT rowid, {_STATE_COLS} FROM capital_rounds ORDER BY rowid").fetchall(),
                con.execute(f"SELECT {_STATE_COLS} FROM capital_round_states ORDER BY id"
                            ).fetchall())
        if {r[1] for r in con.execute("PRAGMA table_info(capital_briefings)")}:
            _check_briefings(checks, "", con.execute(BRIEFINGS_SQL).fetchall(), con.execute(
                "SELECT rowid, round_id, manifest_json FROM capital_rounds ORDER BY rowid"
            ).fetchall())
        _check_season(checks, "", con.execute(_SEASON_SQL).fetchall())
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        _check_unhashed(checks, "", int(row[0]) if row else 0)
        return checks
    finally:
        con.close()


def _check_unhashed(checks: list[StreamCheck], prefix: str, version: int) -> None:
    """Name an unhashed row of a table whose every row is hashed at the store's schema
    ``version`` (:attr:`Stream.since`): its hash was removed, not written before the chain."""
    for check in checks:
        if not check.name.startswith(prefix) or check.problem or not check.legacy:
            continue
        since = STREAMS[check.name[len(prefix):]].since
        if since is not None and version >= since:
            check.problem = (f"{check.name}: {check.first_legacy} has no hash, but every row "
                             f"of this table is hashed since schema v{since} (this store is "
                             f"v{version}): its hash was removed")


def _check_season(checks: list[StreamCheck], prefix: str, rows: Sequence[Any]) -> None:
    """Name a season row (id, kind, ts, lineup_json, lineup_sha256) whose lineup is not its
    SHA-256 (an edit with the chain recomputed would otherwise pass)."""
    check = {c.name: c for c in checks}[f"{prefix}season"]
    if check.problem is not None:
        return
    for rid, kind, ts, text, sha in rows:
        if hashlib.sha256(str(text).encode()).hexdigest() != sha:
            check.problem = (f"{check.name}: row {rid} (kind={kind!r}, ts={ts!r}) was edited: "
                             "its lineup does not hash to its lineup_sha256")
            return


def _check_states(checks: list[StreamCheck], prefix: str, rounds: Sequence[Any],
                  states: Sequence[Any]) -> None:
    """Name a round whose status or prices are not its last chained state (where both its
    streams hold)."""
    by = {c.name: c for c in checks}
    rc, sc = by[f"{prefix}capital_rounds"], by[f"{prefix}capital_round_states"]
    if rc.problem is None and sc.problem is None:
        rc.problem = state_problem(rc.name, rounds, states)


def _check_briefings(checks: list[StreamCheck], prefix: str, briefings: Sequence[Any],
                     rounds: Sequence[Any]) -> None:
    """Name a briefing whose text is not its hash, or one a round names that is not stored
    (where the briefings' chain holds)."""
    check = {c.name: c for c in checks}[f"{prefix}capital_briefings"]
    if check.problem is None:
        check.problem = briefing_problem(check.name, briefings, rounds)


# ------------------------------------------------------------------------------ PostgreSQL


_PgRows = list[tuple[str, Stream, list[tuple[Any, ...]]]]
#: scope prefix -> (capital_rounds' present states, capital_round_states' hashed columns)
_PgStates = dict[str, tuple[list[tuple[Any, ...]], list[Any]]]


async def _pg_rows(url: str) -> tuple[_PgRows, _PgStates, dict[str, int]]:
    import asyncpg  # type: ignore[import-untyped]

    from daemon.store.pg import password_for, redact

    try:
        con = await asyncpg.connect(url, password=password_for(url), timeout=10)
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise VerifyError(f"{redact(url)}: cannot connect to PostgreSQL ({text})") from None
    out: _PgRows = []
    states: _PgStates = {}
    versions: dict[str, int] = {}
    try:
        async with con.transaction(isolation="repeatable_read", readonly=True):
            try:
                scopes = await con.fetch("SELECT scope, schema_name FROM"
                                         " public.paperarena_scopes ORDER BY scope")
            except asyncpg.UndefinedTableError:
                raise VerifyError(f"{redact(url)}: not a paperarena store") from None
            for scope, schema in scopes:
                has = await con.fetchval(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema=$1 AND"
                    " table_name='decisions' AND column_name='chain'", schema)
                if not has:
                    continue  # a scope never opened by this version: nothing chained
                versions[f"{scope}/"] = int(await con.fetchval(
                    f'SELECT value FROM "{schema}".meta WHERE key=\'schema_version\'') or 0)
                for s in STREAMS.values():
                    cols = {r[0] for r in await con.fetch(
                        "SELECT column_name FROM information_schema.columns WHERE"
                        " table_schema=$1 AND table_name=$2", schema, s.table)}
                    rows = [] if not cols else await con.fetch(
                        f'SELECT {s.order}, {"chain" if "chain" in cols else "NULL"},'
                        f' {_columns(s, cols)} FROM "{schema}".{s.table} ORDER BY {s.order}')
                    out.append((f"{scope}/{s.table}", s, [tuple(r) for r in rows]))
                if cols:  # capital_round_states (the last stream) is v15's
                    rounds = await con.fetch(
                        f'SELECT rowid, {_STATE_COLS} FROM "{schema}".capital_rounds'
                        " ORDER BY rowid")
                    states[f"{scope}/"] = ([tuple(r) for r in rounds],
                                           [r[2:] for r in out[-1][2]])
    finally:
        await con.close()
    return out, states, versions


def _verify_pg(url: str) -> list[StreamCheck]:
    checks = []
    streams, states, versions = asyncio.run(_pg_rows(url))
    for name, stream, rows in streams:
        def source(rows: list[tuple[Any, ...]] = rows) -> Iterator[Sequence[tuple[Any, ...]]]:
            for i in range(0, len(rows), _CHUNK):
                yield rows[i:i + _CHUNK]

        checks.append(walk(stream, name, source))
    for prefix, (rounds, chained) in states.items():
        _check_states(checks, prefix, rounds, chained)
    _pg_briefings(checks, streams)
    for name, stream, rows in streams:
        if stream.table == "season":
            _check_season(checks, name[:-len("season")], [(r[0], *r[3:7]) for r in rows])
    for prefix, version in versions.items():
        _check_unhashed(checks, prefix, version)
    return checks


def _pg_briefings(checks: list[StreamCheck], streams: _PgRows) -> None:
    """Check each scope's briefings against its rounds (from the rows the walk read)."""
    briefings = {n.rsplit("/", 1)[0]: rows for n, s, rows in streams
                 if s.table == "capital_briefings"}
    manifest = STREAMS["capital_rounds"].columns.index("manifest_json")
    for name, stream, rows in streams:
        scope = name.rsplit("/", 1)[0]
        if stream.table == "capital_rounds" and scope in briefings:
            _check_briefings(checks, f"{scope}/", [(r[0], *r[2:]) for r in briefings[scope]],
                             [(r[0], r[2], r[2 + manifest]) for r in rows])


def verify(db: str | Path) -> list[StreamCheck]:
    """Walk every chain of the store ``db`` (a SQLite file or a ``postgresql://`` URL)."""
    return _verify_pg(str(db)) if is_store_url(db) else _verify_sqlite(str(db))


def summary(checks: Iterable[StreamCheck]) -> list[str]:
    """Return the lines ``paperarena verify`` prints for a store whose chains hold."""
    checks = list(checks)
    total = sum(c.rows for c in checks)
    legacy = sum(c.legacy for c in checks)
    counts = ", ".join(f"{c.name} {c.rows}" for c in checks)
    lines = [f"ok: {total} rows in {len(checks)} chains hold ({counts}"
             + (f"; {legacy} rows written before the chains began)" if legacy else ")")]
    lines += [f"head {c.name} {c.head.hex() or '-'}" for c in checks]
    return lines
