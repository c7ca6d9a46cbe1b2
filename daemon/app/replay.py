"""Replay a recording through the whole pipeline on a simulated clock, deterministically.

Before each event is published, every scheduled job due strictly before its time runs with the
clock at the job's time, so a decision at T sees exactly the events with ts <= T. A replay killed
at any instant resumes from the last committed checkpoint when run again on the same database,
and ends in the same state as an uninterrupted run.

The pieces are shared with ``paperarena replay-evaluate`` (events received over MQTT, see
``daemon/app/replay_roles.py``): :func:`replay_session` builds and restores the engine,
:class:`ReplayDriver`
applies one event at a time in offset order and finishes the run, whatever the event source.

A database remembers what it replays (:func:`run_fingerprint`: the result-affecting config,
the recording's name, header and content hash, the window and the agents): a resume with
anything different is refused with one line naming what differs, and a replay that finished
says so instead of replaying nothing. A store write that fails stops the replay with one line
(the resume repeats the failed round); a damaged recording stops it after its last whole event.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import sqlite3
import sys
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agents.portbench.stage_scoring import score_engine
from daemon.app.components import Component
from daemon.config.settings import Config
from daemon.core.bus import Bus
from daemon.core.events import Event
from daemon.engine.engine import Engine, freeze_heap
from daemon.store.dbfile import describe_sqlite_error
from daemon.store.records import RoundCommit
from daemon.store.store import Store, StoreWriteError
from daemon.timing.clock import SimClock
from daemon.timing.schedule import SimScheduler
from feeds.recording import RecordingDamaged, count_events, iter_events, read_header

log = structlog.get_logger(__name__)


#: A scheduler job's callback: (job id, fire time, missed).
JobCallback = Callable[[str, float, bool], Awaitable[None]]


class ReplayError(Exception):
    """The replay cannot run; the message is one line."""


class ReplayComplete(ReplayError):
    """The database already holds this replay, finished; the message says where its report is."""


#: Config sections that change what a replay computes (the rest: logging, HTTP, store tuning).
FINGERPRINT_SECTIONS = ("markets", "agents", "scheduler", "alerts")
_META_FINGERPRINT = "replay_fingerprint"
_META_CONFIG = "replay_config"
_META_COMPLETE = "replay_complete"
_CONTENT = "recording content"


#: Bytes read at once while hashing a recording.
_CHUNK = 1 << 20


def content_digest(path: str | Path, limit: int | None = None) -> dict[str, Any]:
    """Return ``{"bytes": n, "sha256": hex}`` of the recording's first ``limit`` bytes of
    content (all of it by default): of what it decompresses to when gzipped, so a file cut
    short (a download, a crash) is a prefix of the complete one. Read in chunks (a recording
    is never held in memory); a truncated or damaged gzip stream counts up to where it ends."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
        while limit is None or n < limit:
            raw = f.read(_CHUNK)
            if not raw:
                break
            if inflate is not None:
                try:
                    raw = inflate.decompress(raw)
                except zlib.error:
                    break
            if limit is not None:
                raw = raw[:limit - n]
            h.update(raw)
            n += len(raw)
            if inflate is not None and inflate.eof:
                break
    return {"bytes": n, "sha256": h.hexdigest()}


