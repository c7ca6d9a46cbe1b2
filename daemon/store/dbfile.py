"""Check a database path before it is opened: one line per reason, and nothing is touched.

``paperarena run``, ``replay`` and ``report`` call :func:`inspect_database` first, so a text
file, a directory, a path under a file, another application's SQLite file or a database of a
newer paperarena is refused with one line, byte-identical, with no lock, ``-wal`` or ``-shm``
file created beside it. :func:`check_writable` refuses, before anything is created, a
database that cannot be written (a read-only file, directory, sidecar file or file system).
:func:`connect_readonly` opens a database for reading only, also on a read-only file system.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"


class StoreOpenError(RuntimeError):
    """The database cannot be opened (the message is one line, starting with its path)."""


class StoreLockedError(StoreOpenError):
    """Another daemon already holds this database (or this scope of a shared one)."""


class StoreSchemaError(StoreOpenError):
    """The database was written by a newer paperarena."""


def inspect_database(path: str, *, create: bool, schema_version: int) -> int:
    """Return the schema version of the paperarena database at ``path`` (0: new or empty).

    ``create``: a missing path or an empty file is a database to create (else it is refused).
    Raise :class:`StoreOpenError` (one line) for anything that is not a paperarena database of
    at most ``schema_version``; read only, so the file is never modified.
    """
    p = Path(path)
    if p.is_dir():
        raise StoreOpenError(f"{path}: is a directory, not a database file")
    if not p.exists():
        ancestor = next((a for a in p.parents if a.exists()), None)
        if ancestor is not None and not ancestor.is_dir():
            raise StoreOpenError(f"{path}: cannot be created: {ancestor} is not a directory")
        if not create:
            raise StoreOpenError(f"{path}: no such database")
        return 0
    if not p.is_file():
        raise StoreOpenError(f"{path}: not a regular file")
    try:
        with p.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreOpenError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not head:
        if not create:
            raise StoreOpenError(f"{path}: empty file, not a paperarena database")
        return 0
    if head != SQLITE_MAGIC:
        raise StoreOpenError(f"{path}: not a SQLite database")
    try:
        con = connect_readonly(path)
        try:
            rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            tables = {r[0] for r in rows}
            row = (con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                   if "meta" in tables else None)
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise StoreOpenError(describe_sqlite_error(path, exc)) from None
    if tables and "meta" not in tables:
        raise StoreOpenError(f"{path}: not a paperarena database (it holds other tables)")
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        raise StoreOpenError(f"{path}: not a paperarena database (bad schema_version)") from None
    if version > schema_version:
        raise StoreSchemaError(
            f"{path}: has schema v{version}, newer than this paperarena (v{schema_version});"
            " use the paperarena that wrote it"
        )
    return version


#: Files SQLite and paperarena keep beside a database (all must be writable to write it).
SIDECARS = ("-wal", "-shm", "-journal", ".lock")


def check_writable(path: str) -> None:
    """Refuse (one line) a database that cannot be written, before anything is created.

    The database file, its directory (or, for a new one, the nearest existing ancestor) and
    any ``-wal``, ``-shm``, ``-journal`` or ``.lock`` file beside it must be writable, on a
    writable file system. Checked first, so a refused open leaves the directory untouched
    (SQLite would otherwise leave ``-shm`` / ``-wal`` behind on a read-only database).
    Anything that is neither a file nor missing is left to :func:`inspect_database`.
    """
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_file():
        return
    where = real.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        return  # inspect_database names the file in the way
    names = [real] + [real.with_name(real.name + s) for s in SIDECARS]
    if _read_only_fs(where):
        reason = os.strerror(errno.EROFS)
    elif not os.access(where, os.W_OK | os.X_OK):
        reason = f"directory {where} is not writable"
    else:
        bad = next((n for n in names if n.exists() and not os.access(n, os.W_OK)), None)
        if bad is None:
            return
        reason = f"{bad.name} is not writable" if bad != real else "the file is not writable"
    raise StoreOpenError(f"{path}: read-only ({reason}); paperarena must write its database: "
                         "give it a writable file and directory")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """Open ``path`` for reading only; on a read-only file system, as an immutable file.

    A WAL database needs its ``-shm`` file; where it cannot be created (read-only directory or
    file system) no process can be writing the database either, so it is read as immutable.
    """
    uri = Path(path).resolve().as_uri()
    try:
        return _probe(sqlite3.connect(f"{uri}?mode=ro", uri=True))
    except sqlite3.OperationalError as exc:
        if "unable to open" not in str(exc) and "readonly" not in str(exc):
            raise
    return _probe(sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True))


def _probe(con: sqlite3.Connection) -> sqlite3.Connection:
    """Return ``con`` once a first read worked (SQLite opens files lazily); else close it."""
    try:
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except BaseException:
        con.close()
        raise
    return con


def describe_sqlite_error(path: str, exc: BaseException) -> str:
    """Return one line saying why SQLite could not open or write ``path``."""
    msg = " ".join(str(exc).split())
    low = msg.lower()
    if "not a database" in low or "malformed" in low:
        return f"{path}: not a SQLite database ({msg})"
    if "readonly" in low or "read-only" in low:
        return (f"{path}: read-only ({msg}); paperarena must write its database: give it a "
                "writable file and directory")
    if "locked" in low or "busy" in low:
        return f"{path}: locked by another process ({msg}); stop it or use another --db"
    if "unable to open" in low:
        return f"{path}: cannot open ({msg}); check the path and its permissions"
    return f"{path}: {msg}"
