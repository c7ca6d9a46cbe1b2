"""PostgreSQL backend of the store (asyncpg): the connection :class:`daemon.store.store.Store` runs
on.

``store.url = "postgresql://user@host:5432/db"`` (or ``--db postgresql://...``) makes the store
write into PostgreSQL instead of a SQLite file. :class:`PgConnection` offers the few calls of
``aiosqlite.Connection`` that ``Store`` uses (``execute`` as awaitable and context manager,
``executemany``, ``in_transaction``, ``close``), so the store's logic and SQL stay single:

- ``?`` parameters become ``$1, $2, ...`` (outside string literals);
- DDL types of the migrations become PostgreSQL's (``INTEGER PRIMARY KEY`` an identity column,
  ``INTEGER`` ``BIGINT``, ``REAL`` ``DOUBLE PRECISION``), so every migration, including ones
  added later, runs unchanged on both databases;
- ``INSERT OR IGNORE`` becomes ``ON CONFLICT DO NOTHING``, ``INSERT OR REPLACE`` an upsert on the
  table's primary key (read from the catalog), and a single ``INSERT`` into a table with an
  identity ``id`` returns it as ``lastrowid``;
- identifiers PostgreSQL reserves (``offset``) are quoted; ``BEGIN IMMEDIATE`` is ``BEGIN``.

Each process writes into its own **scope**, a PostgreSQL schema (``pa_<process id>``) put first on
its ``search_path``: its runs, checkpoint, books and market events stay its own, exactly as in its
own SQLite file, and concurrent processes never touch each other's rows. A session advisory lock on
the scope refuses a second process with the same scope (the file lock of SQLite). Agent ownership is
enforced by the database (:mod:`daemon.store.pg_owners`). Readers merge every scope into one
leaderboard (:mod:`daemon.store.pg_snapshot`).

Database errors are raised as :class:`PgError`, a ``sqlite3.OperationalError``, so the store's
one-line error handling (rollback, fault, :class:`StoreWriteError`) covers both backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import zlib
from collections.abc import Generator, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import structlog

log = structlog.get_logger(__name__)

URL_SCHEMES = ("postgresql://", "postgres://")
#: Environment variable holding the password unless ``store.password_env`` names another.
DEFAULT_PASSWORD_ENV = "PGPASSWORD"
#: Tables whose writes move the readers' cache stamp: ``daemon/web/board_cache.py``'s STAMP_TABLES
#: (CapitalBench's included; tests/store/test_pg_stamp.py keeps them equal); updates and
#: deletes count.
STAMP_TABLES = frozenset({"equity", "decisions", "fills", "resolutions", "probes", "runs",
                          "capital_rounds", "capital_submissions", "stage_scores"})
_WRITE_RE = re.compile(r"^\s*(?:UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)
#: Identifiers of the schema that PostgreSQL reserves (quoted in every statement).
RESERVED = ("offset",)
_RESERVED_RE = re.compile(r'(?<![\w"])(excluded\.)?(' + "|".join(RESERVED) + r')\b(?!\s*\()')
_INSERT_RE = re.compile(r"^\s*INSERT\s+(OR\s+(IGNORE|REPLACE)\s+)?INTO\s+(\w+)\s*\(([^)]*)\)",
                        re.IGNORECASE | re.DOTALL)


class PgError(sqlite3.OperationalError):
    """A PostgreSQL error (one line), shaped like SQLite's so the store handles both alike."""


#: url -> the environment variable holding its password, for this process's readers (the report,
#: the API, the page and the metrics read the store over their own connections).
_PASSWORD_ENVS: dict[str, str] = {}


def use_password_env(url: str, password_env: str) -> None:
    """Make every later connection of this process to ``url`` take its password from the
    environment variable ``password_env`` (:func:`password_for`)."""
    _PASSWORD_ENVS[url] = password_env


