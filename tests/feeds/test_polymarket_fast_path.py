"""The decoder's fast path (price_change-only frames, numbers parsed and checked by msgspec)
validates every price as the general path does and gives the same books, prices and counts; a
refused entry read from the wire is one log line and no price."""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from feeds.polymarket.decode import MarkMode, PolymarketDecoder
from feeds.polymarket.price_frames import Price, Size, Stamp, price_change_events
from tests.fakes.polymarket_server import FakePolymarket, change, price_change
from tests.feeds.test_polymarket import Harness, add_q1
from tests.helpers import wait_for

TOKENS = ["T", "U"]
#: An event of an unknown type: appended to a frame, it sends the frame down the general path.
UNKNOWN = {"event_type": "something_new"}


def _decoder(mark: MarkMode = "mid") -> PolymarketDecoder:
    dec = PolymarketDecoder(mark=mark)
    dec.reset(TOKENS)
    for tok in TOKENS:
        book = {"event_type": "book", "asset_id": tok, "timestamp": "1000",
                "bids": [{"price": "0.40", "size": "10"}],
                "asks": [{"price": "0.60", "size": "10"}]}
        if mark != "mid":  # a last trade for the marks that read it
            book["last_trade_price"] = "0.55"
        assert len(dec.decode(json.dumps(book), 1.0).events) == 1
    return dec


#: The garbage an entry may carry, field by field (each refused by the fast path's decode).
GARBAGE = [("side", "HOLD"), ("price", "NaN"), ("price", "0"), ("price", "-0.2"), ("price", "1.5"),
           ("price", "abc"), ("size", "-3"), ("size", "nan"), ("size", "inf"), ("best_bid", "nan"),
           ("best_bid", "2"), ("best_ask", "-1"), ("timestamp", "0")]


def _frames(n: int, seed: int, bad: float = 0.1) -> list[list[dict[str, Any]]]:
    """Return price_change frames with crossed tops, missing hints, deltas without a book and,
    in a share ``bad`` of the entries, garbage (a frame holding any takes the general path)."""
    rng = random.Random(seed)
    out = []
    for f in range(n):
        entries = []
        ts: int | str = 2000 + f
        for _ in range(rng.randint(1, 6)):
            tok = rng.choice([*TOKENS, *TOKENS, "NOBOOK"])
            side = rng.choice(["BUY", "SELL"])
            price = f"{rng.randint(1, 99) / 100:.2f}"
            size = rng.choice(["0", f"{rng.uniform(1, 50):.2f}"])
            bb = rng.choice([None, f"{rng.randint(0, 60) / 100:.2f}"])
            ba = rng.choice([None, f"{rng.randint(40, 100) / 100:.2f}"])
            entry = change(tok, price, size, side, bb, ba)
            if rng.random() < bad:
                field, value = rng.choice(GARBAGE)
                if field == "timestamp":
                    ts = value
                else:
                    entry[field] = value
            entries.append(entry)
        ev = price_change(entries, 0)
        ev["timestamp"] = str(ts)
        out.append([ev])
    return out


def _run(frames: list[list[dict[str, Any]]], suffix: list[dict[str, Any]], mark: MarkMode = "mid",
         columns: bool = True
         ) -> tuple[list[tuple[float, ...]], tuple[int, int, int], PolymarketDecoder]:
    """Decode ``frames`` (each with ``suffix`` appended) into columns, or as events
    (``columns`` False: :meth:`PolymarketDecoder.decode`, the events turned into rows)."""
    dec = _decoder(mark)
    cols = dec.price_columns()
    errors = rejected = 0
    keys: list[str] = []
    for i, frame in enumerate(frames):
        text = json.dumps(frame + suffix).encode()
        if columns:
            res = dec.decode_columns(text, float(i), cols)
        else:
            res = dec.decode(text, float(i))
            for e in res.events:
                cols.append(e.asset, e.ts, e.recv_ts, e.price, e.bid, e.ask)  # type: ignore[attr-defined]
        errors += res.decode_errors
        rejected += res.rejected
        keys += res.data_keys
    rows = [tuple(x) for x in zip(cols.a, cols.ts, cols.recv_ts, cols.price, cols.bid,
                                  cols.ask, strict=True)]
    rows.append(tuple(float(dec.assets.add(k)) for k in keys))  # the keys that got data, too
    return rows, (errors, rejected, dec.dropped_deltas), dec


def _same(a: list[tuple[float, ...]], b: list[tuple[float, ...]]) -> bool:
    return len(a) == len(b) and all(
        x == y or (math.isnan(x) and math.isnan(y)) for ra, rb in zip(a, b, strict=True)
        for x, y in zip(ra, rb, strict=True))


@pytest.mark.parametrize("mark,columns", [
    ("mid", True), ("mid", False), ("last", True), ("bid", True), ("bid", False)])
