"""Price panels: the last price of every asset of a market at each daily mark, read from the
store's ``market_events`` (live price bursts merged by stored order, resolved tokens at their
payouts). Read by :mod:`scoring.board.load` for the leaderboard and by the page's charts; imports
only the store's price-row helpers (:mod:`daemon.core.price_bursts`) and numpy.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from daemon.core.price_bursts import (
    BURST_KIND,
    PRICE_COLUMNS,
    burst_key,
    expand_price_rows,
    read_asset_sets,
)

__all__ = ["_Panel", "_latest_by_mark", "_latest_in_order", "_load_panel"]

_second = itemgetter(1)


@dataclass
class _Panel:
    """Last price of every asset at each daily mark of one market (whole store)."""

    marks: np.ndarray
    assets: list[str]
    prices: np.ndarray
    index: dict[float, int] = field(default_factory=dict)

    def rows(self, ts: Sequence[float]) -> np.ndarray:
        """Return the price rows of the marks ``ts`` (each must be a mark of the panel)."""
        return self.prices[[self.index[t] for t in ts]] if len(ts) else self.prices[:0]


def _with_bursts(con: sqlite3.Connection, market: str, marks: list[float],
                 rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Return ``rows`` ((asset, mark, ts, price, id): the latest price of each asset up to each
    mark, the last stored among equal times) with the prices of live bursts
    (:mod:`daemon.core.price_bursts`) merged in by the same rule."""
    bursts = con.execute(
        f"SELECT id, {PRICE_COLUMNS} FROM market_events WHERE kind='{BURST_KIND}'"
        " AND market=? AND ts <= ? ORDER BY id", (market, marks[-1])).fetchall()
    if not bursts:
        return rows
    sets = read_asset_sets(con, sorted({burst_key(r[9]) for r in bursts}))
    # Order among equal times: (row id, position in the burst); a row of its own is position 0.
    best: dict[tuple[Any, Any], tuple[Any, ...]] = {(r[0], r[1]): (*r[:4], (r[4], 0))
                                                    for r in rows}
    hi = marks[-1]
    for row in bursts:
        for pos, (_, asset, ts, _, price, _, _) in enumerate(expand_price_rows([row[1:]], sets)):
            if ts > hi:
                continue
            upto = marks[bisect.bisect_left(marks, ts)]
            got = best.get((asset, upto))
            if got is None or (ts, (row[0], pos)) >= (got[2], got[4]):
                best[(asset, upto)] = (asset, upto, ts, price, (row[0], pos))
    return list(best.values())


def _latest_by_mark(rows: Sequence[tuple[Any, Any, Any, Any]], marks: Sequence[float]
                    ) -> list[tuple[Any, ...]]:
    """Return, per asset and mark, the latest of ``rows`` ((asset, ts, price, id), every ts at
    or before the last mark) bucketed at the first mark at or after it, the last stored (highest
    id) among equal times, as ``(asset, mark, ts, price, id)``, in no particular order.

    The selection the store's query made with a window function (``ROW_NUMBER() OVER
    (PARTITION BY asset, mark ORDER BY ts DESC, id DESC)``), one ``searchsorted`` for all rows.
    """
    if not rows:
        return []
    at = np.searchsorted(np.asarray(marks, dtype=float),
                         np.fromiter((r[1] for r in rows), dtype=float, count=len(rows)),
                         side="left").tolist()
    best: dict[tuple[Any, int], tuple[Any, ...]] = {}
    for (asset, ts, price, id_), i in zip(rows, at, strict=True):
        got = best.get((asset, i))
        if got is None or ts > got[2] or (ts == got[2] and id_ > got[4]):
            best[(asset, i)] = (asset, marks[i], ts, price, id_)
    return list(best.values())


def _latest_in_order(rows: Sequence[tuple[Any, Any, Any]], marks: Sequence[float]
                     ) -> list[tuple[Any, ...]]:
    """Return :func:`_latest_by_mark` of ``rows`` ((asset, ts, price) in stored order) without
    the ids, as ``(asset, mark, ts, price)``: the stored order breaks ties of time."""
    if not rows:
        return []
    at = np.searchsorted(np.asarray(marks, dtype=float),
                         np.fromiter(map(_second, rows), dtype=float, count=len(rows)),
                         side="left").tolist()
    best: dict[tuple[Any, int], tuple[Any, Any, Any]] = {}
    for row, i in zip(rows, at, strict=True):
        got = best.get((row[0], i))
        if got is None or row[1] >= got[1]:
            best[(row[0], i)] = row
    return [(asset, marks[i], ts, price) for (_, i), (asset, ts, price) in best.items()]


def _load_panel(con: sqlite3.Connection, market: str, marks: list[float],
                resolutions: list[tuple[float, dict[str, float]]]) -> _Panel:
    """Return the last price of every asset at each mark (one grouped scan of market_events)."""
    if not marks:
        return _Panel(np.empty(0), [], np.empty((0, 0)))
    # The last price of each asset before or at each mark: rows are bucketed by the first mark
    # at or after them, so a print after a mark (a closing auction, an after-hours trade) never
    # hides the price the mark used.
    rows: list[tuple[Any, ...]] = _latest_in_order(con.execute(
        "SELECT CASE kind WHEN 'price' THEN asset END, ts, price FROM market_events"
        f" WHERE kind IN ('price', '{BURST_KIND}')"
        " AND market=? AND ts <= ? ORDER BY id", (market, marks[-1])).fetchall(), marks)
    if any(r[0] is None for r in rows):  # a burst (its asset NULL): merged by stored order
        rows = _with_bursts(con, market, marks, _latest_by_mark(con.execute(
            "SELECT asset, ts, price, id FROM market_events WHERE kind='price' AND market=?"
            " AND ts <= ?", (market, marks[-1])).fetchall(), marks))
    rows.sort(key=lambda r: (r[2], r[0]))
    assets = sorted({r[0] for r in rows} | {a for _, p in resolutions for a in p})
    col = {a: j for j, a in enumerate(assets)}
    prices = np.full((len(marks), len(assets)), np.nan)
    last = np.full(len(assets), np.nan)
    payout: dict[int, float] = {}  # a resolved token stays at its payout; later ticks ignored
    i = r = 0
    for t, m in enumerate(marks):
        while i < len(rows) and rows[i][2] <= m:
            if rows[i][3] is not None:
                last[col[rows[i][0]]] = rows[i][3]
            i += 1
        while r < len(resolutions) and resolutions[r][0] <= m:
            payout.update({col[a]: x for a, x in resolutions[r][1].items()})
            r += 1
        for j, x in payout.items():
            last[j] = x
        prices[t] = last
    return _Panel(np.asarray(marks, dtype=float), assets, prices,
                  {m: t for t, m in enumerate(marks)})
