"""``paperarena backup`` and ``paperarena export``: copies and tables out of a (live) database.

Backup uses SQLite's online backup API in a single step: it reads one consistent snapshot under
a read transaction, which WAL mode lets run beside the daemon's writer (writes go on; the copy
holds exactly the transactions committed when it started). It never takes the daemon's
``<db>.lock`` file lock, so it works while the daemon runs. The copy is written next to its
destination, switched to ``journal_mode=DELETE`` (one self-contained file), checked with
``PRAGMA integrity_check`` and renamed into place atomically.

Restore: stop the daemon, copy the backup over the database (removing stale ``-wal``/``-shm``
files), start the daemon (see docs/operations.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daemon.core.sparse_rows import DECISIONS, FILLS, fill_json

EXPORTS: dict[str, str] = {
    "decisions": (
        "SELECT agent, market, scheduled_ts, decided_ts, outcome, reason, allocation_json,"
        " raw_output, input_sha256, template_version, attempts, duration_s, run_id"
        " FROM decisions ORDER BY scheduled_ts, market, agent"
    ),
    "fills": (
        "SELECT agent, market, scheduled_ts, ts, trades_json, traded_value, cost, value_before,"
        " value_after, weights_json FROM fills ORDER BY scheduled_ts, market, agent"
    ),
    "equity": (
        "SELECT agent, market, ts, kind, value, cash FROM equity ORDER BY ts, market, agent, kind"
    ),
}
_TIME_COLUMNS = ("scheduled_ts", "decided_ts", "ts")

#: Since v11 fills and allocations name assets by index into an asset list: the exports with
#: that list (``assets_json``), the columns mapped back to asset ids, and the column that
#: tells the store has it.
_BY_INDEX: dict[str, tuple[str, tuple[str, ...], tuple[str, str]]] = {
    "fills": (
        "SELECT f.agent, f.market, f.scheduled_ts, f.ts, f.trades_json, f.traded_value, f.cost,"
        f" f.value_before, f.value_after, f.weights_json, s.assets_json FROM {FILLS}"
        " ORDER BY f.scheduled_ts, f.market, f.agent",
        ("trades_json", "weights_json"), ("fills", "assets_sha256")),
    "decisions": (
        "SELECT d.agent, d.market, d.scheduled_ts, d.decided_ts, d.outcome, d.reason,"
        " d.allocation_json, d.raw_output, d.input_sha256, d.template_version, d.attempts,"
        f" d.duration_s, d.run_id, s.assets_json FROM {DECISIONS}"
        " ORDER BY d.scheduled_ts, d.market, d.agent",
        ("allocation_json",), ("observations", "assets_sha256")),
}


class BackupError(Exception):
    """The backup or export cannot be made; the message is one line."""


def _connect_existing(db: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open ``db`` without creating it and without any paperarena lock."""
    path = Path(db)
    if not path.is_file():
        raise BackupError(f"{db}: no such database")
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=30.0)
        con.execute("PRAGMA busy_timeout=30000")
        con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{db}: cannot open database: {exc}") from None
    return con


def _give_back(db: str | os.PathLike[str]) -> None:
    """Hand ``-wal``/``-shm`` files this (root) process created back to the database's owner.

    Opening a WAL database creates them when the daemon is stopped; left owned by root they
    would make the database read-only for the service's (dynamic) user.
    """
    if os.geteuid() != 0:
        return
    try:
        st = os.stat(db)
    except OSError:
        return
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            side = os.stat(f"{db}{suffix}")
            if (side.st_uid, side.st_gid) != (st.st_uid, st.st_gid):
                os.chown(f"{db}{suffix}", st.st_uid, st.st_gid)


def _has_column(con: sqlite3.Connection, table: str, column: str) -> bool:
    return any(r[1] == column for r in con.execute(f"PRAGMA table_info({table})"))


def _counts(con: sqlite3.Connection) -> dict[str, int]:
    names = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]
    return {n: int(con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]) for n in names}


