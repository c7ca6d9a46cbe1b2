"""``paperarena run``: the engine on the live clock, driven by APScheduler and live sources.

Start-up order: open (and lock) the store, rebuild books and market state from it, record missed
rounds from the downtime, start the bus, the sources, the store flusher and the scheduler. Once
the sources settle, one line sums up their health (``sources: 0/4 live (yahoo: connect refused,
...)``), again on every change (rate-limited) and as a reminder while one is down.
SIGINT/SIGTERM stop scheduling, let in-flight rounds finish within a bound (or abandon them,
recorded with outcome ``abandoned``), flush the store, stop sources, and exit 0 with state
committed. SIGHUP reloads the agent and alert configuration, validated first; once applied,
the season's amendment (if the lineup changed) and the new config are stored (``config_reloads``,
at the clock's time of the reload), so a bundle's replay applies it there too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from daemon.app.components import Component
from daemon.config.settings import Config
from daemon.core.events import FUNDAMENTALS, HISTORY, MARKET, NEWS, PRICE, RESOLUTION
from daemon.core.faults import report_fault
from daemon.engine.engine import Engine, freeze_heap
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import LiveClock
from daemon.timing.schedule import LiveScheduler
from feeds.health import SourceHealth

log = structlog.get_logger(__name__)

#: Topic classes of market data (what a recording holds).
MARKET_DATA_CLASSES = (PRICE, NEWS, MARKET, RESOLUTION, HISTORY, FUNDAMENTALS)

#: How long in-flight decision rounds may take to finish after SIGTERM.
STOP_GRACE = 20.0

SourceFactory = Callable[[Engine], list[Any]]


class StartupError(Exception):
    """The daemon could not start; everything it opened is closed (the message is one line)."""


class LiveDaemon:
    """The running daemon: engine, scheduler, sources and background tasks."""

    def __init__(self, config: Config, *, db: str | None = None, version: str = "",
                 sources: SourceFactory | None = None,
                 components: list[Component] | None = None) -> None:
        self.config = config
        self.db = db or config.store.url or config.store.path
        #: This process's scope in a shared (PostgreSQL) store; split roles use the process id.
        self.scope = "all"
        self.version = version
        self.clock = LiveClock()
        self._source_factory = sources
        self.engine: Engine | None = None
        self.scheduler: LiveScheduler | None = None
        self.sources: list[Any] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()
        self.hooks_ready: list[Callable[[], Awaitable[None] | None]] = []
        self.components: list[Component] = list(components or [])
        self._started_components: list[Component] = []
        self._store: Store | None = None
        #: Continue a database whose last run was a replay (``run --append``); else refuse it.
        self.append = False
        #: Applied to a reloaded config before use (a split role keeps only its own agents).
        self.config_filter: Callable[[Config], Config] | None = None

    async def start(self) -> None:
        """Open the store, restore, and start every component."""
        store = self._store = await Store.open(self.db,
                                               busy_timeout=self.config.store.busy_timeout,
                                               scope=self.scope,
                                               password_env=self.config.store.password_env)
        if not self.append:
            await self._refuse_replay(store)
        await self._season(store, self.config)  # before anything is restored or written
        store.max_buffered_events = self.config.store.max_buffered_events
        engine = self.engine = Engine(self.config, clock=self.clock, store=store)
        engine.add_equity_universe(self.config.markets.equity.assets)
        engine.build_agents()
        freeze_heap()
        await engine.restore()
        for market, asset, ts, price in await store.latest_prices_after_checkpoint():
            from daemon.core.events import MARKETS, PriceEvent

            if market in MARKETS and market in engine.books:
                engine.state.on_price(PriceEvent(ts=ts, recv_ts=ts, market=market, asset=asset,
                                                 price=price))
        await store.begin_run(mode="live", version=self.version,
                              config=self.config.model_dump(mode="json"), recording=None,
                              started_ts=self.clock.now())
        await engine.bus.start()
        sched = self.scheduler = LiveScheduler(self.config.scheduler.misfire_grace)
        now = self.clock.now()
        for job_id, trigger in engine.triggers():
            kind, market = job_id.split(":", 1)
            if kind == "decide":
                last = await store.last_decision_ts(market)
                if last is not None:
                    await sched.backfill_missed(job_id, trigger, engine.on_job, last, now)
            sched.add_job(job_id, trigger, engine.on_job, start=now)
        if self._source_factory is not None:
            self.sources = self._source_factory(engine)
        for src in self.sources:
            self._tasks.append(asyncio.create_task(src.run(), name=f"source-{src.name}"))
        if self.sources:
            src_cfg = self.config.sources
            health = SourceHealth(self.sources, min_gap=src_cfg.health_min_gap,
                                  repeat=src_cfg.health_repeat)
            self._tasks.append(asyncio.create_task(health.run(), name="health-line"))
        self._tasks.append(asyncio.create_task(self._flusher(), name="store-flusher"))
        for comp in self.components:
            await comp.start(engine, sources=self.sources)
            self._started_components.append(comp)
        sched.start()
        for hook in self.hooks_ready:
            res = hook()
            if asyncio.iscoroutine(res):
                await res
        for comp in self._started_components:  # e.g. systemd READY=1: everything runs now
            on_ready = getattr(comp, "on_ready", None)
            if on_ready is not None:
                await on_ready()
        self.ready.set()
        log.info("daemon ready", db=self.db, markets=list(engine.markets),
                 agents=sorted({a for m in engine.slots.values() for a in m}),
                 sources=[s.name for s in self.sources])

    async def _season(self, store: Store, config: Config, *, record: bool = True,
                      ts: float | None = None) -> None:
        """Freeze the season's lineup, or check ``config``'s against it (issue 32, point 1):
        a refusal raises :class:`~daemon.store.integrity.season.SeasonError` (one line).
        ``ts``: when an amendment is recorded (now by default)."""
        from daemon.config.season import lineup
        from daemon.store.integrity.season import open_season

        line = await open_season(store, self.db, config.season.name, lineup(config),
                                 amendments=config.season.amendments,
                                 ts=self.clock.now() if ts is None else ts, record=record)
        if line:  # an amendment is worth a warning, a new season a line
            (log.warning if "amendment" in line else log.info)(line)

    async def _refuse_replay(self, store: Store) -> None:
        """Raise :class:`StoreOpenError` (nothing written yet) if the store's last run is a
        replay: running live on it would record every round from the replay's end to now as
        missed."""
        from daemon.store.dbfile import StoreOpenError

        rows = await store.fetchall("SELECT mode, recording FROM runs ORDER BY id DESC LIMIT 1")
        if rows and rows[0][0] == "replay":
            raise StoreOpenError(f"{self.db} holds a replay (recording {rows[0][1]}); run on "
                                 "another database or pass --append to continue it live")

    async def abort_start(self) -> None:
        """Close whatever a failed :meth:`start` opened, committing nothing; never raise.

        The store is closed whatever else fails: its SQLite thread would keep the process alive.
        """
        try:
            for comp in reversed(self._started_components):
                with contextlib.suppress(Exception):
                    await comp.stop()
            self._started_components.clear()
            if self.scheduler is not None:
                with contextlib.suppress(Exception):
                    await self.scheduler.shutdown(wait=False)
            await self._cancel_tasks()
            if self.engine is not None:
                with contextlib.suppress(Exception):
                    await self.engine.bus.stop()
                with contextlib.suppress(Exception):
                    await self.engine.close_agents()
        finally:
            store, self._store, self.engine, self.scheduler = self._store, None, None, None
            if store is not None:
                try:
                    if store.run_id is not None:
                        with contextlib.suppress(Exception):
                            await store.end_run(self.clock.now())
                finally:
                    with contextlib.suppress(Exception):
                        await store.close()

    async def _cancel_tasks(self) -> None:
        """Cancel the background tasks (sources, health line, flusher) and wait for them."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    async def _flusher(self) -> None:
        assert self.engine is not None
        store = self.engine.store
        interval = self.config.store.flush_interval
        while True:
            await asyncio.sleep(interval)
            try:
                await store.flush()
            except StoreWriteError:
                pass  # logged once by the store; the events stay buffered and are retried
            except Exception:
                log.exception("store flush failed")

    def request_stop(self) -> None:
        """Ask the daemon to stop (signal handlers call this)."""
        self._stop.set()

    async def reload(self, path: str | None) -> bool:
        """Re-read ``path`` and apply agent and alert changes; refuse anything invalid."""
        from daemon.app.systemd import monotonic_usec, notify
        from daemon.config.settings import ConfigError, load_config
        from daemon.core.logs import register_config_secrets

        if self.engine is None:
            return False
        if path is None:
            log.error("config reload refused: the daemon was started without --config")
            return False
        notify(f"RELOADING=1\nMONOTONIC_USEC={monotonic_usec()}")
        try:
            try:
                new = load_config(path)
                if self.config_filter is not None:
                    new = self.config_filter(new)
                from daemon.alerts.config import parse_alerts_config

                parse_alerts_config(new.alerts, source=path)  # validate all before applying any
                register_config_secrets(new)
                # a frozen lineup refuses the reload before anything is applied; an allowed
                # change is recorded as an amendment once it is
                await self._season(self.engine.store, new, record=False)
                changes = await self.engine.reload(new)
            except ConfigError as exc:
                log.error("config reload refused, running config kept",
                          error="; ".join(f"{exc.source}: {p}" for p in exc.problems))
                return False
            except Exception as exc:
                log.error("config reload refused, running config kept", error=str(exc))
                return False
            # Applied now (the engine runs the new agents): whatever fails below is said as
            # such, never as a refusal.
            self.config = new
            await self._record_reload(new)
            for comp in self._started_components:
                comp_reload = getattr(comp, "reload", None)
                if comp_reload is not None:
                    try:
                        await comp_reload(new)
                    except Exception as exc:
                        log.error("config reload applied, but a component kept its settings",
                                  component=type(comp).__name__, error=str(exc))
        finally:
            notify("READY=1")
        log.info("config reloaded", path=path, changes=changes)
        return True

    async def _record_reload(self, new: Config) -> None:
        """Store an applied reload: the season amendment, then the config itself (in the form
        of a run's), so that a bundle's replay applies it at the same moment (issue 32). A
        failed write is said in one line: the reload stands, the store lacks it."""
        assert self.engine is not None
        at = self.clock.now()
        try:
            await self._season(self.engine.store, new, ts=at)
            await self.engine.store.record_reload(at, new.model_dump(mode="json"))
        except Exception as exc:
            log.error("config reload applied, but not stored: the season's amendment or the"
                      " reloaded config is missing from the store (a bundle of this season"
                      " cannot replay it)", error=str(exc))

    async def wait(self, duration: float | None = None) -> None:
        """Run until a stop is requested (or ``duration`` seconds passed)."""
        if duration is None:
            await self._stop.wait()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), duration)

    async def stop(self) -> None:
        """Stop scheduling, finish or abandon in-flight rounds, flush, close.

        Every step runs even when an earlier one fails (a component, the bus, an agent, a log
        write), the store is closed whatever happens (its SQLite thread would otherwise keep the
        process alive forever), and the first error is raised again at the end. The final
        commit is made only when every step before it succeeded.
        """
        if self.engine is None and not self._tasks and not self._started_components:
            return  # never started (e.g. the store is locked by another daemon)
        errors: list[BaseException] = []
        try:
            for step in (self._stop_ingesting, self._stop_scheduler, self._stop_components,
                         self._cancel_tasks, self._stop_bus, self._close_agents):
                try:
                    await step()
                except BaseException as exc:  # the rest still runs; raised below
                    errors.append(exc)
                    with contextlib.suppress(Exception):
                        log.error("daemon stop step failed", step=step.__name__.strip("_"),
                                  error=f"{type(exc).__name__}: {exc}")
            if not errors:
                await self._commit_end()
        finally:
            store, self._store = self._store, None
            if store is not None:
                await store.close()
        if errors:
            raise errors[0]
        log.info("daemon stopped")

    async def _stop_ingesting(self) -> None:
        """Seal (components' ``on_stopping``), mute market data and cancel the sources."""
        log.info("daemon stopping")
        stopping_at = self.clock.now()
        try:
            for comp in self._started_components:
                on_stopping = getattr(comp, "on_stopping", None)
                if on_stopping is not None:
                    on_stopping(stopping_at)  # e.g. seal the recording where scheduling ends
        finally:
            # Stop ingesting in the same step (no await in between): nothing received after the
            # recording was sealed may reach the books while in-flight rounds finish, not even
            # a frame a source's sub-task already holds when it is cancelled.
            if self.engine is not None:
                self.engine.bus.mute(MARKET_DATA_CLASSES)
            for t in self._tasks:
                if t.get_name().startswith("source-"):
                    t.cancel()

    async def _stop_scheduler(self) -> None:
        """Stop scheduling; let in-flight rounds finish within the grace or record them
        abandoned."""
        if self.scheduler is None:
            return
        try:
            await asyncio.wait_for(self.scheduler.shutdown(wait=True), STOP_GRACE)
        except TimeoutError:
            log.warning("in-flight rounds abandoned at shutdown", grace_s=STOP_GRACE)
            await self.scheduler.shutdown(wait=False)
        if self.engine is not None:
            from daemon.engine.rounds import record_abandoned

            try:
                await record_abandoned(self.engine)
            except Exception as exc:  # e.g. the store is unreachable while stopping
                report_fault(log, "round_store", "recording abandoned decisions failed", exc)

    async def _stop_components(self) -> None:
        """Stop the components, last started first; one failing does not stop the others."""
        for comp in reversed(self._started_components):
            try:
                await comp.stop()
            except Exception:
                log.exception("component stop failed", component=comp.name)
        self._started_components.clear()

    async def _stop_bus(self) -> None:
        """Deliver what the bus holds and stop its consumers."""
        if self.engine is not None:
            await self.engine.bus.stop()

    async def _close_agents(self) -> None:
        """Let agents holding processes release them."""
        if self.engine is not None:
            await self.engine.close_agents()

    async def _commit_end(self) -> None:
        """Commit books, resolutions paid since the last round and a checkpoint together with
        the last market events, so a restart loses nothing that was applied; end the run."""
        if self.engine is None:
            return
        from daemon.store.records import RoundCommit

        await self.engine.commit(RoundCommit())
        await self.engine.store.end_run(self.clock.now())
