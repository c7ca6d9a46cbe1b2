"""Replay a recording through split roles over MQTT: the publisher and the evaluators' stream.

Replay through roles (``replay-publish`` + ``replay-evaluate``)
    The publisher announces the stream (retained ``replay/begin``: recording fingerprint, time
    window, event count, flow-control window), waits for ``--evaluators`` acknowledgements, then
    sends every recording event at QoS 1 (prices too: nothing is conflated) with its offset as
    ``seq`` in the envelope, and finally a retained ``replay/end`` marker. Evaluators put events
    in a reorder buffer keyed by ``seq`` (duplicates dropped), apply them strictly in offset order
    through :class:`daemon.app.replay.ReplayDriver` (the code path of ``paperarena replay``) and
    acknowledge progress (retained ``replay/ack/<process id>``: contiguous received and applied
    offsets). The publisher keeps at most ``window`` events ahead of the slowest evaluator (so
    broker queues stay under Mosquitto's ``max_queued_messages``) and re-sends from an
    evaluator's contiguous frontier when it stops advancing (go-back-N): events the broker lost
    (crash, dropped queue) are re-sent. An evaluator that joins late or resumes from its database
    gets the stream re-sent from its own offset. If events never arrive (publisher gone), the
    evaluator fails after ``stall_timeout`` naming the missing offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import structlog

from daemon.app.replay import ReplayDriver, ReplayError, replay_session
from daemon.app.roles import (
    Ownership,
    default_process_id,
    require_mqtt,
    role_settings,
    select_agents,
)
from daemon.config.settings import Config
from daemon.core.bus import Bus
from daemon.core.events import Event
from daemon.mqtt.bridge import MqttBridge, wait_event
from daemon.mqtt.settings import MqttSettings
from daemon.mqtt.wire import Envelope
from feeds.recording import read_header

if TYPE_CHECKING:
    from daemon.app.components import Component

log = structlog.get_logger(__name__)

BEGIN = "replay/begin"
END = "replay/end"
ACK = "replay/ack"
#: Default events a replay publisher may send beyond the slowest evaluator's applied offset.
DEFAULT_WINDOW = 500
#: Seconds between checks of the evaluator's progress acknowledgements.
ACK_INTERVAL = 0.1

# ---------------------------------------------------------------------------------------------
# Replay stream wire format


class StreamBegin(msgspec.Struct, frozen=True):
    """The retained announcement of a replay stream."""

    run: str
    session: str
    publisher: str
    recording: str
    start: float
    end: float
    count: int
    window: int


class StreamEnd(msgspec.Struct, frozen=True):
    """The retained end-of-stream marker: every offset below ``count`` has been sent."""

    run: str
    session: str
    count: int


class StreamAck(msgspec.Struct, frozen=True):
    """An evaluator's progress: offsets below ``received`` arrived, below ``applied`` applied.

    ``instance`` changes when the evaluator restarts: only then may its offsets go backwards
    (it resumed from its database). A lower ack of the same instance is stale (a broker that
    restored an old retained copy) and is merged, not followed.
    """

    run: str
    session: str
    received: int
    applied: int
    done: bool = False
    instance: str = ""

    def merge(self, newer: StreamAck) -> StreamAck:
        """Return ``newer`` with offsets never below ours (same evaluator instance)."""
        return msgspec.structs.replace(newer, received=max(self.received, newer.received),
                                       applied=max(self.applied, newer.applied),
                                       done=self.done or newer.done)


_encoder = msgspec.json.Encoder()


def recording_fingerprint(path: str | os.PathLike[str], count: int) -> str:
    """Return the stream id of a recording: a hash of its name, size, header and event count."""
    p = Path(path)
    header = read_header(p)
    key = json.dumps([p.name, p.stat().st_size, header.to_dict(), count], sort_keys=True)
    return hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Replay: evaluator side


@dataclass
class StreamCounters:
    """What an evaluator's reorder buffer saw."""

    received: int = 0
    duplicates: int = 0
    stale: int = 0
    early: int = 0
    skipped: int = 0
    out_of_order: int = 0
    applied: int = 0


