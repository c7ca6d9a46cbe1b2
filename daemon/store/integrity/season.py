"""A season in the store: its frozen lineup, checked at every start and reload, and amendments.

Table ``season`` (schema v13) holds one ``start`` row (the name, when it was frozen: the clock of
the run that froze it, simulated in a replay; the lineup as canonical JSON and its SHA-256) and
one ``amendment`` row per accepted change (its date, the new lineup, and the dotted paths that
changed), each chained (schema v17: ``verify`` names an edited, deleted or reordered one). The
current lineup is the last row's. A store belongs to at most one season: a new
season starts clean books in a new store (:func:`open_season` refuses any other).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from daemon.store.dbfile import StoreOpenError

__all__ = ["SeasonError", "diff_paths", "open_season", "read_season", "season_lines",
           "store_season"]

_READ = "SELECT name, kind, ts, lineup_sha256, changes_json FROM season ORDER BY id"


class SeasonError(StoreOpenError):
    """A start or reload the season refuses (one line; a start reports it as a store it cannot
    open)."""


def _canonical(lineup: Mapping[str, Any]) -> str:
    return json.dumps(lineup, sort_keys=True, separators=(",", ":"), allow_nan=False)


def diff_paths(old: Any, new: Any, path: str = "") -> list[str]:
    """Return the dotted paths where two lineups differ (lists compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += diff_paths(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if old == new else [path or "lineup"]


def _day(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _changes_text(paths: list[str], limit: int = 6) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


async def open_season(store: Any, db: str, name: str | None, lineup: Mapping[str, Any], *,
                      amendments: str, ts: float, record: bool = True) -> str | None:
    """Check ``lineup`` against the season of ``store`` (a :class:`daemon.store.store.Store`).

    With no season stored: ``name`` freezes ``lineup`` (refused if the store already holds
    decisions: a season's books start clean); no ``name`` leaves the store without one. With a
    season stored: another ``name`` (or none) is refused; a changed lineup is refused, or with
    ``amendments == "allow"`` recorded at ``ts``. Return a line describing what was recorded
    (None if nothing); raise :class:`SeasonError` with one line otherwise. ``record=False``
    checks only (a reload checks before it applies anything, and records once applied).
    """
    rows = await store.fetchall(
        "SELECT name, kind, ts, lineup_json FROM season ORDER BY id DESC LIMIT 1")
    first = await store.fetchall("SELECT name FROM season ORDER BY id LIMIT 1")
    text = _canonical(lineup)
    sha = hashlib.sha256(text.encode()).hexdigest()
    if not rows:
        if name is None:
            return None
        held = await store.fetchall("SELECT COUNT(*) FROM decisions")
        if held and held[0][0]:
            raise SeasonError(
                f"{db} already holds {held[0][0]} decisions outside any season: a season "
                f"starts clean books, so start season {name!r} with a new --db")
        if not record:
            return None
        await store.record_season((name, "start", ts, text, sha, None))
        return f"season {name!r} started: lineup frozen (sha256 {sha[:12]})"
    stored = str(first[0][0])
    if name != stored:
        which = "no [season] name" if name is None else f"season {name!r}"
        raise SeasonError(
            f"{db} holds season {stored!r}, not {which}: a new season starts clean books, "
            f"so use a new --db (or set [season] name = {stored!r})")
    changed = diff_paths(json.loads(rows[0][3]), json.loads(text))
    if not changed:
        return None
    if amendments != "allow":
        raise SeasonError(
            f"{db}: season {stored!r}: the lineup is frozen and {_changes_text(changed)} "
            "changed; restore it, or set [season] amendments = \"allow\" to record an "
            "amendment")
    if not record:
        return None
    await store.record_season((stored, "amendment", ts, text, sha, json.dumps(changed)))
    return (f"season {stored!r}: amendment recorded {_day(ts)}: {_changes_text(changed)} "
            f"(lineup sha256 {sha[:12]})")


def read_season(con: sqlite3.Connection) -> dict[str, Any] | None:
    """Return the season of a store open for reading (None if it has none, or is older)."""
    try:
        rows = con.execute(_READ).fetchall()
    except sqlite3.OperationalError:
        return None  # a store older than schema v13
    return _season(rows)


async def store_season(store: Any) -> dict[str, Any] | None:
    """Return the season of an open :class:`daemon.store.store.Store` (None if it has none,
    or is a store older than schema v13 that ``paperarena serve`` reads without migrating)."""
    try:
        rows = await store.fetchall(_READ)
    except sqlite3.Error:  # PostgreSQL's errors are raised as sqlite3.OperationalError too
        return None
    return _season(rows)


def _season(rows: Sequence[Sequence[Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    name, _, started, sha, _ = rows[0]
    return {
        "name": name, "started_ts": started, "started": _day(started), "lineup_sha256": sha,
        "current_lineup_sha256": rows[-1][3],
        "amendments": [{"ts": ts, "date": _day(ts), "lineup_sha256": s,
                        "changes": json.loads(ch or "[]")}
                       for _, kind, ts, s, ch in rows[1:] if kind == "amendment"],
    }


def season_lines(season: Mapping[str, Any] | None) -> list[str]:
    """Return the report's lines about ``season`` (none for a store without one)."""
    if season is None:
        return []
    lines = [f"season {season['name']}: lineup frozen {season['started']} (sha256 "
             f"{season['lineup_sha256'][:12]}); "
             + (f"{len(season['amendments'])} amendment(s)" if season["amendments"]
                else "no amendments")]
    lines += [f"  amendment {a['date']}: {_changes_text(a['changes'])} (lineup sha256 "
              f"{a['lineup_sha256'][:12]})" for a in season["amendments"]]
    return lines
