"""The fast path of the market channel's commonest frame: ``price_change`` events only.

Such a frame is decoded into typed Structs whose numbers msgspec parses and checks once, in C
(lax mode reads ``"0.45"`` as a float; the constraints of :data:`Price`, :data:`Size`,
:data:`Hint` and :data:`Stamp` and the ``BUY`` / ``SELL`` literal are checked as it parses; fields
the decoder does not read, such as ``hash`` and ``market``, are skipped), and applied to the books
in one loop that keeps each touched token's last entry (its ``best_bid`` / ``best_ask`` are the
top the decoder then takes: no hint is copied to the book, no tuple is made per entry). Anything
else takes the general path of :class:`~feeds.polymarket.decode.PolymarketDecoder`, unchanged: a
frame holding another event type, and a frame with any field msgspec does not parse as its type
or that breaks its constraint (``"abc"``, ``""``, JSON ``null``, ``"NaN"``, a price outside
(0, 1], a negative or non-finite size, a hint outside [0, 1], a timestamp that is not a positive
finite number, an unknown side, a missing field), so each refusal is counted per entry as that
path counts it. A token without a book is a dropped delta; a crossed top of book is refused
later, when the top is taken (:meth:`PolymarketDecoder._tops`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Annotated, Literal, Protocol

import msgspec

__all__ = ["NO_HINT", "FastChange", "FastEvent", "Hint", "Hints", "Price", "Size", "Stamp",
           "apply_price_changes", "price_change_events"]

_MAX = sys.float_info.max

#: The default of a missing ``best_bid`` / ``best_ask``: this very NaN (told apart by identity,
#: ``is``; a sent hint is never NaN, :data:`Hint` refuses it). As NaN fails every comparison,
#: one chained range test on the two hints is false for a missing one too.
NO_HINT = float("nan")

#: A price level or trade price: in (0, 1] (NaN fails every comparison: refused).
Price = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
#: A size: >= 0 and finite (``inf`` is above the largest float: refused).
Size = Annotated[float, msgspec.Meta(ge=0.0, le=_MAX)]
#: A ``best_bid`` / ``best_ask`` hint: in [0, 1] (0: no bid, 1: no ask).
Hint = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
#: A ms-epoch timestamp: positive and finite.
Stamp = Annotated[float, msgspec.Meta(gt=0.0, le=_MAX)]


class BookLevels(Protocol):
    """What the fast path updates of a book (:class:`~feeds.polymarket.decode.TokenBook`)."""

    bids: dict[float, float]
    asks: dict[float, float]
    ts: float


class Hints(msgspec.Struct, gc=False):
    """The top a token's last update of a frame names (:data:`NO_HINT`: from the book)."""

    best_bid: float = NO_HINT
    best_ask: float = NO_HINT


class FastChange(msgspec.Struct, gc=False):
    """One ``price_changes`` entry, numbers parsed and checked (every field but the hints is
    required: a missing one sends the frame down the general path, which refuses it)."""

    asset_id: str
    price: Price
    size: Size
    side: Literal["BUY", "SELL"]
    best_bid: Hint = NO_HINT
    best_ask: Hint = NO_HINT


class FastEvent(msgspec.Struct, gc=False):
    """A ``price_change`` event as the fast path reads it (any other type fails to decode)."""

    event_type: Literal["price_change"]
    timestamp: Stamp
    price_changes: list[FastChange]


_FAST = msgspec.json.Decoder(FastEvent | list[FastEvent], strict=False)


def price_change_events(frame: str | bytes) -> list[FastEvent] | None:
    """Return the frame's events if it holds valid ``price_change`` events only; None: the
    frame takes the general path."""
    try:
        obj = _FAST.decode(frame)
    except msgspec.DecodeError:  # ValidationError included: the general path counts it
        return None
    return obj if isinstance(obj, list) else [obj]


def apply_price_changes(events: list[FastEvent], books: Mapping[str, BookLevels],
                        touched: dict[str, FastChange]) -> int:
    """Apply ``events`` to ``books``; record each touched token's last entry in ``touched`` (in
    the order tokens were first touched) and its event's ts in its book's ``ts``; return the
    number of deltas dropped (token without a book)."""
    dropped = 0
    get = books.get
    for ev in events:
        ts = ev.timestamp / 1000.0
        for c in ev.price_changes:
            tok = c.asset_id
            book = get(tok)
            if book is None:
                dropped += 1
                continue
            levels = book.bids if c.side == "BUY" else book.asks
            if c.size:  # > 0 (checked >= 0 as parsed; -0.0 is false too)
                levels[c.price] = c.size
            else:
                levels.pop(c.price, None)
            book.ts = ts
            touched[tok] = c
    return dropped
