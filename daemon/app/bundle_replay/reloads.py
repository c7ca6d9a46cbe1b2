"""The configs a live run took at a reload while running, and their replay (issue 32).

A reload (SIGHUP, :meth:`daemon.app.live.LiveDaemon.reload`) that applied a new config stores
it in ``config_reloads`` (schema v17: its run, the clock's time, the config as a run stores
it), after the season's amendment it made, at the same time. The replay applies each stored
reload inside its run at its time (:func:`apply_reload`): the replayed engine's own
:meth:`~daemon.engine.engine.Engine.reload` with the stored config, on the simulated clock at
the stored time, storing the config and the amendment in the replayed store as the live run
did. A season amendment that no run started with and no stored reload took (a store written
before v17) is refused (:func:`unmatched_amendment`). The replayed store's season (its name,
start and amendments: each lineup and what changed) must be the stored one
(:func:`first_season_difference`): an amendment deleted from a store, or a season renamed,
before its bundle was exported is named.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from daemon.config.settings import Config
from daemon.engine.engine import Engine

__all__ = ["StoredReload", "apply_reload", "first_season_difference", "stored_reloads",
           "unmatched_amendment"]

#: Seconds between a season's amendment and the start of the run that recorded it (a restart
#: records it just before its run row; a reload at the time it stores its config).
AT_START = 60.0


@dataclass(frozen=True, slots=True)
class StoredReload:
    """One stored reload: the run it was applied in, when, and the config it applied."""

    run: int
    ts: float
    config: Config


def stored_reloads(con: sqlite3.Connection, parse: Callable[[str, str], Config]
                   ) -> list[StoredReload]:
    """Return the stored reloads in order (none for a store before v17); ``parse(json,
    name)`` reads a stored config (raising one line)."""
    try:
        rows = con.execute("SELECT id, run_id, ts, config_json FROM config_reloads"
                           " ORDER BY run_id, ts, id").fetchall()
    except sqlite3.OperationalError:  # a store before schema v17
        return []
    return [StoredReload(int(run), float(ts), parse(text, f"the config of stored reload {rid}"))
            for rid, run, ts, text in rows]


def unmatched_amendment(con: sqlite3.Connection, starts: list[float],
                        reloads: list[float]) -> str | None:
    """Return why the season cannot be replayed when one of its amendments matches neither a
    run's start nor a stored reload (a reload before v17 stored no config; None: all do)."""
    try:
        stamps = [t for (t,) in con.execute("SELECT ts FROM season WHERE kind='amendment'"
                                            " ORDER BY id")]
    except sqlite3.OperationalError:  # a store from before seasons
        return None
    for ts in stamps:
        if not any(ts <= s <= ts + AT_START for s in [*starts, *reloads]):
            when = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            return (f"the config was reloaded while running ({when}, a season amendment) and "
                    "the store holds no config of that reload (a reload before schema v17 "
                    "stored none; or the row is gone): it cannot be replayed")
    return None


async def apply_reload(engine: Engine, clock: Any, reload: StoredReload, db: str) -> None:
    """Apply ``reload`` to the replayed ``engine`` with the clock at its time, and store its
    amendment (when the lineup changed) and its config as the live run did (``db``: the
    replayed store's name, for messages). ``clock``: the replay's clock (its ``at`` read while
    set, :class:`~daemon.app.bundle_replay.run.StoredTimesClock`)."""
    from daemon.config.season import lineup
    from daemon.store.integrity.season import open_season

    held, clock.at = clock.at, reload.ts
    try:
        new = reload.config
        await engine.reload(new)
        await open_season(engine.store, db, new.season.name, lineup(new),
                          amendments=new.season.amendments, ts=reload.ts)
        await engine.store.record_reload(reload.ts, new.model_dump(mode="json"))
    finally:
        clock.at = held


#: A season row as the replay rebuilds it (its time is the replayed clock's: left out).
_SEASON = "SELECT name, kind, lineup_sha256, changes_json FROM season ORDER BY id"


def first_season_difference(src: str, out: str) -> str | None:
    """Return the first row of the season of the replayed store ``out`` that is not the stored
    one of ``src`` (its name, kind, lineup and changes), in one line (None: all are)."""
    from daemon.store.dbfile import connect_readonly

    got: list[list[Any]] = []
    for db in (src, out):
        con = connect_readonly(db)
        try:
            got.append([tuple(r) for r in con.execute(_SEASON)])
        except sqlite3.OperationalError:  # a store from before seasons
            got.append([])
        finally:
            con.close()
    want, replayed = got
    for i in range(max(len(want), len(replayed))):
        a = want[i] if i < len(want) else None
        b = replayed[i] if i < len(replayed) else None
        if a != b:
            return (f"the replay's season row {i + 1} is not the stored one: the store holds "
                    f"{_season_row(a)}, the replay {_season_row(b)}")
    return None


def _season_row(row: tuple[Any, ...] | None) -> str:
    if row is None:
        return "none"
    name, kind, sha, changes = row
    return f"the {kind} of season {name!r} (lineup {str(sha)[:12]}, changes {changes or '-'})"
