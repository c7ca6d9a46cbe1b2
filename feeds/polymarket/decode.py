"""Fast, pure decoder of Polymarket CLOB market-channel frames into order books and prices.

Frames are one JSON object or a JSON array of events; numbers are strings. The decoder keeps one
book per subscribed token, built from a ``book`` snapshot and kept up to date by
``price_change`` deltas (``size`` is the new total at a level, ``"0"`` removes it, ``BUY`` is the
bid side). Deltas for a token whose snapshot has not arrived (after :meth:`reset`, i.e. after
every (re)subscription) are dropped.

Top of book: the ``best_bid`` / ``best_ask`` the server sends with every ``price_change`` entry
and in ``best_bid_ask`` events are authoritative when present; otherwise the best levels of our
book (the snapshot's level order is ignored: bids arrive ascending and asks descending, the
decoder takes max/min itself). A best bid of 0 or a best ask of 1 means that side is empty.

Mark (``mark="mid"``, the default): mid of best bid and best ask; with one side empty, the other
side's best price; with both empty, the last trade price; none at all -> no price. With
``mark="last"``: the last trade price, falling back to the mid rule before the first trade;
``mark="bid"``: the best bid, falling back to the mid rule when there is no bid.

A :class:`~daemon.core.events.PriceEvent` is emitted per token at the end of a frame when its
(mark, bid, ask) changed, and after every snapshot. ``ts`` is the event's ``timestamp`` (ms) in
seconds, ``recv_ts`` the receive time.

Garbage never becomes a price: an event whose ``timestamp`` does not parse (or is not a positive
finite number) is dropped as a decode error, never stamped with the receive time; so is a level or
trade with a non-finite or non-positive price (or above 1), a negative or non-finite size, and a
``best_bid`` / ``best_ask`` outside [0, 1]. A crossed top of book (best bid above best ask) is
never published: the frame is counted as rejected and the last published top stays.

Non-JSON frames ``PONG`` and ``NO NEW ASSETS`` are ignored; other undecodable frames count as
decode errors; the legacy ``price_change`` shape (top-level ``asset_id`` + ``changes``) is
rejected; unknown event types are counted and ignored.

Why one module over 500 lines: the decoder keeps every token's book and emits the marks from it;
splitting the book from the frames that update it would expose its invariants (levels, top of book)
across modules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import msgspec

from daemon.core.events import Event, PriceEvent
from daemon.core.price_columns import AssetTable, PriceColumns
from feeds.polymarket.price_frames import (
    NO_HINT,
    FastChange,
    Hints,
    apply_price_changes,
    price_change_events,
)
from feeds.source_contract import DecodeResult

__all__ = [
    "IGNORED_TEXT",
    "Change",
    "Level",
    "MarkMode",
    "PolymarketDecoder",
    "TokenBook",
    "WsEvent",
]

MarkMode = Literal["mid", "last", "bid"]

#: Non-JSON text frames the server sends that are not errors.
IGNORED_TEXT: frozenset[str] = frozenset({"PONG", "NO NEW ASSETS"})


class Level(msgspec.Struct, gc=False):
    """One price level of a ``book`` snapshot."""

    price: str
    size: str


class Change(msgspec.Struct, gc=False):
    """One entry of a ``price_change`` event."""

    asset_id: str = ""
    price: str = ""
    size: str = ""
    side: str = ""
    best_bid: str = ""
    best_ask: str = ""


class WsEvent(msgspec.Struct, gc=False):
    """Any market-channel event (the union of the fields we read; the rest is skipped)."""

    event_type: str = ""
    asset_id: str = ""
    market: str = ""
    timestamp: str = ""
    bids: list[Level] | None = None
    asks: list[Level] | None = None
    price_changes: list[Change] | None = None
    changes: Any = None
    price: str = ""
    best_bid: str = ""
    best_ask: str = ""
    last_trade_price: str = ""
    tick_size: str = ""
    new_tick_size: str = ""
    assets_ids: list[str] | None = None
    winning_asset_id: str = ""
    winning_outcome: str = ""
    id: str = ""


_INF = math.inf
_NAN = math.nan
_FRAME = msgspec.json.Decoder(WsEvent | list[WsEvent])
_ANY = msgspec.json.Decoder()

#: Called for ``market_resolved`` events: (event, ts) -> event to publish, if any.
ResolvedHook = Callable[[WsEvent, float], Event | None]

#: No token is fresh (a frame without a ``book`` snapshot).
_NONE_FRESH: frozenset[str] = frozenset()


def _append_columns(prices: PriceColumns, now: float, flat: list[float]) -> None:
    """Append a frame's tops, ``flat`` rows of (index, ts, mark, bid, ask), to ``prices``
    (``array.fromlist`` sizes each array once: 3-6x faster than ``extend``, which grows it item
    by item; a row is one ``list.extend`` of a tuple, not five appends)."""
    prices.a.fromlist(flat[0::5])  # type: ignore[arg-type]  # the indices are ints
    prices.ts.fromlist(flat[1::5])
    prices.recv_ts.fromlist([now] * (len(flat) // 5))
    prices.price.fromlist(flat[2::5])
    prices.bid.fromlist(flat[3::5])
    prices.ask.fromlist(flat[4::5])


class TokenBook:
    """Order book of one token: price -> size per side, plus the last top of book published."""

    __slots__ = ("ask", "asks", "bid", "bids", "hint_ask", "hint_bid", "idx", "pub_ask", "pub_bid",
                 "pub_mark", "ts")

    def __init__(self, idx: int = 0) -> None:
        """Create an empty book of the token at ``idx`` in the decoder's asset table."""
        self.idx = idx
        self.bids: dict[float, float] = {}
        self.asks: dict[float, float] = {}
        self.bid: float | None = None
        self.ask: float | None = None
        self.hint_bid = NO_HINT
        self.hint_ask = NO_HINT
        """The general path's best bid / ask of the frame, parsed and checked once
        (:data:`~feeds.polymarket.price_frames.NO_HINT`: absent)."""
        self.pub_mark = _NAN
        self.pub_bid: float | None = None
        self.pub_ask: float | None = None
        """The last (mark, bid, ask) published (mark NaN: none yet; no tuple made per top)."""
        self.ts = 0.0
        """The ts of the last update of the frame (read by the tops)."""

    def sorted_bids(self) -> list[tuple[float, float]]:
        """Return bid levels, best (highest) first."""
        return sorted(self.bids.items(), reverse=True)

    def sorted_asks(self) -> list[tuple[float, float]]:
        """Return ask levels, best (lowest) first."""
        return sorted(self.asks.items())


