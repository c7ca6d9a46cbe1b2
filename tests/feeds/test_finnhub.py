"""Finnhub trades WebSocket against a local fake: flow, duplicates, reconnects, staleness."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daemon.core.bus import Bus
from daemon.core.events import Event, PriceEvent, SourceStatus
from feeds.alpaca import MissingCredentialError
from feeds.connection import StreamingSource
from feeds.equities import EquitySourcesSettings, build_equity_sources
from feeds.finnhub import (
    FinnhubSettings,
    FinnhubStreamAdapter,
    TradeDeduper,
    build_finnhub_source,
    redact_text,
    redact_url,
)
from feeds.source_contract import SourceState
from tests.fakes.finnhub_server import FakeFinnhub, trades_frame
from tests.helpers import collecting_bus, wait_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeFinnhub]:
    server = FakeFinnhub()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FH_TEST_KEY", "TOKEN")
    return "TOKEN"


def settings_for(fake: FakeFinnhub, **kw: Any) -> FinnhubSettings:
    base: dict[str, Any] = dict(
        ws_url=fake.url,
        key_env="FH_TEST_KEY",
        stale_after=0.3,
        watchdog_interval=0.05,
        backoff_initial=0.05,
        backoff_max=0.2,
        open_timeout=2.0,
    )
    base.update(kw)
    return FinnhubSettings(**base)




@contextlib.asynccontextmanager
async def running(source: Any) -> AsyncIterator[Any]:
    task = asyncio.get_running_loop().create_task(source.run())
    try:
        yield source
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def prices(seen: list[Event]) -> list[PriceEvent]:
    return [e for e in seen if isinstance(e, PriceEvent)]


def make(fake: FakeFinnhub, symbols: list[str], bus: Bus, **kw: Any) -> StreamingSource:
    is_open = kw.pop("is_open", lambda t: True)
    return build_finnhub_source(
        settings_for(fake, **kw), symbols, bus=bus, now=time.time, is_open=is_open
    )


# ------------------------------------------------------------------------------ unit


def test_decode_trades_ping_error_unknown_and_duplicates() -> None:
    adapter = FinnhubStreamAdapter(FinnhubSettings(stale_after=120.0), "secret-token")
    now = 1672348888.0
    frame = trades_frame(("TSLA", 122.1, 1672348887195, 1.0), ("AAPL", 130.0, 1672348887000, 5))
    res = adapter.decode(frame, now)
    a, _b = res.events
    assert isinstance(a, PriceEvent)
    assert (a.asset, a.price, a.ts, a.recv_ts, a.source) == (
        "TSLA",
        122.1,
        1672348887.195,
        now,
        "finnhub",
    )
    assert sorted(res.data_keys) == ["AAPL", "TSLA"]
    # the same trades again (Finnhub repeats trades) are dropped; a new one passes
    res = adapter.decode(
        trades_frame(("TSLA", 122.1, 1672348887195, 1.0), ("TSLA", 122.2, 1672348887195, 1.0)), now
    )
    assert [e.price for e in res.events] == [122.2] and adapter.duplicates == 1
    assert adapter.decode('{"type":"ping"}', now).events == []
    err = adapter.decode('{"type":"error","msg":"bad token=abc"}', now)
    assert err.rejected == 1
    assert adapter.decode('{"type":"news"}', now).unknown == 1
    assert adapter.decode("{{", now).decode_errors == 1
    assert adapter.decode('{"type":"trade","data":"x"}', now).decode_errors == 1
    bad = adapter.decode(json.dumps({"type": "trade", "data": [{"s": "X", "p": -1, "t": 1}]}), now)
    assert bad.rejected == 1 and bad.events == []
    old = adapter.decode(trades_frame(("OLD", 1.0, 1000, 1.0)), now)
    assert len(old.events) == 1 and old.data_keys == []  # published with its time, not fresh


def test_dedupe_window_is_bounded() -> None:
    d = TradeDeduper(3)
    assert not d.seen(("A", 1, 1.0, 1))
    assert d.seen(("A", 1, 1.0, 1))
    for i in range(2, 6):
        d.seen(("A", i, 1.0, 1))
    assert len(d) == 3
    assert not d.seen(("A", 1, 1.0, 1))  # evicted long ago


def test_token_is_redacted_and_required(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = FinnhubStreamAdapter(FinnhubSettings(), "s3cr3t")
    assert adapter.url() == "wss://ws.finnhub.io?token=s3cr3t"
    assert "s3cr3t" not in repr(adapter)
    assert redact_url(adapter.url()) == "wss://ws.finnhub.io?token=***"
    assert redact_url("https://x/api?symbol=A&token=abc") == "https://x/api?symbol=A&token=***"
    assert "abc" not in redact_text("GET https://x/api?symbol=A&token=abc failed")
    monkeypatch.delenv("FINNHUB_API_KEY", raising=False)
    with pytest.raises(MissingCredentialError, match="FINNHUB_API_KEY"):
        build_equity_sources(
            EquitySourcesSettings(provider="finnhub"),
            ["AAPL"],
            bus=Bus(),
            now=time.time,
            is_open=lambda t: True,
        )


# ------------------------------------------------------------------------------ stream


async def test_normal_flow_with_duplicates(fake: FakeFinnhub, token: str) -> None:
    bus, seen = collecting_bus()
    src = make(fake, ["AAPL", "TSLA"], bus)
    async with running(src):
        await wait_for(lambda: fake.subscribed(0, 2))
        assert fake.paths[0] == "/?token=TOKEN"
        assert fake.conns[0].received == [
            {"type": "subscribe", "symbol": "AAPL"},
            {"type": "subscribe", "symbol": "TSLA"},
        ]
        t = int(time.time() * 1000)
        frame = trades_frame(("AAPL", 190.0, t, 10.0), ("TSLA", 250.0, t, 1.0))
        await fake.send(frame)
        await fake.send(frame)  # duplicate delivery
        await fake.send({"type": "ping"})
        await fake.send(trades_frame(("AAPL", 190.5, t + 1, 10.0)))
        await wait_for(lambda: len(prices(seen)) == 3)
        await asyncio.sleep(0.05)
        assert [(e.asset, e.price) for e in prices(seen)] == [
            ("AAPL", 190.0),
            ("TSLA", 250.0),
            ("AAPL", 190.5),
        ]
        assert src.state is SourceState.LIVE


async def test_abrupt_close_reconnects_and_resubscribes(fake: FakeFinnhub, token: str) -> None:
    bus, _seen = collecting_bus()
    fake.stream_interval = 0.05
    src = make(fake, ["AAPL", "MSFT", "TSLA"], bus)
    async with running(src):
        await wait_for(lambda: fake.subscribed(0, 3))
        fake.abort_all()
        await wait_for(lambda: fake.subscribed(1, 3))
        assert fake.conns[1].symbols == ["AAPL", "MSFT", "TSLA"]
        await wait_for(lambda: src.state is SourceState.LIVE)
        assert src.counters.reconnects >= 1


async def test_silent_freeze_reconnects_only_while_open(fake: FakeFinnhub, token: str) -> None:
    bus, seen = collecting_bus()
    fake.stream_interval = 0.05
    market_open = [False]
    src = make(fake, ["AAPL"], bus, is_open=lambda t: market_open[0])
    async with running(src):
        await wait_for(lambda: fake.subscribed(0, 1))
        await wait_for(lambda: len(prices(seen)) >= 2)
        fake.frozen = True  # pings keep flowing, trades stop
        await asyncio.sleep(0.7)
        assert len(fake.conns) == 1  # market closed: quiet is normal
        market_open[0] = True
        await wait_for(lambda: len(fake.conns) >= 2, 3.0)
        assert any(isinstance(e, SourceStatus) and e.state == "stale" for e in seen)
        fake.frozen = False
        await wait_for(lambda: fake.subscribed(1, 1))


async def test_garbage_frames_counted(fake: FakeFinnhub, token: str) -> None:
    bus, seen = collecting_bus()
    src = make(fake, ["AAPL"], bus, stale_after=30.0)
    async with running(src):
        await wait_for(lambda: fake.subscribed(0, 1))
        await fake.send("garbage")
        await fake.send('{"type":"trade","data":[{"p":1.0,"s":"AAPL","t":12')  # truncated
        await fake.send({"type": "mystery"})
        await fake.send({"type": "error", "msg": "Subscribing to too many symbols"})
        await fake.send(trades_frame(("AAPL", 1.0, int(time.time() * 1000), 1.0)))
        await wait_for(lambda: len(prices(seen)) == 1)
        c = src.counters
        assert (c.decode_errors, c.unknown, c.rejected) == (2, 1, 1)
        assert len(fake.conns) == 1 and src.state is SourceState.LIVE


async def test_wrong_token_backs_off(fake: FakeFinnhub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FH_TEST_KEY", "WRONG")
    bus, _seen = collecting_bus()
    src = make(fake, ["AAPL"], bus)
    async with running(src):
        await wait_for(lambda: len(fake.paths) >= 2)
        assert src.state in (SourceState.BACKING_OFF, SourceState.CONNECTING)
        assert all(p == "/?token=WRONG" for p in fake.paths)
