"""The contract every source meets and the small helpers shared by the feeds.

The :class:`Source` protocol (what the daemon sees of every source, streaming or polling), its
:class:`SourceState` and :class:`SourceCounters`, the streaming :class:`ProtocolAdapter`
protocol with its optional capabilities and :class:`DecodeResult`, and the helpers that read
a WebSocket failure (:func:`http_status_of`, :func:`close_code_of`).
:mod:`feeds.connection` runs adapters over this contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from daemon.core.events import Event
from daemon.core.price_columns import PriceColumns

__all__ = [
    "DEFAULT_WS_OPTIONS",
    "DecodeResult",
    "LiveSubscription",
    "ProtocolAdapter",
    "Resubscribable",
    "Source",
    "SourceCounters",
    "SourceState",
    "aggregate_state",
    "close_code_of",
    "http_status_of",
]

#: Options passed to ``websockets.asyncio.client.connect`` unless overridden by ``ws_options``.
DEFAULT_WS_OPTIONS: Mapping[str, Any] = {
    "max_size": 2**24,  # initial dumps of 200 order books exceed the 1 MiB default
    "close_timeout": 2.0,
    "ping_interval": 20.0,
    "ping_timeout": 20.0,
}


class SourceState(StrEnum):
    """Health of a source (or of one shard of it)."""

    CONNECTING = "connecting"
    LIVE = "live"
    STALE = "stale"
    BACKING_OFF = "backing_off"
    DOWN = "down"


_SEVERITY: dict[SourceState, int] = {
    SourceState.LIVE: 0,
    SourceState.CONNECTING: 1,
    SourceState.STALE: 2,
    SourceState.BACKING_OFF: 3,
    SourceState.DOWN: 4,
}


def aggregate_state(states: Iterable[SourceState]) -> SourceState:
    """Combine shard states: LIVE if all live, DOWN if all down, else the worst (DOWN->BACKING_OFF).

    An empty set of states (nothing to stream yet) is CONNECTING.
    """
    items = list(states)
    if not items:
        return SourceState.CONNECTING
    if all(s is SourceState.LIVE for s in items):
        return SourceState.LIVE
    if all(s is SourceState.DOWN for s in items):
        return SourceState.DOWN
    worst = max(items, key=_SEVERITY.__getitem__)
    return SourceState.BACKING_OFF if worst is SourceState.DOWN else worst


@dataclass
class SourceCounters:
    """Monotonic counters of one source (summed over its shards)."""

    messages: int = 0
    data_messages: int = 0
    decode_errors: int = 0
    unknown: int = 0
    rejected: int = 0
    reconnects: int = 0
    last_message_ts: float | None = None
    last_data_ts: float | None = None


@runtime_checkable
class Source(Protocol):
    """What the daemon sees of every source, streaming or polling."""

    @property
    def name(self) -> str:
        """Return the source name (used in SourceStatus and metrics)."""
        ...

    @property
    def state(self) -> SourceState:
        """Return the current (aggregate) state."""
        ...

    @property
    def counters(self) -> SourceCounters:
        """Return the source's counters."""
        ...

    async def run(self) -> None:
        """Run until cancelled or stopped; never raise on network or protocol errors."""
        ...


@dataclass
class DecodeResult:
    """What one inbound frame produced.

    ``data_keys`` are the keys that received DATA (what the staleness watchdog watches);
    ``reset_keys`` are keys whose state was discarded and need a fresh snapshot.
    """

    events: list[Event] = field(default_factory=list)
    data_keys: list[str] = field(default_factory=list)
    decode_errors: int = 0
    unknown: int = 0
    rejected: int = 0
    reset_keys: Sequence[str] = ()


class ProtocolAdapter(Protocol):
    """The wire protocol of one streaming source."""

    name: str
    max_keys_per_connection: int

    def url(self) -> str:
        """Return the WebSocket URL to connect to."""
        ...

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Authenticate and subscribe ``keys`` on a fresh connection (may await frames)."""
        ...

    async def heartbeat(self, ws: ClientConnection) -> None:
        """Send application-level pings forever (or return at once); cancelled on close."""
        ...

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one inbound frame received at ``now``."""
        ...

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Run any periodic duty (e.g. re-send the subscription) or return at once.

        ``keys`` is a live view: it always holds the shard's current intended keys.
        """
        ...

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        """Return the factor applied to the backoff cap after this failure (1.0 = none)."""
        ...


@runtime_checkable
class LiveSubscription(Protocol):
    """Optional adapter capability: change the subscription of a live connection."""

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Add ``keys`` to the live connection."""
        ...

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Remove ``keys`` from the live connection."""
        ...


@runtime_checkable
class Resubscribable(Protocol):
    """Optional adapter capability: ask the server for fresh snapshots of some keys."""

    async def resubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Request fresh snapshots of ``keys`` on the live connection."""
        ...


def http_status_of(exc: BaseException | None) -> int | None:
    """Return the HTTP status of a rejected WebSocket upgrade, if that is what ``exc`` is."""
    if isinstance(exc, InvalidStatus):
        return exc.response.status_code
    return None


def close_code_of(exc: BaseException | None) -> int | None:
    """Return the close code received from the server, if ``exc`` carries one."""
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        return exc.rcvd.code
    return None


@runtime_checkable
class ColumnDecoder(Protocol):
    """A protocol adapter that can decode a frame's prices into columns."""

    def decode_columns(self, frame: str | bytes, now: float, prices: PriceColumns
                       ) -> DecodeResult:
        """Decode one frame: prices appended to ``prices``, anything else in the result."""
        ...

    def price_columns(self) -> PriceColumns:
        """Return empty columns for this adapter's prices (its market and source)."""
        ...
