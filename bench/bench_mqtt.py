"""Benchmark the MQTT bridge (bus A → Mosquitto → bus B) beside the in-process bus.

Run ``python bench/bench_mqtt.py`` for a table or ``--json`` for machine-readable output; an
aggregator can call :func:`run` directly. Figures, all measured in the same run:

- throughput (events/s) of price events (QoS 0) and decision events (QoS 1) from a publish on
  bus A to a subscriber on bus B through the broker, with the producer kept at most ``WINDOW``
  events ahead of bus B for ``PHASE_SECONDS`` (so no price is conflated, the broker's per-client
  queue never overflows, and the figure is what the path sustains end to end);
- end-to-end latency p50/p99 of single events (one in flight at a time, loopback broker);
- the same two figures for one in-process :class:`~daemon.core.bus.Bus` (publish → subscriber);
- for context, the same paced QoS 1 figure for two bare aiomqtt clients (the client library's
  ceiling on this machine with both ends on one event loop, as here).

Needs a broker on ``127.0.0.1:1883`` (``mosquitto -d -c /etc/mosquitto/mosquitto.conf``); without
one, :func:`run` returns ``{"skipped": reason}``. Bounded to a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiomqtt
import structlog

from daemon.core.bus import Bus
from daemon.core.events import AlertEvent, DecisionEvent, Event, PriceEvent
from daemon.mqtt.bridge import MqttBridge
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import status_topic

WINDOW = 500
N_KEYS = 10_000
BUS_EVENTS = 100_000
BUS_PINGS = 5_000
PHASE_SECONDS = 1.5
MQTT_PINGS = 400
DRAIN_TIMEOUT = 3.0


def _price(i: int) -> PriceEvent:
    return PriceEvent(ts=time.time(), market="equity", asset=f"S{i % N_KEYS}", price=float(i))


def _decision(i: int) -> DecisionEvent:
    now = time.time()
    return DecisionEvent(
        ts=now, agent=f"A{i % 100}", market="equity", scheduled_ts=now, outcome="ok"
    )


def _pct(samples_s: list[float], unit: float) -> dict[str, float]:
    arr = np.asarray(samples_s, dtype=np.float64) * unit
    return {
        "n": len(samples_s),
        "p50": round(float(np.percentile(arr, 50)), 3),
        "p99": round(float(np.percentile(arr, 99)), 3),
    }


class _Sink:
    """Count events reaching a subscriber and wake a waiter on each one."""

    def __init__(self) -> None:
        self.n = 0
        self.arrived = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.n += 1
        self.arrived.set()


async def _bus_figures() -> dict[str, Any]:
    """Return in-process bus throughput (prices, decisions) and single-event latency."""
    bus = Bus(queue_size=10_000)
    prices, decisions, ping = _Sink(), _Sink(), _Sink()
    bus.subscribe("price.#", prices, name="bench-prices")
    bus.subscribe("decision.#", decisions, name="bench-decisions")
    bus.subscribe("alert.#", ping, name="bench-ping")
    await bus.start()
    out: dict[str, Any] = {}

    t0 = time.perf_counter()
    for i in range(BUS_EVENTS):
        bus.publish_nowait(_price(i))
        if i % 1_000 == 999:
            await asyncio.sleep(0)
    await bus.drain()
    out["price_eps"] = round(prices.n / (time.perf_counter() - t0))
    out["price_conflated"] = BUS_EVENTS - prices.n

    t0 = time.perf_counter()
    for i in range(BUS_EVENTS):
        await bus.publish(_decision(i))
    await bus.drain()
    out["decision_eps"] = round(decisions.n / (time.perf_counter() - t0))

    lat: list[float] = []
    for i in range(BUS_PINGS):
        ping.arrived.clear()
        t0 = time.perf_counter()
        await bus.publish(AlertEvent(ts=time.time(), kind="bench", value=float(i)))
        await ping.arrived.wait()
        lat.append(time.perf_counter() - t0)
    out["latency_us"] = _pct(lat, 1e6)
    await bus.stop()
    return out


async def _paced(
    sink: _Sink, publish: Callable[[int], Awaitable[None] | None], seconds: float
) -> dict[str, Any]:
    """Publish for ``seconds``, at most ``WINDOW`` ahead of ``sink``; return the delivered rate."""
    start_n = sink.n
    sent = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        if sent - (sink.n - start_n) >= WINDOW:
            sink.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sink.arrived.wait(), 0.05)
            continue
        result = publish(sent)
        if result is not None:
            await result
        sent += 1
    elapsed = time.perf_counter() - t0
    delivered = sink.n - start_n
    drain_end = time.perf_counter() + DRAIN_TIMEOUT
    while sink.n - start_n < sent and time.perf_counter() < drain_end:
        await asyncio.sleep(0.005)
    return {
        "eps": round(delivered / elapsed),
        "sent": sent,
        "delivered": sink.n - start_n,
        "seconds": round(elapsed, 3),
    }


async def _through_bridge(bus_a: Bus, sink: _Sink, make: Callable[[int], Event]) -> dict[str, Any]:
    """Return the rate of events published on bus A that reach a subscriber on bus B."""

    def publish(i: int) -> Awaitable[None] | None:
        event = make(i)
        if isinstance(event, PriceEvent):
            bus_a.publish_nowait(event)
            return None
        return bus_a.publish(event)

    return await _paced(sink, publish, PHASE_SECONDS)


async def _client_ceiling(host: str, port: int, ns: str) -> dict[str, Any]:
    """Return the same paced QoS 1 figure for bare aiomqtt clients (publisher + subscriber)."""
    sink = _Sink()
    topic = f"bench-raw/{ns}/x"  # outside the bridges' namespace
    payload = b"x" * 220  # about the size of an encoded decision envelope

    class _Inbox(asyncio.Queue):  # type: ignore[type-arg]
        def put_nowait(self, item: Any) -> None:
            sink(item)  # type: ignore[arg-type]

    async with (
        aiomqtt.Client(host, port, queue_type=_Inbox) as sub,
        aiomqtt.Client(host, port, max_inflight_messages=64) as pub,
    ):
        await sub.subscribe(topic, qos=1)
        pub.pending_calls_threshold = 10 * WINDOW
        window = asyncio.Semaphore(64)
        pending: set[asyncio.Task[None]] = set()

        async def one() -> None:
            async with window:
                await pub.publish(topic, payload, qos=1)

        def publish(i: int) -> None:
            task = asyncio.get_running_loop().create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)

        out = await _paced(sink, publish, 1.0)
        for task in list(pending):
            task.cancel()
        return out


async def _ping_bridge(bus_a: Bus, sink: _Sink, make: Callable[[int], Event]) -> dict[str, float]:
    """Return end-to-end latency (ms) of single events, one in flight at a time."""
    lat: list[float] = []
    for i in range(MQTT_PINGS):
        sink.arrived.clear()
        event = make(i)
        t0 = time.perf_counter()
        if isinstance(event, PriceEvent):
            bus_a.publish_nowait(event)
        else:
            await bus_a.publish(event)
        try:
            await asyncio.wait_for(sink.arrived.wait(), 2.0)
        except TimeoutError:
            continue
        lat.append(time.perf_counter() - t0)
    return _pct(lat, 1e3)


async def _mqtt_figures(host: str, port: int) -> dict[str, Any]:
    """Return bridge throughput and latency for prices (QoS 0) and decisions (QoS 1)."""
    ns = f"bench{uuid.uuid4().hex[:10]}"
    settings = MqttSettings(host=host, port=port, namespace=ns)
    bus_a, bus_b = Bus(), Bus()
    prices, decisions = _Sink(), _Sink()
    bus_b.subscribe("price.#", prices, name="bench-prices")
    bus_b.subscribe("decision.#", decisions, name="bench-decisions")
    await bus_a.start()
    await bus_b.start()
    a = MqttBridge(bus_a, settings.model_copy(update={"subscribe_patterns": ()}), process_id="a")
    b = MqttBridge(bus_b, settings.model_copy(update={"publish_patterns": ()}), process_id="b")
    await a.start()
    await b.start()
    out: dict[str, Any] = {"broker": f"{host}:{port}"}
    try:
        if not (await a.wait_connected(5.0) and await b.wait_connected(5.0)):
            return {"skipped": f"bridges could not connect to {host}:{port}"}
        out["price"] = await _through_bridge(bus_a, prices, _price)
        out["decision"] = await _through_bridge(bus_a, decisions, _decision)
        out["price_latency_ms"] = await _ping_bridge(bus_a, prices, _price)
        out["decision_latency_ms"] = await _ping_bridge(bus_a, decisions, _decision)
        out["bridge_a"] = a.counters()
        out["bridge_b"] = b.counters()
        out["aiomqtt_qos1_ceiling"] = await _client_ceiling(host, port, ns)
    finally:
        await a.stop(flush_timeout=2.0)
        await b.stop(flush_timeout=2.0)
        await bus_a.stop()
        await bus_b.stop()
        await _purge(host, port, ns, (a, b))
    return out


async def _purge(host: str, port: int, ns: str, bridges: tuple[MqttBridge, ...]) -> None:
    """Remove the persistent sessions and retained statuses the benchmark created."""
    try:
        for bridge in bridges:
            async with aiomqtt.Client(host, port, identifier=bridge.client_id, clean_session=True):
                pass
        async with aiomqtt.Client(host, port) as client:
            for bridge in bridges:
                await client.publish(status_topic(ns, bridge.process_id), b"", qos=1, retain=True)
    except aiomqtt.MqttError:
        pass


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


async def _run(host: str, port: int) -> dict[str, Any]:
    result: dict[str, Any] = {"bus": await _bus_figures()}
    if not _listening(host, port):
        result["mqtt"] = {"skipped": f"no MQTT broker listening on {host}:{port}"}
    else:
        result["mqtt"] = await _mqtt_figures(host, port)
    return result


def run(host: str = "127.0.0.1", port: int = 1883) -> dict[str, Any]:
    """Run every figure once and return them (``mqtt.skipped`` says why if there is no broker)."""
    return asyncio.run(_run(host, port))


def _table(res: dict[str, Any]) -> str:
    bus, mq = res["bus"], res["mqtt"]
    lines = [
        f"{'path':<34}{'events/s':>12}{'p50':>12}{'p99':>12}",
        f"{'bus: price (publish_nowait)':<34}{bus['price_eps']:>12,}",
        f"{'bus: decision (publish)':<34}{bus['decision_eps']:>12,}"
        f"{bus['latency_us']['p50']:>10.1f}us{bus['latency_us']['p99']:>10.1f}us",
    ]
    if "skipped" in mq:
        lines.append(f"mqtt: skipped ({mq['skipped']})")
        return "\n".join(lines)
    for kind, lat in (("price", "price_latency_ms"), ("decision", "decision_latency_ms")):
        qos = 0 if kind == "price" else 1
        lines.append(
            f"{f'mqtt: {kind} (QoS {qos})':<34}{mq[kind]['eps']:>12,}"
            f"{mq[lat]['p50']:>10.3f}ms{mq[lat]['p99']:>10.3f}ms"
        )
    ceiling = mq["aiomqtt_qos1_ceiling"]["eps"]
    lines.append(f"{'bare aiomqtt pub+sub (QoS 1)':<34}{ceiling:>12,}")
    a = mq["bridge_a"]
    lines.append(
        f"bridge A: sent={a['sent']} dropped_prices={a['dropped_prices']} lost={a['lost']}"
        f"; delivered prices {mq['price']['delivered']}/{mq['price']['sent']}"
        f", decisions {mq['decision']['delivered']}/{mq['decision']['sent']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark and print a table or JSON."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print results as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1883)
    args = ap.parse_args(argv)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    res = run(args.host, args.port)
    print(json.dumps(res, indent=2) if args.json else _table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
