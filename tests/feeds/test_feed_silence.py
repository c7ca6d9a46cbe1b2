"""A frozen stream (control frames flowing, no data) is caught by the data-silence watchdog."""

from __future__ import annotations

import asyncio
import time

from feeds.alpaca import AlpacaSettings
from feeds.connection import StreamingSource, silence_trigger, silence_worst_case
from feeds.finnhub import FinnhubSettings
from feeds.polymarket.source import PolymarketSettings
from feeds.source_contract import DEFAULT_WS_OPTIONS
from feeds.yahoo import YahooSettings, YahooStreamAdapter
from tests.fakes.polymarket_server import FakePolymarket
from tests.fakes.yahoo_server import FakeYahoo
from tests.feeds.test_polymarket import Harness, add_q1
from tests.feeds.test_polymarket import fake as fake
from tests.feeds.test_yahoo import fake_conns, running, settings_for, yahoo_source
from tests.helpers import collecting_bus, wait_for


def test_every_stream_reconnects_after_60s_without_data_by_default() -> None:
    for cls in (PolymarketSettings, YahooSettings, AlpacaSettings, FinnhubSettings):
        s = cls()
        assert s.silent_after == 60.0
        assert s.stream_options()["silent_after"] == 60.0
    assert PolymarketSettings(silent_after="0s").stream_options()["silent_after"] is None


def test_default_worst_case_from_last_data_to_reconnect_is_within_silent_after() -> None:
    close_timeout = DEFAULT_WS_OPTIONS["close_timeout"]
    for cls in (PolymarketSettings, YahooSettings, AlpacaSettings, FinnhubSettings):
        s = cls()
        bound = dict(tick=s.watchdog_interval, first_backoff=s.backoff_initial,
                     close_timeout=close_timeout)
        assert silence_worst_case(s.silent_after, **bound) <= s.silent_after == 60.0
        assert silence_trigger(s.silent_after, **bound) == 56.0  # 60 - tick - backoff - close
    # too short for the room: half of it (the bound cannot hold)
    assert silence_trigger(0.2, tick=1.0, first_backoff=1.0, close_timeout=2.0) == 0.1


async def test_pongs_are_not_data_frozen_polymarket_reconnects(fake: FakePolymarket) -> None:
    add_q1(fake)
    # per-key staleness as long as the production default: only data silence can catch this
    async with Harness(fake, ids=("1",), stale_after=600.0, silent_after=0.5,
                       dead_after=0.3, ping_interval=0.05) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        pings_before = conns[0].pings
        fake.frozen = True  # socket open, PONGs answered, no book / price_change at all
        await wait_for(lambda: h.source.counters.reconnects >= 1, timeout=30)
        assert conns[0].pings > pings_before  # the heartbeat kept flowing while frozen
        assert "stale" in h.statuses()
        fake.frozen = False
        await fake.wait_conns(2)  # ...and every key was subscribed again on a new connection
        assert fake.conns[-1].assets == ["Y1", "N1"]
        await wait_for(lambda: h.source.state.value == "live")


async def test_equity_silence_only_counts_while_the_market_is_open() -> None:
    srv = FakeYahoo()
    await srv.start()
    try:
        srv.snapshot_on_subscribe = False  # no data at all, but the socket stays open
        bus, _ = collecting_bus()
        closed = yahoo_source(srv, ["AAPL"], bus, is_open=lambda t: False,
                              stale_after=600.0, silent_after=0.2)
        async with running(closed):
            await fake_conns(srv, 1)
            await asyncio.sleep(0.8)
            assert len(srv.conns) == 1  # closed market: quiet is normal
        opened = yahoo_source(srv, ["AAPL"], bus, is_open=lambda t: True,
                              stale_after=600.0, silent_after=0.2)
        async with running(opened):
            await fake_conns(srv, 3, 3.0)  # open market: silence -> reconnect + resubscribe
            assert srv.conns[-1].symbols == ["AAPL"]
    finally:
        await srv.stop()


async def test_frozen_stream_reconnects_within_silent_after() -> None:
    srv = FakeYahoo()
    await srv.start()
    try:
        srv.stream_interval = 0.05
        bus, _ = collecting_bus()
        settings = settings_for(srv, stale_after=600.0, silent_after=1.0, watchdog_interval=0.05,
                                backoff_initial=0.05)
        src = StreamingSource(YahooStreamAdapter(settings), ["AAPL"], bus=bus, now=time.time,
                              **settings.stream_options(),
                              ws_options={"user_agent_header": settings.user_agent,
                                          "close_timeout": 0.3})
        async with running(src):
            await fake_conns(srv, 1)
            await wait_for(lambda: src.counters.data_messages >= 3)
            srv.frozen = True  # socket open, no data
            await wait_for(lambda: len(srv.attempts) >= 2, timeout=30)  # hang guard only
            last_data = src.counters.last_data_ts - (time.time() - time.monotonic())
            assert srv.attempts[1] - last_data <= 1.0  # the reconnect attempt within silent_after
    finally:
        await srv.stop()
