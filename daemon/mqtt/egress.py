"""The MQTT bridge's egress (bus → broker): the bus tap, its bounded buffers and the workers that
publish them over the bridge's connection (which :mod:`.bridge` owns).

A synchronous bus tap copies matching local events into the egress's own bounded buffers, so
publishing on the bus never waits for the network (a burst of prices given as columns puts each
asset's latest price there, an event made for it alone). Conflating classes (prices) go out at
QoS 0 through a latest-per-key buffer: while the bridge is behind or disconnected, a newer price
replaces the pending one (counted in ``dropped_prices``). Every other class goes out at QoS 1
through a FIFO buffer of ``egress_queue`` events kept across reconnects; an event whose PUBACK has
not arrived when the connection drops is re-sent after reconnecting (at-least-once). Only when
that buffer overflows is the oldest pending event discarded, counted in ``lost`` and logged.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from itertools import count
from typing import NamedTuple

import aiomqtt
import msgspec
import structlog

from daemon.core.bus import topic_matches
from daemon.core.events import PRICE, Event, PriceEvent, encode_event
from daemon.core.price_columns import PriceColumns
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import ENVELOPE_VERSION, Envelope, _envelope_encoder, event_id, mqtt_topic

log = structlog.get_logger(__name__)

#: Logs a warning at most once per interval for each kind (``warn(what, message, **fields)``).
Warn = Callable[..., None]


class _Out(NamedTuple):
    """One encoded message waiting for (or in) transmission."""

    seq: int
    topic: str
    payload: bytes
    qos: int
    retain: bool = False


class Egress:
    """Buffer local bus events (and raw control messages) and publish them to the broker."""

    def __init__(
        self, settings: MqttSettings, conflating: frozenset[str], *, process_id: str, warn: Warn
    ) -> None:
        """Prepare empty buffers; ``conflating`` names the classes that go out latest-per-key."""
        self.settings = settings
        self.process_id = process_id
        self._warn = warn
        self._cap = settings.egress_queue
        self._conflating = conflating
        #: Whether the taps buffer events (true while the bridge is started).
        self.accepting = False
        #: The remote event the ingress is publishing on the bus: the tap never sends it back.
        self.echo: Event | None = None
        self._pub_match: dict[str, bool] = {}
        self._topic_cache: dict[str, str] = {}
        self._prices: OrderedDict[str, Event] = OrderedDict()
        self._reliable: deque[Event | _Out] = deque()
        self._inflight: dict[int, _Out] = {}
        self._inflight_prices = 0
        self._price_turn = False
        self._seq = count()
        self._idle_workers: deque[asyncio.Future[None]] = deque()
        # Counters.
        self.sent_prices = 0
        self.sent_reliable = 0
        self.dropped_prices = 0
        self.lost = 0
        self.retried = 0

    @property
    def queued(self) -> int:
        """Return how many messages are buffered or in flight."""
        return (
            len(self._prices) + len(self._reliable) + len(self._inflight) + self._inflight_prices
        )

    @property
    def pending(self) -> bool:
        """Return whether any message is still buffered or in flight."""
        return bool(self._prices or self._reliable or self._inflight or self._inflight_prices)

    def discard(self) -> int:
        """Drop every buffered message (reliable ones count in ``lost``, prices in
        ``dropped_prices``) and return how many reliable ones were unsent."""
        unsent = len(self._reliable) + len(self._inflight)
        self.lost += unsent
        self._reliable.clear()
        self._inflight.clear()
        self.dropped_prices += len(self._prices)
        self._prices.clear()
        return unsent

    def send(self, event: Event, *, run: str | None = None, seq: int | None = None) -> None:
        """Queue ``event`` at QoS 1 whatever its class (``run``/``seq``: a replay stream's)."""
        self._queue_reliable(self._encode(event, 1, run=run, seq=seq))

    def send_raw(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        """Queue a raw QoS 1 message (in order with the other QoS 1 sends)."""
        self._queue_reliable(_Out(next(self._seq), topic, payload, 1, retain))

    def _queue_reliable(self, item: Event | _Out) -> None:
        """Append to the QoS 1 FIFO, discarding (and counting) the oldest on overflow."""
        if len(self._reliable) >= self._cap:
            self._reliable.popleft()
            self.lost += 1
            self._warn("lost", "mqtt egress buffer full: oldest reliable event discarded")
        self._reliable.append(item)
        self._wake_workers(1)

    # ------------------------------------------------------------------ bus taps

    def tap(self, event: Event) -> None:
        """Buffer one local event for the broker; never block, never raise."""
        if not self.accepting or event is self.echo:
            return
        if not self._wants(event.topic):
            return
        if event.topic_class in self._conflating:
            self._buffer_price(event, 1)
        else:
            self._queue_reliable(event)
            return
        self._wake_workers(1)

    def _wants(self, topic: str) -> bool:
        """Return whether a bus topic is published to the broker (cached)."""
        wanted = self._pub_match.get(topic)
        if wanted is None:
            wanted = any(topic_matches(p, topic) for p in self.settings.publish_patterns)
            if len(self._pub_match) > 200_000:
                self._pub_match.clear()
            self._pub_match[topic] = wanted
        return wanted

    def _buffer_price(self, event: Event, n: int) -> None:
        """Leave ``event`` in the latest-per-key buffer as the last of ``n`` prices of its key
        (each replacing the one before it: counted in ``dropped_prices``)."""
        prices = self._prices
        key = event.key
        if key in prices:
            prices[key] = event  # keeps its place in line: hot keys do not starve others
            self.dropped_prices += n
        else:
            if len(prices) >= self._cap:
                prices.popitem(last=False)
                self.dropped_prices += 1
            prices[key] = event
            self.dropped_prices += n - 1

    def tap_columns(self, prices: PriceColumns) -> None:
        """Columns tap: what :meth:`tap` leaves buffered after each price of the burst (each
        asset's latest, counted alike), an event made for those latest prices only."""
        if not self.accepting:
            return
        if PRICE not in self._conflating:
            for ev in prices.events():
                self.tap(ev)
            return
        per_asset = Counter(prices.a)
        last = dict(zip(prices.a, range(len(prices)), strict=True))  # first-seen order
        names, market, source = prices.table.names, prices.market, prices.source
        woken = 0
        for k, i in last.items():
            bid, ask = prices.bid[i], prices.ask[i]
            ev = PriceEvent(ts=prices.ts[i], recv_ts=prices.recv_ts[i], market=market,
                            asset=names[k], price=prices.price[i],
                            bid=None if bid != bid else bid, ask=None if ask != ask else ask,
                            source=source)
            if self._wants(ev.topic):
                self._buffer_price(ev, per_asset[k])  # its n prices: the last one stays
                woken += per_asset[k]
        if woken:
            self._wake_workers(woken)

    # ------------------------------------------------------------------ publishing

    def _wake_workers(self, n: int) -> None:
        """Wake up to ``n`` idle workers (one per new message, so they do not stampede)."""
        idle = self._idle_workers
        while n > 0 and idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    def _mqtt_topic(self, topic: str) -> str:
        """Return the (cached) MQTT topic of a bus topic."""
        cached = self._topic_cache.get(topic)
        if cached is None:
            cached = mqtt_topic(self.settings.namespace, topic)
            if len(self._topic_cache) > 200_000:
                self._topic_cache.clear()
            self._topic_cache[topic] = cached
        return cached

    def _encode(
        self, event: Event, qos: int, *, run: str | None = None, seq: int | None = None
    ) -> _Out:
        """Wrap one event in its envelope, ready to publish."""
        data = encode_event(event)
        envelope = Envelope(
            v=ENVELOPE_VERSION,
            id=event_id(data),
            origin=self.process_id,
            event=msgspec.Raw(data),
            run=run,
            seq=seq,
        )
        payload = _envelope_encoder.encode(envelope)
        return _Out(next(self._seq), self._mqtt_topic(event.topic), payload, qos)

    def _take(self) -> _Out | None:
        """Return the next message to send, alternating reliable and price buffers."""
        take_price = bool(self._prices) and (not self._reliable or self._price_turn)
        self._price_turn = not self._price_turn
        if take_price:
            _, event = self._prices.popitem(last=False)
            return self._encode(event, 0)
        if self._reliable:
            item = self._reliable.popleft()
            return item if isinstance(item, _Out) else self._encode(item, 1)
        return None

    async def worker(self, client: aiomqtt.Client) -> None:
        """Send buffered messages until cancelled; one publish in flight per worker."""
        while True:
            out = self._take()
            if out is None:
                waiter = asyncio.get_running_loop().create_future()
                self._idle_workers.append(waiter)
                await waiter
                continue
            if out.qos:
                self._inflight[out.seq] = out
                try:
                    await client.publish(
                        out.topic, out.payload, qos=1, retain=out.retain, timeout=math.inf
                    )
                except ValueError as exc:  # refused by the client (size, topic): never retry
                    del self._inflight[out.seq]
                    self.lost += 1
                    log.error("mqtt publish refused", topic=out.topic, error=str(exc))
                    continue
                del self._inflight[out.seq]
                self.sent_reliable += 1
            else:
                self._inflight_prices += 1
                try:
                    await client.publish(out.topic, out.payload, qos=0, timeout=math.inf)
                except ValueError as exc:
                    self.dropped_prices += 1
                    log.error("mqtt publish refused", topic=out.topic, error=str(exc))
                    continue
                except BaseException:
                    self.dropped_prices += 1
                    raise
                finally:
                    self._inflight_prices -= 1
                self.sent_prices += 1

    def workers_stopped(self) -> None:
        """Forget the stopped workers' waits and requeue what they had in flight."""
        self._idle_workers.clear()
        self.requeue_inflight()

    def requeue_inflight(self) -> None:
        """Put reliable messages without PUBACK back at the front, in their original order."""
        if not self._inflight:
            return
        items = sorted(self._inflight.values(), key=lambda o: o.seq)
        self._inflight.clear()
        self._reliable.extendleft(reversed(items))
        self.retried += len(items)
        self._wake_workers(len(items))