def run_fingerprint(config: Config, *, recording: str, header: str | None = None,
                    window: tuple[float | None, float | None] | None = None,
                    agent_ids: list[str] | None = None,
                    content: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return what a replay's result depends on (None: not known, not compared)."""
    return {
        "config": hashlib.sha256(_config_json(config).encode()).hexdigest(),
        "recording": recording,
        "recording header": header,
        "recording content": content,
        "window": None if window is None else list(window),
        "agents": None if agent_ids is None else sorted(agent_ids),
    }


def _config_json(config: Config) -> str:
    data = config.model_dump(mode="json")
    return json.dumps({k: data.get(k) for k in FINGERPRINT_SECTIONS}, sort_keys=True)


def _config_diff(old: Any, new: Any, path: str = "") -> list[str]:
    """Return the dotted paths where two config dumps differ (lists compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new)):
            out += _config_diff(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if old == new else [path or "config"]


def _differences(stored: dict[str, Any], current: dict[str, Any], stored_cfg: str | None,
                 current_cfg: str) -> list[str]:
    out: list[str] = []
    for key, value in current.items():
        before = stored.get(key)
        if value is None or before is None or before == value or key == _CONTENT:
            continue
        if key == "config" and stored_cfg is not None:
            paths = _config_diff(json.loads(stored_cfg), json.loads(current_cfg))
            shown = ", ".join(paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")
            out.append(f"config ({shown or 'changed'})")
        elif key in ("recording", "window", "agents"):
            out.append(f"{key} ({before} -> {value})")
        else:
            out.append(key)
    return out


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay did."""

    events: int
    resumed_from: int
    decisions: int
    elapsed_s: float
    complete: str = ""
    """Set (to a one-line note) when the database already held this replay, finished."""

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
    recording_header: str | None = None,
    window: tuple[float | None, float | None] | None = None,
    scope: str = "all",
    recording_path: str | None = None,
    clock: SimClock | None = None,
    wrap_job: Callable[[JobCallback], JobCallback] | None = None,
) -> AsyncIterator[ReplayContext]:
    """Open ``db``, build and restore the engine, start scheduler, bus and components.

    Refuse a database holding a replay with another fingerprint (:func:`run_fingerprint`)
    naming what differs; raise :class:`ReplayComplete` if it holds this replay, finished (a
    ``recording_path`` is known by its content: :func:`content_digest`; ``clock``: the
    simulated clock to run on, a fresh one at ``start`` by default; ``wrap_job``: wraps the
    engine's job callback). On
    exit, stop the components, the bus and close the store (nothing is committed here:
    :meth:`ReplayDriver.finish` does it). A database error while starting is a
    :class:`ReplayError` naming the database.
    """
    store = await Store.open(str(db), busy_timeout=config.store.busy_timeout, scope=scope,
                             password_env=config.store.password_env)
    engine: Engine | None = None
    ready = False
    try:
        content = (None if recording_path is None
                   else await asyncio.to_thread(content_digest, recording_path))
        await _check_fingerprint(store, str(db), run_fingerprint(
            config, recording=recording_name, header=recording_header, window=window,
            agent_ids=agent_ids, content=content), _config_json(config), recording_path)
        clock = SimClock(start) if clock is None else clock
        engine = Engine(config, clock=clock, store=store, bus=bus)
        engine.stop_on_store_fault = True
        engine.add_equity_universe(config.markets.equity.assets)
        engine.build_agents(agent_ids)
        freeze_heap()
        offset = await engine.restore()
        resume_clock = engine.state.clock if offset else start
        if resume_clock > clock.now():
            clock.advance(resume_clock)
        await _season(store, str(db), config, clock.now())
        await store.begin_run(mode="replay", version=version, config=config.model_dump(mode="json"),
                              recording=recording_name, started_ts=clock.now())  # no wall time
        # Events stored after the checkpoint (background batches of an interrupted run, even
        # before its first checkpoint) are replayed again: drop them so none is stored twice.
        await store.delete_events_from(offset)
        if offset:
            log.info("replay resumed", offset=offset, clock=resume_clock)
        sched = SimScheduler(clock, config.scheduler.misfire_grace)
        on_job = engine.on_job if wrap_job is None else wrap_job(engine.on_job)
        for job_id, trigger in engine.triggers():
            sched.add_job(job_id, trigger, on_job, start=clock.now())
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


async def _season(store: Store, db: str, config: Config, ts: float) -> None:
    """Freeze the season's lineup, or check it against the frozen one (issue 32, point 1);
    a refusal is one line (:class:`~daemon.store.integrity.season.SeasonError`)."""
    from daemon.config.season import lineup
    from daemon.store.integrity.season import open_season

    line = await open_season(store, db, config.season.name, lineup(config),
                             amendments=config.season.amendments, ts=ts)
    if line:  # an amendment is worth a warning, a new season a line
        (log.warning if "amendment" in line else log.info)(line)


