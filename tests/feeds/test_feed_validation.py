"""Garbage never becomes a price: decoders reject it, the bus guard keeps it out of every cache."""

from __future__ import annotations

import json
import math

import pytest

from daemon.core.bus import Bus
from daemon.core.events import Event, HistoryEvent, PriceEvent
from feeds.polymarket.decode import PolymarketDecoder
from feeds.yahoo import YahooSettings, YahooStreamAdapter
from tests.fakes.polymarket_server import FakePolymarket, change, price_change
from tests.fakes.yahoo_server import pricing_frame
from tests.feeds.test_polymarket import BOOK_Y1, Harness, add_q1, fake  # noqa: F401 - fixture
from tests.helpers import wait_for

NAN_CHANGE = {"asset_id": "T", "price": "NaN", "size": "5", "side": "BUY", "hash": "x"}


def _snapshot(dec: PolymarketDecoder) -> None:
    book = {
        "event_type": "book",
        "asset_id": "T",
        "timestamp": "1000",
        "bids": [{"price": "0.40", "size": "10"}],
        "asks": [{"price": "0.60", "size": "10"}],
    }
    assert len(dec.decode(json.dumps(book), 1.0).events) == 1


def _decoder() -> PolymarketDecoder:
    dec = PolymarketDecoder()
    dec.reset(["T"])
    _snapshot(dec)
    return dec


@pytest.mark.parametrize(
    "entry",
    [
        NAN_CHANGE,
        dict(NAN_CHANGE, price="inf"),
        dict(NAN_CHANGE, price="0"),
        dict(NAN_CHANGE, price="-0.3"),
        dict(NAN_CHANGE, price="0.45", size="-5"),
        dict(NAN_CHANGE, price="0.45", size="NaN"),
        dict(NAN_CHANGE, price="0.45", best_bid="NaN"),
        dict(NAN_CHANGE, price="0.45", best_ask="-1"),
    ],
)
def test_price_change_garbage_is_a_decode_error_not_a_price(entry: dict[str, str]) -> None:
    dec = _decoder()
    res = dec.decode(json.dumps(price_change([entry], 2000)), 2.0)
    assert res.events == [] and res.decode_errors == 1
    assert dec.top("T")[:2] == (0.40, 0.60)  # the book is untouched


@pytest.mark.parametrize("ts", ["soon", "", "NaN", "-5"])
def test_unparseable_timestamp_is_never_replaced_by_receive_time(ts: str) -> None:
    dec = _decoder()
    ev = price_change([change("T", "0.45", "5", "BUY", "0.45", "0.60")], 0)
    ev["timestamp"] = ts
    res = dec.decode(json.dumps(ev), 2.0)
    assert res.events == [] and res.decode_errors == 1
    trade = {"event_type": "last_trade_price", "asset_id": "T", "price": "0.5", "timestamp": ts}
    res = dec.decode(json.dumps(trade), 2.0)
    assert res.events == [] and res.decode_errors == 1
    assert "T" not in dec.last_trade


def test_non_positive_trade_and_garbage_snapshot_levels() -> None:
    dec = _decoder()
    for price in ("NaN", "0", "-1"):
        trade = {"event_type": "last_trade_price", "asset_id": "T", "price": price,
                 "timestamp": "3000"}
        res = dec.decode(json.dumps(trade), 3.0)
        assert res.events == [] and res.decode_errors == 1
    book = {
        "event_type": "book",
        "asset_id": "T",
        "timestamp": "4000",
        "bids": [{"price": "NaN", "size": "10"}, {"price": "0.41", "size": "10"}],
        "asks": [{"price": "0.61", "size": "-3"}, {"price": "0.62", "size": "1"}],
    }
    res = dec.decode(json.dumps(book), 4.0)
    assert res.decode_errors == 2
    assert [(e.price, e.bid, e.ask) for e in res.events] == [(pytest.approx(0.515), 0.41, 0.62)]


