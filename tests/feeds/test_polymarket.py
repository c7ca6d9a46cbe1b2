"""Polymarket source against a local fake (WS market channel + Gamma/CLOB REST).

Why one module over 500 lines: the Polymarket source's tests share one fake server (WS market
channel and Gamma/CLOB REST) and its fixtures.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.core.bus import Bus
from daemon.core.events import Event, MarketListed, PriceEvent, ResolutionEvent, SourceStatus
from feeds.polymarket.decode import PolymarketDecoder
from feeds.polymarket.gamma import (
    backfill_history,
    fetch_midpoint,
    gamma_payout,
    parse_gamma_market,
)
from feeds.polymarket.source import PolymarketSettings, PolymarketSource, build_polymarket_source
from feeds.source_contract import SourceState
from tests.fakes.polymarket_server import (
    Book,
    FakePolymarket,
    change,
    gamma_market,
    price_change,
)
from tests.helpers import HANG_GUARD, wait_for

BOOK_Y1 = Book(
    bids=[(0.40, 100), (0.45, 50), (0.48, 10)], asks=[(0.60, 100), (0.55, 50), (0.52, 10)]
)
BOOK_N1 = Book(bids=[(0.50, 10)], asks=[(0.54, 10)])


@pytest.fixture
async def fake() -> AsyncIterator[FakePolymarket]:
    srv = FakePolymarket()
    await srv.start()
    yield srv
    await srv.stop()


class Harness:
    """A source, its bus and every event it published."""

    def __init__(self, fake: FakePolymarket, questions: Any = None, **kw: Any) -> None:
        base: dict[str, Any] = {
            "ws_url": fake.ws_url,
            "gamma_url": fake.http_url,
            "clob_url": fake.http_url,
            "ping_interval": 0.1,
            "stale_after": 5.0,
            "resolution_poll_interval": 60.0,
            "discovery_interval": 60.0,
            "watchdog_interval": 0.02,
            "backoff_initial": 0.05,
            "backoff_max": 0.2,
            "dead_after": None,
            "http_timeout": 2.0,
            "open_timeout": 2.0,
        }
        base.update(kw)
        self.settings = PolymarketSettings(**base)
        self.bus = Bus()
        self.events: list[Event] = []
        self.bus.add_tap("#", self.events.append)
        self.histories: list[dict[str, list[tuple[float, float]]]] = []
        self.source: PolymarketSource = build_polymarket_source(
            self.settings,
            bus=self.bus,
            now=time.time,
            questions=questions,
            history_sink=self.histories.append,
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Harness:
        self.task = asyncio.create_task(self.source.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.source.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, HANG_GUARD)

    def prices(self, asset: str) -> list[PriceEvent]:
        return [e for e in self.events if isinstance(e, PriceEvent) and e.asset == asset]

    def of(self, cls: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def statuses(self) -> list[str]:
        return [e.state for e in self.of(SourceStatus) if e.source == "polymarket"]


def add_q1(fake: FakePolymarket) -> None:
    fake.add_market(gamma_market("1", "Will A?", "Y1", "N1"), {"Y1": BOOK_Y1, "N1": BOOK_N1})


# ------------------------------------------------------------------------------ normal flow


async def test_normal_flow_books_and_prices(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        conns = await fake.wait_conns(1)
        assert json.loads(conns[0].received[0]) == {
            "assets_ids": ["Y1", "N1"],
            "type": "market",
            "custom_feature_enabled": True,
            "initial_dump": True,
        }
        await wait_for(lambda: bool(h.prices("Y1")) and bool(h.prices("N1")))
        listed = h.of(MarketListed)
        assert [(m.question_id, m.question, m.yes_asset, m.no_asset) for m in listed] == [
            ("1", "Will A?", "Y1", "N1")
        ]
        assert listed[0].end_ts == 1893456000.0
        p = h.prices("Y1")[0]
        assert (p.price, p.bid, p.ask) == (pytest.approx(0.50), 0.48, 0.52)
        assert p.market == "polymarket" and p.source == "polymarket"
        assert p.ts == pytest.approx(fake.ts_ms / 1000 - 1.0, abs=1.0)
        assert h.source.state is SourceState.LIVE

        t1 = fake.next_ts()
        await fake.send(price_change([change("Y1", "0.49", "20", "BUY", "0.49", "0.52")], t1))
        await wait_for(lambda: len(h.prices("Y1")) == 2)
        assert h.prices("Y1")[-1].price == pytest.approx(0.505)
        assert h.prices("Y1")[-1].ts == t1 / 1000
        # no best_bid/best_ask hints: computed from our levels; several entries, two tokens
        t2 = fake.next_ts()
        await fake.send(
            [
                price_change(
                    [change("Y1", "0.49", "0", "BUY"), change("N1", "0.53", "5", "SELL")], t2
                )
            ]
        )
        await wait_for(lambda: len(h.prices("Y1")) == 3 and len(h.prices("N1")) == 2)
        assert h.prices("Y1")[-1].price == pytest.approx(0.50)
        assert h.prices("N1")[-1].price == pytest.approx(0.515)
        assert (h.prices("N1")[-1].bid, h.prices("N1")[-1].ask) == (0.50, 0.53)
        # last trade: recorded, mark (mid) unchanged -> no event
        await fake.send(
            {
                "event_type": "last_trade_price",
                "asset_id": "Y1",
                "market": "0xm",
                "price": "0.51",
                "side": "BUY",
                "size": "10",
                "fee_rate_bps": "0",
                "timestamp": str(fake.next_ts()),
                "transaction_hash": "0x1",
            }
        )
        await wait_for(lambda: h.source.decoder.last_trade.get("Y1") == 0.51)
        await fake.send(
            {
                "event_type": "best_bid_ask",
                "market": "0xm",
                "asset_id": "Y1",
                "best_bid": "0.47",
                "best_ask": "0.51",
                "spread": "0.04",
                "timestamp": str(fake.next_ts()),
            }
        )
        await wait_for(lambda: len(h.prices("Y1")) == 4)
        assert (h.prices("Y1")[-1].bid, h.prices("Y1")[-1].ask) == (0.47, 0.51)
        assert h.prices("Y1")[-1].price == pytest.approx(0.49)
        await fake.send(
            {
                "event_type": "tick_size_change",
                "asset_id": "Y1",
                "market": "0xm",
                "old_tick_size": "0.01",
                "new_tick_size": "0.001",
                "timestamp": str(fake.next_ts()),
            }
        )
        await wait_for(lambda: h.source.decoder.tick_size.get("Y1") == 0.001)
        assert len(h.prices("Y1")) == 4
        assert h.source.decoder.top("Y1") == (0.47, 0.51, pytest.approx(0.49))
        c = h.source.counters
        assert (c.decode_errors, c.unknown, c.rejected, c.reconnects) == (0, 0, 0, 0)


async def test_mark_last_and_one_sided_books() -> None:
    dec = PolymarketDecoder(mark="last")
    dec.reset(["T"])
    book = {
        "event_type": "book",
        "asset_id": "T",
        "timestamp": "1000",
        "bids": [],
        "asks": [{"price": "0.9", "size": "1"}, {"price": "0.7", "size": "2"}],
    }
    res = dec.decode(json.dumps(book), 5.0)
    # no trade yet: falls back to the mid rule, one side empty -> the other side
    assert [(e.price, e.bid, e.ask, e.ts, e.recv_ts) for e in res.events] == [
        (0.7, None, 0.7, 1.0, 5.0)
    ]
    res = dec.decode(
        json.dumps(
            {
                "event_type": "last_trade_price",
                "asset_id": "T",
                "price": "0.66",
                "timestamp": "2000",
            }
        ),
        6.0,
    )
    assert [e.price for e in res.events] == [0.66]
    mid = PolymarketDecoder()
    mid.reset(["T"])
    empty = dict(book, asks=[])
    assert mid.decode(json.dumps(empty), 1.0).events == []  # nothing to mark yet
    # best_bid "0" / best_ask "1" mean an empty side
    mid.decode(json.dumps(book), 1.0)
    res = mid.decode(json.dumps(price_change([change("T", "0.5", "3", "BUY", "0.5", "1")], 3)), 2)
    assert [(e.price, e.bid, e.ask) for e in res.events] == [(0.5, 0.5, None)]


# ------------------------------------------------------------------------------ reconnects


async def test_abrupt_close_resubscribes_and_rebuilds_books(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        fake.books["Y1"] = Book(bids=[(0.30, 5)], asks=[(0.34, 5)])
        # a delta the server sends before the new snapshot must be dropped
        early = price_change([change("Y1", "0.70", "100", "BUY", "0.70", "0.71")], fake.next_ts())
        fake.pre_snapshot = [json.dumps(early)]
        fake.abort_all()
        conns = await fake.wait_conns(2)
        assert sorted(conns[1].assets) == ["N1", "Y1"]
        await wait_for(lambda: h.source.decoder.top("Y1")[:2] == (0.30, 0.34))
        # The decoder's book is current at once; its price reaches the bus with the burst.
        await wait_for(lambda: h.prices("Y1")[-1].price == pytest.approx(0.32))
        assert all(p.bid != 0.70 for p in h.prices("Y1"))
        assert h.source.decoder.dropped_deltas >= 1
        assert h.source.counters.reconnects == 1
        assert "backing_off" in h.statuses()
        await wait_for(lambda: h.source.state is SourceState.LIVE)


async def test_silent_freeze_detected_by_data_staleness(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",), stale_after=0.3) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        fake.frozen = True  # socket open, PONGs answered, no data at all
        fake.books["Y1"] = Book(bids=[(0.20, 5)], asks=[(0.24, 5)])
        await wait_for(lambda: "stale" in h.statuses(), timeout=3)
        assert conns[0].pings >= 2  # the heartbeat kept flowing: staleness is judged on data
        fake.frozen = False
        await wait_for(lambda: h.source.decoder.top("Y1")[:2] == (0.20, 0.24), timeout=3)
        assert h.source.counters.reconnects >= 1
        await wait_for(lambda: h.prices("Y1")[-1].price == pytest.approx(0.22))


async def test_garbage_truncated_unknown_frames_counted_not_fatal(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        for raw in (
            "PONG",
            "NO NEW ASSETS",
            "garbage{",
            '{"event_type":"book","asset_id":"Y1","bi',
            '{"event_type":"mystery"}',
        ):
            await fake.send(raw)
        ok = price_change([change("Y1", "0.50", "1", "BUY", "0.50", "0.52")], fake.next_ts())
        await fake.send([{"event_type": "weird"}, {"event_type": "new_market", "id": "9"}, ok])
        # numbers instead of strings: tolerated via the slow path
        await fake.send(
            {
                "event_type": "last_trade_price",
                "asset_id": "Y1",
                "price": 0.47,
                "timestamp": fake.next_ts(),
            }
        )
        await wait_for(lambda: h.source.decoder.last_trade.get("Y1") == 0.47)
        c = h.source.counters
        assert (c.decode_errors, c.unknown, c.rejected) == (2, 2, 0)
        assert h.prices("Y1")[-1].price == pytest.approx(0.51)
        assert len(fake.conns) == 1 and c.reconnects == 0


async def test_legacy_price_change_rejected(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        legacy = {
            "event_type": "price_change",
            "asset_id": "Y1",
            "market": "0xm",
            "changes": [{"price": "0.7", "side": "BUY", "size": "5"}],
            "timestamp": str(fake.next_ts()),
        }
        await fake.send(legacy)
        await wait_for(lambda: h.source.counters.rejected == 1)
        assert h.source.decoder.top("Y1")[:2] == (0.48, 0.52)
        assert len(h.prices("Y1")) == 1


async def test_client_sends_text_ping_and_server_keeps_connection(fake: FakePolymarket) -> None:
    add_q1(fake)
    fake.require_ping = 0.35
    async with Harness(fake, ids=("1",)) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: conns[0].pings >= 5)  # however long a busy machine takes
        assert conns[0].open and conns[0].pings >= 5
        assert "PING" in conns[0].received
        assert h.source.counters.reconnects == 0


async def test_no_heartbeat_gets_1008_and_reconnects(fake: FakePolymarket) -> None:
    add_q1(fake)
    fake.require_ping = 0.2
    async with Harness(fake, ids=("1",), ping_interval=0) as h:
        await fake.wait_conns(2, timeout=3)
        assert fake.conns[0].close_code == 1008
        assert fake.conns[0].pings == 0
        assert h.source.counters.reconnects >= 1
        assert "backing_off" in h.statuses()


# ------------------------------------------------------------------------------ discovery


def test_gamma_json_string_fields_are_decoded() -> None:
    raw = gamma_market("7", "Q?", "YY", "NN", outcomes=("No", "Yes"), prices=("0.2", "0.8"))
    assert isinstance(raw["outcomes"], str) and isinstance(raw["clobTokenIds"], str)
    m = parse_gamma_market(raw)
    assert m is not None
    assert m.outcomes == ("No", "Yes") and m.token_ids == ("NN", "YY")
    assert (m.yes_token, m.no_token) == ("YY", "NN")
    assert m.outcome_prices == (0.2, 0.8)
    assert m.end_ts == 1893456000.0 and m.is_yes_no
    broken = dict(
        raw, outcomePrices="not json", clobTokenIds=["A", "B"], umaResolutionStatuses=None
    )
    m2 = parse_gamma_market(broken)
    assert m2 is not None and m2.outcome_prices == () and m2.token_ids == ("A", "B")
    assert parse_gamma_market({"question": "no id"}) is None


@pytest.mark.parametrize(
    ("closed", "prices", "expected"),
    [
        (True, ("1", "0"), 1.0),
        (True, ("0", "1"), 0.0),
        (True, ("0.5", "0.5"), 0.5),
        (True, ("0", "0"), None),  # legacy: not resolved yet
        (True, ("0.97", "0.03"), None),
        (False, ("1", "0"), None),  # prices at 1 but not closed
    ],
)
def test_gamma_payout(closed: bool, prices: tuple[str, str], expected: float | None) -> None:
    m = parse_gamma_market(gamma_market("1", "Q", "Y", "N", closed=closed, prices=prices))
    assert m is not None
    assert gamma_payout(m) == expected


async def test_discovery_top_n_by_volume(fake: FakePolymarket) -> None:
    fake.add_market(gamma_market("10", "Ten?", "Y10", "N10", volume_24h=5000))
    fake.add_market(
        gamma_market("11", "Eleven?", "Y11", "N11", volume_24h=9000, outcomes=("No", "Yes"))
    )
    fake.add_market(
        gamma_market("12", "No book", "Y12", "N12", volume_24h=8000, enable_order_book=False)
    )
    fake.add_market(
        gamma_market("13", "Lakers?", "L", "C", volume_24h=7000, outcomes=("Lakers", "Celtics"))
    )
    fake.add_market(gamma_market("14", "Small", "Y14", "N14", volume_24h=100))
    fake.add_market(gamma_market("15", "Closed", "Y15", "N15", volume_24h=6000, closed=True))
    async with Harness(fake, top_n=2) as h:
        await wait_for(lambda: len(h.of(MarketListed)) == 2)
        listed = {m.question_id: (m.yes_asset, m.no_asset) for m in h.of(MarketListed)}
        assert listed == {"11": ("Y11", "N11"), "10": ("Y10", "N10")}
        conns = await fake.wait_conns(1)
        assert sorted(conns[0].assets) == ["N10", "N11", "Y10", "Y11"]
    params = dict(next(q for p, q in fake.http_requests if p == "/markets"))
    assert params["order"] == "volume_24hr" and params["ascending"] == "false"
    assert params["active"] == "true" and params["closed"] == "false"


async def test_discovery_min_volume_and_slugs(fake: FakePolymarket) -> None:
    fake.add_market(gamma_market("10", "Ten?", "Y10", "N10", volume_24h=5000))
    fake.add_market(gamma_market("11", "Eleven?", "Y11", "N11", volume_24h=9000))
    async with Harness(fake, top_n=10, min_volume_24h=6000) as h:
        await wait_for(lambda: len(h.of(MarketListed)) == 1)
        await asyncio.sleep(0.05)
        assert [m.question_id for m in h.of(MarketListed)] == ["11"]
    fake.add_market(
        gamma_market("13", "Lakers?", "L", "C", outcomes=("Lakers", "Celtics"), slug="lal-bos")
    )
    async with Harness(fake, slugs=("lal-bos", "missing-slug")) as h:
        await wait_for(lambda: len(h.of(MarketListed)) == 1)
        m = h.of(MarketListed)[0]
        assert (m.question_id, m.yes_asset, m.no_asset) == ("13", "L", "C")
        assert m.question == "Lakers? [yes = Lakers, no = Celtics]"


async def test_fixed_questions_skip_discovery(fake: FakePolymarket) -> None:
    fake.books["Y1"] = BOOK_Y1
    fake.books["N1"] = BOOK_N1
    questions = [{"id": "1", "question": "Fixed?", "yes": "Y1", "no": "N1"}]
    async with Harness(fake, questions=questions) as h:
        await wait_for(lambda: bool(h.prices("Y1")))
        assert [m.question for m in h.of(MarketListed)] == ["Fixed?"]
    assert not [
        p
        for p, q in fake.http_requests
        if p.startswith("/markets") and ("order", "volume_24hr") in q
    ]


async def test_rediscovery_subscribes_new_market_live(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, discovery_interval=0.2) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        fake.add_market(
            gamma_market("2", "Will B?", "Y2", "N2", volume_24h=10),
            {"Y2": Book(bids=[(0.1, 1)], asks=[(0.2, 1)]), "N2": Book(bids=[(0.8, 1)])},
        )
        await wait_for(lambda: bool(h.prices("Y2")), timeout=3)
        assert h.prices("Y2")[-1].price == pytest.approx(0.15)
        assert h.prices("N2")[-1].price == pytest.approx(0.8)  # one-sided: the other side
        sub = [json.loads(m) for m in conns[0].received if "operation" in m]
        assert sub == [
            {"assets_ids": ["Y2", "N2"], "operation": "subscribe", "custom_feature_enabled": True}
        ]
        assert len(fake.conns) == 1 and h.source.counters.reconnects == 0
        assert [m.question_id for m in h.of(MarketListed)] == ["1", "2"]
        assert [sorted(x) for x in h.histories] == [["N1", "Y1"], ["N2", "Y2"]]


async def test_sharding_over_several_connections(fake: FakePolymarket) -> None:
    for i in range(4):
        fake.add_market(
            gamma_market(str(i), f"Q{i}?", f"Y{i}", f"N{i}", volume_24h=100 + i),
            {f"Y{i}": Book(bids=[(0.4, 1)], asks=[(0.6, 1)]), f"N{i}": Book(bids=[(0.4, 1)])},
        )
    async with Harness(fake, max_per_connection=3) as h:
        conns = await fake.wait_conns(3)
        await wait_for(lambda: h.source.state is SourceState.LIVE)
        assert h.source.streaming.shard_count == 3
        assert all(len(c.assets) <= 3 for c in conns)
        assert sorted(a for c in conns for a in c.assets) == sorted(
            [f"Y{i}" for i in range(4)] + [f"N{i}" for i in range(4)]
        )
        await wait_for(lambda: len({e.asset for e in h.of(PriceEvent)}) == 8)


# ------------------------------------------------------------------------------ resolution


def resolved_frame(qid: str, yes: str, no: str, winner: str, outcome: str) -> dict[str, Any]:
    return {
        "event_type": "market_resolved",
        "id": qid,
        "market": f"0xcond{qid}",
        "assets_ids": [yes, no],
        "winning_asset_id": winner,
        "winning_outcome": outcome,
        "timestamp": "1786604099000",
    }


def close_market(fake: FakePolymarket, qid: str, prices: tuple[str, str]) -> None:
    fake.markets[qid]["closed"] = True
    fake.markets[qid]["outcomePrices"] = json.dumps(list(prices))


async def test_resolution_from_ws_event_only(fake: FakePolymarket) -> None:
    add_q1(fake)
    async with Harness(fake, ids=("1",)) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        await fake.send(resolved_frame("1", "Y1", "N1", "N1", "No"))
        await wait_for(lambda: bool(h.of(ResolutionEvent)))
        (ev,) = h.of(ResolutionEvent)
        assert (ev.question_id, ev.payouts, ev.source) == (
            "1",
            {"Y1": 0.0, "N1": 1.0},
            "polymarket.ws",
        )
        assert ev.ts == 1786604099.0
        # the resolved question's tokens are unsubscribed
        await wait_for(lambda: any('"unsubscribe"' in m for m in conns[0].received))


async def test_resolution_from_gamma_poll_only(fake: FakePolymarket) -> None:
    add_q1(fake)
    fake.add_market(gamma_market("2", "B?", "Y2", "N2"))
    fake.add_market(gamma_market("3", "C?", "Y3", "N3"))
    async with Harness(fake, ids=("1", "2", "3"), resolution_poll_interval=0.1) as h:
        await fake.wait_conns(1)
        await asyncio.sleep(0.15)
        assert h.of(ResolutionEvent) == []
        close_market(fake, "1", ("1", "0"))
        close_market(fake, "2", ("0.5", "0.5"))
        close_market(fake, "3", ("0", "0"))  # legacy: not resolved yet
        await wait_for(lambda: len(h.of(ResolutionEvent)) == 2)
        await asyncio.sleep(0.3)
        evs = {e.question_id: e for e in h.of(ResolutionEvent)}
        assert set(evs) == {"1", "2"}
        assert evs["1"].payouts == {"Y1": 1.0, "N1": 0.0}
        assert evs["2"].payouts == {"Y2": 0.5, "N2": 0.5}
        assert evs["1"].source == "polymarket.gamma"
        close_market(fake, "3", ("0", "1"))
        await wait_for(lambda: len(h.of(ResolutionEvent)) == 3)
        assert h.of(ResolutionEvent)[-1].payouts == {"Y3": 0.0, "N3": 1.0}


async def test_resolution_both_paths_paid_once(fake: FakePolymarket) -> None:
    add_q1(fake)
    fake.add_market(gamma_market("2", "B?", "Y2", "N2"))
    async with Harness(fake, ids=("1", "2"), resolution_poll_interval=0.1) as h:
        await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        # WS first, then the poll sees it too
        await fake.send(resolved_frame("1", "Y1", "N1", "Y1", "Yes"))
        close_market(fake, "1", ("1", "0"))
        # poll first, then the WS event arrives
        close_market(fake, "2", ("0", "1"))
        await wait_for(lambda: {e.question_id for e in h.of(ResolutionEvent)} == {"1", "2"})
        await fake.send(resolved_frame("2", "Y2", "N2", "N2", "No"))
        await asyncio.sleep(0.4)
        evs = h.of(ResolutionEvent)
        assert sorted(e.question_id for e in evs) == ["1", "2"]
        assert {e.question_id: e.payouts for e in evs} == {
            "1": {"Y1": 1.0, "N1": 0.0},
            "2": {"Y2": 0.0, "N2": 1.0},
        }


# ------------------------------------------------------------------------------ REST helpers


async def test_prices_history_backfill_and_midpoint(fake: FakePolymarket) -> None:
    fake.history["Y1"] = [{"t": 200, "p": 0.5}, {"t": 100, "p": 0.4}, {"bad": 1}]
    hist = await backfill_history(["Y1", "Z"], clob_url=fake.http_url, interval="1d", fidelity=5)
    assert hist == {"Y1": [(100.0, 0.4), (200.0, 0.5)], "Z": []}
    req = dict(next(q for p, q in fake.http_requests if p == "/prices-history"))
    assert req == {"market": "Y1", "interval": "1d", "fidelity": "5"}
    fake.midpoints["A"] = {"mid": "0.55"}
    fake.midpoints["B"] = {"mid_price": "0.45"}
    assert await fetch_midpoint("A", clob_url=fake.http_url) == 0.55
    assert await fetch_midpoint("B", clob_url=fake.http_url) == 0.45
    assert await fetch_midpoint("C", clob_url=fake.http_url) is None


async def test_source_backfill_uses_settings(fake: FakePolymarket) -> None:
    add_q1(fake)
    fake.history["Y1"] = [{"t": 1, "p": 0.3}]
    async with Harness(fake, ids=("1",), history_interval="6h", history_fidelity=10) as h:
        await wait_for(lambda: bool(h.histories))
        assert h.histories[0]["Y1"] == [(1.0, 0.3)] and h.histories[0]["N1"] == []
        assert ("interval", "6h") in next(
            q for p, q in fake.http_requests if p == "/prices-history"
        )
        hist = await h.source.backfill_history()
        assert set(hist) == {"Y1", "N1"}


def test_decoder_bench_smoke() -> None:
    from bench.bench_polymarket_decode import run

    res = run(n_frames=50, repeat=1)
    assert res["entries"] == 50 * 5 * 4
    assert res["full_entries_per_s"] > 0 and res["floor_untyped_entries_per_s"] > 0
    assert res["price_events_per_frame"] > 0