async def _check_fingerprint(store: Store, db: str, fp: dict[str, Any], cfg_json: str,
                             path: str | None = None) -> None:
    """Refuse a database holding another replay; raise :class:`ReplayComplete` if finished.

    A recording is the same when its content is (name and header alike are not enough: a
    header-only file is not the full one). An unfinished replay of a file that the new one
    extends (a download cut short, then complete) resumes.
    """
    stored = await store.get_meta(_META_FINGERPRINT)
    if stored is None:
        runs = await store.fetchall("SELECT recording FROM runs WHERE mode='replay' LIMIT 1")
        if runs and runs[0][0] != fp["recording"]:
            raise ReplayError(
                f"{db} holds a replay of {runs[0][0]}, not {fp['recording']}: use a new --db"
            )
        await store.set_meta({_META_FINGERPRINT: json.dumps(fp, sort_keys=True),
                              _META_CONFIG: cfg_json})
        return
    diff = _differences(json.loads(stored), fp, await store.get_meta(_META_CONFIG), cfg_json)
    if diff:
        raise ReplayError(f"{db} holds a replay with a different {'; '.join(diff)}: "
                          "use a new --db")
    done = await store.get_meta(_META_COMPLETE)
    before, now = json.loads(stored).get(_CONTENT), fp.get(_CONTENT)
    if before is not None and now is not None and before != now:
        extends = (done is None and path is not None and now["bytes"] > before["bytes"]
                   and await asyncio.to_thread(content_digest, path, before["bytes"]) == before)
        if not extends:
            raise ReplayError(
                f"{db} holds a {'finished' if done is not None else 'started'} replay of "
                f"{fp['recording']} with other content (sha256 {before['sha256'][:12]}, "
                f"{before['bytes']} bytes; this file: sha256 {now['sha256'][:12]}, "
                f"{now['bytes']} bytes): use a new --db")
    merged = json.loads(stored) | {k: v for k, v in fp.items() if v is not None}
    if merged != json.loads(stored):
        await store.set_meta({_META_FINGERPRINT: json.dumps(merged, sort_keys=True)})
    if done is not None:
        events = json.loads(done).get("events", "?")
        raise ReplayComplete(
            f"{db}: the replay of {fp['recording']} is already complete ({events} events); "
            f"its report: paperarena report --db {db}")


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

    async def step(self, i: int, ev: Event | list[Event], at: float | None = None) -> bool:
        """Apply event ``i`` (its recording offset); return False once past the window end.

        ``at``: the time the event is applied at, when not its ``ts`` (a bundle's replay
        applies a live event when the live run received it, keeping the source's ``ts``). A
        list: a live burst of prices, published as one batch as the live source did (the
        books' incremental marks then round as they did live), at ``at`` or its first ``ts``.
        """
        ts = at if at is not None else ev[0].ts if isinstance(ev, list) else ev.ts
        if ts > self.end:
            return False
        clock = self.clock
        engine = self.engine
        if ts > clock.now():
            self.decisions += await self.sched.run_until(ts, inclusive=False)
            self._check_store()
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
            if isinstance(ev, list):
                engine.bus.publish_batch(ev)
            elif ev.topic_class in self._conflating:
                engine.bus.publish_nowait(ev)  # prices: sync path, no coroutine per tick
            else:
                await engine.bus.publish(ev)
        engine.state.offset = i + 1
        self.events += 1
        store = engine.store
        if store.pending_events >= self._batch:
            self._check_store()
            store.flush_soon()
        return True

    def _check_store(self) -> None:
        """Stop the replay with one line once a store write failed (resume repeats it)."""
        fault = self.engine.job_write_failed or self.engine.store.fault
        if fault is not None:
            raise ReplayError(f"{fault}; stopped at event {self.engine.state.offset}: fix it "
                              "and run the same command again to resume")

    async def finish(self, header_end: float) -> None:
        """Run the jobs due up to the end, drain the bus and commit everything (end checkpoint);
        mark the replay complete."""
        clock = self.clock
        last = max(clock.now(), header_end) if self.end == math.inf else self.end
        self.decisions += await self.sched.run_until(last, inclusive=True)
        self._check_store()
        if last > clock.now():
            clock.advance(last)
        await self.engine.bus.drain()
        store = self.engine.store
        try:
            await self.engine.commit(RoundCommit())
            await score_engine(self.engine, clock.now(), final=True)  # every close is final
            await store.end_run(clock.now())  # simulated: a replay stores no wall time
            await store.set_meta({_META_COMPLETE: json.dumps(
                {"events": self.engine.state.offset, "clock": clock.now()})})
        except StoreWriteError as exc:
            raise ReplayError(f"{exc}: run the same command again to finish") from None


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
    accept_damaged: bool = False,
) -> ReplaySummary:
    """Replay ``recording`` into ``db``; ``speed`` None = as fast as possible, else a factor.

    A damaged (cut) recording raises :class:`ReplayError` after its last whole event unless
    ``accept_damaged``: then the replay ends there as if the recording ended there.
    """
    rec = str(recording)
    try:
        header = read_header(rec)
    except FileNotFoundError:
        raise ReplayError(f"{rec}: no such recording") from None
    start = header.start if window[0] is None else max(header.start, window[0])
    # A live recording cannot know its end when its header is written: without a window end,
    # replay to the last event (or the header's end, whichever is later).
    end = math.inf if window[1] is None else window[1]
    header_sha = hashlib.sha256(json.dumps(header.to_dict(), sort_keys=True).encode()).hexdigest()
    try:
        async with replay_session(config, db, recording_name=Path(rec).name, start=start,
                                  agent_ids=agent_ids, version=version, components=components,
                                  recording_header=header_sha, window=window,
                                  recording_path=rec) as ctx:
            t0 = time.perf_counter()
            driver = ReplayDriver(ctx, start=start, end=end, speed=speed)
            n = await _drive(driver, rec, ctx.offset, header.end, _want_progress(progress),
                             strict=not accept_damaged)
            return ReplaySummary(n, ctx.offset, driver.decisions, time.perf_counter() - t0)
    except ReplayComplete as done:
        return ReplaySummary(0, 0, 0, 0.0, complete=str(done))
    except StoreWriteError as exc:
        raise ReplayError(f"{exc}: fix it and run the same command again to resume") from None
    except RecordingDamaged as exc:
        raise ReplayError(f"{exc}: replayed up to there; replay the complete recording on the "
                          "same --db to finish (or pass --accept-damaged)") from None


async def _drive(driver: ReplayDriver, rec: str, offset: int, header_end: float,
                 show: bool, *, strict: bool = True) -> int:
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=count_events(rec), initial=offset, unit="ev", unit_scale=True,
                   file=sys.stderr, desc="replay", mininterval=0.5)
    n = 0
    try:
        for i, ev in iter_events(rec, start_offset=offset, strict=strict):
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
    """Stop the engine's bus if it was started, and the agents' own processes (even when
    stopping the bus fails: its error is raised after)."""
    if engine is not None:
        try:
            await engine.bus.stop()
        finally:
            await engine.close_agents()


def _want_progress(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    return sys.stderr.isatty()
