"""Shared feed machinery: Backoff (seeded), state aggregation, StreamingSource on a local server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Sequence
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from daemon.core.bus import Bus
from daemon.core.events import Event, PriceEvent, SourceStatus
from feeds.backoff import Backoff, BackoffPolicy
from feeds.connection import StreamingSource
from feeds.source_contract import (
    DecodeResult,
    LiveSubscription,
    Resubscribable,
    SourceState,
    aggregate_state,
    http_status_of,
)
from tests.helpers import HANG_GUARD, wait_for

FAST = BackoffPolicy(initial=0.02, maximum=0.1, multiplier=2.0, reset_after=0.5)

# ------------------------------------------------------------------------------------ Backoff


def test_backoff_full_jitter_matches_seeded_rng_and_caps() -> None:
    policy = BackoffPolicy(initial=1.0, maximum=8.0, multiplier=2.0)
    b = Backoff(policy, rng=random.Random(42))
    ref = random.Random(42)
    caps = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]
    for i, cap in enumerate(caps):
        assert b.attempt == i
        assert b.cap() == cap
        d = b.next_delay()
        assert d == ref.uniform(0.0, cap)
        assert 0.0 <= d <= cap


def test_backoff_penalty_scales_cap_and_stays_bounded() -> None:
    policy = BackoffPolicy(initial=1.0, maximum=10.0)
    b = Backoff(policy, rng=random.Random(1))
    delays = [b.next_delay(penalty=4.0) for _ in range(50)]
    assert max(delays) <= 40.0
    assert b.cap(penalty=4.0) == 40.0
    assert max(delays) > 10.0  # the penalty really widens the window


def test_backoff_jitter_is_full_range() -> None:
    b = Backoff(BackoffPolicy(initial=1.0, maximum=1.0), rng=random.Random(7))
    samples = [b.next_delay() for _ in range(2000)]
    assert min(samples) < 0.02
    assert max(samples) > 0.98
    assert 0.45 < sum(samples) / len(samples) < 0.55


def test_backoff_resets_only_after_stable_period() -> None:
    b = Backoff(BackoffPolicy(initial=1.0, maximum=60.0, reset_after=60.0), rng=random.Random(0))
    for _ in range(4):
        b.next_delay()
    assert b.attempt == 4
    b.connected(100.0)
    b.maybe_reset(159.0)
    assert b.attempt == 4
    b.maybe_reset(160.0)
    assert b.attempt == 0
    # a failure ends the stable period: no reset without a new connected()
    b.next_delay()
    b.maybe_reset(1000.0)
    assert b.attempt == 1


def test_backoff_never_overflows() -> None:
    b = Backoff(BackoffPolicy(initial=1.0, maximum=5.0, multiplier=10.0), rng=random.Random(0))
    b.attempt = 100_000
    assert b.cap() == 5.0
    assert 0.0 <= b.next_delay() <= 5.0


def test_backoff_policy_validation() -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(initial=0.0)
    with pytest.raises(ValueError):
        BackoffPolicy(initial=2.0, maximum=1.0)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([], SourceState.CONNECTING),
        (["live", "live"], SourceState.LIVE),
        (["down", "down"], SourceState.DOWN),
        (["live", "stale"], SourceState.STALE),
        (["live", "connecting"], SourceState.CONNECTING),
        (["live", "backing_off", "stale"], SourceState.BACKING_OFF),
        (["live", "down"], SourceState.BACKING_OFF),
    ],
)
def test_aggregate_state(states: list[str], expected: SourceState) -> None:
    assert aggregate_state(SourceState(s) for s in states) is expected


# ------------------------------------------------------------------------------------ fakes


class KVServer:
    """Tiny streaming server: client sends {"sub": [...]}/{"add"}/{"remove"}; we push frames."""

    def __init__(self) -> None:
        self.conns: list[dict[str, Any]] = []
        self.reject_status: int | None = None
        self._server: Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await serve(
            self._handler, "127.0.0.1", 0, ping_interval=None, process_request=self._process
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def open_conns(self) -> list[dict[str, Any]]:
        return [c for c in self.conns if c["open"]]

    def subscribed(self) -> list[str]:
        return sorted(k for c in self.open_conns for k in c["keys"])

    def _process(self, conn: ServerConnection, request: Request) -> Response | None:
        if self.reject_status is not None:
            return conn.respond(self.reject_status, "no\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        rec: dict[str, Any] = {"ws": ws, "keys": [], "msgs": [], "open": True}
        self.conns.append(rec)
        try:
            async for msg in ws:
                obj = json.loads(msg)
                rec["msgs"].append(obj)
                if "sub" in obj:
                    rec["keys"] = list(obj["sub"])
                if "add" in obj:
                    rec["keys"].extend(obj["add"])
                if "remove" in obj:
                    rec["keys"] = [k for k in rec["keys"] if k not in obj["remove"]]
        except ConnectionClosed:
            pass
        finally:
            rec["open"] = False

    async def push(self, key: str, value: float) -> None:
        for c in self.open_conns:
            if key in c["keys"]:
                with contextlib.suppress(ConnectionClosed):
                    await c["ws"].send(json.dumps({"k": key, "v": value}))


class KVAdapter:
    """Adapter of the KV protocol (no live subscription)."""

    name = "kv"

    def __init__(self, url: str, max_keys: int = 100) -> None:
        self._url = url
        self.max_keys_per_connection = max_keys
        self.opened: list[list[str]] = []
        self.penalties: list[tuple[BaseException | None, int | None]] = []

    def url(self) -> str:
        return self._url

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        self.opened.append(list(keys))
        await ws.send(json.dumps({"sub": list(keys)}))

    async def heartbeat(self, ws: ClientConnection) -> None:
        return

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        obj = json.loads(frame)
        if "reset" in obj:
            return DecodeResult(reset_keys=obj["reset"])
        ev = PriceEvent(ts=now, recv_ts=now, market="equity", asset=obj["k"], price=obj["v"])
        return DecodeResult(events=[ev], data_keys=[obj["k"]])

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        return

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        self.penalties.append((exc, close_code))
        return 4.0 if http_status_of(exc) == 429 else 1.0


class LiveKVAdapter(KVAdapter):
    """KV adapter that can change a live subscription and ask for resubscription."""

    def __init__(self, url: str, max_keys: int = 100) -> None:
        super().__init__(url, max_keys)
        self.resubscribed: list[list[str]] = []

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        await ws.send(json.dumps({"add": list(keys)}))

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        await ws.send(json.dumps({"remove": list(keys)}))

    async def resubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        self.resubscribed.append(list(keys))


@pytest.fixture
async def server() -> Any:
    srv = KVServer()
    await srv.start()
    yield srv
    await srv.stop()


def make(
    adapter: KVAdapter, keys: Sequence[str], **kw: Any
) -> tuple[StreamingSource, Bus, list[Event]]:
    bus = Bus()
    seen: list[Event] = []
    bus.add_tap("#", seen.append)
    kw.setdefault("stale_after", 30.0)
    kw.setdefault("backoff", FAST)
    kw.setdefault("watchdog_interval", 0.02)
    kw.setdefault("open_timeout", 2.0)
    src = StreamingSource(adapter, keys, bus=bus, now=time.time, rng=random.Random(3), **kw)
    return src, bus, seen


def statuses(seen: list[Event]) -> list[str]:
    return [e.state for e in seen if isinstance(e, SourceStatus)]


# ------------------------------------------------------------------------------------ tests


async def test_streams_publishes_and_counts(server: KVServer) -> None:
    adapter = KVAdapter(server.url)
    src, _, seen = make(adapter, ["A", "B"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: src.state is SourceState.LIVE and server.subscribed() == ["A", "B"])
    await server.push("A", 1.5)
    await server.push("B", 2.5)
    await wait_for(lambda: src.counters.data_messages == 2)
    prices = [e for e in seen if isinstance(e, PriceEvent)]
    assert [(p.asset, p.price) for p in prices] == [("A", 1.5), ("B", 2.5)]
    assert statuses(seen) == ["connecting", "live"]
    assert src.counters.messages == 2
    assert src.counters.reconnects == 0
    assert src.counters.last_data_ts is not None
    assert adapter.opened == [["A", "B"]]
    await src.stop()
    await asyncio.wait_for(task, HANG_GUARD)


async def test_refused_backs_off_then_down_and_keeps_retrying() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    adapter = KVAdapter(f"ws://127.0.0.1:{port}")
    src, _, seen = make(adapter, ["A"], down_after=3)
    task = asyncio.create_task(src.run())
    await wait_for(lambda: src.state is SourceState.DOWN)
    n = src.counters.reconnects
    await wait_for(lambda: src.counters.reconnects > n + 2)  # still retrying forever
    st = statuses(seen)
    assert st[:3] == ["connecting", "backing_off", "connecting"]
    assert "down" in st
    assert all(isinstance(e, OSError) for e, _ in adapter.penalties)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_http_429_upgrade_rejection_gets_penalty(server: KVServer) -> None:
    server.reject_status = 429
    adapter = KVAdapter(server.url)
    src, _, _ = make(adapter, ["A"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: len(adapter.penalties) >= 2)
    assert http_status_of(adapter.penalties[0][0]) == 429
    server.reject_status = None
    await wait_for(lambda: src.state is SourceState.LIVE)
    await src.stop()
    await task


async def test_shards_and_resubscribes_every_key_after_close(server: KVServer) -> None:
    keys = ["A", "B", "C", "D", "E"]
    adapter = KVAdapter(server.url, max_keys=2)
    src, _, _ = make(adapter, keys)
    assert src.shard_count == 3
    assert src.shard_keys == [["A", "B"], ["C", "D"], ["E"]]
    task = asyncio.create_task(src.run())

    def subscribed() -> list[str]:
        return sorted(k for c in server.open_conns for k in c["keys"])

    await wait_for(lambda: len(server.open_conns) == 3 and subscribed() == keys)
    for c in server.open_conns:
        await c["ws"].close(1011, "boom")
    await wait_for(lambda: len(server.conns) == 6 and len(server.open_conns) == 3)
    await wait_for(lambda: src.state is SourceState.LIVE and subscribed() == keys)
    assert src.counters.reconnects == 3
    assert any(code == 1011 for _, code in adapter.penalties)
    await src.stop()
    await task


async def test_staleness_judged_on_data_and_gated_by_is_open(server: KVServer) -> None:
    is_open = {"v": False}
    adapter = KVAdapter(server.url)
    src, _, seen = make(adapter, ["A"], stale_after=0.15, is_open=lambda t: is_open["v"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: src.state is SourceState.LIVE)
    await asyncio.sleep(0.4)  # no data at all, but the market is closed: no reconnect
    assert len(server.conns) == 1
    is_open["v"] = True
    await wait_for(lambda: len(server.conns) >= 2)
    assert "stale" in statuses(seen)
    await wait_for(lambda: src.state is SourceState.LIVE and server.subscribed() == ["A"])
    # data keeps it fresh
    n = len(server.conns)
    for i in range(6):
        await server.push("A", float(i))
        await asyncio.sleep(0.05)
    assert len(server.conns) == n
    await src.stop()
    await task


async def test_dead_after_reconnects_a_silent_socket(server: KVServer) -> None:
    adapter = KVAdapter(server.url)
    src, _, _ = make(adapter, ["A"], dead_after=0.15, is_open=lambda t: False)
    task = asyncio.create_task(src.run())
    await wait_for(lambda: len(server.conns) >= 2)
    assert src.counters.reconnects >= 1
    await src.stop()
    await task


async def test_set_keys_restarts_connection_without_live_subscription(server: KVServer) -> None:
    adapter = KVAdapter(server.url)
    src, _, _ = make(adapter, ["A"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: src.state is SourceState.LIVE)
    assert not isinstance(adapter, LiveSubscription)
    src.set_keys(["A", "B"])
    await wait_for(lambda: adapter.opened == [["A"], ["A", "B"]])
    await wait_for(
        lambda: len(server.open_conns) == 1 and server.open_conns[0]["keys"] == ["A", "B"]
    )
    assert adapter.penalties == []  # a planned resubscription is not a failure
    await src.stop()
    await task


async def test_set_keys_live_subscription_and_new_shards(server: KVServer) -> None:
    adapter = LiveKVAdapter(server.url, max_keys=2)
    assert isinstance(adapter, LiveSubscription)
    src, _, _ = make(adapter, ["A"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: src.state is SourceState.LIVE)
    src.set_keys(["A", "B", "C"])  # B fills shard 0 live, C opens shard 1
    await wait_for(lambda: len(server.open_conns) == 2)
    await wait_for(
        lambda: server.conns[0]["keys"] == ["A", "B"] and server.conns[1]["keys"] == ["C"]
    )
    assert server.conns[0]["open"]
    assert src.shard_count == 2
    src.set_keys(["B"])  # A removed live; shard 1 retired
    await wait_for(lambda: server.conns[0]["keys"] == ["B"] and len(server.open_conns) == 1)
    assert src.shard_count == 1
    assert src.counters.reconnects == 0
    await src.stop()
    await task


async def test_reset_keys_asks_adapter_to_resubscribe(server: KVServer) -> None:
    adapter = LiveKVAdapter(server.url)
    assert isinstance(adapter, Resubscribable)
    src, _, _ = make(adapter, ["A", "B"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: bool(server.open_conns) and src.state is SourceState.LIVE)
    await server.open_conns[0]["ws"].send(json.dumps({"reset": ["B", "Z"]}))
    await wait_for(lambda: adapter.resubscribed == [["B"]])
    assert len(server.conns) == 1
    await src.stop()
    await task


@pytest.mark.filterwarnings("error")
async def test_cancel_closes_sockets_cleanly(server: KVServer) -> None:
    adapter = KVAdapter(server.url, max_keys=1)
    src, _, _ = make(adapter, ["A", "B"])
    task = asyncio.create_task(src.run())
    await wait_for(lambda: len(server.open_conns) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: not server.open_conns)
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in others if "feed-" in t.get_name()]
