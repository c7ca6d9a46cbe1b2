"""The market-event rows the store buffers and inserts: one per event, one per live burst.

A buffered row's length says what it is: a live price (7 fields: ts, recv_ts, market, asset,
price, bid, ask), a burst of live prices (:data:`~daemon.core.price_bursts.BURST_FIELDS`), a price
with its recording offset (8: seq first) or any other event (10, its JSON payload last).
:func:`insert_event_rows` writes each run of one kind with one statement, runs in arrival
order, so row ids follow arrival across kinds.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence, Set
from itertools import groupby
from typing import Any

from daemon.core.events import Event, NewsEvent, PriceEvent, encode_event
from daemon.core.price_bursts import BURST_FIELDS, BURST_KIND, burst_row
from daemon.store.integrity.chain import Chains, with_chains

__all__ = ["LIVE_PRICE_FIELDS", "event_row", "insert_event_rows", "price_rows"]

_LIVE_PRICE_ROW = operator.attrgetter("ts", "recv_ts", "market", "asset", "price", "bid", "ask")
#: Length of a buffered live price row.
LIVE_PRICE_FIELDS = 7


def event_row(ev: Event, seq: int | None) -> tuple[Any, ...]:
    """Return the buffered row of one market-data event (``seq``: its recording offset)."""
    if type(ev) is PriceEvent:
        if seq is None:
            return _LIVE_PRICE_ROW(ev)  # type: ignore[no-any-return]
        return (seq, ev.ts, ev.recv_ts, ev.market, ev.asset, ev.price, ev.bid, ev.ask)
    if isinstance(ev, PriceEvent):  # NonMarkingPrice: data with its asset, not a mark
        return (seq, ev.ts, ev.recv_ts, type(ev).__name__, ev.market, ev.asset, ev.price,
                ev.bid, ev.ask, encode_event(ev).decode())
    market = getattr(ev, "market", None)
    asset = (ev.id if isinstance(ev, NewsEvent)
             else getattr(ev, "asset", None) or getattr(ev, "question_id", None))
    return (seq, ev.ts, ev.recv_ts, type(ev).__name__, market, asset, None, None, None,
            encode_event(ev).decode())


def price_rows(events: Sequence[Event], seq: int | None) -> list[tuple[Any, ...]] | None:
    """Return the buffered rows of a batch of plain prices: live ones of one market as one
    burst, replayed ones a row each; None if the batch holds anything else."""
    first = events[0]
    if seq is None and type(first) is PriceEvent and all(
            type(ev) is PriceEvent and ev.market == first.market  # type: ignore[attr-defined]
            for ev in events):
        return [burst_row(first.market, events)]
    if all(type(ev) is PriceEvent for ev in events):
        return [(seq, ev.ts, ev.recv_ts, ev.market, ev.asset,  # type: ignore[attr-defined]
                 ev.price, ev.bid, ev.ask) for ev in events]  # type: ignore[attr-defined]
    return None


def _chained(chains: Chains, content: list[tuple[Any, ...]],
             params: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Return ``params`` each with the chain of its row (``content``: its ten columns)."""
    return with_chains(params, chains.link("market_events", content))


async def insert_event_rows(db: Any, rows: list[tuple[Any, ...]], written: Set[str],
                            chains: Chains) -> set[str]:
    """Insert buffered rows in arrival order (inside the caller's transaction): each run of
    one kind in one statement, so row ids follow arrival across kinds, each row chained to
    the one before (``chains``: the store's heads). A burst's asset-list versions not in
    ``written`` (stored by an earlier commit) go first; return their keys."""
    added: set[str] = set()
    if all(len(r) == BURST_FIELDS for r in rows):
        runs: Iterable[tuple[int, Iterable[tuple[Any, ...]]]] = ((BURST_FIELDS, rows),)
    else:
        # Rows spilled before live price rows lost their seq: (None, ts, ...).
        rows = [r[1:] if len(r) == 8 and r[0] is None else r for r in rows]
        runs = groupby(rows, key=len)
    for fields, run in runs:
        if fields == BURST_FIELDS:
            bursts = list(run)
            versions: dict[str, str] = {}
            for chain in {id(r[5]): r[5] for r in bursts}.values():
                for key, text in reversed(chain):  # the newest first, down to a stored one
                    if key in written or key in versions:
                        break
                    versions[key] = text
            if versions:  # the asset lists first: a burst names its list
                await db.executemany(
                    "INSERT INTO asset_sets(sha256, assets_json) VALUES(?,?)"
                    " ON CONFLICT(sha256) DO NOTHING", sorted(versions.items()))
                added.update(versions)
            params = [r[1:5] for r in bursts]
            await db.executemany(
                "INSERT INTO market_events(seq, ts, recv_ts, kind, market, payload, chain)"
                f" VALUES(NULL,?,?,'{BURST_KIND}',?,?,?)", _chained(chains, [
                    (None, r[0], r[1], BURST_KIND, r[2], None, None, None, None, r[3])
                    for r in params], params))
        elif fields == LIVE_PRICE_FIELDS:
            # Live rows have no seq: binding None goes through sqlite3's adapter lookup
            # (about 0.5 us a row on the writer thread, holding the GIL), a NULL literal
            # costs nothing.
            params = list(run)
            await db.executemany(
                "INSERT INTO market_events(seq, ts, recv_ts, kind, market, asset, price,"
                " bid, ask, chain) VALUES(NULL,?,?,'price',?,?,?,?,?,?)", _chained(chains, [
                    (None, r[0], r[1], "price", r[2], r[3], r[4], r[5], r[6], None)
                    for r in params], params))
        elif fields == 8:
            params = list(run)
            await db.executemany(
                "INSERT INTO market_events(seq, ts, recv_ts, kind, market, asset, price,"
                " bid, ask, chain) VALUES(?,?,?,'price',?,?,?,?,?,?)", _chained(chains, [
                    (r[0], r[1], r[2], "price", r[3], r[4], r[5], r[6], r[7], None)
                    for r in params], params))
        else:
            params = list(run)
            await db.executemany(
                "INSERT INTO market_events(seq, ts, recv_ts, kind, market, asset, price,"
                " bid, ask, payload, chain) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                _chained(chains, params, params))
    return added
