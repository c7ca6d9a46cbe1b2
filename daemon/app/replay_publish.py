"""Replay through roles, the publisher side (``paperarena replay-publish``).

Announces the stream (retained ``replay/begin``), waits for ``--evaluators`` acknowledgements,
sends every event of the recording at QoS 1 with its offset as ``seq``, keeps at most ``window``
events ahead of the slowest evaluator and re-sends from an evaluator's contiguous frontier when it
stops advancing (go-back-N); see :mod:`daemon.app.replay_roles` for the evaluator side and the wire
format.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import structlog

from daemon.app.replay import ReplayError
from daemon.app.replay_roles import (
    ACK,
    BEGIN,
    DEFAULT_WINDOW,
    END,
    EvaluateSummary,
    StreamAck,
    StreamBegin,
    StreamEnd,
    recording_fingerprint,
)
from daemon.app.roles import default_process_id, require_mqtt, role_settings
from daemon.config.settings import Config
from daemon.core.bus import Bus
from daemon.core.events import Event
from daemon.mqtt.bridge import MqttBridge, wait_event
from daemon.mqtt.settings import MqttSettings
from feeds.recording import count_events, iter_events, read_header

log = structlog.get_logger(__name__)

_encoder = msgspec.json.Encoder()

# ---------------------------------------------------------------------------------------------
# Replay: publisher side


@dataclass
class PublishSummary:
    """What a replay publisher did."""

    process_id: str
    run: str
    events: int
    sent: int = 0
    retransmitted: int = 0
    rewinds: int = 0
    evaluators: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    bridge: dict[str, int | bool] = field(default_factory=dict)


class ReplayPublisher:
    """Publish a recording as a flow-controlled, sequenced QoS 1 stream (see module docs)."""

    def __init__(
        self,
        recording: str | os.PathLike[str],
        settings: MqttSettings,
        *,
        process_id: str | None = None,
        evaluators: int = 1,
        window: int = DEFAULT_WINDOW,
        wait_timeout: float = 120.0,
        retransmit_after: float = 2.0,
        idle_timeout: float = 600.0,
    ) -> None:
        """Prepare to publish ``recording`` once ``evaluators`` evaluators acknowledge it."""
        if evaluators < 1:
            raise ValueError("evaluators must be at least 1")
        if window < 1:
            raise ValueError("window must be at least 1")
        self.recording = Path(recording)
        self.settings = role_settings(settings, "publisher")
        self.process_id = (process_id or settings.process_id
                           or default_process_id("publisher", self.recording))
        self.evaluators = evaluators
        self.window = window
        self.wait_timeout = wait_timeout
        self.retransmit_after = retransmit_after
        self.idle_timeout = idle_timeout
        self.acks: dict[str, StreamAck] = {}
        self.bridge: MqttBridge | None = None
        self.begin: StreamBegin | None = None
        self._changed = asyncio.Event()
        self._rewind_to: int | None = None
        self._last_change = time.monotonic()
        self._iter: Iterator[tuple[int, Event]] | None = None
        self._iter_pos = -1

    # -- callbacks ---------------------------------------------------------------------------------
    def _on_control(self, rest: str, payload: bytes, retained: bool) -> None:
        """Track evaluators' acknowledgements of our session."""
        del retained
        if not rest.startswith("ack/") or not payload or self.begin is None:
            return
        pid = rest[4:]
        try:
            ack = msgspec.json.decode(payload, type=StreamAck)
        except msgspec.DecodeError:
            log.warning("invalid replay ack ignored", process=pid)
            return
        if ack.session != self.begin.session:
            return
        prev = self.acks.get(pid)
        if prev is not None and prev.instance == ack.instance:
            ack = prev.merge(ack)  # a stale retained copy never moves an evaluator back
        elif ack.received < (prev.received if prev is not None else math.inf):
            # A newcomer, or an evaluator that restarted and resumed from its database.
            self._rewind_to = (ack.received if self._rewind_to is None
                               else min(self._rewind_to, ack.received))
            log.info("evaluator joined the replay stream", evaluator=pid, offset=ack.received,
                     rejoined=prev is not None)
        if prev != ack:
            self._last_change = time.monotonic()
        self.acks[pid] = ack
        self._changed.set()

    def _on_peer(self, process_id: str, status: str) -> None:
        if process_id in self.acks:
            self._last_change = time.monotonic()
            self._changed.set()

    # -- helpers -----------------------------------------------------------------------------------
    def _online(self, pid: str) -> bool:
        return self.bridge is not None and self.bridge.peers.get(pid) == "online"

    def _active(self) -> list[StreamAck]:
        """Return the acks of online evaluators that have not finished."""
        return [a for pid, a in self.acks.items() if not a.done and self._online(pid)]

    def _event_at(self, seq: int) -> Event:
        """Return the recording event at offset ``seq`` (sequential reads, re-opened on rewind)."""
        if self._iter is None or self._iter_pos != seq:
            self._iter = iter_events(self.recording, start_offset=seq)
            self._iter_pos = seq
        i, ev = next(self._iter)
        if i != seq:
            raise ReplayError(f"{self.recording}: expected event {seq}, read {i}")
        self._iter_pos = seq + 1
        return ev

    async def _wait_change(self, timeout: float = 0.05) -> None:
        self._changed.clear()
        await wait_event(self._changed, timeout)

    # -- run ---------------------------------------------------------------------------------------
    async def run(self) -> PublishSummary:
        """Publish the whole stream and wait until every evaluator has applied it."""
        rec = self.recording
        try:
            header = read_header(rec)
        except FileNotFoundError:
            raise ReplayError(f"{rec}: no such recording") from None
        count = count_events(rec)
        run_id = recording_fingerprint(rec, count)
        self.begin = StreamBegin(run=run_id, session=uuid.uuid4().hex, publisher=self.process_id,
                                 recording=rec.name, start=header.start, end=header.end,
                                 count=count, window=self.window)
        summary = PublishSummary(self.process_id, run_id, count)
        bus = Bus()
        bridge = self.bridge = MqttBridge(bus, self.settings, process_id=self.process_id)
        bridge.watch("replay", self._on_control)
        bridge.on_peer = self._on_peer
        await bus.start()
        await bridge.start()
        t0 = time.perf_counter()
        try:
            if not await bridge.wait_connected(self.wait_timeout):
                s = self.settings
                raise ReplayError(f"MQTT broker {s.host}:{s.port} unreachable")
            bridge.announce(BEGIN, _encoder.encode(self.begin))
            log.info("replay stream announced", recording=rec.name, events=count,
                     evaluators=self.evaluators)
            await self._wait_evaluators()
            await self._stream(summary)
            summary.evaluators = tuple(sorted(p for p, a in self.acks.items() if a.done))
            summary.elapsed_s = time.perf_counter() - t0
            return summary
        finally:
            bridge.announce(BEGIN, b"")
            bridge.announce(END, b"")
            for pid in list(self.acks):
                bridge.announce(f"{ACK}/{pid}", b"")
            await bridge.stop(flush_timeout=5.0)
            summary.bridge = bridge.counters()
            await bus.stop()

    async def _wait_evaluators(self) -> None:
        """Wait until ``evaluators`` online evaluators acknowledged the stream."""
        deadline = time.monotonic() + self.wait_timeout
        while len(self._active()) < self.evaluators:
            if time.monotonic() > deadline:
                raise ReplayError(
                    f"only {len(self._active())} of {self.evaluators} evaluator(s) joined the "
                    f"replay stream within {self.wait_timeout:g}s: start replay-evaluate with "
                    "the same [mqtt] broker and namespace"
                )
            await self._wait_change()

    async def _stream(self, summary: PublishSummary) -> None:
        """Send events under flow control, re-send on stalls, until every evaluator is done."""
        assert self.begin is not None and self.bridge is not None
        bridge, begin = self.bridge, self.begin
        count, run_id = begin.count, begin.run
        active = self._active()
        next_send = min(a.received for a in active)
        self._rewind_to = None
        end_sent = False
        stall_mark: tuple[int, float] = (-1, time.monotonic())
        while True:
            active = self._active()
            if not active:
                unfinished = sorted(p for p, a in self.acks.items() if not a.done)
                if not unfinished:
                    return
                if time.monotonic() - self._last_change > self.wait_timeout:
                    gone = ", ".join(f"{p} at event {self.acks[p].applied}" for p in unfinished)
                    raise ReplayError(
                        f"evaluator(s) offline for {self.wait_timeout:g}s before the end of the "
                        f"stream: {gone}"
                    )
            if self._rewind_to is not None:
                target, self._rewind_to = self._rewind_to, None
                if target < next_send:
                    summary.rewinds += 1
                    summary.retransmitted += next_send - target
                    next_send = target
            if active:
                low_received = min(a.received for a in active)
                low_applied = min(a.applied for a in active)
                # Stalled frontier while everything we sent reached the broker: re-send.
                now = time.monotonic()
                if low_received != stall_mark[0]:
                    stall_mark = (low_received, now)
                elif (low_received < next_send and bridge.connected
                      and bridge.counters()["queued"] == 0
                      and now - stall_mark[1] > self.retransmit_after):
                    log.warning("replay stream stalled; re-sending", from_event=low_received,
                                to_event=next_send)
                    summary.rewinds += 1
                    summary.retransmitted += next_send - low_received
                    next_send = low_received
                    stall_mark = (low_received, now)
                limit = min(count, low_applied + self.window)
                while next_send < limit:
                    bridge.send(self._event_at(next_send), run=run_id, seq=next_send)
                    next_send += 1
                    summary.sent += 1
                    if summary.sent % 100 == 0:
                        await asyncio.sleep(0)
            if next_send >= count and not end_sent:
                bridge.announce(END, _encoder.encode(StreamEnd(run_id, begin.session, count)))
                end_sent = True
                log.info("replay stream sent", events=count)
            if time.monotonic() - self._last_change > self.idle_timeout:
                raise ReplayError(
                    f"no progress from the evaluators for {self.idle_timeout:g}s at event "
                    f"{min((a.applied for a in active), default=next_send)} of {count}"
                )
            await self._wait_change()


