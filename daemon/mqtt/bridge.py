"""Bridge the in-process bus to an MQTT broker so several processes share one event stream.

Wire format
    Topic ``paperarena/<namespace>/<event topic, dots → slashes>``; payload a versioned envelope
    ``{"v": 1, "id": <sha1 of the event JSON>, "origin": <process id>, "event": <event JSON>}``.
    The id is a content hash, so every copy of the same event (re-sends, broker redeliveries)
    carries the same id. Events of a replay stream (:meth:`MqttBridge.send` with ``seq``) also
    carry ``"run"`` and ``"seq"``; they are deduplicated by ``(run, seq)`` instead of content.
    Process liveness is the retained ``online``/``offline`` payload at
    ``paperarena/<namespace>/status/<process id>`` (``offline`` is also the Last Will). A clean
    stop publishes ``offline`` and then clears the retained status, so only a crashed process
    leaves a retained ``offline`` behind.

Control subtrees
    ``paperarena/<namespace>/owners/...`` and ``.../replay/...`` carry raw control messages
    (agent ownership claims, replay stream markers and acknowledgements; see ``daemon/app/roles.py``
    and ``daemon/app/replay_roles.py``),
    never events: :meth:`MqttBridge.watch` hands them to a callback, other bridges ignore them.
    :meth:`MqttBridge.announce` publishes a retained control message and re-publishes it after
    every reconnect, so it survives a broker that lost its retained store.

Egress (bus → broker)
    A synchronous bus tap copies matching local events into the bridge's own bounded buffers, so
    publishing on the bus never waits for the network (a burst of prices given as columns puts
    each asset's latest price there, an event made for it alone). Conflating classes (prices) go
    out at QoS 0 through a latest-per-key buffer: while the bridge is behind or disconnected, a
    newer price replaces the pending one (counted in ``dropped_prices``). Every other class goes
    out at QoS 1 through a FIFO buffer of ``egress_queue`` events kept across reconnects; an event
    whose PUBACK has not arrived when the connection drops is re-sent after reconnecting
    (at-least-once).
    Only when that buffer overflows is the oldest pending event discarded, counted in ``lost`` and
    logged.

Ingress (broker → bus)
    Envelopes from our own process are ignored; the others are deduplicated by id in an LRU of the
    last ``dedupe_window`` ids and published once on the local bus. Events received from the
    broker are never sent back out: the egress tap skips the very event object being applied.

Sessions
    The client connects with ``clean_session=False`` and a stable client id, so the broker keeps
    our subscriptions and queues QoS 1 messages while we are away; they are delivered (and
    deduplicated) after reconnecting. Reconnection uses exponential backoff with jitter and always
    re-subscribes.

The wire format's names, envelope and ids live in ``daemon/mqtt/wire.py``, the settings in
``daemon/mqtt/settings.py``; both are re-exported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import socket
import ssl
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from itertools import count
from typing import NamedTuple

import aiomqtt
import msgspec
import structlog

from daemon.core.bus import Bus, topic_matches
from daemon.core.events import PRICE, Event, PriceEvent, decode_event, encode_event
from daemon.core.price_columns import PriceColumns
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import _LEVEL_UNSAFE as _LEVEL_UNSAFE  # re-exported
from daemon.mqtt.wire import (
    _NAME_UNSAFE,
    CONTROL_SUBTREES,
    ENVELOPE_VERSION,
    OFFLINE,
    ONLINE,
    ROOT,
    Envelope,
    _envelope_decoder,
    _envelope_encoder,
    default_client_id,
    event_id,
    mqtt_filter,
    mqtt_topic,
    status_topic,
)
from daemon.mqtt.wire import _escape_level as _escape_level  # re-exported

log = structlog.get_logger(__name__)

#: Concurrent publishes per connection (and the client's in-flight QoS 1 window).
PUBLISH_WINDOW = 64
#: Seconds between repeated warnings about the same condition.
WARN_INTERVAL = 10.0


#: Receives every new remote event instead of the local bus (see ``MqttBridge(sink=...)``).
Sink = Callable[[Envelope, Event], None]
#: Receives raw control messages: (topic below the subtree, payload, retained flag).
ControlHandler = Callable[[str, bytes, bool], None]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``event``; never swallow a cancellation (unlike wait_for)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


class _Out(NamedTuple):
    """One encoded message waiting for (or in) transmission."""

    seq: int
    topic: str
    payload: bytes
    qos: int
    retain: bool = False


class MqttBridge:
    """Forward local bus events to MQTT and publish remote MQTT events on the local bus."""

    def __init__(
        self, bus: Bus, settings: MqttSettings, *, process_id: str, sink: Sink | None = None
    ) -> None:
        """Prepare the bridge for ``bus``; nothing connects before :meth:`start`.

        With ``sink``, new remote events go to ``sink(envelope, event)`` (called from the reader,
        must not block) instead of being published on ``bus``; egress is unchanged.
        """
        if not process_id or _NAME_UNSAFE.search(process_id):
            raise ValueError(f"invalid process id {process_id!r} (no '/', '+', '#', NUL)")
        self.bus = bus
        self.settings = settings
        self.process_id = process_id
        self.client_id = settings.client_id or default_client_id(settings.namespace, process_id)
        self.status_topic = status_topic(settings.namespace, process_id)
        self._ns_prefix = f"{ROOT}/{settings.namespace}/"
        self._status_prefix = f"{ROOT}/{settings.namespace}/status/"
        self._sink = sink
        self._watchers: dict[str, ControlHandler] = {}
        self._announcements: dict[str, bytes] = {}
        #: Called with (process id, status) whenever a peer's known status changes.
        self.on_peer: Callable[[str, str], None] | None = None
        self._cap = settings.egress_queue
        self._conflating = bus.conflating
        self._tls_context = (
            ssl.create_default_context(cafile=settings.ca_file) if settings.tls else None
        )
        #: Last known liveness of peer processes (from their retained status), by process id.
        self.peers: dict[str, str] = {}
        # Egress.
        self._pub_match: dict[str, bool] = {}
        self._topic_cache: dict[str, str] = {}
        self._prices: OrderedDict[str, Event] = OrderedDict()
        self._reliable: deque[Event | _Out] = deque()
        self._inflight: dict[int, _Out] = {}
        self._inflight_prices = 0
        self._price_turn = False
        self._seq = count()
        self._idle_workers: deque[asyncio.Future[None]] = deque()
        # Ingress.
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._inbox: deque[Event] = deque()
        self._inbox_ready = asyncio.Event()
        self._echo: Event | None = None
        # Lifecycle.
        self._accepting = False
        self._tap_added = False
        self._connected = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._applier: asyncio.Task[None] | None = None
        self._client: aiomqtt.Client | None = None
        self._ever_connected = False
        self._background: set[asyncio.Task[None]] = set()
        self._last_warn: dict[str, float] = {}
        # Counters.
        self._sent_prices = 0
        self._sent_reliable = 0
        self._received = 0
        self._duplicates = 0
        self._own = 0
        self._invalid = 0
        self._dropped_prices = 0
        self._lost = 0
        self._retried = 0
        self._reconnects = 0
        self._connect_failures = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start forwarding: tap the bus and connect in the background (see ``wait_connected``)."""
        if self._runner is not None:
            return
        if not self._tap_added:
            self.bus.add_tap("#", self._tap, columns=self._tap_columns)
            self._tap_added = True
        self._accepting = True
        self._stop_requested.clear()
        loop = asyncio.get_running_loop()
        self._applier = loop.create_task(self._apply_loop(), name=f"mqtt-ingress-{self.process_id}")
        self._runner = loop.create_task(self._run(), name=f"mqtt-bridge-{self.process_id}")
        log.info(
            "mqtt bridge starting",
            host=self.settings.host,
            port=self.settings.port,
            namespace=self.settings.namespace,
            client_id=self.client_id,
            process_id=self.process_id,
        )

    async def stop(self, *, flush_timeout: float = 5.0) -> None:
        """Flush pending egress (bounded), publish retained ``offline`` and disconnect cleanly.

        Reliable events still unsent after ``flush_timeout`` are counted in ``lost``.
        """
        if self._runner is None:
            return
        self._accepting = False
        await self.flush(flush_timeout)
        self._stop_requested.set()
        runner, self._runner = self._runner, None
        try:
            await asyncio.wait_for(runner, timeout=flush_timeout + 15.0)
        except TimeoutError:
            log.warning("mqtt bridge did not stop in time; cancelled", process_id=self.process_id)
        unsent = len(self._reliable) + len(self._inflight)
        if unsent:
            self._lost += unsent
            log.warning("mqtt bridge stopped with unsent reliable events", lost=unsent)
        self._reliable.clear()
        self._inflight.clear()
        self._dropped_prices += len(self._prices)
        self._prices.clear()
        deadline = time.monotonic() + flush_timeout
        while self._inbox and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self._applier is not None:
            self._applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._applier
            self._applier = None
        for task in list(self._background):
            task.cancel()
        log.info("mqtt bridge stopped", process_id=self.process_id, **self.counters())

    async def wait_connected(self, timeout: float) -> bool:
        """Wait until connected and subscribed; return False if ``timeout`` seconds pass first."""
        return await wait_event(self._connected, timeout)

    async def flush(self, timeout: float) -> bool:
        """Wait until every buffered event has been handed to the broker; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._prices or self._reliable or self._inflight or self._inflight_prices:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.002)
        return True

    @property
    def connected(self) -> bool:
        """Return whether the bridge is currently connected and subscribed."""
        return self._connected.is_set()

    def forget(self, key: str) -> None:
        """Forget a delivery (its ``dedupe_key``) the sink could not take: a re-send of it is
        then applied instead of dropped as a duplicate."""
        self._seen.pop(key, None)

    def counters(self) -> dict[str, int | bool]:
        """Return the bridge counters (monotonic except ``queued`` and ``connected``)."""
        return {
            "sent": self._sent_prices + self._sent_reliable,
            "sent_prices": self._sent_prices,
            "sent_reliable": self._sent_reliable,
            "received": self._received,
            "duplicates": self._duplicates,
            "own": self._own,
            "invalid": self._invalid,
            "dropped_prices": self._dropped_prices,
            "lost": self._lost,
            "retried": self._retried,
            "reconnects": self._reconnects,
            "connect_failures": self._connect_failures,
            "queued": len(self._prices)
            + len(self._reliable)
            + len(self._inflight)
            + self._inflight_prices,
            "connected": self._connected.is_set(),
        }

    # ------------------------------------------------------------------ control and streams

    def control_topic(self, subtopic: str) -> str:
        """Return the MQTT topic of a control subtopic (``owners/e1`` → ``.../owners/e1``)."""
        return self._ns_prefix + subtopic

    def watch(self, subtree: str, handler: ControlHandler) -> None:
        """Subscribe to the control ``subtree`` (see ``CONTROL_SUBTREES``); call before start."""
        if subtree not in CONTROL_SUBTREES:
            raise ValueError(f"{subtree!r} is not a control subtree ({sorted(CONTROL_SUBTREES)})")
        if self._runner is not None:
            raise RuntimeError("watch() must be called before start()")
        self._watchers[subtree] = handler

    def send(self, event: Event, *, run: str | None = None, seq: int | None = None) -> None:
        """Queue ``event`` for the broker at QoS 1 whatever its class (never conflated).

        ``run`` and ``seq`` mark it as event ``seq`` of replay stream ``run``. Unlike the bus
        tap, this ignores ``publish_patterns``. Overflow of ``egress_queue`` counts in ``lost``.
        """
        if not self._accepting:
            raise RuntimeError("the bridge is not started")
        self._queue_reliable(self._encode(event, 1, run=run, seq=seq))

    def publish_control(self, subtopic: str, payload: bytes, *, retain: bool = False) -> None:
        """Queue a raw QoS 1 control message (at-least-once, in order with other QoS 1 sends)."""
        if not self._accepting:
            raise RuntimeError("the bridge is not started")
        out = _Out(next(self._seq), self.control_topic(subtopic), payload, 1, retain)
        self._queue_reliable(out)

    def announce(self, subtopic: str, payload: bytes) -> None:
        """Publish a retained control message now and again after every reconnect.

        An empty ``payload`` withdraws the announcement (clears the retained message).
        """
        topic = self.control_topic(subtopic)
        if payload:
            self._announcements[topic] = payload
        else:
            self._announcements.pop(topic, None)
        if self._accepting:
            self._queue_reliable(_Out(next(self._seq), topic, payload, 1, True))

    def _queue_reliable(self, item: Event | _Out) -> None:
        """Append to the QoS 1 FIFO, discarding (and counting) the oldest on overflow."""
        if len(self._reliable) >= self._cap:
            self._reliable.popleft()
            self._lost += 1
            self._warn("lost", "mqtt egress buffer full: oldest reliable event discarded")
        self._reliable.append(item)
        self._wake_workers(1)

    # ------------------------------------------------------------------ egress

    def _tap(self, event: Event) -> None:
        """Buffer one local event for the broker; never block, never raise."""
        if not self._accepting or event is self._echo:
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
            self._dropped_prices += n
        else:
            if len(prices) >= self._cap:
                prices.popitem(last=False)
                self._dropped_prices += 1
            prices[key] = event
            self._dropped_prices += n - 1

    def _tap_columns(self, prices: PriceColumns) -> None:
        """Columns tap: what :meth:`_tap` leaves buffered after each price of the burst (each
        asset's latest, counted alike), an event made for those latest prices only."""
        if not self._accepting:
            return
        if PRICE not in self._conflating:
            for ev in prices.events():
                self._tap(ev)
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

    async def _worker(self, client: aiomqtt.Client) -> None:
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
                    self._lost += 1
                    log.error("mqtt publish refused", topic=out.topic, error=str(exc))
                    continue
                del self._inflight[out.seq]
                self._sent_reliable += 1
            else:
                self._inflight_prices += 1
                try:
                    await client.publish(out.topic, out.payload, qos=0, timeout=math.inf)
                except ValueError as exc:
                    self._dropped_prices += 1
                    log.error("mqtt publish refused", topic=out.topic, error=str(exc))
                    continue
                except BaseException:
                    self._dropped_prices += 1
                    raise
                finally:
                    self._inflight_prices -= 1
                self._sent_prices += 1

    def _requeue_inflight(self) -> None:
        """Put reliable messages without PUBACK back at the front, in their original order."""
        if not self._inflight:
            return
        items = sorted(self._inflight.values(), key=lambda o: o.seq)
        self._inflight.clear()
        self._reliable.extendleft(reversed(items))
        self._retried += len(items)
        self._wake_workers(len(items))

    # ------------------------------------------------------------------ ingress

    def _on_message(self, message: aiomqtt.Message) -> None:
        """Decode, filter and deduplicate one broker message; queue new events for the bus."""
        payload = message.payload
        if not isinstance(payload, bytes | bytearray):
            self._invalid += 1
            return
        topic = message.topic.value
        if topic.startswith(self._ns_prefix):
            head, _, rest = topic[len(self._ns_prefix) :].partition("/")
            if head in CONTROL_SUBTREES:
                handler = self._watchers.get(head)
                if handler is not None:
                    try:
                        handler(rest, bytes(payload), message.retain)
                    except Exception as exc:
                        log.error("mqtt control handler failed", topic=topic, error=repr(exc))
                return
        if topic.startswith(self._status_prefix) and not payload.startswith(b"{"):
            self._on_status(topic[len(self._status_prefix) :], bytes(payload), message.retain)
            return
        try:
            envelope = _envelope_decoder.decode(payload)
        except msgspec.DecodeError as exc:
            self._invalid += 1
            self._warn(
                "invalid", "mqtt message is not a valid envelope", topic=topic, error=str(exc)
            )
            return
        if envelope.v != ENVELOPE_VERSION:
            self._invalid += 1
            self._warn("version", "mqtt envelope version not supported", topic=topic, v=envelope.v)
            return
        if envelope.origin == self.process_id:
            self._own += 1
            return
        seen = self._seen
        key = envelope.dedupe_key
        if key in seen:
            seen.move_to_end(key)
            self._duplicates += 1
            return
        seen[key] = None
        if len(seen) > self.settings.dedupe_window:
            seen.popitem(last=False)
        try:
            event = decode_event(bytes(envelope.event))
        except msgspec.DecodeError as exc:
            self._invalid += 1
            self._warn(
                "invalid", "mqtt envelope holds an invalid event", topic=topic, error=str(exc)
            )
            return
        if self._sink is not None:
            self._received += 1
            try:
                self._sink(envelope, event)
            except Exception as exc:
                log.error("mqtt ingress sink failed", topic=topic, error=repr(exc))
            return
        self._inbox.append(event)
        self._inbox_ready.set()

    def _on_status(self, process_id: str, payload: bytes, retained: bool) -> None:
        """Track peer liveness; re-assert our own ``online`` if a live ``offline`` shows up."""
        if "/" in process_id:
            return
        if process_id == self.process_id:
            if (
                payload == OFFLINE
                and not retained
                and self._connected.is_set()
                and not self._stop_requested.is_set()
            ):
                task = asyncio.get_running_loop().create_task(self._reassert_online())
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return
        previous = self.peers.get(process_id)
        if payload:
            status = payload.decode("utf-8", "replace")
            self.peers[process_id] = status
        else:
            status = ""
            self.peers.pop(process_id, None)
        if status != (previous or "") and self.on_peer is not None:
            try:
                self.on_peer(process_id, status)
            except Exception as exc:
                log.error("mqtt peer callback failed", peer=process_id, error=repr(exc))

    async def _reassert_online(self) -> None:
        """Publish our retained ``online`` again over a stale ``offline``."""
        client = self._client
        if client is None:
            return
        log.warning("mqtt status overwritten with offline; re-publishing online")
        with contextlib.suppress(aiomqtt.MqttError):
            await client.publish(self.status_topic, ONLINE, qos=1, retain=True, timeout=10)

    async def _reader(self, client: aiomqtt.Client) -> None:
        """Take messages off the connection until it drops (raises ``MqttError``)."""
        async for message in client.messages:
            self._on_message(message)

    async def _apply_loop(self) -> None:
        """Publish received events on the local bus, marked so the egress tap skips them."""
        while True:
            if not self._inbox:
                self._inbox_ready.clear()
                await self._inbox_ready.wait()
                continue
            event = self._inbox.popleft()
            self._echo = event
            try:
                await self.bus.publish(event)
            except Exception as exc:
                log.error("mqtt ingress publish failed", topic=event.topic, error=repr(exc))
            finally:
                self._echo = None
            self._received += 1

    # ------------------------------------------------------------------ connection

    def _new_client(self) -> aiomqtt.Client:
        """Build a client for one connection attempt (persistent session, Last Will, NODELAY)."""
        s = self.settings
        password = None
        if s.password_env:
            password = os.environ.get(s.password_env)
            if password is None:
                self._warn("password", "mqtt password variable is not set", env=s.password_env)
        client = aiomqtt.Client(
            s.host,
            s.port,
            username=s.username,
            password=password,
            identifier=self.client_id,
            will=aiomqtt.Will(self.status_topic, OFFLINE, qos=1, retain=True),
            clean_session=False,
            keepalive=s.keepalive,
            tls_context=self._tls_context,
            max_inflight_messages=PUBLISH_WINDOW,
            timeout=10,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        client.pending_calls_threshold = 4 * PUBLISH_WINDOW
        return client

    def _filters(self) -> list[tuple[str, int]]:
        """Return the QoS 1 subscription filters, our own status topic included."""
        ns = self.settings.namespace
        filters = [mqtt_filter(ns, p) for p in self.settings.subscribe_patterns]
        own_status = f"status.{self.process_id}"
        if not any(topic_matches(p, own_status) for p in self.settings.subscribe_patterns):
            filters.append(self.status_topic)
        filters.extend(f"{self._ns_prefix}{subtree}/#" for subtree in self._watchers)
        return [(f, 1) for f in dict.fromkeys(filters)]

    async def _run(self) -> None:
        """Connect, run a session, and reconnect with exponential backoff until stopped."""
        s = self.settings
        delay = s.reconnect_initial
        while not self._stop_requested.is_set():
            client = self._new_client()
            connected = False
            try:
                async with client:
                    connected = True
                    self._client = client
                    if self._ever_connected:
                        self._reconnects += 1
                    self._ever_connected = True
                    delay = s.reconnect_initial
                    await self._session(client)
            except aiomqtt.MqttError as exc:
                if not connected:
                    self._connect_failures += 1
                log.warning(
                    "mqtt connection lost" if connected else "mqtt connect failed",
                    host=s.host,
                    port=s.port,
                    error=str(exc),
                    retry_in=round(delay, 3),
                )
            except Exception as exc:
                log.error("mqtt bridge session failed", error=repr(exc), retry_in=round(delay, 3))
            finally:
                self._client = None
                self._connected.clear()
                self._requeue_inflight()
            if self._stop_requested.is_set():
                break
            await wait_event(self._stop_requested, delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2.0, s.reconnect_max)

    async def _session(self, client: aiomqtt.Client) -> None:
        """Subscribe, announce ``online``, then pump both directions until drop or stop."""
        await client.subscribe(self._filters())
        await client.publish(self.status_topic, ONLINE, qos=1, retain=True)
        for topic, payload in list(self._announcements.items()):
            await client.publish(topic, payload, qos=1, retain=True)
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._reader(client))
        stopper = loop.create_task(self._stop_requested.wait())
        workers = [loop.create_task(self._worker(client)) for _ in range(PUBLISH_WINDOW)]
        tasks = [reader, stopper, *workers]
        self._connected.set()
        log.info("mqtt connected", client_id=self.client_id, host=self.settings.host)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._connected.clear()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._idle_workers.clear()
            self._requeue_inflight()
        if stopper in done:
            try:
                # Peers see "offline", then the retained status is cleared: a stopped process
                # leaves nothing behind (only a crash leaves the Last Will's "offline").
                await client.publish(self.status_topic, OFFLINE, qos=1, retain=True, timeout=5)
                await client.publish(self.status_topic, b"", qos=1, retain=True, timeout=5)
            except aiomqtt.MqttError as exc:
                log.warning("mqtt could not publish offline status", error=str(exc))
            return
        for task in done:
            failure = task.exception()
            if failure is not None:
                raise failure
        raise aiomqtt.MqttError("mqtt session ended unexpectedly")

    def _warn(self, what: str, message: str, **fields: object) -> None:
        """Log ``message`` at most once per ``WARN_INTERVAL`` for each ``what``."""
        now = time.monotonic()
        if now - self._last_warn.get(what, -math.inf) < WARN_INTERVAL:
            return
        self._last_warn[what] = now
        log.warning(message, process_id=self.process_id, **fields, **self._short_counters())

    def _short_counters(self) -> dict[str, int]:
        """Return the loss counters attached to every warning."""
        return {"lost": self._lost, "dropped_prices": self._dropped_prices}
