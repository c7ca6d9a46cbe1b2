"""Replay a recording through the whole pipeline on a simulated clock, deterministically.

Before each event is published, every scheduled job due strictly before its time runs with the
clock at the job's time, so a decision at T sees exactly the events with ts <= T. A replay killed
at any instant resumes from the last committed checkpoint when run again on the same database,
and ends in the same state as an uninterrupted run.

The pieces are shared with ``paperarena replay-evaluate`` (events received over MQTT, see
``daemon/roles.py``): :func:`replay_session` builds and restores the engine, :class:`ReplayDriver`
applies one event at a time in offset order and finishes the run, whatever the event source.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from daemon.bus import Bus
from daemon.clock import SimClock
from daemon.components import Component
from daemon.config import Config
from daemon.dbfile import describe_sqlite_error
from daemon.engine import Engine
from daemon.events import Event
from daemon.schedule import SimScheduler
from daemon.store import RoundCommit, Store
from feeds.recording import count_events, iter_events, read_header

log = structlog.get_logger(__name__)


class ReplayError(Exception):
    """The replay cannot run; the message is one line."""


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay did."""

    events: int
    resumed_from: int
    decisions: int
    elapsed_s: float

    @property
    def events_per_s(self) -> float:
        """Return the replay throughput."""
        return self.events / self.elapsed_s if self.elapsed_s > 0 else float("inf")


@dataclass(slots=True)
class ReplayContext:
    """A restored replay engine ready to be driven (see :func:`replay_session`)."""

    engine: Engine
    sched: SimScheduler
    clock: SimClock
    offset: int


@contextlib.asynccontextmanager
async def replay_session(
    config: Config,
    db: str | Path,
    *,
    recording_name: str,
    start: float,
    agent_ids: list[str] | None = None,
    version: str = "",
    components: list[Component] | None = None,
    bus: Bus | None = None,
) -> AsyncIterator[ReplayContext]:
    """Open ``db``, build and restore the engine, start scheduler, bus and components.

    Refuse a database holding a replay of another recording. On exit, stop the components, the
    bus and close the store (nothing is committed here: :meth:`ReplayDriver.finish` does it).
    A database error while starting is a :class:`ReplayError` naming the database.
    """
    store = await Store.open(str(db))
    engine: Engine | None = None
    ready = False
    try:
        runs = await store.fetchall("SELECT recording FROM runs WHERE mode='replay' LIMIT 1")
        if runs and runs[0][0] != recording_name:
            raise ReplayError(
                f"{db} holds a replay of {runs[0][0]}, not {recording_name}: use another --db"
            )
        clock = SimClock(start)
        engine = Engine(config, clock=clock, store=store, bus=bus)
        engine.add_equity_universe(config.markets.equity.assets)
        engine.build_agents(agent_ids)
        offset = await engine.restore()
        resume_clock = engine.state.clock if offset else start
        if resume_clock > clock.now():
            clock.advance(resume_clock)
        await store.begin_run(mode="replay", version=version, config=config.model_dump(mode="json"),
                              recording=recording_name, started_ts=time.time())
        if offset:
            await store.delete_events_from(offset)
            log.info("replay resumed", offset=offset, clock=resume_clock)
        sched = SimScheduler(clock, config.scheduler.misfire_grace)
        for job_id, trigger in engine.triggers():
            sched.add_job(job_id, trigger, engine.on_job, start=clock.now())
        await engine.bus.start()
        started: list[Component] = []
        try:
            for comp in components or ():
                await comp.start(engine, sources=[])
                started.append(comp)
            ready = True
            yield ReplayContext(engine, sched, clock, offset)
        finally:
            for comp in reversed(started):
                try:
                    await comp.stop()
                except Exception:
                    log.exception("component stop failed", component=comp.name)
    except sqlite3.Error as exc:
        if ready:
            raise
        raise ReplayError(f"--db {describe_sqlite_error(str(db), exc)}") from exc
    finally:
        try:
            await engine_stop(engine)
        finally:
            await store.close()


