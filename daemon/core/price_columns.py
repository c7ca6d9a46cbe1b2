"""A burst of one market's prices as columns: what a columnar decoder fills and the bus carries.

A decoder that can (:class:`feeds.source_contract.ColumnDecoder`) appends each price it would have
published as a :class:`~daemon.core.events.PriceEvent` to a :class:`PriceColumns` instead, its asset
as an index into the source's :class:`AssetTable` (given when the asset is subscribed); the read
loop publishes the columns with :meth:`~daemon.core.bus.Bus.publish_columns`. Taps with a columns
variant (price cache and books, store, alert checks, the page's event stream, the MQTT bridge) read
the columns directly: no event object per price. Anything else (a recorder, a subscriber) gets the
same prices as :class:`PriceEvent` objects, made once per batch by :meth:`PriceColumns.events`,
equal to the events the decoder would have emitted.
"""

from __future__ import annotations

import hashlib
import json
from array import array

import numpy as np

from daemon.core.events import Market, PriceEvent

__all__ = ["AssetSet", "AssetTable", "PriceColumns"]

_INF = float("inf")
_NAN = float("nan")


#: One stored version of an asset table: (``asset_sets`` key, JSON text).
AssetSet = tuple[str, str]


class AssetTable:
    """The assets one source prices, each given an index once (append-only): a price names
    its asset by index, and a stored burst names the table's version.

    Versions form a chain: each is stored (an ``asset_sets`` row) as the names added since the
    one before, ``{"after": <its key or null>, "assets": [...]}``, so a table that grows a
    token at a time costs its names once, not once per version
    (:func:`daemon.core.price_bursts.resolve_asset_sets` rebuilds a version's list).
    """

    __slots__ = ("_chain", "_covered", "index", "names")

    def __init__(self) -> None:
        """Create an empty table."""
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self._chain: tuple[AssetSet, ...] = ()
        self._covered = 0

    def add(self, asset: str) -> int:
        """Return the index of ``asset``, giving it the next one if it has none."""
        i = self.index.get(asset)
        if i is None:
            i = self.index[asset] = len(self.names)
            self.names.append(asset)
        return i

    def versions(self) -> tuple[AssetSet, ...]:
        """Return the chain of versions up to the table as it is now, the oldest first (a
        new version only when names were added since the last one)."""
        n = len(self.names)
        if n != self._covered or not self._chain:
            parent = self._chain[-1][0] if self._chain else None
            text = json.dumps({"after": parent, "assets": self.names[self._covered:n]},
                              separators=(",", ":"), ensure_ascii=False)
            key = hashlib.sha256(text.encode()).hexdigest()
            self._chain = (*self._chain, (key, text))
            self._covered = n
        return self._chain


class PriceColumns:
    """Prices of one market and source, in arrival order, one typed array per field (a missing
    bid or ask is NaN: a quote is never NaN, the guard drops any batch whose price is). Arrays
    hold the numbers themselves, not float objects: readers take them as numpy views."""

    __slots__ = ("a", "ask", "bid", "market", "price", "recv_ts", "source", "table", "ts")

    def __init__(self, market: Market, source: str = "", table: AssetTable | None = None
                 ) -> None:
        """Create empty columns for ``market``'s prices from ``source``, their assets indices
        into ``table`` (a new one by default)."""
        self.market = market
        self.source = source
        self.table = AssetTable() if table is None else table
        self.a = array("q")
        """Per price: its asset's index into :attr:`table`."""
        self.ts = array("d")
        self.recv_ts = array("d")
        self.price = array("d")
        self.bid = array("d")
        self.ask = array("d")

    def __len__(self) -> int:
        return len(self.price)

    def append(self, asset: str, ts: float, recv_ts: float, price: float, bid: float | None,
               ask: float | None) -> None:
        """Add one price (what a :class:`PriceEvent` of these fields would say)."""
        self.a.append(self.table.add(asset))
        self.ts.append(ts)
        self.recv_ts.append(recv_ts)
        self.price.append(price)
        self.bid.append(_NAN if bid is None else bid)
        self.ask.append(_NAN if ask is None else ask)

    def assets(self) -> list[str]:
        """Return each price's asset, in order."""
        return list(map(self.table.names.__getitem__, self.a))

    def take(self, n: int | None = None) -> PriceColumns:
        """Remove the first ``n`` prices (all by default) and return them as new columns."""
        out = PriceColumns(self.market, self.source, self.table)
        if n is None or n >= len(self.price):
            out.a, self.a = self.a, array("q")
            out.ts, self.ts = self.ts, array("d")
            out.recv_ts, self.recv_ts = self.recv_ts, array("d")
            out.price, self.price = self.price, array("d")
            out.bid, self.bid = self.bid, array("d")
            out.ask, self.ask = self.ask, array("d")
            return out
        for name in ("a", "ts", "recv_ts", "price", "bid", "ask"):
            col = getattr(self, name)
            setattr(out, name, col[:n])
            del col[:n]
        return out

    def events(self) -> list[PriceEvent]:
        """Return the prices as events, in order."""
        market, source = self.market, self.source
        return [PriceEvent(ts=t, recv_ts=r, market=market, asset=a, price=p,
                           bid=None if b != b else b, ask=None if k != k else k, source=source)
                for a, t, r, p, b, k in zip(self.assets(), self.ts, self.recv_ts, self.price,
                                            self.bid, self.ask, strict=True)]

    def valid(self) -> bool:
        """Return whether every price is a finite number >= 0 and every bid and ask one or
        missing: the bus's guard, over the whole batch at once."""
        if not len(self.price):
            return True
        p = np.frombuffer(self.price, dtype=np.float64)
        if not (p.min() >= 0.0 and p.max() < _INF):  # NaN fails both
            return False
        for quotes in (self.bid, self.ask):
            q = np.frombuffer(quotes, dtype=np.float64)
            if (q < 0.0).any() or np.isinf(q).any():  # NaN: missing
                return False
        return True