def test_crossed_top_of_book_is_never_published() -> None:
    dec = _decoder()
    crossed = price_change([change("T", "0.824", "5", "BUY", "0.824", "0.821")], 5000)
    res = dec.decode(json.dumps(crossed), 5.0)
    assert res.events == [] and res.rejected == 1
    # our own levels crossing (no server hints) is not published either
    dec2 = _decoder()
    res = dec2.decode(json.dumps(price_change([change("T", "0.7", "5", "BUY")], 6000)), 6.0)
    assert res.events == [] and res.rejected == 1
    # a sane update afterwards is published again
    ok = price_change([change("T", "0.45", "5", "BUY", "0.45", "0.60")], 7000)
    assert [e.price for e in dec.decode(json.dumps(ok), 7.0).events] == [pytest.approx(0.525)]


async def test_issue_frames_never_become_prices_end_to_end(fake: FakePolymarket) -> None:  # noqa: F811
    add_q1(fake)
    fake.books["Y1"] = BOOK_Y1
    async with Harness(fake, ids=("1",)) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        before = len(h.prices("Y1"))
        bad = price_change([change("Y1", "NaN", "-5", "BUY", "0.48", "0.52")], 0)
        bad["timestamp"] = "yesterday"
        await fake.send(bad)
        await fake.send(price_change([change("Y1", "0.824", "5", "BUY", "0.824", "0.821")],
                                     fake.next_ts()))
        nan_top = price_change([change("Y1", "0.49", "5", "BUY", "NaN", "0.52")], fake.next_ts())
        await fake.send(nan_top)
        marker = price_change([change("N1", "0.51", "5", "BUY", "0.51", "0.54")], fake.next_ts())
        await fake.send(marker)
        await wait_for(lambda: len(h.prices("N1")) >= 2)
        assert len(h.prices("Y1")) == before
        assert all(math.isfinite(e.price) for e in h.of(PriceEvent))
        c = h.source.counters
        assert c.decode_errors == 2 and c.rejected == 1


def test_yahoo_non_finite_price_is_a_decode_error_and_crossed_quote_dropped() -> None:
    ad = YahooStreamAdapter(YahooSettings())
    res = ad.decode(pricing_frame("AAPL", math.nan, 1_000_000), 1000.0)
    assert res.events == [] and res.decode_errors == 1
    res = ad.decode(pricing_frame("AAPL", -3.0, 1_000_000), 1000.0)
    assert res.events == [] and res.decode_errors == 1
    res = ad.decode(pricing_frame("AAPL", 101.0, 1_000_000, bid=102.0, ask=100.0), 1000.0)
    assert [(e.price, e.bid, e.ask) for e in res.events] == [(101.0, None, None)]


async def test_bus_guard_keeps_non_finite_prices_out_of_every_tap() -> None:
    bus = Bus()
    seen: list[Event] = []
    bus.add_tap("#", seen.append)
    got: list[Event] = []
    bus.subscribe("#", got.append, name="sub")
    await bus.start()
    for bad in (
        PriceEvent(ts=1, market="equity", asset="A", price=math.nan),
        PriceEvent(ts=1, market="equity", asset="A", price=math.inf),
        PriceEvent(ts=1, market="equity", asset="A", price=-1.0),
        PriceEvent(ts=1, market="equity", asset="A", price=1.0, bid=math.nan),
    ):
        await bus.publish(bad)
        bus.publish_nowait(bad)
    good = PriceEvent(ts=2, market="equity", asset="A", price=1.0, bid=0.9, ask=1.1)
    await bus.publish(good)
    await bus.publish(HistoryEvent(ts=3, market="equity", asset="A",
                                   points=((1.0, 10.0), (2.0, math.nan), (3.0, 11.0))))
    await bus.drain()
    await bus.stop()
    assert bus.invalid_prices == 9  # 8 events + 1 history with a bad point
    assert seen[0] == good and got[0] == good
    hist = seen[1]
    assert isinstance(hist, HistoryEvent) and hist.points == ((1.0, 10.0), (3.0, 11.0))
    assert len(seen) == 2 and len(got) == 2


