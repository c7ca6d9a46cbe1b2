"""Split one paperarena deployment into processes over MQTT: feeds, evaluators, replay streams.

Live roles (``paperarena run --role ...``)
    ``all``: the single process (sources, agents, scheduler, store), no broker.
    ``feeds``: sources, a store of market events and a bridge publishing market data; no agents
    (the scheduler runs with no agents, so rounds are no-ops and daily marks only checkpoint).
    When a peer's status turns ``online`` it re-announces the open Polymarket questions
    (``MarketListed``), which a process that was never subscribed could not have received.
    ``evaluator``: agents, scheduler, books, store and components (metrics, alerts) fed by market
    data from the broker; it publishes its decisions, fills and alerts. No sources.

Agent ownership
    Each evaluator owns a set of agents (``[evaluator] agents`` or ``--agents``; empty = all) and
    announces it as a retained claim at ``paperarena/<ns>/owners/<process id>``. It subscribes
    to every claim and status first, then publishes its own claim and waits for its echo: by then
    the broker has delivered every earlier claim. A claim counts while its process's status is
    ``online``; if a live peer already owns one of our agents we withdraw and refuse to start
    (:class:`OwnershipError`). Of two evaluators racing, the one whose claim reaches the broker
    second sees the first and refuses.

Replay through roles (``replay-publish`` + ``replay-evaluate``)
    The publisher announces the stream (retained ``replay/begin``: recording fingerprint, time
    window, event count, flow-control window), waits for ``--evaluators`` acknowledgements, then
    sends every recording event at QoS 1 (prices too: nothing is conflated) with its offset as
    ``seq`` in the envelope, and finally a retained ``replay/end`` marker. Evaluators put events
    in a reorder buffer keyed by ``seq`` (duplicates dropped), apply them strictly in offset order
    through :class:`daemon.replay.ReplayDriver` (the code path of ``paperarena replay``) and
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
import socket
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from daemon.bus import Bus, topic_matches
from daemon.config import Config, ConfigError
from daemon.events import Event, MarketListed
from daemon.mqtt import Envelope, MqttBridge, MqttSettings, wait_event
from daemon.replay import ReplayDriver, ReplayError, replay_session
from feeds.recording import count_events, iter_events, read_header

if TYPE_CHECKING:
    from daemon.components import Component
    from daemon.engine import Engine
    from daemon.live import LiveDaemon

log = structlog.get_logger(__name__)

ROLES = ("all", "feeds", "evaluator")
MARKET_DATA = ("price.#", "news.#", "market.#", "resolution.#")
#: Default bridge patterns per role (used unless the ``[mqtt]`` section sets them).
ROLE_PATTERNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "feeds": ((*MARKET_DATA, "status.#"), ("status.#",)),
    "evaluator": (("decision.#", "fill.#", "alert.#"), (*MARKET_DATA, "status.#")),
    "publisher": ((), ("status.#",)),
}
OWNERS = "owners"
BEGIN = "replay/begin"
END = "replay/end"
ACK = "replay/ack"
#: Default events a replay publisher may send beyond the slowest evaluator's applied offset.
DEFAULT_WINDOW = 500
#: Seconds between checks of the evaluator's progress acknowledgements.
ACK_INTERVAL = 0.1


class RoleError(Exception):
    """A role cannot start or run; the message is one line."""


class OwnershipError(RoleError):
    """Another live evaluator owns some of our agents (or ownership cannot be checked)."""


# ---------------------------------------------------------------------------------------------
# Settings and identities


def role_settings(settings: MqttSettings, role: str) -> MqttSettings:
    """Return ``settings`` with the role's default patterns, unless the config sets them.

    Evaluators and publishers always watch ``status.#``: ownership and flow control need to
    know which peers are alive.
    """
    publish, subscribe = ROLE_PATTERNS[role]
    update: dict[str, Any] = {}
    if "publish_patterns" not in settings.model_fields_set:
        update["publish_patterns"] = publish
    if "subscribe_patterns" not in settings.model_fields_set:
        update["subscribe_patterns"] = subscribe
    elif role != "feeds" and not any(
        topic_matches(p, "status.x") for p in settings.subscribe_patterns
    ):
        update["subscribe_patterns"] = (*settings.subscribe_patterns, "status.#")
    return settings.model_copy(update=update)


def default_process_id(role: str, anchor: str | os.PathLike[str]) -> str:
    """Return a stable process id: role plus a hash of the hostname and ``anchor`` (a path).

    Two live evaluators cannot share a database (it is locked), so ids derived from it are
    unique among live evaluators and stable across restarts (the persistent session survives).
    """
    key = f"{socket.gethostname()}:{Path(anchor).resolve()}"
    return f"{role}-{hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:8]}"


def require_mqtt(config: Config, what: str) -> MqttSettings:
    """Return the ``[mqtt]`` settings or raise a one-line :class:`ConfigError`."""
    if config.mqtt is None:
        raise ConfigError("config", [f"{what} needs an [mqtt] section (host, port, namespace)"])
    return config.mqtt


def select_agents(config: Config, agents: Iterable[str] | None = None) -> tuple[str, ...]:
    """Return the agent ids an evaluator owns: ``agents``, else ``[evaluator] agents``, else all.

    Raise a one-line :class:`ConfigError` naming unknown agents.
    """
    ids = [a.id for a in config.agents]
    wanted = tuple(agents) if agents else config.evaluator.agents
    unknown = sorted(set(wanted) - set(ids))
    if unknown:
        raise ConfigError(
            "--agents",
            [f"unknown agent(s): {', '.join(unknown)} (configured: {', '.join(ids) or 'none'})"],
        )
    return tuple(a for a in ids if a in set(wanted)) if wanted else tuple(ids)


def parse_agents(value: str | None) -> tuple[str, ...] | None:
    """Parse a ``--agents a,b`` value (None or blank: not given)."""
    if value is None:
        return None
    out = tuple(a.strip() for a in value.split(",") if a.strip())
    return out or None


def with_overrides(
    config: Config, *, agents: tuple[str, ...] | None = None, process_id: str | None = None
) -> Config:
    """Return ``config`` with the command line's ``--agents`` and ``--process-id`` applied."""
    update: dict[str, Any] = {}
    if agents is not None:
        select_agents(config, agents)  # validate
        update["evaluator"] = config.evaluator.model_copy(update={"agents": agents})
    if process_id is not None:
        settings = require_mqtt(config, "--process-id")
        if not process_id or any(c in process_id for c in "/+#\x00"):
            raise ConfigError("--process-id", ["must be non-empty without '/', '+', '#' or NUL"])
        update["mqtt"] = settings.model_copy(update={"process_id": process_id})
    return config.model_copy(update=update) if update else config


