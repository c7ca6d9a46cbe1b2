"""Define the MQTT wire format: topic names, status payloads, the event envelope, event ids."""

from __future__ import annotations

import hashlib
import re
import socket

import msgspec

ROOT = "paperarena"
ENVELOPE_VERSION = 1
ONLINE = b"online"
OFFLINE = b"offline"
#: Topic subtrees (second level under the namespace) that carry control messages, not events.
CONTROL_SUBTREES: frozenset[str] = frozenset({"owners", "replay"})

_LEVEL_UNSAFE = re.compile(r"[%/+#\x00]")
_NAME_UNSAFE = re.compile(r"[/+#\x00]")


class Envelope(msgspec.Struct, frozen=True, omit_defaults=True):
    """The versioned MQTT payload around one encoded event (``run``/``seq``: replay streams)."""

    v: int
    id: str
    origin: str
    event: msgspec.Raw
    run: str | None = None
    seq: int | None = None

    @property
    def dedupe_key(self) -> str:
        """Return the identity used to drop duplicates: ``run:seq`` if sequenced, else the id."""
        return self.id if self.seq is None else f"{self.run}:{self.seq}"


_envelope_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)


def _escape_level(level: str) -> str:
    """Percent-encode characters that are not allowed (or not wanted) inside one MQTT level."""
    if not _LEVEL_UNSAFE.search(level):
        return level
    return (
        level.replace("%", "%25")
        .replace("/", "%2F")
        .replace("+", "%2B")
        .replace("#", "%23")
        .replace("\x00", "%00")
    )


def mqtt_topic(namespace: str, topic: str) -> str:
    """Return the MQTT topic of a bus topic (``price.equity.AAPL`` → ``.../price/equity/AAPL``)."""
    return f"{ROOT}/{namespace}/" + "/".join(_escape_level(lv) for lv in topic.split("."))


def mqtt_filter(namespace: str, pattern: str) -> str:
    """Return the MQTT subscription filter of a bus pattern (``price.#`` → ``.../price/#``)."""
    levels = (lv if lv in ("+", "#") else _escape_level(lv) for lv in pattern.split("."))
    return f"{ROOT}/{namespace}/" + "/".join(levels)


def status_topic(namespace: str, process_id: str) -> str:
    """Return the retained liveness topic of one process."""
    return f"{ROOT}/{namespace}/status/{process_id}"


def default_client_id(namespace: str, process_id: str) -> str:
    """Return the stable default client id: namespace, hostname and process id."""
    return f"{ROOT}-{namespace}-{socket.gethostname()}-{process_id}"


def event_id(data: bytes) -> str:
    """Return the stable id of an encoded event (identical events share it)."""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()
