"""Live prices stored one row per burst: the format, its encoder and the readers' expansion.

A live source's burst (the frames one socket read handed over, :mod:`feeds.frame_batch`) is
stored as one ``market_events`` row of kind :data:`BURST_KIND` instead of a row per price: the
per-row insert cost SQLite more than decoding the frames did. The row's ``market`` is the burst's
market, ``ts`` its earliest price time and ``recv_ts`` its latest receive time (so a reader can
skip bursts wholly after a mark by SQL), ``asset``, ``price``, ``bid`` and ``ask`` are NULL, and
``payload`` holds the ticks (:class:`Burst`): a JSON object naming the asset list its prices index
into (``assets_sha256``, a key of ``asset_sets``: a version of the source's asset table, stored
as the names it adds to the version before it, :class:`~daemon.core.price_columns.AssetTable`,
written with the first burst that needs it), the number of prices (``n``) and ``ticks``, the
base64 of six little-endian columns of ``n`` values each, in arrival order: the asset's index
into that list (uint32), then ``ts``, ``recv_ts``, ``price``, ``bid`` and ``ask`` (float64,
exact; NaN for a missing bid or ask, which a stored price never has as a value). Binary columns
and a shared asset list cost a fraction of what JSON numbers and names did to write
(docs/benchmarks.md).

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

from daemon.core.price_columns import AssetSet, AssetTable

if TYPE_CHECKING:
    from daemon.core.price_columns import PriceColumns

#: A buffered burst row (see :data:`BURST_FIELDS`).
BurstRow = tuple[int, float, float, str, str, tuple[AssetSet, ...]]

__all__ = [
    "BURST_FIELDS",
    "BURST_KIND",
    "PRICE_COLUMNS",
    "PRICE_KINDS",
    "Burst",
    "DamagedBurstError",
    "burst_key",
    "burst_row",
    "burst_ticks",
    "columns_row",
    "expand_price_rows",
    "read_asset_sets",
    "read_prices",
    "read_prices_async",
    "resolve_asset_sets",
]

#: ``market_events.kind`` of a burst row.
BURST_KIND: Final[str] = "prices"
#: SQL list of the kinds that hold marking prices: a row per price, or a burst of them.
PRICE_KINDS: Final[str] = "('price', 'prices')"
#: Length of a buffered burst row: (events, ts, recv_ts, market, payload, the versions of the
#: asset list it indexes into, the oldest first, as (``asset_sets`` key, JSON) pairs).
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


def _row(market: str, chain: tuple[AssetSet, ...], idx: Sequence[int], ts: Sequence[float],
         recv: Sequence[float], price: Sequence[float], bid: Sequence[float | None],
         ask: Sequence[float | None]) -> BurstRow:
    n = len(idx)
    a = (np.frombuffer(idx, dtype=np.int64) if isinstance(idx, array)
         else np.array(idx, dtype=np.int64))
    t, r = _f8(ts), _f8(recv)
    ticks = b"".join((a.astype(_U4).tobytes(), t.tobytes(), r.tobytes(), _f8(price).tobytes(),
                      _f8(bid).tobytes(), _f8(ask).tobytes()))
    payload = _ENCODE.encode(Burst(chain[-1][0], n, base64.b64encode(ticks).decode())).decode()
    return (n, float(t.min()), float(r.max()), market, payload, chain)


def burst_row(market: str, events: Sequence[Any]) -> BurstRow:
    """Return the buffered row of live ``events`` (plain prices of ``market``, in order):
    (events, earliest ts, latest recv_ts, market, payload, the asset list's versions); the
    asset list is the burst's distinct assets."""
    assets, ts, recv, price, bid, ask = zip(*map(_FIELDS, events), strict=True)
    table = AssetTable()
    idx = list(map(table.add, assets))
    return _row(market, table.versions(), idx, ts, recv, price, bid, ask)


def columns_row(prices: PriceColumns) -> BurstRow:
    """Return the buffered row of a batch of live prices given as columns (as
    :func:`burst_row`; the asset list is the source's asset table as it is now)."""
    return _row(prices.market, prices.table.versions(), prices.a, prices.ts, prices.recv_ts,
                prices.price, prices.bid, prices.ask)


def _decoded(payload: str | bytes) -> Burst:
    """Return a burst's payload decoded (:class:`DamagedBurstError` if it is not a burst's)."""
    try:
        return _DECODE.decode(payload)
    except (msgspec.MsgspecError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:120]
        raise DamagedBurstError(f"a stored burst of prices cannot be read: {reason}") from None


def burst_key(payload: str | bytes) -> str:
    """Return the ``asset_sets`` key a burst's payload names (:class:`DamagedBurstError` if
    the payload is not a burst's)."""
    return _decoded(payload).assets_sha256


def burst_ticks(payload: str | bytes, assets: Sequence[str]
                ) -> Iterator[tuple[str, float, float, float, float | None, float | None]]:
    """Yield (asset, ts, recv_ts, price, bid, ask) of each price of a burst, in order;
    ``assets``: the asset list its payload names."""
    return _ticks(_decoded(payload), assets)


def _ticks(b: Burst, assets: Sequence[str]
           ) -> Iterator[tuple[str, float, float, float, float | None, float | None]]:
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


class DamagedBurstError(sqlite3.DatabaseError):
    """A stored burst of prices cannot be read: its payload or its asset list is damaged or
    missing (a damaged database: the readers' database-error handling reports it in one line)."""


def expand_price_rows(rows: Iterable[Sequence[Any]], sets: Mapping[str, Sequence[str]]
                      ) -> Iterator[Tick]:
    """Yield (market, asset, ts, recv_ts, price, bid, ask) per price of ``rows``, in order.

    ``rows``: :data:`PRICE_COLUMNS` of ``market_events`` rows whose kind is in
    :data:`PRICE_KINDS`; ``sets``: the asset lists their bursts name (``asset_sets``). A burst
    that cannot be read raises :class:`DamagedBurstError`.
    """
    for kind, market, asset, ts, recv_ts, price, bid, ask, payload in rows:
        if kind == BURST_KIND:
            try:
                burst = _decoded(payload)
                assets = sets.get(burst.assets_sha256)
                if assets is None:
                    raise DamagedBurstError(
                        f"a stored burst of {market} prices names asset list"
                        f" {burst.assets_sha256[:16]}..., which is not stored (asset_sets)")
                ticks = list(_ticks(burst, assets))
            except (ValueError, TypeError, IndexError, msgspec.MsgspecError) as exc:
                reason = " ".join(str(exc).split())[:120]
                raise DamagedBurstError(f"a stored burst of {market} prices cannot be read:"
                                        f" {reason}") from None
            for tick in ticks:
                yield (market, *tick)
        else:
            yield market, asset, ts, recv_ts, price, bid, ask


def _sets_sql(n: int) -> str:
    """Return the query of the ``asset_sets`` rows :func:`resolve_asset_sets` needs for ``n``
    keys: those keys and every table version (each names the one before it)."""
    return ("SELECT sha256, assets_json FROM asset_sets WHERE assets_json LIKE '{\"after\":%'"
            f" OR sha256 IN ({','.join('?' * n)})")


def resolve_asset_sets(texts: Mapping[str, str]) -> dict[str, Sequence[str]]:
    """Return every key's asset list from ``asset_sets`` texts: a JSON list as it is, a table
    version (``{"after": key, "assets": [...]}``) as its parent's list and the names it adds.
    Versions of one table share one list (a version's names are a prefix of its child's)."""
    delta: dict[str, tuple[str | None, list[str]]] = {}
    out: dict[str, Sequence[str]] = {}
    for key, text in texts.items():
        obj = json.loads(text)
        if isinstance(obj, dict):
            delta[key] = (obj.get("after"), list(obj.get("assets", ())))
        else:
            out[key] = obj
    shared: dict[str, tuple[list[str], int]] = {}  # key -> (the list it shares, its length)
    for key in delta:
        path = []
        k: str | None = key
        while k is not None and k in delta and k not in shared:
            path.append(k)
            k = delta[k][0]
        if k is not None and k not in shared:
            continue  # a version whose chain is not stored: no list (its bursts fail to read)
        names, n = shared[k] if k is not None else ([], 0)
        for v in reversed(path):
            if n != len(names):
                names = names[:n]  # a second child of one version: its own list from here
            names.extend(delta[v][1])
            n = len(names)
            shared[v] = (names, n)
    for key, (names, n) in shared.items():
        out[key] = names if n == len(names) else _Prefix(names, n)
    return out


class _Prefix(Sequence[str]):
    """The first ``n`` names of a longer list (an older version of a table), without a copy."""

    __slots__ = ("_n", "_names")

    def __init__(self, names: list[str], n: int) -> None:
        self._names, self._n = names, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return self._names[: self._n][i]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._names[i % self._n]


def _keys(rows: Sequence[Sequence[Any]]) -> list[str]:
    return sorted({burst_key(r[8]) for r in rows if r[0] == BURST_KIND})


def read_asset_sets(con: sqlite3.Connection, keys: Sequence[str]) -> dict[str, Sequence[str]]:
    """Return the asset list of each of ``keys`` (``asset_sets``, table versions resolved)."""
    keys = list(keys)
    return resolve_asset_sets(dict(con.execute(_sets_sql(len(keys)), keys))) if keys else {}


def read_prices(con: sqlite3.Connection, where: str, params: Sequence[Any] = ()
                ) -> list[Tick]:
    """Return every price of the ``market_events`` rows matching ``where`` (an SQL condition
    on them, beside the price kinds), in stored order."""
    rows = con.execute(f"SELECT {PRICE_COLUMNS} FROM market_events WHERE kind IN"
                       f" {PRICE_KINDS} AND ({where}) ORDER BY id", params).fetchall()
    return list(expand_price_rows(rows, read_asset_sets(con, _keys(rows))))


async def read_prices_async(fetchall: Callable[..., Awaitable[list[tuple[Any, ...]]]],
                            where: str, params: Sequence[Any] = ()) -> list[Tick]:
    """:func:`read_prices` through an async ``fetchall(sql, params)`` (the store's)."""
    rows = await fetchall(f"SELECT {PRICE_COLUMNS} FROM market_events WHERE kind IN"
                          f" {PRICE_KINDS} AND ({where}) ORDER BY id", tuple(params))
    keys = _keys(rows)
    sets = (resolve_asset_sets(dict(await fetchall(_sets_sql(len(keys)), tuple(keys))))
            if keys else {})
    return list(expand_price_rows(rows, sets))
