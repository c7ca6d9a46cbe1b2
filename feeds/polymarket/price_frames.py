"""The fast path of the market channel's commonest frame: ``price_change`` events only.

Such a frame is decoded into typed Structs with numbers parsed once, in C (msgspec's lax mode
reads ``"0.45"`` as a float; fields the decoder does not read, such as ``hash`` and ``market``,
are skipped), and applied to the books in one loop that keeps each touched token's last valid
entry (its ``best_bid`` / ``best_ask`` are the top the decoder then takes: no hint is copied to the
book, no tuple is made per entry). Anything else takes the general path of
:class:`~feeds.polymarket.decode.PolymarketDecoder`, unchanged: a frame holding another event
type, and any field msgspec does not parse as its type (``"abc"``, ``""``, JSON ``null``, an
out-of-range number), so per-entry error counts stay as that path counts them. The checks are
the general path's: a price outside (0, 1] (NaN included), a negative or non-finite size, a hint
outside [0, 1] or a timestamp that is not a positive finite number are decode errors, an
unknown side is rejected, a token without a book is a dropped delta; a crossed top of book is
refused later, when the top is taken (:meth:`PolymarketDecoder._tops`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import msgspec

from feeds.source_contract import DecodeResult

__all__ = ["NO_HINT", "FastChange", "FastEvent", "apply_price_changes", "price_change_events"]

_INF = math.inf
_NAN = math.nan

#: The default of a missing ``best_bid`` / ``best_ask``: this very float object (told apart by
#: identity, ``is``; a number msgspec parses is always a new object). It lies in [0, 1], so one
#: range check per entry covers a missing hint and a sent one alike.
NO_HINT = float("0.5")


class BookLevels(Protocol):
    """What the fast path updates of a book (:class:`~feeds.polymarket.decode.TokenBook`)."""

    bids: dict[float, float]
    asks: dict[float, float]
    ts: float


class FastChange(msgspec.Struct, gc=False):
    """One ``price_changes`` entry, numbers parsed (a missing price or size is NaN: refused)."""

    asset_id: str = ""
    price: float = _NAN
    size: float = _NAN
    side: str = ""
    best_bid: float = NO_HINT
    best_ask: float = NO_HINT


class FastEvent(msgspec.Struct, gc=False):
    """A market-channel event as the fast path reads it (only ``price_change`` is applied)."""

    event_type: str = ""
    timestamp: float = _NAN
    price_changes: list[FastChange] | None = None


_FAST = msgspec.json.Decoder(FastEvent | list[FastEvent], strict=False)


def price_change_events(frame: str | bytes) -> list[FastEvent] | None:
    """Return the frame's events if it holds ``price_change`` events only, each field of its
    type; None: the frame takes the general path."""
    try:
        obj = _FAST.decode(frame)
    except msgspec.DecodeError:  # ValidationError included: the general path counts it
        return None
    events = obj if isinstance(obj, list) else [obj]
    for ev in events:
        if ev.event_type != "price_change":
            return None
    return events


def apply_price_changes(events: list[FastEvent], books: Mapping[str, BookLevels], res: DecodeResult,
                        touched: dict[str, FastChange]) -> int:
    """Apply ``events`` to ``books``; record each touched token's last valid entry in ``touched``
    (in the order tokens were first touched) and its event's ts in its book's ``ts``, count errors
    and rejections in ``res``; return the number of deltas dropped (token without a book)."""
    dropped = 0
    errors = 0
    rejected = 0
    get = books.get
    for ev in events:
        pcs = ev.price_changes
        if pcs is None:
            rejected += 1  # legacy shape (asset_id + changes) or malformed
            continue
        ms = ev.timestamp
        if not 0.0 < ms < _INF:
            errors += 1
            continue
        ts = ms / 1000.0
        for c in pcs:
            tok = c.asset_id
            book = get(tok)
            if book is None:
                dropped += 1
                continue
            price = c.price
            size = c.size
            if not (0.0 < price <= 1.0 and 0.0 <= size < _INF and 0.0 <= c.best_bid <= 1.0
                    and 0.0 <= c.best_ask <= 1.0):
                errors += 1
                continue
            side = c.side
            if side == "BUY":
                levels = book.bids
            elif side == "SELL":
                levels = book.asks
            else:
                rejected += 1
                continue
            if size > 0.0:
                levels[price] = size
            else:
                levels.pop(price, None)
            book.ts = ts
            touched[tok] = c
    if errors:
        res.decode_errors += errors
    if rejected:
        res.rejected += rejected
    return dropped
