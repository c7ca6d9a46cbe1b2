"""Bridge the in-process bus to an MQTT broker so several processes share one event stream.

Owns the connection: one :class:`MqttBridge` per process connects, subscribes, announces its
liveness and reconnects, and wires the egress (bus → broker, :mod:`.egress`) and the ingress
(broker → bus, :mod:`.ingress`) to it.

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

Egress and ingress
    Local events go out through bounded buffers (prices latest-per-key at QoS 0, everything else
    FIFO at QoS 1, at-least-once across reconnects): ``daemon/mqtt/egress.py``. Remote events are
    deduplicated and published once on the local bus, never sent back out:
    ``daemon/mqtt/ingress.py``.

Sessions
    The client connects with ``clean_session=False`` and a stable client id, so the broker keeps
    our subscriptions and queues QoS 1 messages while we are away; they are delivered (and
    deduplicated) after reconnecting. Reconnection uses exponential backoff with jitter and always
    re-subscribes.

The wire format's names, envelope and ids live in ``daemon/mqtt/wire.py``, the settings in
``daemon/mqtt/settings.py``.
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
from collections.abc import Callable

import aiomqtt
import structlog

from daemon.core.bus import Bus, topic_matches
from daemon.core.events import Event
from daemon.mqtt.egress import Egress
from daemon.mqtt.ingress import ControlHandler, Ingress, Sink
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import (
    _NAME_UNSAFE,
    CONTROL_SUBTREES,
    OFFLINE,
    ONLINE,
    ROOT,
    default_client_id,
    mqtt_filter,
    status_topic,
)

log = structlog.get_logger(__name__)

#: Concurrent publishes per connection (and the client's in-flight QoS 1 window).
PUBLISH_WINDOW = 64
#: Seconds between repeated warnings about the same condition.
WARN_INTERVAL = 10.0


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``event``; never swallow a cancellation (unlike wait_for)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()



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
        self._announcements: dict[str, bytes] = {}
        #: Called with (process id, status) whenever a peer's known status changes.
        self.on_peer: Callable[[str, str], None] | None = None
        self._tls_context = (
            ssl.create_default_context(cafile=settings.ca_file) if settings.tls else None
        )
        #: Last known liveness of peer processes (from their retained status), by process id.
        self.peers: dict[str, str] = {}
        self._egress = Egress(settings, bus.conflating, process_id=process_id, warn=self._warn)
        self._ingress = Ingress(
            bus,
            settings,
            process_id=process_id,
            egress=self._egress,
            on_status=self._on_status,
            warn=self._warn,
            sink=sink,
        )
        # Lifecycle.
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
        self._reconnects = 0
        self._connect_failures = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start forwarding: tap the bus and connect in the background (see ``wait_connected``)."""
        if self._runner is not None:
            return
        if not self._tap_added:
            self.bus.add_tap("#", self._egress.tap, columns=self._egress.tap_columns)
            self._tap_added = True
        self._egress.accepting = True
        self._stop_requested.clear()
        loop = asyncio.get_running_loop()
        self._applier = loop.create_task(
            self._ingress.apply_loop(), name=f"mqtt-ingress-{self.process_id}"
        )
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
        self._egress.accepting = False
        await self.flush(flush_timeout)
        self._stop_requested.set()
        runner, self._runner = self._runner, None
        try:
            await asyncio.wait_for(runner, timeout=flush_timeout + 15.0)
        except TimeoutError:
            log.warning("mqtt bridge did not stop in time; cancelled", process_id=self.process_id)
        unsent = self._egress.discard()
        if unsent:
            log.warning("mqtt bridge stopped with unsent reliable events", lost=unsent)
        deadline = time.monotonic() + flush_timeout
        while self._ingress.pending and time.monotonic() < deadline:
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
        while self._egress.pending:
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
        self._ingress.forget(key)

    def counters(self) -> dict[str, int | bool]:
        """Return the bridge counters (monotonic except ``queued`` and ``connected``)."""
        out, into = self._egress, self._ingress
        return {
            "sent": out.sent_prices + out.sent_reliable,
            "sent_prices": out.sent_prices,
            "sent_reliable": out.sent_reliable,
            "received": into.received,
            "duplicates": into.duplicates,
            "own": into.own,
            "invalid": into.invalid,
            "dropped_prices": out.dropped_prices,
            "lost": out.lost,
            "retried": out.retried,
            "reconnects": self._reconnects,
            "connect_failures": self._connect_failures,
            "queued": out.queued,
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
        self._ingress.watchers[subtree] = handler

    def send(self, event: Event, *, run: str | None = None, seq: int | None = None) -> None:
        """Queue ``event`` for the broker at QoS 1 whatever its class (never conflated).

        ``run`` and ``seq`` mark it as event ``seq`` of replay stream ``run``. Unlike the bus
        tap, this ignores ``publish_patterns``. Overflow of ``egress_queue`` counts in ``lost``.
        """
        if not self._egress.accepting:
            raise RuntimeError("the bridge is not started")
        self._egress.send(event, run=run, seq=seq)

    def publish_control(self, subtopic: str, payload: bytes, *, retain: bool = False) -> None:
        """Queue a raw QoS 1 control message (at-least-once, in order with other QoS 1 sends)."""
        if not self._egress.accepting:
            raise RuntimeError("the bridge is not started")
        self._egress.send_raw(self.control_topic(subtopic), payload, retain=retain)

    def announce(self, subtopic: str, payload: bytes) -> None:
        """Publish a retained control message now and again after every reconnect.

        An empty ``payload`` withdraws the announcement (clears the retained message).
        """
        topic = self.control_topic(subtopic)
        if payload:
            self._announcements[topic] = payload
        else:
            self._announcements.pop(topic, None)
        if self._egress.accepting:
            self._egress.send_raw(topic, payload, retain=True)

    # ------------------------------------------------------------------ liveness

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
        filters.extend(f"{self._ns_prefix}{subtree}/#" for subtree in self._ingress.watchers)
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
                self._egress.requeue_inflight()
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
        reader = loop.create_task(self._ingress.reader(client))
        stopper = loop.create_task(self._stop_requested.wait())
        workers = [loop.create_task(self._egress.worker(client)) for _ in range(PUBLISH_WINDOW)]
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
            self._egress.workers_stopped()
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
        return {"lost": self._egress.lost, "dropped_prices": self._egress.dropped_prices}
