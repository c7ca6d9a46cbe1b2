"""Prices as columns (issue 16, point 1): the bus publishes a columnar batch exactly as it
would publish its events, and the read loop keeps every event in its place around them."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from daemon.core.bus import Bus
from daemon.core.events import Event, NewsEvent, PriceEvent
from daemon.core.price_columns import PriceColumns
from feeds.source_contract import DecodeResult
from tests.feeds.test_connection import KVAdapter, KVServer, make, server  # noqa: F401
from tests.helpers import HANG_GUARD, wait_for


def _columns(*prices: tuple[str, float], bid: float | None = 0.1) -> PriceColumns:
    cols = PriceColumns("polymarket", "src")
    for i, (asset, p) in enumerate(prices):
        cols.append(asset, 10.0 + i, 11.0 + i, p, bid, None)
    return cols


def _recording_bus() -> tuple[Bus, dict[str, list[Any]]]:
    """A bus with a per-event tap, a batch tap, a columns tap and a subscriber."""
    bus = Bus()
    got: dict[str, list[Any]] = {"each": [], "batch": [], "columns": [], "sub": []}
    bus.add_tap("price.#", got["each"].append)
    bus.add_tap("#", lambda e: None, batch=lambda evs: got["batch"].append(list(evs)))
    bus.add_tap("price.#", lambda e: None,
                columns=lambda c: got["columns"].append((c.assets(), list(c.price))))
    bus.subscribe("price.#", got["sub"].append, name="sub")
    return bus, got


async def test_a_columnar_batch_reaches_every_tap_and_subscriber_as_its_events() -> None:
    bus, got = _recording_bus()
    await bus.start()
    cols = _columns(("A", 0.5), ("B", 0.25), ("A", 0.75))
    events = cols.events()
    assert [(e.asset, e.price, e.bid, e.ask, e.source) for e in events] == [
        ("A", 0.5, 0.1, None, "src"), ("B", 0.25, 0.1, None, "src"), ("A", 0.75, 0.1, None, "src")]
    bus.publish_columns(cols)
    await bus.drain()
    assert got["each"] == events  # a tap with no columns variant: each event, in order
    assert got["batch"] == [events]  # a batch variant: the events once
    assert got["columns"] == [(["A", "B", "A"], [0.5, 0.25, 0.75])]  # the columns, no events
    assert sorted(e.asset for e in got["sub"]) == ["A", "B"]  # conflated per asset
    assert next(e for e in got["sub"] if e.asset == "A").price == 0.75
    assert bus.published == 3 and bus.published_by_class["price"] == 3
    await bus.stop()


async def test_an_invalid_price_in_the_columns_is_dropped_and_the_rest_published() -> None:
    bus, got = _recording_bus()
    cols = _columns(("A", 0.5), ("B", math.nan), ("C", 0.75))
    assert not cols.valid()
    bus.publish_columns(cols)
    assert [e.asset for e in got["each"]] == ["A", "C"]
    assert got["columns"] == []  # the batch went as its (guarded) events
    assert bus.invalid_prices == 1 and bus.published == 2


async def test_muted_columns_are_counted_and_asset_routes_get_their_asset_only() -> None:
    bus, got = _recording_bus()
    only_b: list[Event] = []
    bus.add_tap("price.polymarket.B", only_b.append)  # a route that depends on the asset
    bus.publish_columns(_columns(("A", 0.5), ("B", 0.25)))
    assert [e.asset for e in only_b] == ["B"]  # type: ignore[attr-defined]
    assert [e.asset for e in got["each"]] == ["A", "B"]
    bus.mute(["price"])
    bus.publish_columns(_columns(("A", 0.5), ("B", 0.25)))
    assert bus.muted_events == 2 and len(got["each"]) == 2


class ColumnKVAdapter(KVAdapter):
    """The KV protocol decoded into columns; a frame may carry a news item too."""

    def price_columns(self) -> PriceColumns:
        return PriceColumns("polymarket", "kv")

    def decode_columns(self, frame: str | bytes, now: float, prices: PriceColumns
                       ) -> DecodeResult:
        obj = json.loads(frame)
        res = DecodeResult(data_keys=[obj["k"]])
        news = obj.get("news", [])  # decoded before the frame's prices, as resolutions are
        for n in [news] if isinstance(news, str) else news:
            res.events.append(NewsEvent(ts=now, recv_ts=now, id=n, headline="h"))
        prices.append(obj["k"], now, now, obj["v"], None, None)
        return res

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        raise AssertionError("a columnar adapter is read through decode_columns")


async def test_the_read_loop_keeps_each_event_between_the_prices_around_it(
        server: KVServer) -> None:  # noqa: F811
    adapter = ColumnKVAdapter(server.url)
    src, bus, seen = make(adapter, ["K"])
    batches: list[int] = []
    bus.add_tap("price.#", lambda e: None, columns=lambda c: batches.append(len(c)))
    task = asyncio.create_task(src.run())
    await wait_for(lambda: server.subscribed() == ["K"])
    conn: Any = server.open_conns[0]["ws"]
    n = 300
    frames: list[dict[str, Any]] = [{"k": "K", "v": float(i)} for i in range(n)]
    for i in (50, 51, 200):
        frames[i]["news"] = f"n{i}"
    for f in frames:  # one burst: the client reads many frames per socket read
        await conn.send(json.dumps(f))
    await wait_for(lambda: sum(isinstance(e, PriceEvent) for e in seen) == n)
    order = [e.id if isinstance(e, NewsEvent) else e.price  # type: ignore[attr-defined]
             for e in seen if isinstance(e, NewsEvent | PriceEvent)]
    expect: list[Any] = []
    for f in frames:
        expect += [f["news"], f["v"]] if "news" in f else [f["v"]]
    assert order == expect  # every price, each news item before its own frame's price
    assert sum(batches) == n and len(batches) < n / 4  # bursts published together
    await src.stop()
    await asyncio.wait_for(task, HANG_GUARD)


def test_columns_split_keeps_the_rest_in_order() -> None:
    cols = _columns(("A", 0.1), ("B", 0.2), ("C", 0.3))
    head = cols.take(2)
    assert head.assets() == ["A", "B"] and cols.assets() == ["C"]
    assert head.table is cols.table and len(head) == 2 and len(cols) == 1
    assert list(cols.take().price) == [0.3] and len(cols) == 0


class _BurstSocket:
    """Hands out prepared frames without suspending (one burst), then closes."""

    def __init__(self, frames: list[str]) -> None:
        self.frames = list(frames)

    async def recv(self) -> str:
        if not self.frames:
            from websockets.exceptions import ConnectionClosed

            raise ConnectionClosed(None, None)
        return self.frames.pop(0)


async def test_a_frames_prices_wait_for_all_its_events_even_under_backpressure() -> None:
    """While a frame's second event waits for a full subscriber queue, the burst's scheduled
    publication must not slip the frame's own prices in before its remaining events."""
    import random
    import time

    from feeds.connection import StreamingSource, _Shard

    bus = Bus()
    seen: list[Any] = []
    bus.add_tap("#", lambda e: seen.append(e.id if isinstance(e, NewsEvent) else e.price))

    async def slow(ev: Event) -> None:
        await asyncio.sleep(0.02)

    bus.subscribe("news.#", slow, name="slow", maxsize=1)
    await bus.start()
    src = StreamingSource(ColumnKVAdapter("ws://unused"), ["K"], bus=bus, now=time.time,
                          rng=random.Random(1), stale_after=30.0)
    frames = [json.dumps({"k": "K", "v": 0.1}),
              json.dumps({"k": "K", "v": 0.2, "news": ["n_a", "n_b", "n_c"]})]
    await src._read(_Shard(0, ["K"], None), _BurstSocket(frames))  # type: ignore[arg-type]
    assert bus._subs[0].stats.blocked >= 1  # the events really waited
    assert seen == [0.1, "n_a", "n_b", "n_c", 0.2]
    await bus.drain()
    await bus.stop()