def test_fast_path_equals_general_path_on_mixed_garbage(mark: MarkMode, columns: bool) -> None:
    frames = _frames(600, seed=3)
    fast_frames = sum(price_change_events(json.dumps(f)) is not None for f in frames)
    assert 200 < fast_frames < 550  # both paths taken
    fast_rows, fast_counts, fast = _run(frames, [], mark, columns)
    slow_rows, slow_counts, slow = _run(frames, [UNKNOWN], mark, columns)
    assert len(fast_rows) > 100 and _same(fast_rows, slow_rows)
    assert fast_counts == slow_counts and min(fast_counts) > 0
    for tok in TOKENS:
        assert fast.books[tok].bids == slow.books[tok].bids
        assert fast.books[tok].asks == slow.books[tok].asks
        assert fast.top(tok) == slow.top(tok)


def test_price_change_frame_takes_the_fast_path_and_others_do_not() -> None:
    ok = json.dumps([price_change([change("T", "0.45", "5", "BUY", "0.45", "0.6")], 2000)])
    assert price_change_events(ok) is not None
    assert price_change_events(ok.encode()) is not None
    mixed = json.dumps([price_change([change("T", "0.45", "5", "BUY")], 2000), UNKNOWN])
    assert price_change_events(mixed) is None
    garbage = json.dumps(price_change([change("T", "abc", "5", "BUY")], 2000))
    assert price_change_events(garbage) is None
    assert price_change_events("{not json") is None


@pytest.mark.parametrize("field,value", [
    ("price", "NaN"), ("price", "nan"), ("price", "inf"), ("price", "0"), ("price", "-0.3"),
    ("price", "1.01"), ("size", "-5"), ("size", "NaN"), ("best_bid", "NaN"),
    ("best_bid", "-0.1"), ("best_ask", "1.5"), ("best_ask", "nan"),
])
def test_fast_path_refuses_each_invalid_number(field: str, value: str) -> None:
    dec = _decoder()
    entry = change("T", "0.45", "5", "BUY", "0.45", "0.6")
    entry[field] = value
    frame = json.dumps(price_change([entry], 2000))
    assert price_change_events(frame) is None  # refused as msgspec parses it: the general path
    cols = dec.price_columns()
    res = dec.decode_columns(frame, 2.0, cols)
    assert res.decode_errors == 1 and len(cols) == 0 and res.data_keys == []
    assert dec.top("T")[:2] == (0.40, 0.60) and dec.books["T"].bids == {0.40: 10.0}


@pytest.mark.parametrize("value,priced", [
    ("abc", ["U"]), ("", ["U"]), ("1e400", ["U"]),
    (None, []),  # a null where text belongs: the whole event is a decode error
])
def test_garbage_numbers_take_the_general_path_and_are_refused(value: str | None,
                                                               priced: list[str]) -> None:
    dec = _decoder()
    entry: dict[str, Any] = change("T", "0.45", "5", "BUY", "0.45", "0.6")
    entry["price"] = value
    good = change("U", "0.42", "5", "BUY", "0.42", "0.6")
    res = dec.decode(json.dumps(price_change([entry, good], 2000)), 2.0)
    assert res.decode_errors == 1
    assert [e.asset for e in res.events] == priced  # type: ignore[attr-defined]
    assert dec.top("T")[:2] == (0.40, 0.60)


@pytest.mark.parametrize("ts", ["0", "-5", "NaN", "inf"])
def test_fast_path_refuses_a_non_positive_or_non_finite_timestamp(ts: str) -> None:
    dec = _decoder()
    ev = price_change([change("T", "0.45", "5", "BUY", "0.45", "0.6")], 0)
    ev["timestamp"] = ts
    res = dec.decode(json.dumps(ev), 2.0)
    assert res.events == [] and res.decode_errors == 1 and "T" not in res.data_keys


def test_crossed_top_is_rejected_and_the_last_published_top_stays() -> None:
    dec = _decoder()
    res = dec.decode(json.dumps(price_change(
        [change("T", "0.45", "5", "BUY", "0.55", "0.50")], 2000)), 2.0)
    assert res.events == [] and res.rejected == 1
    assert dec.top("T")[:2] == (0.40, 0.60)
    # Without hints the book's own levels cross: refused the same way.
    res = dec.decode(json.dumps(price_change([change("T", "0.70", "5", "BUY")], 2001)), 2.0)
    assert res.events == [] and res.rejected == 1
    assert dec.top("T")[:2] == (0.40, 0.60)


def test_numbers_sent_as_json_numbers_are_read_by_the_fast_path() -> None:
    dec = _decoder()
    entry: dict[str, Any] = {"asset_id": "T", "price": 0.45, "size": 5, "side": "BUY",
                             "best_bid": 0.45, "best_ask": 0.5}
    frame = json.dumps({"event_type": "price_change", "timestamp": 2000,
                        "price_changes": [entry]})
    assert price_change_events(frame) is not None
    res = dec.decode(frame, 2.0)
    assert [(e.ts, e.price, e.bid, e.ask) for e in res.events] == [  # type: ignore[attr-defined]
        (2.0, 0.475, 0.45, 0.5)]
    assert dec.books["T"].bids == {0.40: 10.0, 0.45: 5.0}


