"""The MQTT bridge's ingress (broker → bus): it sorts what the bridge's connection (owned by
:mod:`.bridge`) receives, deduplicates remote events and publishes them once on the local bus.

Control messages go to the handler watching their subtree, liveness payloads to the bridge's
status callback. Envelopes from our own process are ignored; the others are deduplicated by id in
an LRU of the last ``dedupe_window`` ids and published once on the local bus (or handed to a
sink). Events received from the broker are never sent back out: while one is published, it is the
egress's ``echo``, which its tap skips.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable

import aiomqtt
import msgspec
import structlog

from daemon.core.bus import Bus
from daemon.core.events import Event, decode_event
from daemon.mqtt.egress import Egress, Warn
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import CONTROL_SUBTREES, ENVELOPE_VERSION, ROOT, Envelope, _envelope_decoder

log = structlog.get_logger(__name__)

#: Receives every new remote event instead of the local bus (see ``MqttBridge(sink=...)``).
Sink = Callable[[Envelope, Event], None]
#: Receives raw control messages: (topic below the subtree, payload, retained flag).
ControlHandler = Callable[[str, bytes, bool], None]
#: Receives liveness payloads: (process id below ``status/``, payload, retained flag).
StatusHandler = Callable[[str, bytes, bool], None]


class Ingress:
    """Decode, filter and deduplicate broker messages; publish new remote events on the bus."""

    def __init__(
        self,
        bus: Bus,
        settings: MqttSettings,
        *,
        process_id: str,
        egress: Egress,
        on_status: StatusHandler,
        warn: Warn,
        sink: Sink | None = None,
    ) -> None:
        """Prepare an empty inbox and dedupe window; ``egress`` learns which event to skip."""
        self.bus = bus
        self.settings = settings
        self.process_id = process_id
        self._egress = egress
        self._on_status = on_status
        self._warn = warn
        self._sink = sink
        self._ns_prefix = f"{ROOT}/{settings.namespace}/"
        self._status_prefix = f"{ROOT}/{settings.namespace}/status/"
        #: Handlers of the watched control subtrees, by subtree.
        self.watchers: dict[str, ControlHandler] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._inbox: deque[Event] = deque()
        self._inbox_ready = asyncio.Event()
        # Counters.
        self.received = 0
        self.duplicates = 0
        self.own = 0
        self.invalid = 0

    @property
    def pending(self) -> bool:
        """Return whether received events still wait to be published on the bus."""
        return bool(self._inbox)

    def forget(self, key: str) -> None:
        """Forget a delivery (its ``dedupe_key``): a re-send of it is applied again."""
        self._seen.pop(key, None)

    def on_message(self, message: aiomqtt.Message) -> None:
        """Decode, filter and deduplicate one broker message; queue new events for the bus."""
        payload = message.payload
        if not isinstance(payload, bytes | bytearray):
            self.invalid += 1
            return
        topic = message.topic.value
        if topic.startswith(self._ns_prefix):
            head, _, rest = topic[len(self._ns_prefix) :].partition("/")
            if head in CONTROL_SUBTREES:
                handler = self.watchers.get(head)
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
            self.invalid += 1
            self._warn(
                "invalid", "mqtt message is not a valid envelope", topic=topic, error=str(exc)
            )
            return
        if envelope.v != ENVELOPE_VERSION:
            self.invalid += 1
            self._warn("version", "mqtt envelope version not supported", topic=topic, v=envelope.v)
            return
        if envelope.origin == self.process_id:
            self.own += 1
            return
        seen = self._seen
        key = envelope.dedupe_key
        if key in seen:
            seen.move_to_end(key)
            self.duplicates += 1
            return
        seen[key] = None
        if len(seen) > self.settings.dedupe_window:
            seen.popitem(last=False)
        try:
            event = decode_event(bytes(envelope.event))
        except msgspec.DecodeError as exc:
            self.invalid += 1
            self._warn(
                "invalid", "mqtt envelope holds an invalid event", topic=topic, error=str(exc)
            )
            return
        if self._sink is not None:
            self.received += 1
            try:
                self._sink(envelope, event)
            except Exception as exc:
                log.error("mqtt ingress sink failed", topic=topic, error=repr(exc))
            return
        self._inbox.append(event)
        self._inbox_ready.set()

    async def reader(self, client: aiomqtt.Client) -> None:
        """Take messages off the connection until it drops (raises ``MqttError``)."""
        async for message in client.messages:
            self.on_message(message)

    async def apply_loop(self) -> None:
        """Publish received events on the local bus, marked so the egress tap skips them."""
        egress = self._egress
        while True:
            if not self._inbox:
                self._inbox_ready.clear()
                await self._inbox_ready.wait()
                continue
            event = self._inbox.popleft()
            egress.echo = event
            try:
                await self.bus.publish(event)
            except Exception as exc:
                log.error("mqtt ingress publish failed", topic=event.topic, error=repr(exc))
            finally:
                egress.echo = None
            self.received += 1
