"""Live prices stored one row per burst: the format, its encoder and the readers' expansion.

A live source's burst (the frames one socket read handed over, :mod:`feeds.frame_batch`) is
stored as one ``market_events`` row of kind :data:`BURST_KIND` instead of a row per price: the
per-row insert cost SQLite more than decoding the frames did. The row's ``market`` is the burst's
market, ``ts`` its earliest price time and ``recv_ts`` its latest receive time (so a reader can
skip bursts wholly after a mark by SQL), ``asset``, ``price``, ``bid`` and ``ask`` are NULL, and
``payload`` holds the ticks (:class:`Burst`): a JSON object naming the asset list its prices index
into (``assets_sha256``, a key of ``asset_sets``: the source's asset table as it was, written
with the burst), the number of prices (``n``) and ``ticks``, the base64 of six little-endian
columns of ``n`` values each, in arrival order: the asset's index into that list (uint32), then
``ts``, ``recv_ts``, ``price``, ``bid`` and ``ask`` (float64, exact; NaN for a missing bid or
ask, which a stored price never has as a value). Binary columns and a shared asset list cost a
fraction of what JSON numbers and names did to write (docs/benchmarks.md).

Replays keep a row per price (with its recording offset, ``seq``). Readers of prices use
:func:`read_prices` (or :func:`read_prices_async`), which turns either kind into one row per
price, in stored order.
"""

from __future__ import annotations

import base64
import json
import operator
import sqlite3
from array import array
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
import numpy as np

from daemon.sparse_rows import asset_list

if TYPE_CHECKING:
    from daemon.price_columns import PriceColumns

__all__ = [
    "BURST_FIELDS",
    "BURST_KIND",
    "PRICE_COLUMNS",
    "PRICE_KINDS",
    "Burst",
    "burst_key",
    "burst_row",
    "burst_ticks",
    "columns_row",
    "expand_price_rows",
    "read_prices",
    "read_prices_async",
]

#: ``market_events.kind`` of a burst row.
BURST_KIND: Final[str] = "prices"
#: SQL list of the kinds that hold marking prices: a row per price, or a burst of them.
PRICE_KINDS: Final[str] = "('price', 'prices')"
#: Length of a buffered burst row: (events, ts, recv_ts, market, payload, (set key, set JSON)).
BURST_FIELDS: Final[int] = 6
#: The columns of ``market_events`` :func:`expand_price_rows` reads, in its order.
PRICE_COLUMNS: Final[str] = "kind, market, asset, ts, recv_ts, price, bid, ask, payload"

#: A price as readers get it: (market, asset, ts, recv_ts, price, bid, ask).
Tick = tuple[Any, str, float, float, float, float | None, float | None]


class Burst(msgspec.Struct, gc=False):
    """The ``payload`` of a :data:`BURST_KIND` row."""

    assets_sha256: str
    """The ``asset_sets`` key of the asset list the prices index into."""
    n: int
    """How many prices the burst holds."""
    ticks: str
    """Base64 of the columns: asset index (uint32), ts, recv_ts, price, bid, ask (float64), all
    little-endian, ``n`` values each; NaN: no bid or ask."""


_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(Burst)
_FIELDS = operator.attrgetter("asset", "ts", "recv_ts", "price", "bid", "ask")
_F8 = np.dtype("<f8")
_U4 = np.dtype("<u4")


def _f8(values: Sequence[float | None]) -> np.ndarray:
    """Return ``values`` as little-endian float64 (a typed array as it is; None: NaN)."""
    if isinstance(values, array):
        return np.frombuffer(values, dtype=np.float64).astype(_F8, copy=False)
    return np.array(values, dtype=_F8)


def _row(market: str, key: str, text: str, idx: Sequence[int], ts: Sequence[float],
         recv: Sequence[float], price: Sequence[float], bid: Sequence[float | None],
         ask: Sequence[float | None]) -> tuple[int, float, float, str, str, tuple[str, str]]:
    n = len(idx)
    a = (np.frombuffer(idx, dtype=np.int64) if isinstance(idx, array)
         else np.array(idx, dtype=np.int64))
    t, r = _f8(ts), _f8(recv)
    ticks = b"".join((a.astype(_U4).tobytes(), t.tobytes(), r.tobytes(), _f8(price).tobytes(),
                      _f8(bid).tobytes(), _f8(ask).tobytes()))
    payload = _ENCODE.encode(Burst(key, n, base64.b64encode(ticks).decode())).decode()
    return (n, float(t.min()), float(r.max()), market, payload, (key, text))