class ReplayStream:
    """Reorder buffer of one evaluator: receive sequenced events, yield them in offset order."""

    def __init__(self, *, stall_timeout: float = 30.0, idle_timeout: float | None = None,
                 begin_timeout: float | None = None) -> None:
        """Fail on a hole unfilled for ``stall_timeout`` s, or ``idle_timeout`` s of silence.

        :meth:`wait_begin` gives up after ``begin_timeout`` s (default ``idle_timeout``).
        """
        self.stall_timeout = stall_timeout
        self.idle_timeout = idle_timeout
        self.begin_timeout = idle_timeout if begin_timeout is None else begin_timeout
        self.bridge: MqttBridge | None = None
        self.begin: StreamBegin | None = None
        self.end: StreamEnd | None = None
        self.counters = StreamCounters()
        self._candidate: StreamBegin | None = None
        self._opened = False
        self._buffer: dict[int, Event] = {}
        self._next = 0
        self._frontier = 0
        self._acked: tuple[int, int, bool] | None = None
        self._done = False
        self._wake = asyncio.Event()
        self._last_progress = time.monotonic()
        self._ack_task: asyncio.Task[None] | None = None
        self._switch_error: str | None = None
        self.instance = uuid.uuid4().hex[:12]

    # -- bridge callbacks (reader context: never block) ------------------------------------------
    def on_event(self, envelope: Envelope, event: Event) -> None:
        """Bridge sink: buffer one sequenced event of the current stream."""
        seq = envelope.seq
        if seq is None:
            self.counters.stale += 1  # live data in this namespace: not part of the replay
            return
        begin = self.begin
        if begin is None or not self._opened:
            self.counters.early += 1  # re-sent once we acknowledge our offset
            if self.bridge is not None:  # ... so the re-send must not count as a duplicate
                self.bridge.forget(envelope.dedupe_key)
            return
        if envelope.run != begin.run or not 0 <= seq < begin.count:
            self.counters.stale += 1
            return
        self.counters.received += 1
        if seq < self._frontier or seq in self._buffer:
            self.counters.duplicates += 1
            return
        if seq > self._frontier:
            self.counters.out_of_order += 1
        self._buffer[seq] = event
        while self._frontier in self._buffer:
            self._frontier += 1
        self._last_progress = time.monotonic()
        self._wake.set()

    def on_control(self, rest: str, payload: bytes, retained: bool) -> None:
        """Bridge watcher of ``replay/...``: stream announcements and end markers."""
        del retained
        if not payload:
            return
        try:
            if rest == "begin":
                self._on_begin(msgspec.json.decode(payload, type=StreamBegin))
            elif rest == "end":
                end = msgspec.json.decode(payload, type=StreamEnd)
                if self.begin is not None and end.run == self.begin.run:
                    self.end = end
                    self._wake.set()
        except msgspec.DecodeError as exc:
            log.warning("invalid replay control message", topic=rest, error=str(exc))

    def _on_begin(self, begin: StreamBegin) -> None:
        current = self.begin
        if current is None:
            self._candidate = begin
        elif begin.session == current.session:
            return
        elif begin.run == current.run:
            self.begin = begin  # the publisher restarted: same recording, same offsets
            self.end = None
            self._acked = None
            log.info("replay publisher restarted; following its new session",
                     publisher=begin.publisher)
        elif self._opened:
            self._switch_error = (
                f"the publisher switched to another recording ({begin.recording}) while this "
                f"evaluator replays {current.recording}"
            )
        else:
            self._candidate = begin
        self._wake.set()

    # -- evaluator side ----------------------------------------------------------------------------
    def _publisher_status(self) -> str:
        if self.bridge is None or self.begin is None:
            return "unknown"
        return self.bridge.peers.get(self.begin.publisher, "unknown")

    async def wait_begin(self) -> StreamBegin:
        """Wait for the announcement of a stream whose publisher is online."""
        timeout = self.begin_timeout
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            cand = self._candidate
            if cand is not None and self.bridge is not None and (
                    self.bridge.peers.get(cand.publisher) == "online"):
                self.begin = cand
                return cand
            if time.monotonic() > deadline:
                stale = "" if cand is None else (
                    f" (the stream of {cand.recording} announced by {cand.publisher} has no "
                    "running publisher)")
                raise ReplayError(
                    f"no running replay-publish announced a stream within {timeout:g}s{stale}: "
                    "start replay-publish against the same broker and namespace "
                    "(or raise [evaluator] publisher_timeout)"
                )
            self._wake.clear()
            await wait_event(self._wake, 0.05)

    def open(self, offset: int) -> None:
        """Start accepting events from ``offset`` (the database's resume point) and acking."""
        self._next = self._frontier = offset
        self.counters.skipped = offset
        self._opened = True
        self._last_progress = time.monotonic()
        self._ack_task = asyncio.get_running_loop().create_task(self._ack_loop())

    async def close(self) -> None:
        """Stop acknowledging (a last ack has been sent by :meth:`complete`)."""
        if self._ack_task is not None:
            self._ack_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ack_task
            self._ack_task = None

    def complete(self) -> None:
        """Acknowledge the whole stream as applied and committed."""
        self._done = True
        self._ack(force=True)

    async def next_event(self) -> tuple[int, Event] | None:
        """Return the next event in offset order, None at the end; raise on a stalled stream."""
        assert self.begin is not None
        while True:
            if self._switch_error is not None:
                raise ReplayError(self._switch_error)
            begin = self.begin
            if self._next >= begin.count:
                return None
            ev = self._buffer.pop(self._next, None)
            if ev is not None:
                i = self._next
                self._next += 1
                self.counters.applied += 1
                self._last_progress = time.monotonic()
                if self._next - (self._acked[1] if self._acked else 0) >= max(
                        1, begin.window // 4):
                    self._ack()
                return i, ev
            self._check_stall()
            self._wake.clear()
            await wait_event(self._wake, 0.05)

    def _check_stall(self) -> None:
        """Raise if the next event is overdue: a hole, the end marker or the publisher gone."""
        assert self.begin is not None
        waited = time.monotonic() - self._last_progress
        status = self._publisher_status()
        hole = bool(self._buffer) or self.end is not None or status != "online"
        if hole and waited > self.stall_timeout:
            hi = (min(self._buffer) if self._buffer else self.begin.count) - 1
            missing = f"{self._next}" if hi == self._next else f"{self._next}..{hi}"
            raise ReplayError(
                f"replay stream incomplete: event(s) {missing} of {self.begin.count} never "
                f"arrived within {self.stall_timeout:g}s ({len(self._buffer)} later events "
                f"buffered, publisher {self.begin.publisher} {status}); lost between publisher "
                "and broker and not re-sent: is replay-publish still running?"
            )
        if self.idle_timeout is not None and waited > self.idle_timeout:
            raise ReplayError(
                f"replay stream idle for {self.idle_timeout:g}s at event {self._next} of "
                f"{self.begin.count} (publisher {self.begin.publisher} {status})"
            )

    def _ack(self, *, force: bool = False) -> None:
        """Announce our progress (retained) if it changed."""
        begin, bridge = self.begin, self.bridge
        if begin is None or bridge is None or not self._opened:
            return
        state = (self._frontier, self._next, self._done)
        if state == self._acked and not force:
            return
        self._acked = state
        ack = StreamAck(run=begin.run, session=begin.session, received=self._frontier,
                        applied=self._next, done=self._done, instance=self.instance)
        with contextlib.suppress(RuntimeError):
            bridge.announce(f"{ACK}/{bridge.process_id}", _encoder.encode(ack))

    async def _ack_loop(self) -> None:
        """Acknowledge progress every ``ACK_INTERVAL`` (when it changed)."""
        while True:
            self._ack()
            await asyncio.sleep(ACK_INTERVAL)


@dataclass(frozen=True, slots=True)
class EvaluateSummary:
    """What a replay evaluator did."""

    process_id: str
    agents: tuple[str, ...]
    events: int
    resumed_from: int
    decisions: int
    elapsed_s: float
    stream: StreamCounters
    bridge: dict[str, int | bool] = field(default_factory=dict)


async def replay_evaluate(
    config: Config,
    db: str | Path,
    *,
    agent_ids: Iterable[str] | None = None,
    settings: MqttSettings | None = None,
    process_id: str | None = None,
    version: str = "",
    components: list[Component] | None = None,
    stall_timeout: float = 30.0,
    idle_timeout: float | None = None,
    publisher_timeout: float | None = None,
    connect_timeout: float = 10.0,
) -> EvaluateSummary:
    """Replay the stream of ``replay-publish`` into ``db`` for the agents this evaluator owns.

    The same engine setup and driver as :func:`daemon.app.replay.replay`; events come from the
    broker in offset order (reorder buffer) instead of the file. Raise :class:`OwnershipError`
    if a live peer owns one of the agents and :class:`ReplayError` if the stream cannot complete
    or no running publisher announces one within ``publisher_timeout`` s (default
    ``[evaluator] publisher_timeout``).
    """
    settings = settings or require_mqtt(config, "replay-evaluate")
    owned = select_agents(config, agent_ids)
    pid = process_id or settings.process_id or default_process_id("evaluator", db, owned)
    stream = ReplayStream(stall_timeout=stall_timeout, idle_timeout=idle_timeout,
                          begin_timeout=publisher_timeout if publisher_timeout is not None
                          else config.evaluator.publisher_timeout)
    bus = Bus()
    bridge = MqttBridge(bus, role_settings(settings, "evaluator"), process_id=pid,
                        sink=stream.on_event)
    stream.bridge = bridge
    bridge.watch("replay", stream.on_control)
    ownership = Ownership(bridge, owned, mode="replay")
    await bridge.start()
    try:
        if not await bridge.wait_connected(connect_timeout):
            raise ReplayError(
                f"MQTT broker {settings.host}:{settings.port} unreachable for {connect_timeout:g}s"
            )
        await ownership.claim(connect_timeout)
        begin = await stream.wait_begin()
        log.info("replay stream found", recording=begin.recording, events=begin.count,
                 publisher=begin.publisher, agents=list(owned))
        async with replay_session(config, db, recording_name=begin.recording, start=begin.start,
                                  agent_ids=list(owned), version=version, components=components,
                                  bus=bus, scope=pid) as ctx:
            t0 = time.perf_counter()
            stream.open(ctx.offset)
            try:
                driver = ReplayDriver(ctx, start=begin.start)
                while (item := await stream.next_event()) is not None:
                    await driver.step(*item)
                await driver.finish(stream.begin.end if stream.begin else begin.end)
                stream.complete()
            finally:
                await stream.close()
            elapsed = time.perf_counter() - t0
        return EvaluateSummary(pid, owned, driver.events, ctx.offset, driver.decisions, elapsed,
                               stream.counters, bridge.counters())
    finally:
        if ownership.claimed:
            ownership.withdraw()
        await bridge.stop(flush_timeout=5.0)
