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
_SEASON_COLUMNS = ("name", "kind", "lineup_sha256", "changes_json")
_SEASON = f"SELECT {', '.join(_SEASON_COLUMNS)} FROM season ORDER BY id"


def first_season_difference(src: str, out: str) -> str | None:
    """Return the first row of the season of the replayed store ``out`` that is not the stored
    one of ``src`` (its name, kind, lineup and changes), in one line (None: all are)."""
    from daemon.app.bundle_replay.rows import first_row_difference
    from daemon.store.dbfile import connect_readonly

    got: list[dict[int, tuple[Any, ...]]] = []
    for db in (src, out):
        con = connect_readonly(db)
        try:
            got.append({i: tuple(r) for i, r in enumerate(con.execute(_SEASON), 1)})
        except sqlite3.OperationalError:  # a store from before seasons
            got.append({})
        finally:
            con.close()
    want, replayed = got

    def what(i: int) -> str:
        name, kind, *_ = want.get(i) or replayed[i]
        return f"season row {i} (the {kind} of season {name!r})"

    return first_row_difference(want, replayed, _SEASON_COLUMNS,
                                range(1, max(len(want), len(replayed)) + 1), what,
                                lambda x, y: (x[:60], y[:60]))