def backup(db: str | os.PathLike[str], out: str | os.PathLike[str], *, verify: bool = True
           ) -> dict[str, Any]:
    """Copy ``db`` to ``out`` consistently (the daemon may be running); return a summary."""
    src_path, out_path = Path(db), Path(out)
    if out_path.exists() and src_path.exists() and out_path.resolve() == src_path.resolve():
        raise BackupError(f"{out}: the backup must not overwrite the database itself")
    if out_path.is_dir():
        raise BackupError(f"{out}: is a directory; give a file name")
    if not out_path.parent.is_dir():
        raise BackupError(f"{out_path.parent}: no such directory")
    t0 = time.monotonic()
    src = _connect_existing(db)
    tmp = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst, pages=-1)  # one step: one consistent snapshot, writers not blocked
            dst.execute("PRAGMA journal_mode=DELETE")
            integrity = (dst.execute("PRAGMA integrity_check").fetchone()[0] if verify
                         else "skipped")
            if verify and integrity != "ok":
                raise BackupError(f"{out}: integrity check of the copy failed: {integrity}")
            tables = _counts(dst)
            version = dst.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        finally:
            dst.close()
        os.replace(tmp, out_path)
    except sqlite3.Error as exc:
        raise BackupError(f"backup of {db} failed: {exc}") from None
    except OSError as exc:
        raise BackupError(f"{out}: {exc.strerror or exc}") from None
    finally:
        src.close()
        _give_back(db)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return {
        "db": str(db),
        "out": str(out_path),
        "bytes": out_path.stat().st_size,
        "schema_version": int(version[0]) if version else None,
        "integrity": integrity,
        "tables": tables,
        "seconds": round(time.monotonic() - t0, 3),
    }


def export(db: str | os.PathLike[str], out_dir: str | os.PathLike[str], fmt: str = "csv",
           what: Sequence[str] = ("decisions", "fills", "equity")) -> list[Path]:
    """Write ``what`` tables of ``db`` to ``out_dir`` as CSV or Parquet; return the files."""
    if fmt not in ("csv", "parquet"):
        raise BackupError(f"unknown format {fmt!r}: use csv or parquet")
    unknown = [w for w in what if w not in EXPORTS]
    if unknown or not what:
        raise BackupError(f"cannot export {', '.join(unknown) or 'nothing'}: "
                          f"choose from {', '.join(EXPORTS)}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise BackupError("parquet export needs pyarrow: pip install pyarrow (or use --format csv)")
    import pandas as pd

    con = _connect_existing(db)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        con.close()
        _give_back(db)
        raise BackupError(f"{out}: {exc.strerror or exc}") from None
    paths: list[Path] = []
    try:
        con.execute("BEGIN")  # one snapshot for every table
        for name in dict.fromkeys(what):
            by_index = _BY_INDEX.get(name)
            if by_index is not None and _has_column(con, *by_index[2]):
                df = pd.read_sql_query(by_index[0], con)
                for col in by_index[1]:
                    df[col] = [fill_json(v, a if isinstance(a, str) else None)
                               if isinstance(v, str) else v  # NULL: pandas gives NaN
                               for v, a in zip(df[col], df["assets_json"], strict=True)]
                df = df.drop(columns="assets_json")
            else:
                df = pd.read_sql_query(EXPORTS[name], con)
            for col in _TIME_COLUMNS:
                if col in df.columns:
                    df[col.removesuffix("_ts") + "_time" if col != "ts" else "time"] = (
                        pd.to_datetime(df[col], unit="s", utc=True))
            path = out / f"{name}.{fmt}"
            if fmt == "csv":
                df.to_csv(path, index=False)
            else:
                df.to_parquet(path, index=False)
            paths.append(path)
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        raise BackupError(f"export of {db} failed: {exc}") from None
    finally:
        con.close()
        _give_back(db)
    return paths