def burst_row(market: str, events: Sequence[Any]
              ) -> tuple[int, float, float, str, str, tuple[str, str]]:
    """Return the buffered row of live ``events`` (plain prices of ``market``, in order):
    (events, earliest ts, latest recv_ts, market, payload, (asset set key, its JSON)); the
    asset list is the burst's distinct assets."""
    assets, ts, recv, price, bid, ask = zip(*map(_FIELDS, events), strict=True)
    key, text, index = asset_list(list(dict.fromkeys(assets)))
    return _row(market, key, text, list(map(index.__getitem__, assets)), ts, recv, price, bid,
                ask)


def columns_row(prices: PriceColumns
                ) -> tuple[int, float, float, str, str, tuple[str, str]]:
    """Return the buffered row of a batch of live prices given as columns (as
    :func:`burst_row`; the asset list is the source's asset table as it is now)."""
    key, text = prices.table.version()
    return _row(prices.market, key, text, prices.a, prices.ts, prices.recv_ts, prices.price,
                prices.bid, prices.ask)


def burst_key(payload: str | bytes) -> str:
    """Return the ``asset_sets`` key a burst's payload names."""
    return _DECODE.decode(payload).assets_sha256


def burst_ticks(payload: str | bytes, assets: Sequence[str]
                ) -> Iterator[tuple[str, float, float, float, float | None, float | None]]:
    """Yield (asset, ts, recv_ts, price, bid, ask) of each price of a burst, in order;
    ``assets``: the asset list its payload names."""
    b = _DECODE.decode(payload)
    n = b.n
    raw = base64.b64decode(b.ticks, validate=True)
    if len(raw) != n * 44:
        raise ValueError(f"price burst: {len(raw)} bytes of ticks for {n} prices")
    idx = np.frombuffer(raw, dtype=_U4, count=n).tolist()
    cols = np.frombuffer(raw, dtype=_F8, offset=4 * n).reshape(5, n)
    ts, recv, price = cols[0].tolist(), cols[1].tolist(), cols[2].tolist()
    bid = [None if q != q else q for q in cols[3].tolist()]
    ask = [None if q != q else q for q in cols[4].tolist()]
    return zip(map(assets.__getitem__, idx), ts, recv, price, bid, ask, strict=True)


def expand_price_rows(rows: Iterable[Sequence[Any]], sets: Mapping[str, Sequence[str]]
                      ) -> Iterator[Tick]:
    """Yield (market, asset, ts, recv_ts, price, bid, ask) per price of ``rows``, in order.

    ``rows``: :data:`PRICE_COLUMNS` of ``market_events`` rows whose kind is in
    :data:`PRICE_KINDS`; ``sets``: the asset lists their bursts name (``asset_sets``).
    """
    for kind, market, asset, ts, recv_ts, price, bid, ask, payload in rows:
        if kind == BURST_KIND:
            for tick in burst_ticks(payload, sets[burst_key(payload)]):
                yield (market, *tick)
        else:
            yield market, asset, ts, recv_ts, price, bid, ask


def _sets_sql(n: int) -> str:
    return ("SELECT sha256, assets_json FROM asset_sets WHERE sha256 IN"
            f" ({','.join('?' * n)})")


def _keys(rows: Sequence[Sequence[Any]]) -> list[str]:
    return sorted({burst_key(r[8]) for r in rows if r[0] == BURST_KIND})


def read_prices(con: sqlite3.Connection, where: str, params: Sequence[Any] = ()
                ) -> list[Tick]:
    """Return every price of the ``market_events`` rows matching ``where`` (an SQL condition
    on them, beside the price kinds), in stored order."""
    rows = con.execute(f"SELECT {PRICE_COLUMNS} FROM market_events WHERE kind IN"
                       f" {PRICE_KINDS} AND ({where}) ORDER BY id", params).fetchall()
    keys = _keys(rows)
    sets = {k: json.loads(t) for k, t in con.execute(_sets_sql(len(keys)), keys)} if keys else {}
    return list(expand_price_rows(rows, sets))


async def read_prices_async(fetchall: Callable[..., Awaitable[list[tuple[Any, ...]]]],
                            where: str, params: Sequence[Any] = ()) -> list[Tick]:
    """:func:`read_prices` through an async ``fetchall(sql, params)`` (the store's)."""
    rows = await fetchall(f"SELECT {PRICE_COLUMNS} FROM market_events WHERE kind IN"
                          f" {PRICE_KINDS} AND ({where}) ORDER BY id", tuple(params))
    keys = _keys(rows)
    sets = ({k: json.loads(t) for k, t in await fetchall(_sets_sql(len(keys)), tuple(keys))}
            if keys else {})
    return list(expand_price_rows(rows, sets))
