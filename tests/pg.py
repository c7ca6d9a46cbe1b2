"""The PostgreSQL server of this machine for tests: one fresh database per test, dropped after.

Tests using :func:`pg_database` are skipped, with the reason, when no server answers at
``PAPERARENA_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``, trust auth).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ADMIN_URL = os.environ.get("PAPERARENA_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _reachable() -> str | None:
    """Return why the server cannot be used (None if it can)."""
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError:
        return "asyncpg is not installed (pip install -e '.[dev]')"
    parts = urlsplit(ADMIN_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 2):
            pass
    except OSError as exc:
        return f"no PostgreSQL server at {parts.hostname}:{parts.port or 5432} ({exc})"

    async def probe() -> None:
        con = await asyncpg.connect(ADMIN_URL, timeout=5)
        await con.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"PostgreSQL at {ADMIN_URL} refused the test user ({exc})"
    return None


REASON = _reachable()
requires_pg = pytest.mark.skipif(REASON is not None, reason=f"PostgreSQL tests: {REASON}")


def _admin(sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def run() -> None:
        con = await asyncpg.connect(ADMIN_URL, timeout=5)
        try:
            await con.execute(sql)
        finally:
            await con.close()

    asyncio.run(run()) if not _in_loop() else _in_thread(run)


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _in_thread(fn: object) -> None:
    import threading

    err: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(fn())  # type: ignore[operator]
        except BaseException as exc:
            err.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if err:
        raise err[0]


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """Create a uniquely named database, yield its URL, drop it (and its sessions) after."""
    if REASON is not None:
        pytest.skip(f"PostgreSQL tests: {REASON}")
    name = f"pa_test_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    parts = urlsplit(ADMIN_URL)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=requires_pg)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Yield the database of one test on each backend: a SQLite file, then a fresh PostgreSQL
    database URL (skipped with the reason when no server answers)."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    else:
        with pg_database() as url:
            yield url
