"""Alpaca data WebSocket v2 against a local fake: auth flow, decode, limits, dead socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from daemon.core.bus import Bus
from daemon.core.events import Event, PriceEvent, SourceStatus
from feeds.alpaca import (
    AlpacaSettings,
    AlpacaSource,
    AlpacaStreamAdapter,
    MissingCredentialError,
    build_alpaca_source,
    parse_rfc3339,
)
from feeds.equities import EquitySourcesSettings, build_equity_sources
from feeds.source_contract import SourceState
from tests.fakes.alpaca_server import FakeAlpaca, bar, quote, trade
from tests.helpers import MaxRng, collecting_bus, wait_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeAlpaca]:
    server = FakeAlpaca()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def settings_for(fake: FakeAlpaca, **kw: Any) -> AlpacaSettings:
    base: dict[str, Any] = dict(
        ws_url=fake.url,
        stale_after=30.0,
        watchdog_interval=0.05,
        backoff_initial=0.05,
        backoff_max=1.0,
        open_timeout=2.0,
    )
    base.update(kw)
    return AlpacaSettings(**base)


def make_source(
    fake: FakeAlpaca,
    symbols: list[str],
    bus: Bus,
    *,
    key: str = "KEY",
    secret: str = "SECRET",
    is_open: Any = lambda t: True,
    **kw: Any,
) -> AlpacaSource:
    s = settings_for(fake, **kw)
    return AlpacaSource(
        AlpacaStreamAdapter(s, key, secret),
        symbols,
        bus=bus,
        now=time.time,
        stale_after=s.stale_after,
        backoff=s.backoff_policy(),
        is_open=is_open,
        open_timeout=s.open_timeout,
        dead_after=s.dead_after,
        watchdog_interval=s.watchdog_interval,
        rng=MaxRng(),
    )




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


def states(seen: list[Event]) -> list[str]:
    return [e.state for e in seen if isinstance(e, SourceStatus)]


# ------------------------------------------------------------------------------ decode


def test_parse_rfc3339_nanoseconds() -> None:
    base = datetime(2026, 9, 16, 12, 44, 6, tzinfo=UTC).timestamp()
    assert parse_rfc3339("2026-09-16T12:44:06.259763316Z") == pytest.approx(
        base + 0.259763316, abs=1e-6
    )
    assert parse_rfc3339("2026-09-16T12:44:06Z") == base
    assert parse_rfc3339("2026-09-16T12:44:06.5+00:00") == base + 0.5
    with pytest.raises(ValueError):
        parse_rfc3339("2026-09-16T12:44:06.x1Z")


def test_decode_batched_frame() -> None:
    adapter = AlpacaStreamAdapter(AlpacaSettings(stale_after=120.0), "k", "s")
    now = datetime(2026, 9, 16, 14, 2, 1, tzinfo=UTC).timestamp()
    frame = json.dumps(
        [
            trade("QQQ", 707.64, now - 1),
            quote("QQQ", 708.02, 708.35, now - 0.5),
            bar("NVDA", 214.75, now - 61),  # minute 14:01 -> known at 14:02
            bar("NVDA", 214.8, now - 61, kind="u"),
            bar("NVDA", 215.0, now - 3 * 86400, kind="d"),
            {"T": "s", "S": "QQQ", "sc": "H", "sm": "Trading Halt"},
            {"T": "subscription", "trades": ["QQQ"], "bars": ["NVDA"]},
            {"T": "l", "S": "QQQ"},
            {"T": "zz"},
            "not-a-dict",
            {"T": "q", "S": "QQQ", "bp": 0, "ap": 1.0, "t": "2026-09-16T14:02:00Z"},
            {"T": "t", "S": "QQQ", "p": 1.0, "t": "garbage"},
        ]
    )
    res = adapter.decode(frame, now)
    t, q, b, u, d = res.events
    assert isinstance(t, PriceEvent) and (t.asset, t.price, t.source) == ("QQQ", 707.64, "alpaca")
    assert t.ts == pytest.approx(now - 1, abs=1e-6) and t.recv_ts == now
    assert q.price == pytest.approx((708.02 + 708.35) / 2) and (q.bid, q.ask) == (708.02, 708.35)
    assert b.price == 214.75 and b.ts == now - 1  # 14:01:00 + 60 s
    assert u.price == 214.8
    assert d.ts == now - 3 * 86400  # daily bar keeps its own time
    assert sorted(res.data_keys) == ["NVDA", "NVDA", "QQQ", "QQQ"]  # daily bar is not fresh data
    assert res.unknown == 1 and res.decode_errors == 2 and res.rejected == 1
    assert adapter.subscribed == {"trades": ["QQQ"], "bars": ["NVDA"]}
    assert adapter.decode("{garbage", now).decode_errors == 1
    assert adapter.decode('{"T":"t"}', now).decode_errors == 1  # frames are always arrays
    res = adapter.decode(json.dumps([{"T": "error", "code": 405, "msg": "symbol limit"}]), now)
    assert res.rejected == 1 and adapter.last_error == 405


def test_old_bars_are_not_fresh_data() -> None:
    adapter = AlpacaStreamAdapter(AlpacaSettings(stale_after=120.0), "k", "s")
    now = time.time()
    res = adapter.decode(json.dumps([bar("AAPL", 1.0, now - 3600)]), now)
    assert len(res.events) == 1 and res.data_keys == []


def test_credentials_never_in_repr_and_required(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = AlpacaStreamAdapter(AlpacaSettings(), "MYKEY", "MYSECRET")
    assert "MYKEY" not in repr(adapter) and "MYSECRET" not in repr(adapter)
    monkeypatch.delenv("APCA_API_KEY_ID", raising=False)
    with pytest.raises(MissingCredentialError, match="APCA_API_KEY_ID"):
        build_alpaca_source(
            AlpacaSettings(), ["AAPL"], bus=Bus(), now=time.time, is_open=lambda t: True
        )
    monkeypatch.setenv("APCA_API_KEY_ID", "k")
    monkeypatch.setenv("APCA_API_SECRET_KEY", "s")
    srcs = build_equity_sources(
        EquitySourcesSettings(provider="alpaca"),
        ["AAPL"],
        bus=Bus(),
        now=time.time,
        is_open=lambda t: True,
    )
    assert [s.name for s in srcs] == ["alpaca", "yahoo-rest"]
    assert isinstance(srcs[0], AlpacaSource) and srcs[0].dead_after == 165.0


# ------------------------------------------------------------------------------ stream


async def test_auth_subscribe_and_live_only_after_authenticated(fake: FakeAlpaca) -> None:
    bus, seen = collecting_bus()
    fake.auth_delay = 2.0  # far longer than the pause below, however slow the machine
    src = make_source(fake, ["AAPL", "MSFT"], bus, open_timeout=30.0)
    async with running(src):
        await wait_for(lambda: len(fake.conns) == 1)
        await asyncio.sleep(0.15)
        assert src.state is SourceState.CONNECTING  # connected, not yet authenticated
        await wait_for(lambda: src.state is SourceState.LIVE)
        conn = fake.conns[0]
        await wait_for(conn.subscribed.is_set)
        auth, sub = conn.received
        assert auth == {"action": "auth", "key": "KEY", "secret": "SECRET"}
        assert sub == {
            "action": "subscribe",
            "trades": ["AAPL", "MSFT"],
            "bars": ["AAPL", "MSFT"],
            "statuses": ["AAPL", "MSFT"],
        }
        await wait_for(lambda: src.adapter.subscribed.get("trades") == ["AAPL", "MSFT"])
        now = time.time()
        await fake.send([trade("AAPL", 190.5, now), trade("MSFT", 410.0, now)])
        await fake.send([bar("AAPL", 190.75, now - 60)])
        await wait_for(lambda: len(prices(seen)) == 3)
    assert [(e.asset, e.price) for e in prices(seen)] == [
        ("AAPL", 190.5),
        ("MSFT", 410.0),
        ("AAPL", 190.75),
    ]
    assert states(seen)[:2] == ["connecting", "live"]


async def test_auth_failure_is_down_with_long_backoff(fake: FakeAlpaca) -> None:
    bus, seen = collecting_bus()
    src = make_source(fake, ["AAPL"], bus, secret="WRONG", auth_penalty=10.0)
    with capture_logs() as logs:
        async with running(src):
            await wait_for(lambda: "down" in states(seen))
            assert src.state is SourceState.DOWN and src.adapter.auth_failed
            await wait_for(lambda: len(fake.attempts) == 2)
            # cap 10 x 0.05 = 0.5 s before the next try (MaxRng: the cap), and it waited it
            delay = next(e["delay"] for e in logs if e["event"] == "feed shard disconnected")
            assert delay == 0.5 and fake.attempts[1] - fake.attempts[0] >= 0.49
            fake.secret = "WRONG"  # credentials fixed on the server side: the next auth works
            await wait_for(lambda: src.state is SourceState.LIVE)
            assert not src.adapter.auth_failed


async def attempt_gap(fake: FakeAlpaca) -> float:
    """Return the delay the source chose after its first failed attempt (logged with it), once
    it made the next attempt: the chosen delay, not the wall time (a busy machine adds to it)."""
    fake.attempts.clear()
    bus = Bus()
    src = make_source(fake, ["AAPL"], bus)
    with capture_logs() as logs:
        async with running(src):
            await wait_for(lambda: len(fake.attempts) >= 2)
    gap = fake.attempts[1] - fake.attempts[0]
    delay = next(e["delay"] for e in logs if e["event"] == "feed shard disconnected")
    assert gap >= delay - 0.01  # it did wait the delay it chose
    return float(delay)


async def test_connection_limit_and_http_429_back_off_longer(fake: FakeAlpaca) -> None:
    # a plain server close: cap = initial 0.05 s
    fake.error_on_connect = None
    fake.reject_status = 503
    plain = await attempt_gap(fake)
    # HTTP 429 on the upgrade: cap = 4 x 0.05 s
    fake.reject_status = 429
    limited_429 = await attempt_gap(fake)
    # 406 connection limit sent in-band, then closed: cap = 4 x 0.05 s
    fake.reject_status = None
    fake.error_on_connect = 406
    limited_406 = await attempt_gap(fake)
    assert plain == 0.05  # MaxRng: every delay is its cap
    assert limited_429 == 0.2 and limited_406 == 0.2
    adapter = AlpacaStreamAdapter(AlpacaSettings(), "k", "s")
    adapter.last_error = 406
    assert adapter.backoff_penalty(None, 1008) == 4.0


async def test_dead_socket_reconnects_even_when_market_closed(fake: FakeAlpaca) -> None:
    bus, _seen = collecting_bus()
    fake.frozen = True  # after "authenticated", not one more frame (no ack, no data, no pings)
    src = make_source(fake, ["AAPL"], bus, dead_after=0.4, is_open=lambda t: False)
    async with running(src):
        await wait_for(lambda: len(fake.conns) == 1 and fake.conns[0].subscribed.is_set())
        t0 = time.monotonic()
        await wait_for(lambda: len(fake.conns) >= 2, 3.0)
        assert time.monotonic() - t0 >= 0.3
        await wait_for(lambda: fake.conns[1].subscribed.is_set())
        assert fake.conns[1].state["trades"] == ["AAPL"]


async def test_abrupt_close_reauths_and_resubscribes(fake: FakeAlpaca) -> None:
    bus, seen = collecting_bus()
    src = make_source(fake, ["AAPL", "MSFT"], bus)
    async with running(src):
        await wait_for(lambda: len(fake.conns) == 1 and fake.conns[0].subscribed.is_set())
        fake.abort_all()
        await wait_for(lambda: len(fake.conns) == 2 and fake.conns[1].subscribed.is_set())
        assert fake.conns[1].received[0]["action"] == "auth"
        assert fake.conns[1].state["trades"] == ["AAPL", "MSFT"]
        await wait_for(lambda: src.state is SourceState.LIVE)
        await fake.send([trade("MSFT", 1.5, time.time())])
        await wait_for(lambda: len(prices(seen)) == 1)
        assert src.counters.reconnects >= 1


async def test_garbage_and_errors_counted_not_fatal(fake: FakeAlpaca) -> None:
    bus, seen = collecting_bus()
    src = make_source(fake, ["AAPL"], bus)
    async with running(src):
        await wait_for(lambda: src.state is SourceState.LIVE)
        await fake.send("not json")
        await fake.send('{"T":"t"}')
        await fake.send([{"T": "mystery"}])
        await fake.send([{"T": "error", "code": 405, "msg": "symbol limit exceeded"}])
        await fake.send([trade("AAPL", 2.0, time.time())])
        await wait_for(lambda: len(prices(seen)) == 1)
        c = src.counters
        assert (c.decode_errors, c.unknown, c.rejected) == (2, 1, 1)
        assert len(fake.conns) == 1 and src.state is SourceState.LIVE
