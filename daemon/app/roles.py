"""Split one paperarena deployment into processes over MQTT: role wiring (feeds, evaluators).

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

Replay through roles (``replay-publish`` + ``replay-evaluate``) lives in
:mod:`daemon.app.replay_roles`, which builds on the settings, ownership and bridge of this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from daemon.config.settings import Config, ConfigError
from daemon.core.bus import topic_matches
from daemon.core.events import MarketListed
from daemon.mqtt.bridge import MqttBridge, wait_event
from daemon.mqtt.settings import MqttSettings

if TYPE_CHECKING:
    from daemon.app.components import Component
    from daemon.app.live import LiveDaemon
    from daemon.engine.engine import Engine

log = structlog.get_logger(__name__)

ROLES = ("all", "feeds", "evaluator")
#: Every event class a source or a recording carries to the evaluators (a class missing here
#: never reaches them: a replay stream holding one waits forever on the gap it leaves). Live
#: sources publish no ``clock`` event; recordings end with one.
MARKET_DATA = ("price.#", "news.#", "market.#", "resolution.#", "history.#", "fundamentals.#",
               "bar.#", "clock.#")
#: Default bridge patterns per role (used unless the ``[mqtt]`` section sets them).
ROLE_PATTERNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "feeds": ((*MARKET_DATA, "status.#"), ("status.#",)),
    "evaluator": (("decision.#", "fill.#", "alert.#"), (*MARKET_DATA, "status.#")),
    "publisher": ((), ("status.#",)),
}
OWNERS = "owners"


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


def default_process_id(role: str, anchor: str | os.PathLike[str],
                       agents: Iterable[str] = ()) -> str:
    """Return a stable process id: role plus a hash of the hostname and ``anchor`` (a path).

    Two live evaluators cannot share a database (it is locked), so ids derived from it are
    unique among live evaluators and stable across restarts (the persistent session survives).
    A shared ``postgresql://`` store is not one per process: its id also hashes ``agents``.
    """
    where = str(anchor)
    if where.startswith(("postgresql://", "postgres://")):
        key = f"{socket.gethostname()}:{where}:{','.join(sorted(agents))}"
    else:
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
    from daemon.app.components import default_components
    from daemon.app.live import LiveDaemon
    from daemon.app.sources import build_sources

    extra = list(components or [])
    if role == "all":
        return LiveDaemon(config, db=db, version=version,
                          sources=lambda eng: build_sources(config, eng),
                          components=default_components(config, mode="live") + extra)
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    settings = require_mqtt(config, f"--role {role}")
    anchor = db or config.store.url or config.store.path
    owned = select_agents(config) if role == "evaluator" else ()
    process_id = settings.process_id or default_process_id(role, anchor, owned)
    if role == "feeds":
        cfg = config.model_copy(update={"agents": ()})
        bridge = RoleBridge(settings, role="feeds", process_id=process_id)
        protocols = [a.protocol for a in config.agents]  # fundamentals: wanted by any agent
        daemon = LiveDaemon(cfg, db=db, version=version,
                            sources=lambda eng: build_sources(cfg, eng, protocols=protocols),
                            components=[bridge, *default_components(cfg, mode="live"), *extra])
        daemon.config_filter = lambda new: new.model_copy(update={"agents": ()})
        daemon.scope = process_id
        return daemon
    cfg = config.model_copy(update={"agents": tuple(a for a in config.agents if a.id in owned)})
    bridge = RoleBridge(settings, role="evaluator", process_id=process_id, agents=owned)
    daemon = LiveDaemon(cfg, db=db, version=version, sources=None,
                        components=[bridge, *default_components(cfg, mode="live"), *extra])
    daemon.scope = process_id

    def keep_owned(new: Config) -> Config:
        """Restrict a reloaded config to the agents this evaluator has claimed."""
        return new.model_copy(update={
            "agents": tuple(a for a in new.agents if a.id in set(owned)),
            "evaluator": cfg.evaluator,
        })

    daemon.config_filter = keep_owned
    return daemon