async def replay_publish(
    recording: str | os.PathLike[str],
    config: Config,
    *,
    settings: MqttSettings | None = None,
    process_id: str | None = None,
    evaluators: int = 1,
    window: int = DEFAULT_WINDOW,
    wait_timeout: float = 120.0,
    retransmit_after: float = 2.0,
) -> PublishSummary:
    """Publish ``recording`` to ``evaluators`` replay evaluators over the ``[mqtt]`` broker."""
    settings = settings or require_mqtt(config, "replay-publish")
    publisher = ReplayPublisher(recording, settings, process_id=process_id, evaluators=evaluators,
                                window=window, wait_timeout=wait_timeout,
                                retransmit_after=retransmit_after)
    return await publisher.run()


def summary_line(summary: EvaluateSummary | PublishSummary) -> str:
    """Return a one-line human summary of a publisher's or an evaluator's run."""
    if isinstance(summary, PublishSummary):
        return (
            f"published {summary.events} events ({summary.sent} sends, {summary.retransmitted} "
            f"re-sent) to {len(summary.evaluators)} evaluator(s): "
            f"{', '.join(summary.evaluators)}"
        )
    c = summary.stream
    duplicates = c.duplicates + int(summary.bridge.get("duplicates", 0))
    return (
        f"evaluated {summary.events} events (resumed at {summary.resumed_from}) for "
        f"{', '.join(summary.agents) or 'no agents'}: {summary.decisions} scheduled jobs, "
        f"{duplicates} duplicate deliveries dropped, {c.out_of_order} out of order"
    )