def password_for(url: str, password_env: str | None = None) -> str | None:
    """Return the password of ``url``: from ``password_env``, else from the variable the store
    of ``url`` was opened with in this process, else from ``PGPASSWORD`` (None if unset)."""
    env = password_env or _PASSWORD_ENVS.get(url) or DEFAULT_PASSWORD_ENV
    return os.environ.get(env) or None


def is_url(path: str | os.PathLike[str]) -> bool:
    """Return whether ``path`` names a PostgreSQL database rather than a SQLite file."""
    return str(path).startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password:
        url = url.replace(f":{parts.password}@", ":***@", 1)
    return _QUERY_PASSWORD_RE.sub(lambda m: m.group(1) + "***", url)


_QUERY_PASSWORD_RE = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def url_problem(url: str) -> str | None:
    """Return why ``url`` cannot be used as ``store.url`` (None if it can)."""
    if not is_url(url):
        return f"store.url must start with postgresql:// (got {url.split(':', 1)[0]!r})"
    parts = urlsplit(url)
    if parts.password or any(k.lower() == "password"
                             for k, _ in parse_qsl(parts.query, keep_blank_values=True)):
        return ("store.url must not contain a password: put it in the environment variable "
                "named by store.password_env")
    if not parts.hostname and "host=" not in (parts.query or ""):
        return "store.url names no host (postgresql://user@host:5432/database)"
    return None


def scope_schema(scope: str) -> str:
    """Return the PostgreSQL schema of a process scope (lower case, at most 63 bytes)."""
    clean = re.sub(r"[^a-z0-9_]", "_", scope.lower())[:48]
    return f"pa_{clean}_{zlib.crc32(scope.encode()):08x}"


# ------------------------------------------------------------------------------- translation


def translate_params(sql: str) -> str:
    """Return ``sql`` with ``?`` placeholders numbered ``$1..$n`` (string literals untouched)."""
    out: list[str] = []
    n = 0
    quoted = False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
        elif ch == "?" and not quoted:
            n += 1
            out.append(f"${n}")
            continue
        out.append(ch)
    return "".join(out)


def translate_ddl(stmt: str) -> str:
    """Return a SQLite DDL statement of the migrations in PostgreSQL's types.

    A table without an ``INTEGER PRIMARY KEY`` gets a ``rowid`` identity column, as every SQLite
    table has one (readers follow new rows by ``rowid``).
    """
    s = stmt
    if (re.match(r"\s*CREATE\s+TABLE", s, re.IGNORECASE)
            and not re.search(r"\bINTEGER\s+PRIMARY\s+KEY", s, re.IGNORECASE)
            and s.rstrip().endswith(")")):
        s = s.rstrip()[:-1] + ", rowid BIGINT GENERATED ALWAYS AS IDENTITY)"
    s = re.sub(r"\bINTEGER\s+PRIMARY\s+KEY(\s+AUTOINCREMENT)?",
               "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", s, flags=re.IGNORECASE)
    s = re.sub(r"\bINTEGER\b", "BIGINT", s, flags=re.IGNORECASE)
    s = re.sub(r"\bREAL\b", "DOUBLE PRECISION", s, flags=re.IGNORECASE)
    s = re.sub(r"\bBLOB\b", "BYTEA", s, flags=re.IGNORECASE)
    return s


_UNIXEPOCH_RE = re.compile(r"\bdate\(\s*([\w.]+)\s*,\s*'unixepoch'\s*\)", re.IGNORECASE)


def translate_functions(sql: str) -> str:
    """Return ``sql`` with the SQLite functions the project uses in PostgreSQL's terms."""
    return _UNIXEPOCH_RE.sub(
        lambda m: f"to_char(to_timestamp({m.group(1)}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')", sql)


def quote_reserved(sql: str) -> str:
    """Quote the identifiers PostgreSQL reserves (``offset`` -> ``"offset"``)."""
    return _RESERVED_RE.sub(lambda m: f'{m.group(1) or ""}"{m.group(2)}"', sql)