# ---------------------------------------------------------------------------------------------
# Agent ownership


class Ownership:
    """Claim a set of agents for one evaluator and refuse overlaps with live peers."""

    def __init__(self, bridge: MqttBridge, agents: Iterable[str], *, mode: str = "live") -> None:
        """Watch the claims on ``bridge`` (call before the bridge starts)."""
        self.bridge = bridge
        self.agents = tuple(sorted(agents))
        self.mode = mode
        self.nonce = uuid.uuid4().hex
        self.topic = f"{OWNERS}/{bridge.process_id}"
        #: Agents claimed by other processes, by process id.
        self.claims: dict[str, frozenset[str]] = {}
        self.claimed = False
        self._echo = asyncio.Event()
        bridge.watch(OWNERS, self._on_claim)

    def _on_claim(self, rest: str, payload: bytes, retained: bool) -> None:
        """Track one peer's claim (or notice the echo of ours)."""
        del retained
        pid = rest
        if not pid or "/" in pid:
            return
        if not payload:
            self.claims.pop(pid, None)
            return
        try:
            data = json.loads(payload)
            agents = frozenset(str(a) for a in data["agents"])
            nonce = str(data.get("nonce", ""))
        except (ValueError, KeyError, TypeError):
            log.warning("invalid ownership claim ignored", process=pid)
            return
        if pid == self.bridge.process_id:
            if nonce == self.nonce:
                self._echo.set()
            return
        self.claims[pid] = agents
        if self.claimed:
            overlap = agents & set(self.agents)
            if overlap:
                log.warning("a peer claims agents this evaluator owns (it will refuse to start)",
                            peer=pid, agents=sorted(overlap))

    def conflicts(self) -> dict[str, list[str]]:
        """Return the agents we want that live peers already own, by peer process id."""
        mine = set(self.agents)
        return {
            pid: sorted(agents & mine)
            for pid, agents in sorted(self.claims.items())
            if agents & mine and self.bridge.peers.get(pid) == "online"
        }

    async def claim(self, timeout: float) -> None:
        """Announce our claim, wait for its echo and raise :class:`OwnershipError` on overlap."""
        payload = json.dumps(
            {"agents": list(self.agents), "nonce": self.nonce, "mode": self.mode,
             "since": time.time()},
            sort_keys=True,
        ).encode()
        self.bridge.announce(self.topic, payload)
        if not await wait_event(self._echo, timeout):
            self.withdraw()
            raise OwnershipError(
                f"cannot check agent ownership: no answer from the MQTT broker within {timeout:g}s"
            )
        conflicts = self.conflicts()
        if conflicts:
            self.withdraw()
            owners = "; ".join(f"{', '.join(a)} owned by {pid}" for pid, a in conflicts.items())
            raise OwnershipError(
                f"evaluator {self.bridge.process_id} refused: agent(s) already owned by a live "
                f"evaluator ({owners}); give each evaluator a disjoint --agents set"
            )
        self.claimed = True
        log.info("agents claimed", process=self.bridge.process_id, agents=list(self.agents))

    def withdraw(self) -> None:
        """Clear our retained claim."""
        self.claimed = False
        with contextlib.suppress(RuntimeError):  # bridge already stopped: nothing to clear
            self.bridge.announce(self.topic, b"")


