"""The observability component: metrics, loop-lag monitor, HTTP server, alerts and notifiers.

One :class:`Observability` per daemon (live or replay). It owns a dedicated Prometheus
``CollectorRegistry`` (several daemons can run in one process, e.g. in tests), subscribes to
``decision.#`` and ``alert.#`` for the event-driven counters, reads everything else at scrape
time, runs the :class:`~daemon.alerts.rules.AlertMonitor` (drawdown and stale-feed alerts, halts,
notifiers) and, when asked, the HTTP server.

In a replay there are no live sources; a ``replay`` pseudo-source stands for the recording so the
feed metrics and dashboards still show the event flow (its timestamps are recording time).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector

from daemon.alerts.config import AlertsConfig, parse_alerts_config
from daemon.alerts.delivery import build_notifiers
from daemon.alerts.rules import AlertMonitor
from daemon.core.faults import report_fault
from daemon.web.http import HttpServer
from daemon.web.loop_lag import LoopLagMonitor
from daemon.web.metrics import (
    EngineCollector,
    LeaderboardFigures,
    LlmUsage,
    Metrics,
    PerformanceCache,
)

if TYPE_CHECKING:
    from daemon.config.settings import Config
    from daemon.core.events import AlertEvent, DecisionEvent, Event
    from daemon.engine.engine import Engine

log = structlog.get_logger(__name__)

#: Wall seconds between reads of new daily equity marks for the risk-adjusted figures.
PERFORMANCE_REFRESH = 15.0


def package_version() -> str:
    """Return the installed paperarena version."""
    try:
        return dist_version("paperarena")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass
class ReplayCounters:
    """Counters of the replay pseudo-source (the same names as a live source's)."""

    messages: int = 0
    data_messages: int = 0
    decode_errors: int = 0
    rejected: int = 0
    reconnects: int = 0
    last_message_ts: float | None = None
    last_data_ts: float | None = None


class ReplayFeed:
    """The recording, seen as a source: live while the replay runs."""

    market = None

    def __init__(self) -> None:
        """Start live with zero counters."""
        self.name = "replay"
        self.state = "live"
        self.counters = ReplayCounters()

    def on_event(self, ev: Event) -> None:
        """Bus tap: count one replayed market-data event."""
        c = self.counters
        c.messages += 1
        c.data_messages += 1
        c.last_message_ts = ev.ts
        c.last_data_ts = ev.ts


def wants_observability(config: Config, mode: str) -> bool:
    """Return whether a daemon in ``mode`` runs the observability component for ``config``."""
    halts = any(a.halt_on_breach for a in config.agents)
    if mode == "replay":
        return config.http.replay or bool(config.alerts) or halts
    return config.http.enabled or bool(config.alerts) or halts


def serves_http(config: Config, mode: str) -> bool:
    """Return whether a daemon in ``mode`` serves HTTP."""
    return config.http.replay if mode == "replay" else config.http.enabled


class Observability:
    """Metrics registry and collectors, loop-lag monitor, HTTP server, alert monitor."""

    name = "observability"

    def __init__(self, config: Config, *, mode: str = "live", alerts: AlertsConfig | None = None,
                 http: bool | None = None, host: str | None = None, port: int | None = None,
                 version: str | None = None, process_metrics: bool = True) -> None:
        """Prepare the component (validated alerts config; nothing runs before ``start``)."""
        self.config = config
        self.mode = mode
        self.alerts_config = alerts if alerts is not None else parse_alerts_config(config.alerts)
        self.http_enabled = serves_http(config, mode) if http is None else http
        self.host = config.http.host if host is None else host
        self.port = config.http.port if port is None else port
        self.version = version or package_version()
        self.registry = CollectorRegistry()
        self.metrics = Metrics(version=self.version, registry=self.registry)
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        self.engine: Engine | None = None
        self.monitor: AlertMonitor | None = None
        self.performance: PerformanceCache | None = None
        self.board: LeaderboardFigures | None = None
        self.llm: LlmUsage | None = None
        self.lag = LoopLagMonitor(on_lag=self._on_lag)
        self.server: HttpServer | None = None
        self.sources: list[Any] = []
        self.replay_feed: ReplayFeed | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._marked = asyncio.Event()
        """Set after each daily mark: the refresh loop recomputes the figures at once."""
        self._running = False

    @classmethod
    def from_config(cls, config: Config, *, mode: str) -> Observability | None:
        """Return the component ``config`` asks for in ``mode``, or None; validate ``[alerts]``."""
        alerts = parse_alerts_config(config.alerts)
        if not wants_observability(config, mode):
            return None
        return cls(config, mode=mode, alerts=alerts)

    @property
    def url(self) -> str | None:
        """Return the HTTP base URL once serving."""
        if self.server is None:
            return None
        return f"http://{self.host}:{self.server.port}"

    def feeds(self) -> list[Any]:
        """Return the sources shown in feed metrics and readiness."""
        return [*self.sources, *([self.replay_feed] if self.replay_feed is not None else [])]

    async def start(self, engine: Engine, *, sources: list[Any]) -> None:
        """Wire metrics, alerts and (if enabled) the HTTP server to ``engine``.

        On failure (e.g. the HTTP port is taken) everything started is stopped again.
        """
        try:
            await self._start(engine, sources)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, engine: Engine, sources: list[Any]) -> None:
        self.engine = engine
        self.sources = list(sources)
        if not self.sources and self.mode == "replay":
            self.replay_feed = ReplayFeed()
            for pattern in ("price.#", "news.#", "market.#", "resolution.#"):
                engine.bus.add_tap(pattern, self.replay_feed.on_event)
        m = self.metrics
        m.init_agents((a, mk) for mk, slots in engine.slots.items() for a in slots)
        self.llm = LlmUsage(engine, m)
        await self.llm.restore()
        self.performance = PerformanceCache(engine)
        await self.performance.refresh()
        self.board = LeaderboardFigures(engine)
        await self.board.refresh()
        self.registry.register(self.board)
        engine.mark_listeners.append(lambda _market, _ts: self._marked.set())
        self.monitor = AlertMonitor(
            engine, self.alerts_config, sources=self.sources,
            notifiers=build_notifiers(self.alerts_config, m.on_notification))
        await self.monitor.start()
        engine.bus.subscribe("decision.#", self._on_decision, name="observability-decisions")
        engine.bus.subscribe("alert.#", self._on_alert, name="observability-alerts")
        self.registry.register(EngineCollector(engine, monitor=self.monitor,
                                               performance=self.performance, llm=self.llm,
                                               feeds=self.feeds))
        self.lag.start()
        self._running = True
        self._tasks.append(asyncio.create_task(self._refresh_loop(), name="metrics-refresh"))
        if self.http_enabled:
            self.server = HttpServer(engine, registry=self.registry, host=self.host,
                                     port=self.port, lag=self.lag, monitor=self.monitor,
                                     performance=self.performance, metrics=m, feeds=self.feeds,
                                     settings=self.config.http)
            await self.server.start()
        log.info("observability started", mode=self.mode, http=self.url,
                 notifiers=len(self.alerts_config.webhooks))

    async def stop(self) -> None:
        """Stop the server, deliver queued alerts (bounded), stop the background tasks."""
        self._running = False
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.replay_feed is not None:
            self.replay_feed.state = "down"
        if self.monitor is not None:
            await self.monitor.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        await self.lag.stop()

    async def reload(self, config: Config) -> None:
        """Apply a reloaded config: alert settings, notifiers and agent limits."""
        alerts = parse_alerts_config(config.alerts)
        self.config = config
        self.alerts_config = alerts
        if self.monitor is not None:
            await self.monitor.reload(alerts, build_notifiers(alerts, self.metrics.on_notification),
                                      config.agents)
        if self.llm is not None:
            self.llm.set_agents(config.agents)
        if self.engine is not None:
            self.metrics.init_agents(
                (a, mk) for mk, slots in self.engine.slots.items() for a in slots)

    async def _on_decision(self, ev: DecisionEvent) -> None:
        if not self._running:
            return
        self.metrics.on_decision(ev)
        if self.llm is not None:
            await self.llm.on_decision(ev)

    def _on_alert(self, ev: AlertEvent) -> None:
        self.metrics.on_alert(ev)

    def _on_lag(self, lag: float, max_lag: float) -> None:
        self.metrics.loop_lag.set(lag)
        self.metrics.loop_lag_max.set(max_lag)

    async def _refresh_loop(self) -> None:
        while True:
            # Every PERFORMANCE_REFRESH seconds, and at once after a daily mark.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._marked.wait(), PERFORMANCE_REFRESH)
            self._marked.clear()
            if self.performance is None:
                continue
            try:
                await self.performance.refresh()
                if self.board is not None:
                    await self.board.refresh()
                if self.server is not None and self.server.board_cache is not None:
                    self.server.board_cache.refresh()  # recomputes only after marks or rounds
            except Exception as exc:  # e.g. the store's server went away: retried next time
                report_fault(log, "performance_refresh", "performance refresh failed", exc)