def _returns_rows(sql: str) -> bool:
    """Return whether ``sql`` yields rows (a query, or a write with ``RETURNING``)."""
    head = sql.lstrip()[:8].upper()
    return head.startswith(("SELECT", "WITH", "VALUES", "SHOW", "EXPLAIN", "TABLE")) or (
        "RETURNING" in sql.upper())


def _is_ddl(sql: str) -> bool:
    head = sql.lstrip()[:12].upper()
    return head.startswith(("CREATE", "ALTER", "DROP"))


# ------------------------------------------------------------------------------- connection


class _Result:
    """What ``PgConnection.execute`` returns: awaitable, and an async context manager."""

    def __init__(self, con: PgConnection, sql: str, params: Sequence[Any]) -> None:
        self._con = con
        self._sql = sql
        self._params = params
        self.rows: list[tuple[Any, ...]] = []
        self.lastrowid: int | None = None
        self.rowcount = -1

    def __await__(self) -> Generator[Any, None, _Result]:
        return self._run().__await__()

    async def __aenter__(self) -> _Result:
        return await self._run()

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def _run(self) -> _Result:
        await self._con._execute(self)
        return self

    async def fetchone(self) -> tuple[Any, ...] | None:
        """Return the first row (None if there is none)."""
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[tuple[Any, ...]]:
        """Return every row."""
        return list(self.rows)


