"""MQTT bridge against a real Mosquitto: delivery, no echo, dedupe, conflation, status, restarts.

Every test uses its own namespace (uuid) on the system broker at 127.0.0.1:1883, and purges the
persistent sessions and retained statuses it created. The restart test runs a private Mosquitto
(persistence on) on a free port so it can be stopped and started mid-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import msgspec
import pytest

from daemon.core.bus import Bus
from daemon.core.events import (
    AlertEvent,
    DecisionEvent,
    Event,
    FillEvent,
    MarketListed,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
    SourceStatus,
    decode_event,
    encode_event,
)
from daemon.mqtt.bridge import MqttBridge
from daemon.mqtt.egress import Egress
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import event_id, mqtt_topic, status_topic
from tests.helpers import HANG_GUARD
from tests.mosquitto import HOST, PORT, PrivateBroker, requires_broker, until

pytestmark = requires_broker



def decision(agent: str, i: int) -> DecisionEvent:
    return DecisionEvent(
        ts=1_700_000_000.0 + i,
        agent=agent,
        market="equity",
        scheduled_ts=1_700_000_000.0 + i,
        outcome="ok",
        allocation={"AAPL": 0.5, "CASH": 0.5},
    )


def price(asset: str, p: float, ts: float = 1_700_000_000.0) -> PriceEvent:
    return PriceEvent(ts=ts, market="equity", asset=asset, price=p)


def sample_events(tag: str) -> list[Event]:
    """Return one event of every kind (and awkward topic characters)."""
    t = 1_700_000_000.123456
    return [
        PriceEvent(
            ts=t, recv_ts=t + 0.25, market="equity", asset="AAPL", price=189.5, bid=189.4,
            ask=189.6, source="test",
        ),
        PriceEvent(ts=t, market="polymarket", asset="7123456789", price=0.42),
        PriceEvent(ts=t, market="equity", asset="BRK.B/+#%", price=410.0),
        NewsEvent(ts=t, id=f"n-{tag}", headline="Fed holds — «rates»", keys=("AAPL", "MSFT")),
        MarketListed(
            ts=t, question_id="q1", question="Will it rain?", yes_asset="y1", no_asset="n1",
            end_ts=t + 86_400,
        ),
        ResolutionEvent(ts=t, question_id="q1", payouts={"y1": 1.0, "n1": 0.0}),
        decision(f"agent-{tag}", 1),
        FillEvent(
            ts=t, agent=f"agent-{tag}", market="equity", scheduled_ts=t, trades={"AAPL": 10.0},
            traded_value=1895.0, cost=1.9, value_before=10_000.0, value_after=9_998.1,
            weights={"AAPL": 0.19, "CASH": 0.81},
        ),
        AlertEvent(ts=t, kind="drawdown", agent=f"agent-{tag}", market="equity", value=-0.2),
        SourceStatus(ts=t, source="yahoo", state="live"),
    ]  # fmt: skip


@dataclass
class Node:
    """One simulated process: its own bus, bridge and a collector of everything on its bus."""

    bus: Bus
    bridge: MqttBridge
    seen: list[Event]

    def of(self, kind: type[Event]) -> list[Event]:
        return [e for e in self.seen if isinstance(e, kind)]


@dataclass
class Harness:
    """Builds nodes in one namespace and cleans the broker state they leave behind."""

    namespace: str
    port: int = PORT
    nodes: list[Node] = field(default_factory=list)

    def settings(self, **overrides: object) -> MqttSettings:
        base: dict[str, object] = {
            "namespace": self.namespace,
            "port": self.port,
            "reconnect_initial": 0.05,
            "reconnect_max": 0.3,
            "keepalive": 5,
        }
        return MqttSettings(**(base | overrides))

    async def node(self, process_id: str, *, connect: bool = True, **overrides: object) -> Node:
        bus = Bus()
        seen: list[Event] = []
        bus.subscribe("#", seen.append, name="collector")
        await bus.start()
        bridge = MqttBridge(bus, self.settings(**overrides), process_id=process_id)
        await bridge.start()
        node = Node(bus, bridge, seen)
        self.nodes.append(node)
        if connect:
            assert await bridge.wait_connected(HANG_GUARD), f"{process_id} did not connect"
        return node

    async def close(self) -> None:
        for node in self.nodes:
            await node.bridge.stop(flush_timeout=1.0)
            await node.bus.stop()
        if self.port != PORT:
            return
        # Drop the persistent sessions and retained statuses left on the shared broker.
        for cid in {n.bridge.client_id for n in self.nodes}:
            async with aiomqtt.Client(HOST, PORT, identifier=cid, clean_session=True):
                pass
        async with aiomqtt.Client(HOST, PORT) as client:
            for pid in {n.bridge.process_id for n in self.nodes}:
                await client.publish(status_topic(self.namespace, pid), b"", qos=1, retain=True)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness(namespace=f"t{uuid.uuid4().hex[:12]}")
    try:
        yield h
    finally:
        await h.close()


@contextlib.asynccontextmanager
async def observer(filter_: str, port: int = PORT) -> AsyncIterator[list[aiomqtt.Message]]:
    """Collect raw broker messages matching ``filter_`` in the background."""
    got: list[aiomqtt.Message] = []
    async with aiomqtt.Client(HOST, port) as client:
        await client.subscribe(filter_, qos=1)

        async def pump() -> None:
            async for message in client.messages:
                got.append(message)

        task = asyncio.get_running_loop().create_task(pump())
        try:
            yield got
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_events_cross_between_buses_unchanged_and_are_not_echoed(harness: Harness) -> None:
    ns = harness.namespace
    async with observer(f"paperarena/{ns}/#") as raw:
        a = await harness.node("proc-a")
        b = await harness.node("proc-b")
        sent = sample_events("a")
        for ev in sent:
            await a.bus.publish(ev)
        await until(lambda: len(b.seen) == len(sent), what="B to receive A's events")
        # Identical content; the reliable (QoS 1) ones in publication order.
        assert sorted(map(encode_event, b.seen)) == sorted(map(encode_event, sent))
        assert [e for e in b.seen if not isinstance(e, PriceEvent)] == [
            e for e in sent if not isinstance(e, PriceEvent)
        ]
        # A hears its own publications back from the broker and ignores them.
        await until(lambda: a.bridge.counters()["own"] == len(sent), what="A's own echoes")

        # The other way round, while A's events are on B's bus: nothing loops.
        back = [decision("agent-b", i) for i in range(3)]
        for ev in back:
            await b.bus.publish(ev)
        await until(lambda: len(a.seen) == len(sent) + 3, what="A to receive B's events")
        await asyncio.sleep(0.3)
        assert a.seen == sent + back
        assert b.seen[len(sent) :] == back and len(b.seen) == len(sent) + 3
        ca, cb = a.bridge.counters(), b.bridge.counters()
        assert (ca["sent"], ca["received"], cb["sent"], cb["received"]) == (
            len(sent),
            3,
            3,
            len(sent),
        )
        assert ca["duplicates"] == cb["duplicates"] == ca["lost"] == cb["lost"] == 0
        assert b.bridge.peers.get("proc-a") == "online"

        # Wire format: topic mapping, QoS per class, versioned envelope with a content id.
        await until(lambda: sum(m.payload.startswith(b"{") for m in raw) >= len(sent) + 3)
        envelopes = {
            m.topic.value: m
            for m in raw
            if m.payload.startswith(b"{")  # type: ignore[union-attr]
        }
        for ev in sent:
            m = envelopes[mqtt_topic(ns, ev.topic)]
            body = json.loads(m.payload)  # type: ignore[arg-type]
            assert set(body) == {"v", "id", "origin", "event"}
            assert (body["v"], body["origin"]) == (1, "proc-a")
            assert body["id"] == event_id(encode_event(ev))
            assert decode_event(json.dumps(body["event"])) == ev
            assert m.qos == (0 if isinstance(ev, PriceEvent) else 1)
        assert mqtt_topic(ns, "price.equity.BRK.B/+#%") == (
            f"paperarena/{ns}/price/equity/BRK/B%2F%2B%23%25"
        )


async def test_duplicate_deliveries_are_applied_once(harness: Harness) -> None:
    ns = harness.namespace
    b = await harness.node("proc-b")
    ev = decision("agent-x", 7)
    data = encode_event(ev)
    envelope = {"v": 1, "id": event_id(data), "origin": "proc-x", "event": msgspec.Raw(data)}
    payload = msgspec.json.encode(envelope)
    topic = mqtt_topic(ns, ev.topic)
    async with aiomqtt.Client(HOST, PORT) as client:
        await client.publish(topic, payload, qos=1)
        await client.publish(topic, payload, qos=1)  # QoS 1 redelivery of the same event
        own = msgspec.json.encode({**envelope, "id": "other", "origin": "proc-b"})
        await client.publish(topic, own, qos=1)  # claims to come from B itself
        await client.publish(topic, b"{not json", qos=1)
        await client.publish(topic, msgspec.json.encode({**envelope, "v": 2}), qos=1)
        await client.publish(topic, payload, qos=1)
    await until(lambda: b.bridge.counters()["duplicates"] == 2, what="duplicates counted")
    await b.bus.drain()
    assert b.seen == [ev]
    c = b.bridge.counters()
    assert (c["received"], c["duplicates"], c["own"], c["invalid"]) == (1, 2, 1, 2)


async def test_prices_conflate_under_backlog_while_decisions_all_arrive(harness: Harness) -> None:
    a = await harness.node("proc-a")
    b = await harness.node("proc-b")
    n_prices, n_keys = 5_000, 10
    # One burst without yielding: the egress cannot send meanwhile, so it is entirely behind.
    for i in range(n_prices):
        a.bus.publish_nowait(price(f"K{i % n_keys}", float(i)))
        if i % 25 == 0:
            await a.bus.publish(decision("agent-a", i))
    assert a.bridge.counters()["queued"] == n_keys + n_prices // 25
    assert await a.bridge.flush(5.0)
    await until(lambda: len(b.of(DecisionEvent)) == n_prices // 25, what="all decisions")
    await until(lambda: len(b.of(PriceEvent)) == n_keys, what="latest prices")
    assert b.of(DecisionEvent) == [decision("agent-a", i) for i in range(0, n_prices, 25)]
    latest = {e.asset: e.price for e in b.of(PriceEvent)}  # type: ignore[attr-defined]
    assert latest == {f"K{k}": float(n_prices - n_keys + k) for k in range(n_keys)}
    c = a.bridge.counters()
    assert c["dropped_prices"] == n_prices - n_keys
    assert (c["sent_prices"], c["sent_reliable"], c["lost"]) == (n_keys, n_prices // 25, 0)


async def test_retained_online_and_last_will_offline(harness: Harness) -> None:
    ns = harness.namespace
    topic = status_topic(ns, "proc-w")
    async with observer(f"paperarena/{ns}/status/+") as raw:
        w = await harness.node("proc-w")
        watcher = await harness.node("proc-v")
        await until(lambda: [m.payload for m in raw if m.topic.value == topic] == [b"online"])
        # Kill the transport abruptly (no DISCONNECT): the broker must publish the Last Will.
        assert w.bridge._client is not None
        sock = w.bridge._client._client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)

        def statuses() -> list[bytes]:
            return [m.payload for m in raw if m.topic.value == topic]  # type: ignore[misc]

        await until(lambda: statuses()[:2] == [b"online", b"offline"], what="last will")
        # The bridge reconnects by itself and announces itself again.
        await until(lambda: statuses()[-1:] == [b"online"] and w.bridge.connected, what="online")
        assert w.bridge.counters()["reconnects"] == 1
        await until(lambda: watcher.bridge.peers.get("proc-w") == "online")
        # A stale will landing after the reconnect is overwritten by a fresh "online".
        async with aiomqtt.Client(HOST, PORT) as client:
            await client.publish(topic, b"offline", qos=1, retain=True)
        await until(lambda: statuses()[-2:] == [b"offline", b"online"], what="re-asserted")
        await w.bridge.stop()
        # A clean stop says "offline", then clears the retained status (issue 11.13).
        await until(lambda: statuses()[-2:] == [b"offline", b""], what="offline, then cleared")
        await until(lambda: "proc-w" not in watcher.bridge.peers)
    # Nothing retained is left behind: a late subscriber sees no status at all.
    async with observer(topic) as late:
        await asyncio.sleep(0.5)
        assert late == []


async def test_unreachable_broker_never_blocks_the_bus_and_stop_counts_unsent() -> None:
    with socket.socket() as s:
        s.bind((HOST, 0))
        closed_port = s.getsockname()[1]  # nothing listens here once the socket is closed
    bus = Bus()
    bridge = MqttBridge(
        bus,
        MqttSettings(port=closed_port, reconnect_initial=0.05, reconnect_max=0.1, egress_queue=50),
        process_id="lonely",
    )
    await bus.start()
    await bridge.start()
    assert not await bridge.wait_connected(0.3)

    async def publish() -> None:
        for i in range(80):
            await bus.publish(decision("z", i))
            bus.publish_nowait(price("K", float(i)))

    # Publishing never waits for the network (no broker will ever answer: a publish that
    # waited would hang), nor does the stop beyond its flush timeout.
    await asyncio.wait_for(publish(), HANG_GUARD)
    await asyncio.wait_for(bridge.stop(flush_timeout=0.2), HANG_GUARD)
    c = bridge.counters()
    assert c["connect_failures"] >= 2 and c["sent"] == 0 and not c["connected"]
    assert c["lost"] == 80  # 30 overflowed the buffer of 50, 50 were unsent at stop
    assert c["dropped_prices"] == 80
    await bus.stop()


@pytest.mark.skipif(shutil.which("mosquitto") is None, reason="mosquitto binary not installed")
async def test_broker_restart_reconnects_resends_and_keeps_sessions(
    harness: Harness, tmp_path: Path
) -> None:
    broker = PrivateBroker(tmp_path, max_queued_messages=100_000)
    harness.port = broker.port
    await broker.start()
    try:
        a = await harness.node("proc-a")
        b = await harness.node("proc-b", subscribe_patterns=("decision.#", "price.#"))
        c = await harness.node("proc-c", egress_queue=10)
        await a.bus.publish(decision("a", 0))
        await until(lambda: len(b.of(DecisionEvent)) == 1, what="first decision")

        # Outage: A and C keep publishing into their egress buffers.
        await broker.stop()
        await until(lambda: not (a.bridge.connected or b.bridge.connected or c.bridge.connected))
        for i in range(1, 31):
            await a.bus.publish(decision("a", i))
        for i in range(1_000):
            a.bus.publish_nowait(price(f"K{i % 5}", float(i)))
        for i in range(25):
            await c.bus.publish(decision("c", i))
        assert c.bridge.counters()["lost"] == 15  # C's buffer holds only 10: the oldest go
        await broker.start()
        for node in (a, b, c):
            assert await node.bridge.wait_connected(HANG_GUARD)
        await until(lambda: len(b.of(DecisionEvent)) == 41, what="buffered decisions")
        by_agent: dict[str, list[Event]] = {"a": [], "c": []}
        for ev in b.of(DecisionEvent):
            by_agent[ev.agent].append(ev)  # type: ignore[attr-defined]
        assert by_agent["a"] == [decision("a", i) for i in range(31)]  # in order, none lost
        assert by_agent["c"] == [decision("c", i) for i in range(15, 25)]  # the newest 10
        ca = a.bridge.counters()
        assert ca["reconnects"] == 1 and ca["lost"] == 0
        assert ca["dropped_prices"] >= 995  # 1000 prices on 5 keys: at most 5 sent
        assert len(b.of(PriceEvent)) <= 5  # QoS 0: not queued for B if it was still away

        # Broker stops mid-stream: unacknowledged QoS 1 messages are re-sent after reconnecting,
        # and whatever reached the broker twice is applied once.
        n_stream = 3_000

        async def stream() -> None:
            for i in range(n_stream):
                await a.bus.publish(decision("s", i))
                if i % 20 == 0:
                    await asyncio.sleep(0)

        producer = asyncio.get_running_loop().create_task(stream())
        sent_before = ca["sent_reliable"]
        await until(lambda: a.bridge.counters()["sent_reliable"] > sent_before + 300)
        await broker.stop()
        await broker.start()
        await producer
        await until(
            lambda: len([e for e in b.seen if getattr(e, "agent", "") == "s"]) == n_stream,
            timeout=10.0,
            what="the whole stream",
        )
        await asyncio.sleep(0.2)
        assert [e for e in b.seen if getattr(e, "agent", "") == "s"] == [
            decision("s", i) for i in range(n_stream)
        ]
        ca = a.bridge.counters()
        assert (ca["lost"], ca["reconnects"]) == (0, 2)
        assert ca["retried"] > 0  # some were in flight when the broker went away

        # Persistent session: B goes away cleanly; the broker queues A's decisions for it,
        # keeps them across its own restart, and hands them to B's successor (same process id).
        await b.bridge.stop()
        for i in range(100, 120):
            await a.bus.publish(decision("a", i))
        assert await a.bridge.flush(5.0)
        await broker.stop()
        await broker.start()
        b2 = await harness.node("proc-b", subscribe_patterns=("decision.#", "price.#"))
        await until(lambda: len(b2.of(DecisionEvent)) == 20, what="queued decisions")
        assert b2.of(DecisionEvent) == [decision("a", i) for i in range(100, 120)]
        assert b2.bridge.counters()["duplicates"] == 0
    finally:
        await harness.close()
        harness.nodes.clear()
        broker.kill()


def test_a_columnar_burst_leaves_the_egress_buffer_as_its_prices_one_by_one() -> None:
    """The bridge's columns tap buffers each asset's latest price of a burst and counts the
    replaced ones exactly as the per-price tap does, making an event for the latest only."""
    from daemon.core.price_columns import PriceColumns

    def egress() -> Egress:
        e = MqttBridge(Bus(), MqttSettings(port=1), process_id="p")._egress
        e.accepting = True  # as started, without a connection
        return e

    one, cols_egress = egress(), egress()
    for e in (one, cols_egress):  # a price already waiting from an earlier burst
        e.tap(PriceEvent(ts=1.0, market="polymarket", asset="B", price=0.1))
    cols = PriceColumns("polymarket", "src")
    for i, asset in enumerate("ABACBDAA"):
        cols.append(asset, 10.0 + i, 11.0 + i, 0.01 * (i + 1), 0.005 if i % 2 else None, None)
    for ev in cols.events():
        one.tap(ev)
    cols_egress.tap_columns(cols)
    assert list(cols_egress._prices) == list(one._prices) == [
        "price.polymarket.B", "price.polymarket.A", "price.polymarket.C", "price.polymarket.D"]
    assert list(cols_egress._prices.values()) == list(one._prices.values())
    # A's 4 prices leave 1 (3 replaced), B's 2 both replace (one was waiting): 5.
    assert cols_egress.dropped_prices == one.dropped_prices == 5
