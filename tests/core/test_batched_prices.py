"""One frame's prices as one batch: the bus runs each tap once, the book marks once with
equity and peaks current, and the outcome equals publishing the events one by one (issue 16,
point 1)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from daemon.core.bus import Bus
from daemon.core.events import Event, NewsEvent, PriceEvent
from daemon.core.price_bursts import read_prices
from daemon.core.price_columns import AssetTable, PriceColumns
from daemon.market.state import MarketState
from scoring.ledger.ledger import Book


def price(asset: str, p: float, ts: float = 10.0, market: str = "polymarket") -> PriceEvent:
    return PriceEvent(ts=ts, recv_ts=ts + 1, market=market, asset=asset, price=p)  # type: ignore[arg-type]


def test_publish_batch_runs_each_tap_once_and_offers_every_event() -> None:
    async def main() -> None:
        bus = Bus()
        calls: list[list[str]] = []
        single: list[str] = []
        bus.add_tap("price.#", lambda e: None,
                    batch=lambda evs: calls.append([e.asset for e in evs]))  # type: ignore[attr-defined]
        bus.add_tap("price.#", lambda e: single.append(e.asset))  # type: ignore[attr-defined]
        got: list[Event] = []

        async def handler(evs: list[Event]) -> None:
            got.extend(evs)

        bus.subscribe("price.#", handler, name="s", batch=True)
        await bus.start()
        bus.publish_batch([price("A", 0.5), price("B", float("nan")), price("C", 0.25)])
        await bus.drain()
        await bus.stop()
        assert calls == [["A", "C"]]  # once, the invalid price dropped by the guard
        assert single == ["A", "C"]  # a tap without a batch variant still sees every event
        assert sorted(e.asset for e in got) == ["A", "C"]  # type: ignore[attr-defined]
        assert bus.published == 2 and bus.invalid_prices == 1
        with pytest.raises(ValueError, match="only for conflating"):
            bus.publish_batch([NewsEvent(ts=1.0, recv_ts=1.0, id="n", headline="h")])

    asyncio.run(main())


def _book(n_agents: int = 5, n_assets: int = 6) -> Book:
    b = Book("polymarket", lazy_mark=True)
    for j in range(n_assets):
        b.add_asset(f"t{j}")
    for i in range(n_agents):
        b.add_agent(f"a{i}")
    b.set_prices(np.arange(n_assets, dtype=np.intp), np.full(n_assets, 0.5), 1.0)
    for i in range(n_agents):
        b.rebalance(f"a{i}", {f"t{i % n_assets}": 0.6, f"t{(i + 1) % n_assets}": 0.3,
                              "CASH": 0.1})
    return b


def test_set_prices_keeps_equity_and_peaks_current_after_every_batch() -> None:
    b = _book()
    rng = np.random.default_rng(3)
    peak = b.values()
    for _ in range(50):
        cols = rng.choice(6, 3, replace=False).astype(np.intp)
        b.set_prices(cols, rng.uniform(0.05, 0.95, 3), 2.0)
        assert not b._dirty
        now = b._vals[:5].copy()
        peak = np.maximum(peak, now)
        full = b._cash[:5] + b._h[:5, :6] @ b._pz[:6]  # a full re-mark, without touching b
        np.testing.assert_allclose(now, full, rtol=1e-12)
        np.testing.assert_array_equal(b.peaks(), peak)
    with pytest.raises(ValueError, match="finite and >= 0"):
        b.set_prices(np.array([0], dtype=np.intp), np.array([-1.0]), 3.0)


def test_a_batch_leaves_the_same_state_as_its_events_one_by_one() -> None:
    evs = [price("t0", 0.4, 100.0), price("t3", 0.7, 101.0), price("t1", 0.2, 86_500.0),
           price("zz", 0.9, 102.0)]
    one, batch = _book(), _book()
    s1, s2 = MarketState({"polymarket": one}), MarketState({"polymarket": batch})
    for ev in evs:
        s1.on_price(ev)
    s2.on_prices(evs)
    np.testing.assert_allclose(batch._vals[:5], one.values(), rtol=1e-12)
    np.testing.assert_array_equal(batch.prices, one.prices)
    np.testing.assert_array_equal(batch.price_times, one.price_times)
    h1, h2 = s1.history["polymarket"], s2.history["polymarket"]
    assert h1.keys() == h2.keys()
    for k in h1:
        assert (h1[k].day, h1[k].last, list(h1[k].closes)) == (
            h2[k].day, h2[k].last, list(h2[k].closes))


def _histories(st: MarketState) -> dict[str, tuple[object, ...]]:
    return {a: (h.day, h.last, h.first, list(h.closes))
            for a, h in st.history["polymarket"].items()}


def test_columns_leave_the_same_state_as_their_events_one_by_one() -> None:
    """Within a day only each asset's last price is visited; a batch crossing midnight, a
    price stamped ahead of its receipt and an unlisted token leave the same state too."""
    rng = np.random.default_rng(5)
    one, cols_book, events_book = _book(), _book(), _book()
    s1, s2 = MarketState({"polymarket": one}), MarketState({"polymarket": cols_book})
    s3 = MarketState({"polymarket": events_book})  # the same batches as events
    t = 200.0
    table = AssetTable()  # one source's table across its bursts (every 7th from another)
    for batch in range(40):
        cols = PriceColumns("polymarket", table=AssetTable() if batch % 7 == 6 else table)
        for _ in range(int(rng.integers(1, 30))):
            t += float(rng.uniform(0, 400 if batch % 10 else 9_000))  # some batches span days
            ahead = float(rng.uniform(0, 50)) if rng.random() < 0.1 else 0.0
            asset = ["t0", "t1", "t2", "t3", "t4", "t5", "zz"][int(rng.integers(0, 7))]
            cols.append(asset, t + ahead, t, float(rng.uniform(0.01, 0.99)), None, None)
        for ev in cols.events():
            s1.on_price(ev)
        s3.on_prices(cols.events())
        s2.on_price_columns(cols)
        np.testing.assert_allclose(cols_book._vals[:5], one.values(), rtol=1e-12)
        assert not cols_book._dirty  # current after every batch, the same bits either way
        np.testing.assert_array_equal(cols_book._vals[:5], events_book._vals[:5])
        np.testing.assert_array_equal(cols_book._peak[:5], events_book._peak[:5])
        if batch % 13 == 12:  # history read between bursts: their latest prices are in it
            assert _histories(s2) == _histories(s1)
    np.testing.assert_array_equal(cols_book.prices, one.prices)
    np.testing.assert_array_equal(cols_book.price_times, one.price_times)
    h1, h2 = s1.history["polymarket"], s2.history["polymarket"]
    assert h1.keys() == h2.keys() and "zz" in h2
    for k in h1:
        assert (h1[k].day, h1[k].last, list(h1[k].closes)) == (
            h2[k].day, h2[k].last, list(h2[k].closes))
    assert sum(len(h.closes) for h in h2.values()) > 6  # days were crossed


def test_a_batch_of_equity_prices_keeps_the_sessions_opening_price() -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    t = [datetime(2026, 11, d, h, m, tzinfo=ny).timestamp()
         for d, h, m in ((23, 9, 0), (23, 9, 31), (23, 10, 0), (24, 9, 45), (24, 9, 50))]
    evs = [price("AAPL", 100.0 + i, ts, market="equity") for i, ts in enumerate(t)]
    books = []
    for _ in range(2):
        b = Book("equity", lazy_mark=True)
        b.add_asset("AAPL")
        b.add_agent("a0")
        books.append(b)
    s1, s2 = MarketState({"equity": books[0]}), MarketState({"equity": books[1]})
    for ev in evs[:3]:
        s1.on_price(ev)
    s2.on_prices(evs[:3])  # the same column three times in one batch: its last price marks
    assert s2.history["equity"]["AAPL"].first == (t[1], 101.0)
    assert books[1].prices[0] == 102.0 and books[1].price_times[0] == t[2]
    for ev in evs[3:]:
        s1.on_price(ev)
    s2.on_prices(evs[3:])
    h1, h2 = s1.history["equity"]["AAPL"], s2.history["equity"]["AAPL"]
    assert (h2.first, h2.last, list(h2.closes)) == (h1.first, h1.last, list(h1.closes))
    assert h2.first == (t[3], 103.0)


def test_stored_price_rows_are_the_same_with_and_without_seq(tmp_path: object) -> None:

    from daemon.store.store import Store

    async def main() -> list[tuple[object, ...]]:
        store = await Store.open(Path(str(tmp_path)) / "s.db")
        store.add_prices([price("A", 0.5, 10.0), PriceEvent(ts=11.0, recv_ts=11.5,
                          market="polymarket", asset="B", price=0.25, bid=0.2, ask=None)])
        await store.flush()  # live rows: no seq (the NULL-literal statement)
        store.add_prices([price("C", 0.75, 12.0)], seq=7)
        await store.flush()
        rows = await store.fetchall("SELECT seq, ts, recv_ts, kind, market, asset, price, bid,"
                                    " ask, payload FROM market_events ORDER BY id")
        await store.close()
        return [tuple(r) for r in rows]

    rows = asyncio.run(main())
    # The live batch is one burst row (earliest ts, latest recv_ts); the replayed price a row.
    assert [r[:6] for r in rows] == [(None, 10.0, 11.5, "prices", "polymarket", None),
                                     (7, 12.0, 13.0, "price", "polymarket", "C")]
    assert read_prices(sqlite3.connect(Path(str(tmp_path)) / "s.db"), "1") == [
        ("polymarket", "A", 10.0, 11.0, 0.5, None, None),
        ("polymarket", "B", 11.0, 11.5, 0.25, 0.2, None),
        ("polymarket", "C", 12.0, 13.0, 0.75, None, None),
    ]


def test_stored_market_events_keep_their_arrival_order_across_kinds(tmp_path: object) -> None:
    """A resolution between two bursts of prices is stored between them (ids follow arrival),
    live or with a seq, and a spilled row of the older format still lands in its place."""

    from daemon.core.events import ResolutionEvent
    from daemon.store.store import Store

    def resolution(ts: float) -> ResolutionEvent:
        return ResolutionEvent(ts=ts, recv_ts=ts, market="polymarket", question_id="q1",
                               payouts={"A": 1.0, "B": 0.0})

    async def main() -> list[tuple[object, ...]]:
        store = await Store.open(Path(str(tmp_path)) / "o.db")
        store.add_prices([price("A", 0.5, 10.0), price("B", 0.5, 10.0)])
        store.add_event(resolution(11.0))
        store.add_prices([price("C", 0.25, 12.0)])
        store._pending.append((None, 13.0, 13.5, "polymarket", "D", 0.1, None, None))  # old spill
        store.add_event(resolution(14.0), seq=3)
        store.add_prices([price("E", 0.75, 15.0)], seq=4)
        await store.flush()
        rows = await store.fetchall("SELECT seq, ts, kind, asset FROM market_events ORDER BY id")
        await store.close()
        return [tuple(r) for r in rows]

    assert asyncio.run(main()) == [
        (None, 10.0, "prices", None),  # the burst of A and B
        (None, 11.0, "ResolutionEvent", "q1"),
        (None, 12.0, "prices", None), (None, 13.0, "price", "D"),
        (3, 14.0, "ResolutionEvent", "q1"),
        (4, 15.0, "price", "E"),
    ]