class PgConnection:
    """An asyncpg connection speaking the subset of ``aiosqlite.Connection`` the store uses."""

    def __init__(self, con: Any, url: str, schema: str) -> None:
        self.con = con
        self.url = url
        self.schema = schema
        self.scope = schema
        self._dirty = False
        """Whether the open transaction wrote a table the leaderboard reads."""
        self.lock = asyncio.Lock()
        """One operation at a time on the connection (aiosqlite queues them on its thread)."""
        self.reopen: Any = None
        """Coroutine function returning a new :class:`PgConnection` of the same scope."""
        self.session_sql: list[str] = []
        """Statements that set up a (re)opened session (``lock_timeout``)."""
        self._tx_open = False
        self._lost = False
        """Whether the connection is lost and its loss logged (until a reconnect succeeds)."""
        self._pk: dict[str, tuple[list[str], bool, bool]] = {}
        """table -> (primary-key columns, has an identity ``id``, has a ``rowid`` column)"""

    @property
    def in_transaction(self) -> bool:
        """Return whether a transaction is open."""
        return bool(self.con.is_in_transaction())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Result:
        """Run one statement (``?`` parameters); await it or use it with ``async with``."""
        return _Result(self, sql, params)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for every row of parameters."""
        rows = list(rows)
        if not rows:
            return
        text, _ = await self._translate(sql, returning=False)
        async with self.lock:
            with pg_errors():
                  await self.con.executemany(text, rows)

    async def claim_agents(self, agents: Iterable[str]) -> None:
        """Own ``agents`` for this scope (:func:`daemon.store.pg_owners.claim_agents`)."""
        from daemon.store.pg_owners import claim_agents

        async with self.lock:
            await claim_agents(self.con, self.url, self.scope, self.schema, agents)

    async def owner_schema(self, agent: str) -> str | None:
        """Return the schema of the scope that owns ``agent`` (None if no scope does)."""
        async with self.lock:
            with pg_errors():
                value = await self.con.fetchval(
                    "SELECT schema_name FROM public.paperarena_owners WHERE agent = $1", agent)
        return None if value is None else str(value)

    async def close(self) -> None:
        """Close the connection (releasing its scope lock)."""
        with contextlib.suppress(Exception):
            await self.con.close(timeout=5)

    async def _execute(self, res: _Result) -> None:
        sql = res._sql.strip()
        head = sql.upper()
        if head in ("BEGIN IMMEDIATE", "BEGIN", "BEGIN DEFERRED", "BEGIN EXCLUSIVE"):
            self._dirty = False
            await self._begin()
            return
        elif head == "COMMIT" and self._dirty:
            self._dirty = False
            async with self.lock:
                with pg_errors():  # the readers' cache stamp moves with this very commit
                    await self.con.execute("UPDATE public.paperarena_scopes SET commits ="
                                           " commits + 1 WHERE schema_name = $1", self.schema)
        elif head.startswith("PRAGMA"):
            return  # SQLite tuning has no meaning here
        if head in ("COMMIT", "ROLLBACK"):
            self._tx_open = False
        elif not self._tx_open and self.con.is_closed():
            await self._reconnect()  # between transactions nothing is lost
        text, returning = await self._translate(sql, returning=True)
        async with self.lock:
            with pg_errors():
                if returning or _returns_rows(text):
                    records = await self.con.fetch(text, *res._params)
                    res.rows = [tuple(r) for r in records]
                    if returning and res.rows:
                        res.lastrowid = int(res.rows[0][0])
                        res.rows = []
                elif res._params:
                    await self.con.execute(text, *res._params)
                else:
                    await self.con.execute(text)

    async def _begin(self) -> None:
        """Open a transaction; on a lost connection, reconnect (same scope) and open it there:
        nothing of the transaction has run yet, so nothing can be lost or applied twice."""
        for attempt in (1, 2):
            if self.con.is_closed():
                await self._reconnect()
            try:
                async with self.lock:
                    with pg_errors():
                        await self.con.execute("BEGIN")
            except PgError:
                if attempt == 2 or not self.con.is_closed():
                    raise
                continue
            self._tx_open = True
            return

    async def _reconnect(self) -> None:
        """Replace a lost connection by a new one of the same scope (its lock re-taken)."""
        from daemon.store.dbfile import StoreOpenError

        if self.reopen is None:
            raise PgError("connection to PostgreSQL lost")
        if not self._lost:  # one line per outage, however many attempts it takes
            log.warning("postgresql connection lost; reconnecting", url=self.url,
                        scope=self.scope)
            self._lost = True
        try:
            fresh = await self.reopen()
        except StoreOpenError as exc:
            raise PgError(str(exc)) from None
        self.con = fresh.con
        self._lost = False
        async with self.lock:
            with pg_errors():
                for stmt in self.session_sql:
                    await self.con.execute(stmt)

    async def _translate(self, sql: str, *, returning: bool) -> tuple[str, bool]:
        """Return ``sql`` in PostgreSQL and whether it returns the new row's ``id``."""
        if _is_ddl(sql):
            return quote_reserved(translate_ddl(sql)), False
        ret = False
        w = _WRITE_RE.match(sql)
        if w and w.group(1) in STAMP_TABLES:
            self._dirty = True
        m = _INSERT_RE.match(sql)
        if m:
            verb, table, cols = (m.group(2) or "").upper(), m.group(3), m.group(4)
            if table in STAMP_TABLES:
                self._dirty = True
            pk, identity, has_rowid = await self._table_keys(table)
            if verb:
                sql = re.sub(r"^\s*INSERT\s+OR\s+\w+\s+INTO", "INSERT INTO", sql,
                             flags=re.IGNORECASE)
            if verb == "IGNORE":
                sql += " ON CONFLICT DO NOTHING"
            elif verb == "REPLACE":
                names = [c.strip() for c in cols.split(",")]
                rest = [c for c in names if c not in pk]
                # SQLite's REPLACE deletes and re-inserts: the row gets a new rowid.
                sets = ", ".join([f"{c}=excluded.{c}" for c in rest]
                                 + (["rowid=DEFAULT"] if has_rowid else []))
                sql += (f" ON CONFLICT ({', '.join(pk)}) DO UPDATE SET {sets}" if rest
                        else " ON CONFLICT DO NOTHING")
            if returning and identity and "RETURNING" not in sql.upper():
                sql += " RETURNING id"
                ret = True
        return translate_params(quote_reserved(translate_functions(sql))), ret

    async def _table_keys(self, table: str) -> tuple[list[str], bool, bool]:
        """Return the primary-key columns of ``table``, whether it has an identity ``id`` and
        whether it has a ``rowid`` column."""
        if table not in self._pk:
            async with self.lock:
                with pg_errors():
                    rows = await self.con.fetch(
                        "SELECT a.attname, a.attidentity FROM pg_index i JOIN pg_attribute a"
                        " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                        " WHERE i.indrelid = to_regclass($1) AND i.indisprimary"
                        " ORDER BY array_position(i.indkey, a.attnum)", table)
                    has_rowid = bool(await self.con.fetchval(
                        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1)"
                        " AND attname = 'rowid' AND NOT attisdropped", table))
            pk = [str(r[0]) for r in rows]
            self._pk[table] = (pk, pk == ["id"] and bool(rows[0][1]), has_rowid)
        return self._pk[table]


