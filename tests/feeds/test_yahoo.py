"""Yahoo streamer (protobuf, sharding, staleness) and chart REST fallback against local fakes."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import struct
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from daemon.core.bus import Bus
from daemon.core.events import Event, PriceEvent, SourceStatus
from feeds.connection import StreamingSource
from feeds.equities import EquitySourcesSettings, build_equity_sources, build_yahoo_source
from feeds.source_contract import Source, SourceState
from feeds.yahoo import (
    ChartResult,
    RateLimited,
    YahooRestFallback,
    YahooSettings,
    YahooStreamAdapter,
    backfill_daily_closes,
    fetch_chart,
    parse_chart,
)
from feeds.yahoo_proto import (
    PricingData,
    ProtoDecodeError,
    clean_float32,
    decode_pricing,
    decode_pricing_b64,
    encode_pricing,
)
from tests.fakes.yahoo_server import FakeYahoo, chart_payload, pricing_frame
from tests.helpers import HANG_GUARD, MaxRng, collecting_bus, wait_for

EXAMPLE = "CgRES05HFa5HxEEYkJu3uYxoKgNOTVMwCDgBRet8lUBIpqS0BmXwKIw/2AEE"




@pytest.fixture
async def fake() -> AsyncIterator[FakeYahoo]:
    server = FakeYahoo()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def settings_for(fake: FakeYahoo, **kw: Any) -> YahooSettings:
    base: dict[str, Any] = dict(
        ws_url=fake.ws_url,
        chart_url=fake.chart_url,
        stale_after=0.3,
        watchdog_interval=0.05,
        backoff_initial=0.05,
        backoff_max=0.2,
        resubscribe_interval=60.0,
        open_timeout=2.0,
        rest_timeout=2.0,
    )
    base.update(kw)
    return YahooSettings(**base)




@contextlib.asynccontextmanager
async def running(source: Any) -> AsyncIterator[Any]:
    task = asyncio.get_running_loop().create_task(source.run())
    try:
        yield source
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def prices(seen: list[Event], source: str | None = None) -> list[PriceEvent]:
    return [e for e in seen if isinstance(e, PriceEvent) and (source is None or e.source == source)]


def yahoo_source(
    fake: FakeYahoo,
    symbols: list[str],
    bus: Bus,
    *,
    is_open: Callable[[float], bool] = lambda t: True,
    **kw: Any,
) -> StreamingSource:
    return build_yahoo_source(
        settings_for(fake, **kw), symbols, bus=bus, now=time.time, is_open=is_open
    )


# ------------------------------------------------------------------------------ protobuf


def test_example_payload_decodes_exactly() -> None:
    pd = decode_pricing_b64(EXAMPLE)
    assert pd.id == "DKNG"
    assert clean_float32(pd.price) == 24.535
    assert pd.time == 1788377229000
    assert pd.exchange == "NMS"
    assert pd.quote_type == 8
    assert pd.market_hours == 1
    assert base64.b64encode(encode_pricing(pd)).decode() == EXAMPLE


def test_proto_round_trip_negative_and_unknown_fields() -> None:
    pd = PricingData(
        id="X",
        price=1.5,
        time=-5,
        day_volume=123456789012,
        change=-0.25,
        bid=1.25,
        ask=1.75,
        quote_type=41,
    )
    raw = encode_pricing(pd)
    # an unknown varint field 99 and an unknown length-delimited field 100 are skipped
    extra = bytes([0x98, 0x06, 0x07]) + bytes([0xA2, 0x06, 0x02]) + b"hi"
    out = decode_pricing(raw + extra)
    assert out.time == -5 and out.day_volume == 123456789012
    assert out.change == -0.25 and out.bid == 1.25 and out.ask == 1.75 and out.quote_type == 41


@pytest.mark.parametrize(
    "raw",
    [
        base64.b64decode(EXAMPLE)[:-1],  # truncated varint
        base64.b64decode(EXAMPLE)[:3],  # truncated string
        bytes([0x15, 0x00, 0x00]),  # truncated fixed32
        bytes([0x0B]),  # wire type 3 (group)
        bytes([0x08] + [0xFF] * 11),  # varint too long
    ],
)
def test_proto_malformed_raises(raw: bytes) -> None:
    with pytest.raises(ProtoDecodeError):
        decode_pricing(raw)


def test_clean_float32() -> None:
    f32 = struct.unpack("<f", struct.pack("<f", 24.535))[0]
    assert f32 != 24.535 and clean_float32(f32) == 24.535
    f32 = struct.unpack("<f", struct.pack("<f", 12345.67))[0]
    assert clean_float32(f32) == 12345.67
    assert clean_float32(0.0) == 0.0


def test_adapter_decode() -> None:
    adapter = YahooStreamAdapter(YahooSettings(stale_after=120.0))
    now = 1788377229.5
    res = adapter.decode(json.dumps({"type": "pricing", "message": EXAMPLE}), now)
    (ev,) = res.events
    assert isinstance(ev, PriceEvent)
    assert (ev.market, ev.asset, ev.price, ev.ts, ev.recv_ts, ev.source) == (
        "equity",
        "DKNG",
        24.535,
        1788377229.0,
        now,
        "yahoo",
    )
    assert ev.bid is None and ev.ask is None
    assert res.data_keys == ["DKNG"]
    # the same snapshot three days later is still published (its own time) but is not fresh data
    res = adapter.decode(json.dumps({"type": "pricing", "message": EXAMPLE}), now + 3 * 86400)
    assert len(res.events) == 1 and res.events[0].ts == 1788377229.0 and res.data_keys == []
    assert adapter.decode("not json", now).decode_errors == 1
    assert adapter.decode('{"type":"pricing","message":"!!!"}', now).decode_errors == 1
    cut = base64.b64encode(base64.b64decode(EXAMPLE)[:5]).decode()  # string field cut short
    assert adapter.decode(json.dumps({"type": "pricing", "message": cut}), now).decode_errors == 1
    assert adapter.decode('{"type":"heartbeat"}', now).unknown == 1
    assert adapter.decode("[1,2]", now).decode_errors == 1
    zero = base64.b64encode(encode_pricing(PricingData(id="Z", price=0.0, time=1))).decode()
    assert adapter.decode(json.dumps({"type": "pricing", "message": zero}), now).decode_errors == 1
    frame = pricing_frame("AAPL", 190.12, int(now * 1000), bid=190.11, ask=190.13)
    (ev,) = adapter.decode(frame, now).events
    assert (ev.price, ev.bid, ev.ask) == (190.12, 190.11, 190.13)


# ------------------------------------------------------------------------------ streaming


async def test_stream_normal_flow_and_periodic_resubscribe(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    fake.prices = {"AAPL": 190.5, "MSFT": 410.25}
    src = yahoo_source(fake, ["AAPL", "MSFT"], bus, resubscribe_interval=0.1)
    async with running(src):
        (conn,) = await fake_conns(fake, 1)
        await wait_for(lambda: {e.asset for e in prices(seen)} == {"AAPL", "MSFT"})
        assert json.loads(conn.received[0]) == {"subscribe": ["AAPL", "MSFT"]}
        await wait_for(lambda: conn.subscribes >= 3)
        assert all(json.loads(m) == {"subscribe": ["AAPL", "MSFT"]} for m in conn.received)
        await fake.push("AAPL", 191.0)
        await wait_for(lambda: any(e.price == 191.0 for e in prices(seen)))
        assert src.state is SourceState.LIVE
        ev = next(e for e in prices(seen) if e.asset == "MSFT")
        assert ev.price == 410.25 and ev.source == "yahoo" and abs(ev.ts - time.time()) < HANG_GUARD
    statuses = [e.state for e in seen if isinstance(e, SourceStatus)]
    assert statuses[:2] == ["connecting", "live"]


async def fake_conns(fake: FakeYahoo, n: int, timeout: float = 5.0) -> list[Any]:
    await wait_for(lambda: sum(c.subscribed.is_set() for c in fake.conns) >= n, timeout)
    return [c for c in fake.conns if c.subscribed.is_set()]


async def test_abrupt_close_reconnects_and_resubscribes(fake: FakeYahoo) -> None:
    bus, _seen = collecting_bus()
    fake.stream_interval = 0.05
    src = yahoo_source(fake, ["AAPL", "MSFT", "NVDA"], bus)
    async with running(src):
        await fake_conns(fake, 1)
        fake.abort_all()
        conns = await fake_conns(fake, 2)
        assert sorted(conns[1].symbols) == ["AAPL", "MSFT", "NVDA"]
        await wait_for(lambda: src.state is SourceState.LIVE)
        assert src.counters.reconnects >= 1


async def test_silent_freeze_reconnects(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    fake.stream_interval = 0.05
    src = yahoo_source(fake, ["AAPL"], bus)
    async with running(src):
        await fake_conns(fake, 1)
        await asyncio.sleep(0.2)
        fake.frozen = True  # socket stays open, data stops
        await wait_for(
            lambda: any(isinstance(e, SourceStatus) and e.state == "stale" for e in seen), 3.0
        )
        fake.frozen = False
        conns = await fake_conns(fake, 2, 3.0)
        assert conns[1].symbols == ["AAPL"]
        assert src.counters.reconnects >= 1


async def test_days_old_snapshot_is_not_fresh(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    fake.snapshot_age = 3 * 86400.0  # only a weekend-old snapshot, then silence
    src = yahoo_source(fake, ["AAPL"], bus)
    async with running(src):
        await fake_conns(fake, 1)
        await wait_for(lambda: len(prices(seen)) >= 1)
        assert time.time() - prices(seen)[0].ts > 2 * 86400  # published with its own time
        await fake_conns(fake, 2, 3.0)  # ...but did not count as data: stale -> reconnect


async def test_no_staleness_alarm_while_market_closed(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    fake.snapshot_age = 3 * 86400.0
    src = yahoo_source(fake, ["AAPL"], bus, is_open=lambda t: False)
    async with running(src):
        await fake_conns(fake, 1)
        await asyncio.sleep(0.9)  # three times stale_after
        assert len(fake.conns) == 1 and src.state is SourceState.LIVE
        assert not any(isinstance(e, SourceStatus) and e.state == "stale" for e in seen)


async def test_garbage_truncated_unknown_frames_counted(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    fake.snapshot_on_subscribe = False
    src = yahoo_source(fake, ["AAPL"], bus, stale_after=30.0)
    async with running(src):
        await fake_conns(fake, 1)
        truncated = base64.b64encode(base64.b64decode(EXAMPLE)[:-2]).decode()
        for raw in (
            "garbage{",
            json.dumps({"type": "pricing", "message": truncated}),
            json.dumps({"type": "news", "message": "x"}),
            b"\x00\x01binary",
        ):
            await fake.send(raw)  # type: ignore[arg-type]
        await fake.push("AAPL", 190.0)
        await wait_for(lambda: len(prices(seen)) == 1)
        assert src.counters.decode_errors == 3 and src.counters.unknown == 1
        assert src.counters.messages == 5 and src.state is SourceState.LIVE
        assert len(fake.conns) == 1


async def test_250_symbols_use_three_connections(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    symbols = [f"S{i:03d}" for i in range(250)]
    src = yahoo_source(fake, symbols, bus, stale_after=30.0)
    assert src.shard_count == 3
    async with running(src):
        conns = await fake_conns(fake, 3)
        await wait_for(lambda: len({e.asset for e in prices(seen)}) == 250)
        assert len(fake.conns) == 3
        assert all(len(c.symbols) <= 100 for c in conns)
        assert sorted(s for c in conns for s in c.symbols) == symbols
        await wait_for(lambda: src.state is SourceState.LIVE)


async def test_http_429_on_upgrade_backs_off_longer(fake: FakeYahoo) -> None:
    from websockets.datastructures import Headers
    from websockets.exceptions import InvalidStatus
    from websockets.http11 import Response

    adapter = YahooStreamAdapter(settings_for(fake))
    exc = InvalidStatus(Response(429, "Too Many Requests", Headers()))
    assert adapter.backoff_penalty(exc, None) == 4.0
    assert adapter.backoff_penalty(ConnectionError(), None) == 1.0

    async def gaps(status: int | None) -> float:
        fake.attempts.clear()
        fake.reject_status = status
        bus = Bus()
        src = StreamingSource(
            YahooStreamAdapter(settings_for(fake)),
            ["AAPL"],
            bus=bus,
            now=time.time,
            stale_after=30.0,
            rng=MaxRng(),
            backoff=settings_for(fake, backoff_max=1.0).backoff_policy(),
        )
        with capture_logs() as logs:
            async with running(src):
                await wait_for(lambda: len(fake.attempts) >= 2)
        # The delay chosen after the first failure (the wall-clock gap only adds load to it).
        delay = next(e["delay"] for e in logs if e["event"] == "feed shard disconnected")
        assert fake.attempts[1] - fake.attempts[0] >= delay - 0.01
        return float(delay)

    plain = await gaps(503)
    limited = await gaps(429)
    assert plain == 0.05  # MaxRng: cap = initial 0.05
    assert limited == 0.2  # cap = 4 x 0.05


# ------------------------------------------------------------------------------ REST


DAY = 86400


async def test_fetch_chart_with_nulls_and_browser_agent(fake: FakeYahoo) -> None:
    days = [(1_700_000_000 + i * DAY, c) for i, c in enumerate([10.0, None, 12.5, None, 13.0])]
    fake.charts["AAPL"] = chart_payload("AAPL", 13.25, 1_700_400_000, days)
    async with aiohttp.ClientSession() as session:
        res = await fetch_chart(session, settings_for(fake), "AAPL")
        assert isinstance(res, ChartResult)
        assert res.last_price == 13.25 and res.last_time == 1_700_400_000
        assert res.daily_closes == [
            (1_700_000_000, 10.0),
            (1_700_000_000 + 2 * DAY, 12.5),
            (1_700_000_000 + 4 * DAY, 13.0),
        ]
        _symbol, query, ua = fake.chart_requests[-1]
        assert query == {"range": "5d", "interval": "1d"} and ua.startswith("Mozilla/")
        with pytest.raises(RateLimited):
            await fetch_chart(session, settings_for(fake, user_agent="python-aiohttp"), "AAPL")


def test_parse_chart_edge_cases() -> None:
    with pytest.raises(Exception, match="no chart result"):
        parse_chart("X", {"chart": {"result": None, "error": {"description": "No data"}}})
    res = parse_chart("X", {"chart": {"result": [{"meta": {"regularMarketPrice": None}}]}})
    assert res.last_price is None and res.daily_closes == []


async def test_backfill_daily_closes(fake: FakeYahoo) -> None:
    now = time.time()
    start = int(now) - 5 * DAY
    today = int(now) - 3600
    fake.charts["AAPL"] = chart_payload(
        "AAPL",
        5.0,
        int(now),
        [(start, 1.0), (start + DAY, None), (start + 2 * DAY, 3.0), (today, 5.0)],
        session=(today, int(now) + 3600),
    )
    fake.charts["MSFT"] = chart_payload("MSFT", 9.0, int(now), [(start, 8.0), (today, 9.0)])
    fake.chart_fail = [429]  # the first request is rate-limited, then retried
    async with aiohttp.ClientSession() as session:
        out = await backfill_daily_closes(
            session,
            settings_for(fake, backoff_initial=0.01),
            ["AAPL", "MSFT", "NOPE"],
            now=time.time,
        )
    assert out["AAPL"] == [(start, 1.0), (start + 2 * DAY, 3.0)]  # nulls and today's bar left out
    assert out["MSFT"] == [(start, 8.0), (today, 9.0)]  # no session info: kept as is
    assert out["NOPE"] == []


async def test_rest_fallback_polls_only_stale_symbols_while_open(fake: FakeYahoo) -> None:
    bus, seen = collecting_bus()
    now = time.time()
    for s in ("AAPL", "MSFT"):
        fake.charts[s] = chart_payload(s, 50.0, int(now), [(int(now) - DAY, 49.0)])
    market_open = [False]
    s = settings_for(fake, rest_check_interval=0.05, rest_poll_interval=10.0)
    fb = YahooRestFallback(
        s,
        ["AAPL", "MSFT"],
        bus=bus,
        now=time.time,
        is_open=lambda t: market_open[0],
        stale_after=0.2,
    )

    async def stream_aapl() -> None:
        while True:
            bus.publish_nowait(
                PriceEvent(
                    ts=time.time(),
                    recv_ts=time.time(),
                    market="equity",
                    asset="AAPL",
                    price=1.0,
                    source="yahoo",
                )
            )
            await asyncio.sleep(0.05)

    feeder = asyncio.get_running_loop().create_task(stream_aapl())
    try:
        async with running(fb):
            await asyncio.sleep(0.4)
            assert fake.chart_requests == []  # market closed: no polling at all
            market_open[0] = True
            await wait_for(lambda: len(prices(seen, "yahoo-rest")) == 1, 3.0)
            await asyncio.sleep(0.3)
    finally:
        feeder.cancel()
    (ev,) = prices(seen, "yahoo-rest")
    assert (ev.asset, ev.price, ev.ts) == ("MSFT", 50.0, float(int(now)))
    assert [r[0] for r in fake.chart_requests] == ["MSFT"]
    assert fb.state is SourceState.LIVE


async def test_build_equity_sources_default_is_yahoo_with_fallback() -> None:
    bus = Bus()
    srcs = build_equity_sources(
        EquitySourcesSettings(), ["AAPL", "MSFT"], bus=bus, now=time.time, is_open=lambda t: True
    )
    assert [s.name for s in srcs] == ["yahoo", "yahoo-rest"]
    assert all(isinstance(s, Source) for s in srcs)
    assert isinstance(srcs[0], StreamingSource) and srcs[0].shard_count == 1
    srcs = build_equity_sources(
        EquitySourcesSettings(rest_fallback=False),
        ["AAPL"],
        bus=bus,
        now=time.time,
        is_open=lambda t: True,
    )
    assert [s.name for s in srcs] == ["yahoo"]
    with pytest.raises(ValueError):
        EquitySourcesSettings(provider="bloomberg")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        YahooSettings(unknown=1)  # type: ignore[call-arg]
