"""Replay a recording through the whole pipeline on a simulated clock, deterministically.

Before each event is published, every scheduled job due strictly before its time runs with the
clock at the job's time, so a decision at T sees exactly the events with ts <= T. A replay killed
at any instant resumes from the last committed checkpoint when run again on the same database,
and ends in the same state as an uninterrupted run.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from daemon.clock import SimClock
from daemon.components import Component
from daemon.config import Config
from daemon.engine import Engine
from daemon.schedule import SimScheduler
from daemon.store import Store
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
    store = await Store.open(str(db))
    try:
        runs = await store.fetchall("SELECT recording FROM runs WHERE mode='replay' LIMIT 1")
        if runs and runs[0][0] != Path(rec).name:
            raise ReplayError(
                f"{db} holds a replay of {runs[0][0]}, not {Path(rec).name}: use another --db"
            )
        clock = SimClock(start)
        engine = Engine(config, clock=clock, store=store)
        engine.add_equity_universe(config.markets.equity.assets)
        engine.build_agents(agent_ids)
        offset = await engine.restore()
        resume_clock = engine.state.clock if offset else start
        if resume_clock > clock.now():
            clock.advance(resume_clock)
        await store.begin_run(mode="replay", version=version, config=config.model_dump(mode="json"),
                              recording=Path(rec).name, started_ts=time.time())
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
            t0 = time.perf_counter()
            n, decisions = await _drive(engine, sched, clock, rec, offset, start, end,
                                        header.end, speed, _want_progress(progress))
            return ReplaySummary(n, offset, decisions, time.perf_counter() - t0)
        finally:
            for comp in reversed(started):
                try:
                    await comp.stop()
                except Exception:
                    log.exception("component stop failed", component=comp.name)
    finally:
        await engine_stop(locals().get("engine"))
        await store.close()


async def _drive(engine: Engine, sched: SimScheduler, clock: SimClock, rec: str, offset: int,
                 start: float, end: float, header_end: float, speed: float | None,
                 show: bool) -> tuple[int, int]:
    store = engine.store
    state = engine.state
    bus = engine.bus
    batch = engine.config.store.batch_size
    conflating = bus.conflating
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=count_events(rec), initial=offset, unit="ev", unit_scale=True,
                   file=sys.stderr, desc="replay", mininterval=0.5)
    n = 0
    decisions = 0
    wall0 = time.monotonic()
    first_ts: float | None = None
    try:
        for i, ev in iter_events(rec, start_offset=offset):
            ts = ev.ts
            if ts > end:
                break
            if ts > clock.now():
                decisions += await sched.run_until(ts, inclusive=False)
                if ts > clock.now():
                    clock.advance(ts)
            if ts >= start:
                if speed is not None:
                    if first_ts is None:
                        first_ts = ts
                    due = wall0 + (ts - first_ts) / speed
                    delay = due - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                engine.seq = i
                if ev.topic_class in conflating:
                    bus.publish_nowait(ev)  # prices: sync path, no coroutine per tick
                else:
                    await bus.publish(ev)
            state.offset = i + 1
            n += 1
            if bar is not None and n % 4096 == 0:
                bar.update(4096)
            if store.pending_events >= batch:
                store.flush_soon()
        last = max(clock.now(), header_end) if end == math.inf else end
        decisions += await sched.run_until(last, inclusive=True)
        if last > clock.now():
            clock.advance(last)
        await bus.drain()
        # Final commit: everything buffered, books and the end checkpoint.
        from daemon.store import RoundCommit

        await engine.commit(RoundCommit())
    finally:
        if bar is not None:
            bar.update(n % 4096)
            bar.close()
    return n, decisions


async def engine_stop(engine: Engine | None) -> None:
    """Stop the engine's bus if it was started."""
    if engine is not None:
        await engine.bus.stop()


def _want_progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty()
