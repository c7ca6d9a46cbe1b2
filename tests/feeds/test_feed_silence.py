"""A frozen stream (control frames flowing, no data) is caught by the data-silence watchdog."""

from __future__ import annotations

import asyncio

from feeds.alpaca import AlpacaSettings
from feeds.finnhub import FinnhubSettings
from feeds.polymarket.source import PolymarketSettings
from feeds.yahoo import YahooSettings
from tests.fakes.polymarket_server import FakePolymarket
from tests.fakes.yahoo_server import FakeYahoo
from tests.feeds.test_polymarket import Harness, add_q1
from tests.feeds.test_polymarket import fake as fake
from tests.feeds.test_yahoo import fake_conns, running, yahoo_source
from tests.helpers import collecting_bus, wait_for


def test_every_stream_reconnects_after_60s_without_data_by_default() -> None:
    for cls in (PolymarketSettings, YahooSettings, AlpacaSettings, FinnhubSettings):
        s = cls()
        assert s.silent_after == 60.0
        assert s.stream_options()["silent_after"] == 60.0
    assert PolymarketSettings(silent_after="0s").stream_options()["silent_after"] is None


async def test_pongs_are_not_data_frozen_polymarket_reconnects(fake: FakePolymarket) -> None:
    add_q1(fake)
    # per-key staleness as long as the production default: only data silence can catch this
    async with Harness(fake, ids=("1",), stale_after=600.0, silent_after=0.5,
                       dead_after=0.3, ping_interval=0.05) as h:
        conns = await fake.wait_conns(1)
        await wait_for(lambda: bool(h.prices("Y1")))
        fake.frozen = True  # socket open, PONGs answered, no book / price_change at all
        await wait_for(lambda: h.source.counters.reconnects >= 1, timeout=5)
        assert conns[0].pings >= 5  # the heartbeat kept flowing (and dead_after never fired)
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