# ---------------------------------------------------------------------------------------------
# Live roles


class RoleBridge:
    """The MQTT side of a live ``feeds`` or ``evaluator`` process (a daemon component)."""

    name = "mqtt"

    def __init__(
        self,
        settings: MqttSettings,
        *,
        role: str,
        process_id: str,
        agents: tuple[str, ...] = (),
        connect_timeout: float = 10.0,
    ) -> None:
        """Prepare the bridge of ``role`` (``feeds`` or ``evaluator``); nothing connects yet."""
        if role not in ("feeds", "evaluator"):
            raise ValueError(f"no bridge for role {role!r}")
        self.settings = role_settings(settings, role)
        self.role = role
        self.process_id = process_id
        self.agents = agents
        self.connect_timeout = connect_timeout
        self.bridge: MqttBridge | None = None
        self.ownership: Ownership | None = None
        self.reannounced = 0
        self._engine: Engine | None = None
        self._reannounce_task: asyncio.Task[None] | None = None

    async def start(self, engine: Engine, *, sources: list[Any]) -> None:
        """Connect; an evaluator claims its agents first and raises if a live peer owns any."""
        del sources
        self._engine = engine
        bridge = self.bridge = MqttBridge(engine.bus, self.settings, process_id=self.process_id)
        if self.role == "evaluator":
            self.ownership = Ownership(bridge, self.agents)
        else:
            bridge.on_peer = self._on_peer
        await bridge.start()
        if self.ownership is None:
            return
        try:
            if not await bridge.wait_connected(self.connect_timeout):
                s = self.settings
                raise OwnershipError(
                    f"cannot check agent ownership: MQTT broker {s.host}:{s.port} unreachable "
                    f"for {self.connect_timeout:g}s"
                )
            await self.ownership.claim(self.connect_timeout)
        except BaseException:
            await bridge.stop(flush_timeout=1.0)
            self.bridge = None
            raise

    async def stop(self) -> None:
        """Withdraw our claim, flush and disconnect."""
        if self._reannounce_task is not None:
            self._reannounce_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reannounce_task
        if self.bridge is None:
            return
        if self.ownership is not None:
            self.ownership.withdraw()
        await self.bridge.stop()
        self.bridge = None

    def counters(self) -> dict[str, int | bool]:
        """Return the bridge counters (empty before start)."""
        return {} if self.bridge is None else self.bridge.counters()

    def _on_peer(self, process_id: str, status: str) -> None:
        """Re-announce market state (debounced) when a peer comes online."""
        if status != "online" or self._engine is None:
            return
        if self._reannounce_task is None or self._reannounce_task.done():
            self._reannounce_task = asyncio.get_running_loop().create_task(self._reannounce())
        log.info("peer online", peer=process_id)

    async def _reannounce(self) -> None:
        """Send every open Polymarket question again for processes that missed its listing."""
        await asyncio.sleep(0.2)  # several peers coming online together: one announcement
        engine, bridge = self._engine, self.bridge
        if engine is None or bridge is None:
            return
        state = engine.state
        now = engine.clock.now()
        n = 0
        for q in list(state.questions.values()):
            if q.id in state.resolved:
                continue
            try:
                bridge.send(MarketListed(ts=now, recv_ts=now, question_id=q.id,
                                         question=q.question, yes_asset=q.yes, no_asset=q.no))
            except RuntimeError:  # stopping
                return
            n += 1
        self.reannounced += n
        log.info("market state re-announced", questions=n)


