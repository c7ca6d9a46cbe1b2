"""The runs that wrote a bundle's store, as the replay takes them (issue 32).

Several live runs (a restart) are replayed one after the other into the same store
(:func:`forget_replay` lets each run's replay open what the one before left). Several replay
runs are the invocations of one ``paperarena replay`` stopped and run again on the same store:
a resumed replay ends as an uninterrupted one (:mod:`daemon.app.replay`), so they are replayed
as one run (:func:`merged_runs`), from the first one's start to the last one's stop, with the
config they share. A mix of live and replay runs, or replays with different configs, is
refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from daemon.app.replay import _META_COMPLETE, _META_CONFIG, _META_FINGERPRINT

__all__ = ["RunRow", "forget_replay", "merged_runs"]

#: A stored run as the replay reads it: (the ``runs`` ids it stands for, started_ts,
#: stopped_ts, mode, config_json).
RunRow = tuple[tuple[int, ...], float, float | None, str, str]


def merged_runs(rows: Sequence[Sequence[Any]]) -> tuple[list[RunRow], str | None]:
    """Return the runs to replay of the stored ``runs`` rows (id, started_ts, stopped_ts, mode,
    config_json; in id order): the live ones each as it is, replay runs sharing one config as
    one run; and why they cannot be replayed (None: they can)."""
    runs: list[RunRow] = [((int(r[0]),), float(r[1]), None if r[2] is None else float(r[2]),
                           str(r[3]), str(r[4])) for r in rows]
    if len(runs) < 2 or all(r[3] == "live" for r in runs):
        return runs, None
    modes = {r[3] for r in runs}
    if modes != {"replay"}:
        return runs, (f"the store was written by {len(runs)} runs of modes "
                      f"{', '.join(sorted(modes))}: live runs are replayed one after the "
                      "other and the runs of one resumed replay as one, never a mix")
    if len({r[4] for r in runs}) > 1:
        return runs, (f"the store was written by {len(runs)} replay runs with different "
                      "configs: only the runs of one resumed replay (one config) are replayed "
                      "as one")
    first, last = runs[0], runs[-1]
    return [(tuple(i for r in runs for i in r[0]), first[1], last[2], "replay", first[4])], None


def forget_replay(out: str) -> None:
    """Let the next run's replay open ``out``: it holds no finished replay, only the books
    and checkpoint the run before left."""
    con = sqlite3.connect(out)
    try:
        with con:
            con.execute(f"DELETE FROM meta WHERE key IN ('{_META_FINGERPRINT}', '{_META_CONFIG}',"
                        f" '{_META_COMPLETE}')")
    finally:
        con.close()
