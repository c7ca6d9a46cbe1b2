"""Every config a store ran with, in time order: each run's as it started, each reload's.

A run stores its config in its ``runs`` row (``config_json``) when it starts; a SIGHUP reload
that applied a new config stores it in ``config_reloads`` (schema v17) at the moment it was
applied. The readers that take an agent's label, kind or settings from "the configs the store
ran with" (the report, the page, the protocols' scores) read both through :func:`run_configs`
(or :data:`CONFIGS_SQL` through an async ``fetch``), later configs overriding earlier ones.
Runs are ordered by their start (ties by id), a reload at its time, after the run it was
applied in (the order a PostgreSQL snapshot keeps: it renumbers the runs by their start).
A store older than v17 has no ``config_reloads``: its runs' configs only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["CONFIGS_SQL", "RUNS_SQL", "fetch_run_configs", "run_configs"]

#: Every stored config (``config_json``), in time order (runs and reloads).
CONFIGS_SQL = ("SELECT config_json FROM (SELECT started_ts AS ts, 0 AS k, id, config_json"
               " FROM runs UNION ALL SELECT ts, 1 AS k, id, config_json FROM config_reloads)"
               " AS c ORDER BY ts, k, id")
#: The runs' configs only (a store older than schema v17), in start order.
RUNS_SQL = "SELECT config_json FROM runs ORDER BY started_ts, id"


def run_configs(con: sqlite3.Connection) -> list[str]:
    """Return the ``config_json`` of every config the store of ``con`` ran with, in order."""
    has = con.execute("SELECT 1 FROM sqlite_master WHERE type='table'"
                      " AND name='config_reloads'").fetchone()
    return [str(r[0]) for r in con.execute(CONFIGS_SQL if has else RUNS_SQL)]


async def fetch_run_configs(fetch: Callable[..., Awaitable[list[tuple[Any, ...]]]]
                            ) -> list[str]:
    """Return :func:`run_configs` read through ``fetch(sql)`` (a store's ``fetchall``)."""
    try:
        rows = await fetch(CONFIGS_SQL)
    except Exception:  # a store older than schema v17 (served read-only)
        rows = await fetch(RUNS_SQL)
    return [str(r[0]) for r in rows]