class ReplayDriver:
    """Apply events in offset order on the simulated clock; the one replay code path.

    Before an event with time ``t`` is published, every job due strictly before ``t`` runs with
    the clock at its own time, so a decision at ``T`` sees exactly the events with ``ts <= T``.
    """

    def __init__(self, ctx: ReplayContext, *, start: float, end: float = math.inf,
                 speed: float | None = None) -> None:
        """Drive ``ctx`` over recording time [start, end] (``speed`` None: as fast as possible)."""
        self.engine = ctx.engine
        self.sched = ctx.sched
        self.clock = ctx.clock
        self.start = start
        self.end = end
        self.speed = speed
        self.events = 0
        self.decisions = 0
        self._batch = ctx.engine.config.store.batch_size
        self._conflating = ctx.engine.bus.conflating
        self._wall0 = time.monotonic()
        self._first_ts: float | None = None

    async def step(self, i: int, ev: Event) -> bool:
        """Apply event ``i`` (its recording offset); return False once past the window end."""
        ts = ev.ts
        if ts > self.end:
            return False
        clock = self.clock
        engine = self.engine
        if ts > clock.now():
            self.decisions += await self.sched.run_until(ts, inclusive=False)
            if ts > clock.now():
                clock.advance(ts)
        if ts >= self.start:
            if self.speed is not None:
                if self._first_ts is None:
                    self._first_ts = ts
                due = self._wall0 + (ts - self._first_ts) / self.speed
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            engine.seq = i
            if ev.topic_class in self._conflating:
                engine.bus.publish_nowait(ev)  # prices: sync path, no coroutine per tick
            else:
                await engine.bus.publish(ev)
        engine.state.offset = i + 1
        self.events += 1
        store = engine.store
        if store.pending_events >= self._batch:
            store.flush_soon()
        return True

    async def finish(self, header_end: float) -> None:
        """Run the jobs due up to the end, drain the bus and commit everything (end checkpoint)."""
        clock = self.clock
        last = max(clock.now(), header_end) if self.end == math.inf else self.end
        self.decisions += await self.sched.run_until(last, inclusive=True)
        if last > clock.now():
            clock.advance(last)
        await self.engine.bus.drain()
        await self.engine.commit(RoundCommit())


async def replay(
    recording: str | Path,
    config: Config,
    db: str | Path,
    *,
    speed: float | None = None,
    progress: bool | None = None,
    agent_ids: list[str] | None = None,
    window: tuple[float | None, float | None] = (None, None),
    version: str = "",
    components: list[Component] | None = None,
) -> ReplaySummary:
    """Replay ``recording`` into ``db``; ``speed`` None = as fast as possible, else a factor."""
    rec = str(recording)
    try:
        header = read_header(rec)
    except FileNotFoundError:
        raise ReplayError(f"{rec}: no such recording") from None
    start = header.start if window[0] is None else max(header.start, window[0])
    # A live recording cannot know its end when its header is written: without a window end,
    # replay to the last event (or the header's end, whichever is later).
    end = math.inf if window[1] is None else window[1]
    async with replay_session(config, db, recording_name=Path(rec).name, start=start,
                              agent_ids=agent_ids, version=version,
                              components=components) as ctx:
        t0 = time.perf_counter()
        driver = ReplayDriver(ctx, start=start, end=end, speed=speed)
        n = await _drive(driver, rec, ctx.offset, header.end, _want_progress(progress))
        return ReplaySummary(n, ctx.offset, driver.decisions, time.perf_counter() - t0)


async def _drive(driver: ReplayDriver, rec: str, offset: int, header_end: float,
                 show: bool) -> int:
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=count_events(rec), initial=offset, unit="ev", unit_scale=True,
                   file=sys.stderr, desc="replay", mininterval=0.5)
    n = 0
    try:
        for i, ev in iter_events(rec, start_offset=offset):
            if not await driver.step(i, ev):
                break
            n += 1
            if bar is not None and n % 4096 == 0:
                bar.update(4096)
        await driver.finish(header_end)
    finally:
        if bar is not None:
            bar.update(n % 4096)
            bar.close()
    return n


async def engine_stop(engine: Engine | None) -> None:
    """Stop the engine's bus if it was started."""
    if engine is not None:
        await engine.bus.stop()


def _want_progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty()