def _coerce(obj: Any) -> Any:
    """Turn JSON numbers into strings, recursively (for servers that send numbers)."""
    if isinstance(obj, dict):
        return {k: _coerce(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_coerce(v) for v in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return str(obj)
    return obj


def _ts(raw: str) -> float | None:
    """Return a ms-epoch string in seconds, or None unless it is a positive finite number."""
    try:
        ms = float(raw)
    except ValueError:
        return None
    return ms / 1000.0 if 0.0 < ms < math.inf else None


def _price(raw: str) -> float | None:
    """Return a price in (0, 1], or None for anything else (NaN, inf, <= 0, > 1, text)."""
    try:
        p = float(raw)
    except ValueError:
        return None
    return p if 0.0 < p <= 1.0 else None


def _size(raw: str) -> float | None:
    """Return a size >= 0, or None for anything else (negative, NaN, inf, text)."""
    try:
        s = float(raw)
    except ValueError:
        return None
    return s if 0.0 <= s < math.inf else None


def _hint_ok(raw: str) -> bool:
    """Return whether a best_bid / best_ask hint is absent or a price in [0, 1]."""
    if not raw:
        return True
    try:
        return 0.0 <= float(raw) <= 1.0
    except ValueError:
        return False


def _levels(levels: list[Level] | None, res: DecodeResult) -> dict[float, float]:
    """Return price -> size of the valid, non-empty levels; count each invalid one."""
    out: dict[float, float] = {}
    for lv in levels or ():
        price, size = _price(lv.price), _size(lv.size)
        if price is None or size is None:
            res.decode_errors += 1
        elif size > 0:
            out[price] = size
    return out


class PolymarketDecoder:
    """Decode market-channel frames, maintain books and emit PriceEvents on mark changes."""

    def __init__(
        self,
        *,
        mark: MarkMode = "mid",
        source: str = "polymarket",
        on_resolved: ResolvedHook | None = None,
    ) -> None:
        """Create a decoder with no subscribed token."""
        if mark not in ("mid", "last", "bid"):
            raise ValueError(f"mark must be 'mid', 'last' or 'bid', got {mark!r}")
        self.mark = mark
        self.source = source
        self.on_resolved = on_resolved
        self.books: dict[str, TokenBook] = {}
        self.assets = AssetTable()
        """Every token this decoder has priced, each with its index (columns name them so)."""
        self.subscribed: set[str] = set()
        self.last_trade: dict[str, float] = {}
        self.tick_size: dict[str, float] = {}
        self.dropped_deltas = 0
        self.ignored_text = 0

    # ----------------------------------------------------------------------------- state

    def reset(self, tokens: Iterable[str]) -> None:
        """Subscribe ``tokens`` and discard their books: deltas are dropped until a snapshot."""
        for t in tokens:
            self.subscribed.add(t)
            self.books.pop(t, None)

    def forget(self, tokens: Iterable[str]) -> None:
        """Stop tracking ``tokens``."""
        for t in tokens:
            self.subscribed.discard(t)
            self.books.pop(t, None)
            self.last_trade.pop(t, None)
            self.tick_size.pop(t, None)

    def top(self, token: str) -> tuple[float | None, float | None, float | None]:
        """Return (best bid, best ask, mark) of ``token`` (None where unknown)."""
        book = self.books.get(token)
        if book is None:
            return None, None, None
        return book.bid, book.ask, self._mark(book.bid, book.ask, self.last_trade.get(token))

    def _mark(self, bid: float | None, ask: float | None, last: float | None) -> float | None:
        if self.mark != "mid":
            if self.mark == "last" and last is not None:
                return last
            if self.mark == "bid" and bid is not None:
                return bid
        if bid is not None:
            return (bid + ask) / 2.0 if ask is not None else bid
        if ask is not None:
            return ask
        return last

    # ----------------------------------------------------------------------------- decoding

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one frame received at ``now`` into events and counts."""
        return self.decode_columns(frame, now, None)

    def price_columns(self) -> PriceColumns:
        """Return empty columns for this decoder's prices."""
        return PriceColumns("polymarket", self.source, self.assets)

    def decode_columns(self, frame: str | bytes, now: float, prices: PriceColumns | None
                       ) -> DecodeResult:
        """Decode one frame received at ``now``: its prices appended to ``prices`` (as
        :meth:`decode` would emit them, in the same order), everything else in the result
        (``prices`` None: prices as events in the result, :meth:`decode`)."""
        res = DecodeResult()
        if not frame:
            res.decode_errors = 1
            return res
        first = frame[:1]
        if first not in ("{", "[", b"{", b"["):
            text = frame.decode(errors="replace") if isinstance(frame, bytes) else frame
            text = text.strip()
            if text in IGNORED_TEXT:
                self.ignored_text += 1
                return res
            if not text.startswith(("{", "[")):
                res.decode_errors = 1
                return res
        fast = price_change_events(frame)
        if fast is not None:  # the commonest frame: price changes only, numbers checked in C
            last: dict[str, FastChange] = {}
            dropped = apply_price_changes(fast, self.books, last)
            if dropped:
                self.dropped_deltas += dropped
            if last:
                flat = self._tops(last, _NONE_FRESH, res)
                if flat:
                    self._put(flat, now, res, prices)
                res.data_keys = list(last)
            return res
        try:
            obj = _FRAME.decode(frame)
            events: list[WsEvent] = obj if isinstance(obj, list) else [obj]
        except msgspec.ValidationError:
            events = self._slow_events(frame, res)
        except msgspec.DecodeError:
            res.decode_errors = 1
            return res
        touched: dict[str, float] = {}
        data: dict[str, None] = {}
        fresh: set[str] = set()
        for ev in events:
            et = ev.event_type
            if et == "price_change":
                self._price_change(ev, now, res, touched, data)
            elif et == "book":
                self._book(ev, now, res, touched, data, fresh)
            elif et == "last_trade_price":
                self._last_trade(ev, now, res, touched, data)
            elif et == "best_bid_ask":
                self._best_bid_ask(ev, res, touched, data)
            elif et == "tick_size_change":
                tok = ev.asset_id
                if tok in self.subscribed:
                    tick = _price(ev.new_tick_size)
                    if tick is None:
                        res.decode_errors += 1
                        continue
                    self.tick_size[tok] = tick
                    data[tok] = None
            elif et == "market_resolved":
                ts = _ts(ev.timestamp)
                if ts is None:
                    res.decode_errors += 1
                elif self.on_resolved is not None:
                    out = self.on_resolved(ev, ts)
                    if out is not None:
                        res.events.append(out)
            elif et == "new_market":
                continue
            else:
                res.unknown += 1
        if touched:
            flat = self._tops(self._hints(touched), fresh, res)
            if flat:
                self._put(flat, now, res, prices)
        if data:
            res.data_keys = list(data)
        return res

    def _slow_events(self, frame: str | bytes, res: DecodeResult) -> list[WsEvent]:
        """Decode a frame whose fields have unexpected types, event by event."""
        try:
            raw = _ANY.decode(frame)
        except msgspec.DecodeError:
            res.decode_errors += 1
            return []
        items = raw if isinstance(raw, list) else [raw]
        out: list[WsEvent] = []
        for item in items:
            if not isinstance(item, dict):
                res.decode_errors += 1
                continue
            try:
                out.append(msgspec.convert(_coerce(item), WsEvent))
            except msgspec.ValidationError:
                res.decode_errors += 1
        return out

    def _price_change(
        self,
        ev: WsEvent,
        now: float,
        res: DecodeResult,
        touched: dict[str, float],
        data: dict[str, None],
    ) -> None:
        pcs = ev.price_changes
        if pcs is None:
            res.rejected += 1  # legacy shape (asset_id + changes) or malformed
            return
        ts = _ts(ev.timestamp)
        if ts is None:
            res.decode_errors += 1
            return
        books = self.books
        dropped = 0
        for c in pcs:  # hot path: the checks of _price, _size and _hint_ok, inline
            tok = c.asset_id
            book = books.get(tok)
            if book is None:
                dropped += 1
                continue
            try:
                price = float(c.price)
                size = float(c.size)
                hb = float(c.best_bid) if c.best_bid else NO_HINT
                ha = float(c.best_ask) if c.best_ask else NO_HINT
            except ValueError:
                res.decode_errors += 1
                continue
            if not (0.0 < price <= 1.0 and 0.0 <= size < _INF
                    and (hb is NO_HINT or 0.0 <= hb <= 1.0)
                    and (ha is NO_HINT or 0.0 <= ha <= 1.0)):
                res.decode_errors += 1
                continue
            side = c.side
            if side == "BUY":
                levels = book.bids
            elif side == "SELL":
                levels = book.asks
            else:
                res.rejected += 1
                continue
            if size > 0.0:
                levels[price] = size
            else:
                levels.pop(price, None)
            book.hint_bid = hb
            book.hint_ask = ha
            touched[tok] = ts
            data[tok] = None
        if dropped:
            self.dropped_deltas += dropped

    def _book(
        self,
        ev: WsEvent,
        now: float,
        res: DecodeResult,
        touched: dict[str, float],
        data: dict[str, None],
        fresh: set[str],
    ) -> None:
        tok = ev.asset_id
        if tok not in self.subscribed:
            return
        ts = _ts(ev.timestamp)
        if ts is None:
            res.decode_errors += 1
            return
        book = TokenBook(self.assets.add(tok))
        book.bids = _levels(ev.bids, res)
        book.asks = _levels(ev.asks, res)
        old = self.books.get(tok)
        if old is not None:
            book.pub_mark, book.pub_bid, book.pub_ask = old.pub_mark, old.pub_bid, old.pub_ask
        self.books[tok] = book
        last = _price(ev.last_trade_price) if ev.last_trade_price else None
        if last is not None:
            self.last_trade[tok] = last
        tick = _price(ev.tick_size) if ev.tick_size else None
        if tick is not None:
            self.tick_size[tok] = tick
        touched[tok] = ts
        data[tok] = None
        fresh.add(tok)

    def _last_trade(
        self,
        ev: WsEvent,
        now: float,
        res: DecodeResult,
        touched: dict[str, float],
        data: dict[str, None],
    ) -> None:
        tok = ev.asset_id
        if tok not in self.subscribed:
            return
        price, ts = _price(ev.price), _ts(ev.timestamp)
        if price is None or ts is None:
            res.decode_errors += 1
            return
        self.last_trade[tok] = price
        data[tok] = None
        if tok in self.books:
            touched[tok] = ts

    def _best_bid_ask(
        self, ev: WsEvent, res: DecodeResult, touched: dict[str, float], data: dict[str, None]
    ) -> None:
        book = self.books.get(ev.asset_id)
        if book is None:
            if ev.asset_id in self.subscribed:
                self.dropped_deltas += 1
            return
        ts = _ts(ev.timestamp)
        if ts is None or not (_hint_ok(ev.best_bid) and _hint_ok(ev.best_ask)):
            res.decode_errors += 1
            return
        book.hint_bid = float(ev.best_bid) if ev.best_bid else NO_HINT
        book.hint_ask = float(ev.best_ask) if ev.best_ask else NO_HINT
        touched[ev.asset_id] = ts
        data[ev.asset_id] = None

    def _hints(self, touched: dict[str, float]) -> dict[str, Hints]:
        """Return the hints of each token the general path touched that has a book (its ts
        stored in the book), and clear them from the book."""
        books = self.books
        out: dict[str, Hints] = {}
        for tok, ts in touched.items():
            book = books.get(tok)
            if book is None:
                continue
            book.ts = ts
            out[tok] = Hints(book.hint_bid, book.hint_ask)
            book.hint_bid = book.hint_ask = NO_HINT
        return out

    def _tops(self, last: Mapping[str, Hints | FastChange], fresh: set[str] | frozenset[str],
              res: DecodeResult) -> list[float]:
        """Return flat rows (index, ts, mark, bid, ask; NaN: no bid / ask) of each token in
        ``last`` (whose value names the token's hints) whose top changed, or that is ``fresh``;
        count each crossed top as rejected and leave the last published top as it was."""
        flat: list[float] = []
        put = flat.extend
        books = self.books
        last_trade = self.last_trade
        mid = self.mark == "mid"
        rejected = 0
        for tok, c in last.items():
            book = books[tok]
            hb = c.best_bid
            ha = c.best_ask
            if mid and 0.0 < hb <= ha < 1.0:
                # The commonest top: both sides sent (NO_HINT is NaN: false), neither empty, not
                # crossed; its mid is a function of the two, so they tell whether it changed.
                book.bid = hb
                book.ask = ha
                if hb == book.pub_bid and ha == book.pub_ask and tok not in fresh:
                    continue
                mark = (hb + ha) / 2.0
                book.pub_mark = mark
                book.pub_bid = hb
                book.pub_ask = ha
                put((book.idx, book.ts, mark, hb, ha))
                continue
            bid: float | None
            ask: float | None
            if hb is NO_HINT:
                bid = max(book.bids) if book.bids else None
            else:
                bid = hb if hb > 0.0 else None
            if ha is NO_HINT:
                ask = min(book.asks) if book.asks else None
            else:
                ask = ha if ha < 1.0 else None
            if bid is not None and ask is not None and bid > ask:
                rejected += 1  # crossed: never published; the last published top stays
                continue
            book.bid = bid
            book.ask = ask
            m = self._mark(bid, ask, last_trade.get(tok))
            if m is None:
                continue
            if m == book.pub_mark and bid == book.pub_bid and ask == book.pub_ask and (
                    tok not in fresh):
                continue
            book.pub_mark = m
            book.pub_bid = bid
            book.pub_ask = ask
            put((book.idx, book.ts, m, _NAN if bid is None else bid,
                 _NAN if ask is None else ask))
        if rejected:
            res.rejected += rejected
        return flat

    def _put(self, flat: list[float], now: float, res: DecodeResult,
             prices: PriceColumns | None) -> None:
        """Append the rows of :meth:`_tops` to ``prices`` (None: as events to the result)."""
        if prices is not None:
            _append_columns(prices, now, flat)
            return
        source = self.source
        names = self.assets.names
        res.events.extend(
            PriceEvent(ts=flat[i + 1], recv_ts=now, market="polymarket",
                       asset=names[int(flat[i])], price=flat[i + 2],
                       bid=None if flat[i + 3] != flat[i + 3] else flat[i + 3],
                       ask=None if flat[i + 4] != flat[i + 4] else flat[i + 4], source=source)
            for i in range(0, len(flat), 5))