def test_missing_hints_take_the_top_from_the_book_and_empty_sides_drop() -> None:
    dec = _decoder()
    res = dec.decode(json.dumps(price_change([change("T", "0.45", "5", "BUY")], 2000)), 2.0)
    assert [(e.price, e.bid, e.ask) for e in res.events] == [  # type: ignore[attr-defined]
        (0.525, 0.45, 0.60)]
    res = dec.decode(json.dumps(price_change(
        [change("T", "0.45", "0", "BUY", "0", "1")], 2001)), 2.0)  # both sides empty, no trade
    assert res.events == [] and dec.books["T"].bids == {0.40: 10.0}


def test_unknown_side_is_rejected_and_deltas_without_a_book_are_dropped() -> None:
    dec = _decoder()
    res = dec.decode(json.dumps(price_change(
        [change("T", "0.45", "5", "HOLD", "0.45", "0.6"),
         change("ZZ", "0.45", "5", "BUY", "0.45", "0.6")], 2000)), 2.0)
    assert res.events == [] and res.rejected == 1 and dec.dropped_deltas == 1


@pytest.mark.parametrize("columns", [True, False])
def test_one_missing_hint_takes_that_side_from_the_book(columns: bool) -> None:
    dec = _decoder()
    cols = dec.price_columns()
    frame = json.dumps(price_change([change("T", "0.30", "5", "BUY", "0.42", None)], 2000))
    res = dec.decode_columns(frame, 2.0, cols) if columns else dec.decode(frame, 2.0)
    rows = [(e.price, e.bid, e.ask) for e in (cols.events() if columns else res.events)]
    assert rows == [(pytest.approx(0.51), 0.42, 0.60)]  # the ask: the book's best
    frame = json.dumps(price_change([change("T", "0.65", "5", "SELL", None, "0.58")], 2001))
    cols.take()
    res = dec.decode_columns(frame, 2.0, cols) if columns else dec.decode(frame, 2.0)
    rows = [(e.price, e.bid, e.ask) for e in (cols.events() if columns else res.events)]
    assert rows == [(pytest.approx(0.49), 0.40, 0.58)]  # the bid: the book's best


def test_numbers_parsed_in_c_equal_float_of_the_text() -> None:
    """msgspec's lax str -> float gives float()'s value for every price with up to four
    decimals, sizes of 0-6 decimals and ms timestamps (no fast path drift in the last bit)."""
    rng = random.Random(5)
    prices = [f"{i / 10_000:.4f}" for i in range(1, 10_001)]
    prices += [str(i / 1000) for i in range(1, 1001)]
    sizes = [f"{rng.uniform(0, 1e6):.{rng.randint(0, 6)}f}" for _ in range(20_000)] + ["0", "-0"]
    stamps = [str(rng.randrange(1_600_000_000_000, 1_900_000_000_000)) for _ in range(5_000)]
    for typ, texts in ((Price, prices), (Size, sizes), (Stamp, stamps)):
        got = msgspec.json.Decoder(list[typ], strict=False).decode(json.dumps(texts))
        assert got == [float(t) for t in texts]


@pytest.fixture
async def fake() -> AsyncIterator[FakePolymarket]:
    srv = FakePolymarket()
    await srv.start()
    yield srv
    await srv.stop()


@pytest.mark.parametrize("entry,line", [
    (change("Y1", "NaN", "5", "BUY", "0.49", "0.52"), "feed frame undecodable"),
    (change("Y1", "0", "5", "BUY", "0.49", "0.52"), "feed frame undecodable"),
    (change("Y1", "-0.2", "5", "SELL", "0.49", "0.52"), "feed frame undecodable"),
    (change("Y1", "0.5x", "5", "BUY", "0.49", "0.52"), "feed frame undecodable"),
    (change("Y1", "0.49", "5", "BUY", "0.53", "0.52"), "feed frame rejected"),  # crossed
])
async def test_a_refused_entry_is_one_log_line_and_nothing_applied(
        fake: FakePolymarket, entry: dict[str, Any], line: str) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        book = dict(h.source.decoder.books["Y1"].bids), dict(h.source.decoder.books["Y1"].asks)
        with capture_logs() as logs:
            await fake.send(price_change([entry], fake.next_ts()))
            # A good frame after it: once its price is out, the bad frame was read.
            await fake.send(price_change([change("N1", "0.50", "0", "BUY", "0.49", "0.54")],
                                         fake.next_ts()))
            await wait_for(lambda: len(h.prices("N1")) == 2)
        warned = [e for e in logs if e["log_level"] == "warning"]
        assert [e["event"] for e in warned] == [line]
        assert warned[0]["source"] == "polymarket" and '"Y1"' in warned[0]["sample"]
        assert len(h.prices("Y1")) == 1  # the snapshot's price only
        if line == "feed frame undecodable":  # refused as read: the book is as it was
            assert (h.source.decoder.books["Y1"].bids, h.source.decoder.books["Y1"].asks) == book
        assert h.source.decoder.top("Y1")[:2] == (0.48, 0.52)