def role_daemon(
    config: Config,
    role: str,
    *,
    db: str | None = None,
    version: str = "",
    components: list[Component] | None = None,
) -> LiveDaemon:
    """Build the live daemon of ``role`` (``all`` is the single process, unchanged)."""
    from daemon.components import default_components
    from daemon.live import LiveDaemon
    from feeds.registry import build_sources

    extra = list(components or [])
    if role == "all":
        return LiveDaemon(config, db=db, version=version,
                          sources=lambda eng: build_sources(config, eng),
                          components=default_components(config, mode="live") + extra)
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    settings = require_mqtt(config, f"--role {role}")
    process_id = settings.process_id or default_process_id(role, db or config.store.path)
    if role == "feeds":
        cfg = config.model_copy(update={"agents": ()})
        bridge = RoleBridge(settings, role="feeds", process_id=process_id)
        protocols = [a.protocol for a in config.agents]  # fundamentals: wanted by any agent
        daemon = LiveDaemon(cfg, db=db, version=version,
                            sources=lambda eng: build_sources(cfg, eng, protocols=protocols),
                            components=[bridge, *default_components(cfg, mode="live"), *extra])
        daemon.config_filter = lambda new: new.model_copy(update={"agents": ()})
        return daemon
    owned = select_agents(config)
    cfg = config.model_copy(update={"agents": tuple(a for a in config.agents if a.id in owned)})
    bridge = RoleBridge(settings, role="evaluator", process_id=process_id, agents=owned)
    daemon = LiveDaemon(cfg, db=db, version=version, sources=None,
                        components=[bridge, *default_components(cfg, mode="live"), *extra])

    def keep_owned(new: Config) -> Config:
        """Restrict a reloaded config to the agents this evaluator has claimed."""
        return new.model_copy(update={
            "agents": tuple(a for a in new.agents if a.id in set(owned)),
            "evaluator": cfg.evaluator,
        })

    daemon.config_filter = keep_owned
    return daemon


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

    The same engine setup and driver as :func:`daemon.replay.replay`; events come from the
    broker in offset order (reorder buffer) instead of the file. Raise :class:`OwnershipError`
    if a live peer owns one of the agents and :class:`ReplayError` if the stream cannot complete
    or no running publisher announces one within ``publisher_timeout`` s (default
    ``[evaluator] publisher_timeout``).
    """
    settings = settings or require_mqtt(config, "replay-evaluate")
    owned = select_agents(config, agent_ids)
    pid = process_id or settings.process_id or default_process_id("evaluator", db)
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
                                  bus=bus) as ctx:
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
