"""Fill a round at the session's opening prices (``[markets.equity.schedule] fill_at``).

StockBench decides "at the market open" and converts dollars into shares at the opening price.
A round scheduled after the open with ``fill_at = "session_open"`` shows every stock at its
session opening price (the first regular-session price of the session, see
:meth:`daemon.market.state.MarketState.opening_prices`) and fills at it: :func:`at_prices` sets
the book to those prices for the snapshot and the rebalances, then puts the latest ones back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from agents.base import PricePoint
from scoring.ledger.ledger import Book


@contextmanager
def at_prices(book: Book, prices: Mapping[str, PricePoint] | None) -> Iterator[None]:
    """Price ``book`` at ``prices`` inside the block, then restore its prices and re-mark it
    (``None``: leave the book alone).

    The block must not yield to the event loop: a tick arriving inside it would be undone.
    """
    if prices is None:
        yield
        return
    index = {a: j for j, a in enumerate(book.assets)}
    old_p = book.prices.copy()
    old_t = book.price_times.copy()
    for asset, pp in sorted(prices.items()):
        book.set_price(asset, pp.price, pp.ts)
    try:
        yield
    finally:
        for asset in sorted(prices):
            j = index[asset]
            p, t = float(old_p[j]), float(old_t[j])
            if not (math.isnan(p) or math.isnan(t)):
                book.set_price(asset, p, t)
        book.mark()  # exact values again after the round trip of incremental marks


def missing_open_reason(missing: tuple[str, ...], shown: int = 10) -> str:
    """Return the one-line reason of a round skipped for want of opening prices."""
    names = ", ".join(missing[:shown])
    if len(missing) > shown:
        names += f", ... and {len(missing) - shown} more"
    return (f"no session opening price yet (fill_at = session_open: first regular-session "
            f"price since the NYSE open) for {len(missing)} asset(s): {names}")