@contextlib.contextmanager
def pg_errors() -> Generator[None, None, None]:
    """Re-raise asyncpg and connection errors as :class:`PgError` (one line)."""
    import asyncpg  # type: ignore[import-untyped]

    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise PgError(text) from exc


async def connect(url: str, *, scope: str, password_env: str | None = None,
                  timeout: float = 10.0) -> PgConnection:
    """Connect to ``url``, create and enter ``scope``'s schema, and lock the scope.

    Raises :class:`daemon.store.dbfile.StoreOpenError` (one line) if the server cannot be reached,
    the URL is unusable, or another live process holds the scope.
    """
    import asyncpg  # type: ignore[import-untyped]

    from daemon.store.dbfile import StoreLockedError, StoreOpenError
    from daemon.store.pg_owners import install_shared, lock_key

    problem = url_problem(url)
    if problem:
        raise StoreOpenError(f"{redact(url)}: {problem}")
    if password_env:
        use_password_env(url, password_env)  # the readers of this process use it too
    password = password_for(url, password_env)
    schema = scope_schema(scope)
    try:
        con = await asyncpg.connect(url, password=password, timeout=timeout,
                                    server_settings={"application_name": f"paperarena {scope}"})
    except Exception as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise StoreOpenError(f"{url}: cannot connect to PostgreSQL ({text})") from None
    try:
        if not await con.fetchval("SELECT pg_try_advisory_lock($1)", lock_key(schema)):
            raise StoreLockedError(f"{url}: scope {scope!r} is in use by another paperarena "
                                   "process; stop it or give this one another process id")
        await install_shared(con)
        await con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await con.execute(f'SET search_path TO "{schema}"')
        await con.execute(
            "INSERT INTO public.paperarena_scopes(scope, schema_name) VALUES($1, $2)"
            " ON CONFLICT(scope) DO NOTHING", scope, schema)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            await con.close(timeout=5)
        if isinstance(exc, asyncpg.PostgresError):
            raise StoreOpenError(f"{url}: {' '.join(str(exc).split())}") from None
        raise
    log.info("postgresql store opened", url=url, scope=scope, schema=schema)
    pg = PgConnection(con, url, schema)
    pg.scope = scope

    async def reopen() -> PgConnection:
        return await connect(url, scope=scope, password_env=password_env, timeout=timeout)

    pg.reopen = reopen
    return pg


async def open_store(cls: Any, url: str, *, scope: str, password_env: str | None,
                     busy_timeout: float) -> Any:
    """Open ``cls`` (:class:`daemon.store.store.Store`) on ``url``: connect, migrate the scope's
    schema, put the ownership triggers on it and probe a write; close everything on failure."""
    from daemon.store.dbfile import StoreOpenError
    from daemon.store.pg_owners import install_triggers

    pg = await connect(url, scope=scope, password_env=password_env)
    store = cls(url, pg, None, busy_timeout)
    try:
        pg.session_sql.append(f"SET lock_timeout = {int(busy_timeout * 1000)}")
        await pg.con.execute(pg.session_sql[-1])
        await store._migrate()
        await install_triggers(pg.con, pg.schema)
        await store._probe_write()
    except BaseException as exc:
        await pg.close()
        if isinstance(exc, sqlite3.Error):
            raise StoreOpenError(f"{url}: {exc}") from None
        raise
    return store
