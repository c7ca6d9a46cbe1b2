"""Live prices stored one row per burst: the format, its encoder and the readers' expansion.

A live source's burst (the frames one socket read handed over, :mod:`feeds.frame_batch`) is
stored as one ``market_events`` row of kind :data:`BURST_KIND` instead of a row per price: the
per-row insert cost SQLite more than decoding the frames did. The row's ``market`` is the burst's
market, ``ts`` its earliest price time and ``recv_ts`` its latest receive time (so a reader can
skip bursts wholly after a mark by SQL), ``asset``, ``price``, ``bid`` and ``ask`` are NULL, and
``payload`` holds the ticks as JSON columns (:class:`Burst`): every field of every price, exact
(shortest round-trip floats), in arrival order; assets by index into the burst's own list.

Replays keep a row per price (with its recording offset, ``seq``). Readers of prices use
:data:`PRICE_KINDS` and :func:`expand_price_rows`, which turns either kind into one row per
price, in stored order.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "BURST_FIELDS",
    "BURST_KIND",
    "PRICE_KINDS",
    "Burst",
    "burst_row",
    "burst_ticks",
    "expand_price_rows",
]

#: ``market_events.kind`` of a burst row.
BURST_KIND: Final[str] = "prices"
#: SQL list of the kinds that hold marking prices: a row per price, or a burst of them.
PRICE_KINDS: Final[str] = "('price', 'prices')"
#: Length of a buffered burst row: (events, ts, recv_ts, market, payload).
BURST_FIELDS: Final[int] = 5


class Burst(msgspec.Struct, gc=False):
    """The ticks of one burst, as columns (``payload`` of a :data:`BURST_KIND` row)."""

    assets: list[str]
    """The burst's distinct assets, in order of first appearance."""
    a: list[int]
    """Per price: its asset's index into :attr:`assets`."""
    ts: list[float]
    recv_ts: list[float]
    price: list[float]
    bid: list[float | None]
    ask: list[float | None]


_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(Burst)
_FIELDS = operator.attrgetter("asset", "ts", "recv_ts", "price", "bid", "ask")


def burst_row(market: str, events: Sequence[Any]) -> tuple[int, float, float, str, str]:
    """Return the buffered row of live ``events`` (plain prices of ``market``, in order):
    (events, earliest ts, latest recv_ts, market, payload)."""
    assets, ts, recv, price, bid, ask = zip(*map(_FIELDS, events), strict=True)
    names = list(dict.fromkeys(assets))
    pos = {a: i for i, a in enumerate(names)}
    burst = Burst(names, list(map(pos.__getitem__, assets)), list(ts), list(recv), list(price),
                  list(bid), list(ask))
    return (len(events), min(ts), max(recv), market, _ENCODE.encode(burst).decode())


def burst_ticks(payload: str | bytes) -> Iterator[tuple[str, float, float, float, float | None,
                                                        float | None]]:
    """Yield (asset, ts, recv_ts, price, bid, ask) of each price of a burst, in order."""
    b = _DECODE.decode(payload)
    names = b.assets
    return zip(map(names.__getitem__, b.a), b.ts, b.recv_ts, b.price, b.bid, b.ask,
               strict=True)


def expand_price_rows(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """Yield (market, asset, ts, recv_ts, price, bid, ask) per price of ``rows``, in order.

    ``rows``: (kind, market, asset, ts, recv_ts, price, bid, ask, payload) of ``market_events``
    rows whose kind is in :data:`PRICE_KINDS`.
    """
    for kind, market, asset, ts, recv_ts, price, bid, ask, payload in rows:
        if kind == BURST_KIND:
            for tick in burst_ticks(payload):
                yield (market, *tick)
        else:
            yield market, asset, ts, recv_ts, price, bid, ask
