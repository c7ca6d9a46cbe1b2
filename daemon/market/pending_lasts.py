"""The latest price of each asset of one market, kept as arrays until someone reads history.

Within one day, a burst of prices can only change each asset's latest (time, price): the
market state records them here by asset-table index (:class:`~daemon.core.price_columns.AssetTable`)
with one vectorised assignment per burst, and turns them into the per-asset history objects
(:meth:`PendingLasts.settle`) only when history is read (a decision round, a checkpoint), a
day ends, or a price comes another way. Settling gives the same history as visiting every
price in order.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np

from daemon.core.price_columns import AssetTable

__all__ = ["PendingLasts", "book_columns"]


class PendingLasts:
    """Latest (time, price) per asset-table index of one market and day, not yet in history."""

    __slots__ = ("day", "dirty", "price", "table", "ts")

    def __init__(self, table: AssetTable, day: str) -> None:
        """Start recording prices of ``table``'s assets on ``day``."""
        self.table = table
        self.day = day
        n = max(len(table.names), 16)
        self.ts = np.zeros(n)
        self.price = np.zeros(n)
        self.dirty = np.zeros(n, dtype=bool)

    def record(self, idx: np.ndarray, ts: np.ndarray, price: np.ndarray) -> None:
        """Record the latest price of each index of ``idx`` (unique)."""
        n = len(self.table.names)
        if n > len(self.ts):
            grow = max(n, 2 * len(self.ts)) - len(self.ts)
            self.ts = np.concatenate((self.ts, np.zeros(grow)))
            self.price = np.concatenate((self.price, np.zeros(grow)))
            self.dirty = np.concatenate((self.dirty, np.zeros(grow, dtype=bool)))
        self.ts[idx] = ts
        self.price[idx] = price
        self.dirty[idx] = True

    def settle(self, hists: MutableMapping[str, Any], new: Callable[[], Any],
               close: Callable[[tuple[float, float]], Any]) -> None:
        """Apply the recorded prices to ``hists`` (asset -> history with ``day``, ``last``,
        ``first`` and ``closes``), as visiting them in order would: a history of another day
        closes that day first (``close`` makes the close of its last price)."""
        idx = np.flatnonzero(self.dirty)
        if not len(idx):
            return
        names = self.table.names
        day = self.day
        for k, t, p in zip(idx.tolist(), self.ts[idx].tolist(), self.price[idx].tolist(),
                           strict=True):
            asset = names[k]
            hist = hists.get(asset)
            if hist is None:
                hist = hists[asset] = new()
            if day != hist.day:
                if hist.last is not None:
                    hist.closes.append(close(hist.last))
                hist.day = day
                hist.first = None
            hist.last = (t, p)
        self.dirty[idx] = False


def book_columns(table: AssetTable, columns: dict[str, int] | Any,
                 cached: np.ndarray | None) -> np.ndarray:
    """Return each table index's book column (-1: not in the book), reusing ``cached`` when
    neither the table nor the book's columns grew since (both only ever grow)."""
    n = len(table.names)
    if cached is not None and len(cached) == n + 1 and cached[n] == len(columns):
        return cached
    out = np.empty(n + 1, dtype=np.intp)
    get = columns.get
    out[:n] = [get(a, -1) for a in table.names]
    out[n] = len(columns)  # the size of the book's mapping it was built from
    return out
