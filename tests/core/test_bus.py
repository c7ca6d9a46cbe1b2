"""Bus policies: conflation, no drop under backpressure, failing handlers, taps before handlers."""

from __future__ import annotations

import asyncio

import pytest

from daemon.core.bus import Bus, topic_matches
from daemon.core.events import AlertEvent, DecisionEvent, PriceEvent


def price(asset: str, p: float, ts: float = 0.0) -> PriceEvent:
    return PriceEvent(ts=ts, market="equity", asset=asset, price=p)


def decision(i: int) -> DecisionEvent:
    return DecisionEvent(
        ts=float(i), agent="a", market="equity", scheduled_ts=float(i), outcome="ok"
    )


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("price.#", "price.equity.AAPL", True),
        ("price.+.AAPL", "price.equity.AAPL", True),
        ("price.+", "price.equity.AAPL", False),
        ("price.equity.AAPL", "price.equity.AAPL", True),
        ("price.equity", "price.equity.AAPL", False),
        ("#", "alert.drawdown", True),
        ("decision.+", "fill.a", False),
    ],
)
def test_topic_matching(pattern: str, topic: str, expected: bool) -> None:
    assert topic_matches(pattern, topic) is expected


async def test_prices_conflate_latest_per_key_wins() -> None:
    bus = Bus()
    seen: list[PriceEvent] = []
    sub = bus.subscribe("price.#", seen.append, name="slow")
    # Not started yet: everything queues, so conflation must keep only the latest per key.
    for i in range(100):
        await bus.publish(price("AAPL", 100.0 + i))
        await bus.publish(price("MSFT", 200.0 + i))
    assert sub.depth == 2
    await bus.start()
    await bus.drain()
    assert [(e.asset, e.price) for e in seen] == [("AAPL", 199.0), ("MSFT", 299.0)]
    assert bus.counters()["conflated"]["price"] == 198
    await bus.stop()


async def test_conflation_memory_is_bounded_and_drops_are_counted() -> None:
    bus = Bus(max_keys=10)
    seen: list[PriceEvent] = []
    sub = bus.subscribe("price.#", seen.append, name="bounded")
    for i in range(25):
        await bus.publish(price(f"A{i}", 1.0))
    assert sub.depth == 10
    assert bus.counters()["dropped"]["price"] == 15
    await bus.start()
    await bus.drain()
    assert [e.asset for e in seen] == [f"A{i}" for i in range(15, 25)]
    await bus.stop()


async def test_decisions_are_never_dropped_publisher_waits() -> None:
    bus = Bus(queue_size=5)
    seen: list[int] = []
    gate = asyncio.Event()

    async def slow(ev: DecisionEvent) -> None:
        await gate.wait()
        seen.append(int(ev.ts))

    sub = bus.subscribe("decision.#", slow, name="slow")
    await bus.start()

    async def producer() -> None:
        for i in range(50):
            await bus.publish(decision(i))

    task = asyncio.create_task(producer())
    await asyncio.sleep(0.05)
    assert not task.done(), "publisher must be held back by a full queue"
    assert sub.depth <= 5
    gate.set()
    await task
    await bus.drain()
    assert seen == list(range(50))
    assert sub.stats.blocked > 0
    assert bus.counters()["dropped"] == {}
    await bus.stop()


async def test_failing_handler_does_not_stop_delivery() -> None:
    bus = Bus()
    good: list[float] = []

    def bad(ev: PriceEvent) -> None:
        if ev.price > 1:
            raise RuntimeError("boom")

    bad_sub = bus.subscribe("price.#", bad, name="bad")
    bus.subscribe("price.#", lambda ev: good.append(ev.price), name="good")
    await bus.start()
    for i in range(5):
        await bus.publish(price(f"X{i}", float(i)))
        await bus.drain()
    assert good == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert bad_sub.stats.failed == 3
    assert bad_sub.stats.delivered == 5
    await bus.stop()


async def test_taps_run_before_handlers_see_the_event() -> None:
    bus = Bus()
    cache: dict[str, float] = {}
    observed: list[tuple[float, float]] = []
    bus.add_tap("price.#", lambda ev: cache.__setitem__(ev.asset, ev.price))
    bus.subscribe("price.#", lambda ev: observed.append((ev.price, cache[ev.asset])), name="h")
    await bus.start()
    await bus.publish(price("AAPL", 5.0))
    assert cache["AAPL"] == 5.0  # inline, before any handler ran
    await bus.drain()
    assert observed == [(5.0, 5.0)]
    await bus.stop()


async def test_batch_subscriber_gets_lists_and_mixed_order_is_kept() -> None:
    bus = Bus()
    batches: list[list[str]] = []
    bus.subscribe(["price.#", "alert.#"], lambda evs: batches.append([e.topic for e in evs]),
                  name="store", batch=True)
    await bus.publish(price("A", 1.0))
    await bus.publish(AlertEvent(ts=1.0, kind="drawdown"))
    await bus.publish(price("B", 1.0))
    await bus.start()
    await bus.drain()
    assert batches == [["price.equity.A", "alert.drawdown", "price.equity.B"]]
    await bus.stop()


def test_publish_nowait_refuses_reliable_classes() -> None:
    bus = Bus()
    with pytest.raises(ValueError, match="only for conflating"):
        bus.publish_nowait(decision(1))


async def test_muted_classes_reach_no_tap_and_no_subscriber() -> None:
    bus = Bus()
    tapped: list[str] = []
    seen: list[str] = []
    bus.add_tap("#", lambda ev: tapped.append(ev.topic))
    bus.subscribe("#", lambda ev: seen.append(ev.topic), name="all")
    await bus.start()
    bus.mute({"price"})
    bus.publish_nowait(price("A", 1.0))
    await bus.publish(price("B", 1.0))
    await bus.publish(decision(1))
    await bus.drain()
    assert tapped == seen == ["decision.a"]
    assert bus.muted_events == 2
    await bus.stop()
