"""Schedules: NYSE-session and 24/7 triggers, and the live and simulated schedulers that run them.

The same APScheduler trigger objects drive both modes: :class:`LiveScheduler` hands them to
APScheduler's :class:`~apscheduler.schedulers.asyncio.AsyncIOScheduler` on the wall clock, and
:class:`SimScheduler` evaluates them against a :class:`~daemon.timing.clock.SimClock` in replay, so
a
replayed run makes its decisions at exactly the times the live run would have.

Trigger convention (shared by every trigger here and by APScheduler's own triggers):
``get_next_fire_time(None, now)`` returns the first fire time ``>= now``;
``get_next_fire_time(prev, now)`` returns the first fire time ``> prev``. The second form does
not skip ahead to ``now``, so a scheduler walking from ``prev`` sees every fire time it passed
and can report each one as missed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import threading
import traceback
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo

import exchange_calendars as xcals
import structlog
from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
    JobExecutionEvent,
    JobSubmissionEvent,
)
from apscheduler.executors.base import BaseExecutor
from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from daemon.timing.clock import SimClock, utc_datetime

log = structlog.get_logger(__name__)

__all__ = [
    "NY",
    "Callback",
    "LiveScheduler",
    "NyseCalendar",
    "NyseSessionTrigger",
    "ScheduleSpec",
    "SimScheduler",
    "fire_times",
    "get_nyse_calendar",
    "make_trigger",
    "parse_wall_time",
]

NY = ZoneInfo("America/New_York")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: First day of the calendar window (old enough to replay past data).
CALENDAR_START = date(2019, 1, 1)
#: How far past the latest requested day a (re)built calendar window reaches.
CALENDAR_HORIZON = timedelta(days=366)
#: Longest run of days a trigger scans for a fire time before giving up.
MAX_SCAN_DAYS = 45

Callback = Callable[[str, float, bool], Awaitable[None]]
"""Job callback: ``(job_id, scheduled_time, missed)``."""


# --------------------------------------------------------------------------------------------
# NYSE calendar
# --------------------------------------------------------------------------------------------


class NyseCalendar:
    """Cached NYSE (XNYS) session table that extends its window on demand."""

    def __init__(self, start: date = CALENDAR_START, end: date | None = None) -> None:
        """Build the session table for ``[start, end]`` (end defaults to about a year ahead)."""
        if end is None:
            end = datetime.now(UTC).date() + CALENDAR_HORIZON
        if end < start:
            raise ValueError(f"calendar end {end} is before start {start}")
        self._lock = threading.Lock()
        self._start = start
        self._end = end
        self._sessions: dict[date, tuple[datetime, datetime]] = {}
        self._build(start, end)

    @property
    def window(self) -> tuple[date, date]:
        """Return the first and last day currently covered."""
        return self._start, self._end

    def _build(self, start: date, end: date) -> None:
        """Load sessions for ``[start, end]`` from exchange_calendars."""
        with warnings.catch_warnings():
            # exchange_calendars trips pandas deprecation warnings internally; not ours to fix.
            warnings.simplefilter("ignore", DeprecationWarning)
            cal = xcals.get_calendar("XNYS", start=start.isoformat(), end=end.isoformat())
        sched = cal.schedule
        sessions: dict[date, tuple[datetime, datetime]] = {}
        for label, open_ts, close_ts in zip(
            sched.index, sched["open"], sched["close"], strict=True
        ):
            sessions[label.date()] = (
                open_ts.to_pydatetime().astimezone(UTC),
                close_ts.to_pydatetime().astimezone(UTC),
            )
        self._sessions = sessions
        self._start, self._end = start, end
        log.debug("nyse_calendar_built", start=str(start), end=str(end), sessions=len(sessions))

    def _ensure(self, day: date) -> None:
        """Extend the window so that it covers ``day``."""
        if self._start <= day <= self._end:
            return
        with self._lock:
            if self._start <= day <= self._end:
                return
            start = min(self._start, date(day.year, 1, 1))
            end = max(self._end, day + CALENDAR_HORIZON)
            log.info("nyse_calendar_extend", day=str(day), start=str(start), end=str(end))
            self._build(start, end)

    def session_bounds(self, day: date) -> tuple[datetime, datetime] | None:
        """Return (open, close) in UTC for the session on ``day``, or None if closed all day."""
        self._ensure(day)
        return self._sessions.get(day)

    def is_session(self, day: date) -> bool:
        """Return whether ``day`` is an NYSE trading day."""
        return self.session_bounds(day) is not None

    def is_open(self, t: float) -> bool:
        """Return whether the market is open at epoch time ``t`` (open inclusive, close not)."""
        dt = utc_datetime(t)
        bounds = self.session_bounds(dt.astimezone(NY).date())
        return bounds is not None and bounds[0] <= dt < bounds[1]

    def next_session(self, after: datetime) -> tuple[datetime, datetime] | None:
        """Return (open, close) of the first session that closes after ``after``.

        That is the session in progress at ``after`` if there is one, else the next one.
        Return None only if no session exists within ``MAX_SCAN_DAYS`` days.
        """
        day = after.astimezone(NY).date()
        for _ in range(MAX_SCAN_DAYS):
            bounds = self.session_bounds(day)
            if bounds is not None and bounds[1] > after:
                return bounds
            day += timedelta(days=1)
        return None


@cache
def get_nyse_calendar() -> NyseCalendar:
    """Return the process-wide NYSE calendar."""
    return NyseCalendar()


# --------------------------------------------------------------------------------------------
# Time specs
# --------------------------------------------------------------------------------------------

_WALL_RE = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_REL_RE = re.compile(r"^(open|close)(?:([+-])(\d+)([smh]))?$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_wall_time(spec: str) -> time:
    """Parse ``"HH:MM"`` or ``"HH:MM:SS"`` into a naive wall time."""
    m = _WALL_RE.match(spec.strip())
    if m is None:
        raise ValueError(f"bad wall time {spec!r}: expected HH:MM or HH:MM:SS")
    hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
    try:
        return time(hour, minute, second)
    except ValueError as exc:
        raise ValueError(f"bad wall time {spec!r}: {exc}") from None


@dataclass(frozen=True)
class _RelativeTime:
    """A time relative to the session open or close."""

    anchor: Literal["open", "close"]
    offset: timedelta


@dataclass(frozen=True)
class _WallTime:
    """A wall-clock time in the trigger's timezone."""

    at: time


def _parse_session_time(spec: str) -> _RelativeTime | _WallTime:
    """Parse one session time spec: ``open[+-N(s|m|h)]``, ``close[+-N(s|m|h)]`` or ``HH:MM``."""
    text = spec.strip().lower().replace(" ", "")
    m = _REL_RE.match(text)
    if m is not None:
        offset = timedelta()
        if m[2] is not None:
            seconds = int(m[3]) * _UNIT_SECONDS[m[4]]
            offset = timedelta(seconds=seconds if m[2] == "+" else -seconds)
        return _RelativeTime(anchor=cast(Literal["open", "close"], m[1]), offset=offset)
    try:
        return _WallTime(parse_wall_time(text))
    except ValueError:
        raise ValueError(
            f"bad session time {spec!r}: expected open[+-N(s|m|h)], close[+-N(s|m|h)] or HH:MM"
        ) from None


# --------------------------------------------------------------------------------------------
# Triggers
# --------------------------------------------------------------------------------------------


class NyseSessionTrigger(BaseTrigger):
    """Fire at given times on NYSE session days only.

    Relative times (``open+30m``, ``close-5m``, ...) are clamped into ``[open, close]`` so they
    always fire inside the session (``close-30m`` is 12:30 ET on a 13:00 half day). Wall times
    (``HH:MM`` in ``timezone``) fire only if they fall inside ``[open, close]`` that day, so
    ``15:30`` is skipped on half days. Holidays and weekends never fire. Wall times are resolved
    with the tz database on each day, so DST never shifts them.
    """

    def __init__(
        self,
        times: Sequence[str],
        timezone: str = "America/New_York",
        calendar: NyseCalendar | None = None,
    ) -> None:
        """Create a trigger for ``times`` (wall times are read in ``timezone``)."""
        if isinstance(times, str):
            times = (times,)
        if not times:
            raise ValueError("NyseSessionTrigger needs at least one time")
        self.times: tuple[str, ...] = tuple(times)
        self.timezone = ZoneInfo(timezone)
        self._specs = tuple(_parse_session_time(s) for s in self.times)
        self._calendar = calendar

    @property
    def calendar(self) -> NyseCalendar:
        """Return the calendar in use (the process-wide one unless given)."""
        if self._calendar is None:
            self._calendar = get_nyse_calendar()
        return self._calendar

    def fires_on(self, day: date) -> list[datetime]:
        """Return the sorted UTC fire times in the NYSE session on ``day`` (empty if none)."""
        bounds = self.calendar.session_bounds(day)
        if bounds is None:
            return []
        open_, close = bounds
        out: set[datetime] = set()
        for spec in self._specs:
            if isinstance(spec, _RelativeTime):
                base = open_ if spec.anchor == "open" else close
                out.add(min(max(base + spec.offset, open_), close))
                continue
            # The session's NY date may be a neighbouring date in the trigger's timezone.
            for d in (day - timedelta(days=1), day, day + timedelta(days=1)):
                t = datetime.combine(d, spec.at, tzinfo=self.timezone).astimezone(UTC)
                if open_ <= t <= close:
                    out.add(t)
        return sorted(out)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """Return the first fire time after ``previous_fire_time`` (or at/after ``now``)."""
        floor = previous_fire_time if previous_fire_time is not None else now
        inclusive = previous_fire_time is None
        day = floor.astimezone(NY).date()
        for _ in range(MAX_SCAN_DAYS):
            for t in self.fires_on(day):
                if t > floor or (inclusive and t == floor):
                    return t
            day += timedelta(days=1)
        log.warning("nyse_trigger_never_fires", times=self.times, after=floor.isoformat())
        return None

    def __str__(self) -> str:
        """Describe the trigger."""
        return f"nyse[{','.join(self.times)} {self.timezone.key}]"

    def __repr__(self) -> str:
        """Describe the trigger for debugging."""
        return f"<NyseSessionTrigger times={self.times!r} timezone={self.timezone.key!r}>"


@dataclass(frozen=True)
class ScheduleSpec:
    """Declarative schedule: NYSE session times, a 24/7 interval, or a 24/7 daily wall time."""

    kind: Literal["nyse", "interval", "daily"]
    times: tuple[str, ...] = ("close-30m",)
    every_seconds: float = 3600.0
    at: str = "00:00"
    timezone: str = "America/New_York"

    def __post_init__(self) -> None:
        """Validate the spec."""
        if self.kind not in ("nyse", "interval", "daily"):
            raise ValueError(f"unknown schedule kind {self.kind!r}")
        if isinstance(self.times, str):
            object.__setattr__(self, "times", (self.times,))
        elif not isinstance(self.times, tuple):
            object.__setattr__(self, "times", tuple(self.times))
        ZoneInfo(self.timezone)
        if self.kind == "nyse":
            if not self.times:
                raise ValueError("nyse schedule needs at least one time")
            for spec in self.times:
                _parse_session_time(spec)
        elif self.kind == "interval":
            if not self.every_seconds > 0:
                raise ValueError(f"every_seconds must be > 0, got {self.every_seconds!r}")
        else:
            parse_wall_time(self.at)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ScheduleSpec:
        """Build a spec from a config mapping (lists become tuples, unknown keys rejected)."""
        unknown = set(data) - {"kind", "times", "every_seconds", "at", "timezone"}
        if unknown:
            raise ValueError(f"unknown schedule keys: {sorted(unknown)}")
        kwargs = dict(data)
        if "times" in kwargs:
            times = kwargs["times"]
            kwargs["times"] = (times,) if isinstance(times, str) else tuple(times)
        if "every_seconds" in kwargs:
            kwargs["every_seconds"] = float(kwargs["every_seconds"])
        return cls(**kwargs)


def make_trigger(spec: ScheduleSpec, *, calendar: NyseCalendar | None = None) -> BaseTrigger:
    """Build the APScheduler trigger for ``spec``.

    ``interval`` ignores ``timezone``: it is anchored at epoch 0 UTC, so fire times are the
    multiples of ``every_seconds`` (every hour on the hour) and stable across restarts.
    """
    if spec.kind == "nyse":
        return NyseSessionTrigger(spec.times, spec.timezone, calendar=calendar)
    if spec.kind == "interval":
        return IntervalTrigger(seconds=spec.every_seconds, start_date=EPOCH, timezone=UTC)
    at = parse_wall_time(spec.at)
    return CronTrigger(
        hour=at.hour, minute=at.minute, second=at.second, timezone=ZoneInfo(spec.timezone)
    )


def fire_times(trigger: BaseTrigger, start: float, end: float) -> list[float]:
    """Return every fire time of ``trigger`` in ``[start, end]`` as epoch seconds."""
    out: list[float] = []
    nxt = trigger.get_next_fire_time(None, utc_datetime(start))
    while nxt is not None:
        ts = nxt.timestamp()
        if ts > end:
            break
        if out and ts <= out[-1]:
            raise RuntimeError(f"trigger {trigger} did not advance past {utc_datetime(out[-1])}")
        out.append(ts)
        nxt = trigger.get_next_fire_time(nxt, nxt)
    return out


# --------------------------------------------------------------------------------------------
# Simulated scheduler (replay)
# --------------------------------------------------------------------------------------------


@dataclass
class _SimJob:
    """A job registered with the simulated scheduler."""

    job_id: str
    trigger: BaseTrigger
    callback: Callback
    next_fire: datetime | None = field(default=None)


class SimScheduler:
    """Run triggers against a SimClock; fire jobs in (time, insertion order), deterministically.

    A fire time that the clock has already passed (someone advanced it directly) is run with the
    clock left where it is if it is late by at most ``misfire_grace`` seconds, and reported with
    ``missed=True`` otherwise, mirroring the live policy.
    """

    def __init__(self, clock: SimClock, misfire_grace: float) -> None:
        """Create a scheduler driven by ``clock``."""
        if misfire_grace < 0:
            raise ValueError(f"misfire_grace must be >= 0, got {misfire_grace!r}")
        self.clock = clock
        self.misfire_grace = float(misfire_grace)
        self._jobs: dict[str, _SimJob] = {}  # insertion order breaks ties
        self._running = False

    @property
    def job_ids(self) -> list[str]:
        """Return job ids in insertion order."""
        return list(self._jobs)

    def add_job(
        self, job_id: str, trigger: BaseTrigger, callback: Callback, *, start: float
    ) -> None:
        """Register a job whose first fire time is the first one at or after ``start``."""
        if job_id in self._jobs:
            raise ValueError(f"duplicate job id {job_id!r}")
        job = _SimJob(job_id, trigger, callback)
        job.next_fire = trigger.get_next_fire_time(None, utc_datetime(start))
        self._jobs[job_id] = job

    def remove_job(self, job_id: str) -> None:
        """Unregister a job (KeyError if unknown)."""
        del self._jobs[job_id]

    def next_fire_time(self) -> float | None:
        """Return the earliest pending fire time, or None if no job will fire again."""
        job = self._next_job()
        return None if job is None or job.next_fire is None else job.next_fire.timestamp()

    def _next_job(self) -> _SimJob | None:
        """Return the job that fires next (ties broken by insertion order)."""
        best: _SimJob | None = None
        for job in self._jobs.values():
            if job.next_fire is None:
                continue
            if best is None or best.next_fire is None or job.next_fire < best.next_fire:
                best = job
        return best

    async def run_until(self, t: float, *, inclusive: bool) -> int:
        """Fire every job due before ``t`` (or at ``t`` if inclusive), in time order.

        Before each fire the clock is advanced to its fire time, then
        ``callback(job_id, fire_time, missed)`` is awaited. Return the number of callbacks
        awaited. A callback's exception propagates; the job's next fire time is already set.
        """
        if self._running:
            raise RuntimeError("SimScheduler.run_until is not re-entrant")
        self._running = True
        count = 0
        try:
            while True:
                job = self._next_job()
                if job is None or job.next_fire is None:
                    break
                fire_dt = job.next_fire
                fire = fire_dt.timestamp()
                if fire > t or (fire == t and not inclusive):
                    break
                now = self.clock.now()
                missed = False
                if fire >= now:
                    self.clock.advance(fire)
                else:
                    missed = now - fire > self.misfire_grace
                    log.warning(
                        "sim_fire_late", job_id=job.job_id, fire=fire, now=now, missed=missed
                    )
                job.next_fire = job.trigger.get_next_fire_time(
                    fire_dt, utc_datetime(max(fire, self.clock.now()))
                )
                await job.callback(job.job_id, fire, missed)
                count += 1
        finally:
            self._running = False
        return count

    def resume_from(self, t: float) -> None:
        """Reposition every job so that its next fire time is the first one at or after ``t``."""
        now = utc_datetime(t)
        for job in self._jobs.values():
            job.next_fire = job.trigger.get_next_fire_time(None, now)


# --------------------------------------------------------------------------------------------
# Live scheduler (APScheduler)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fire:
    """APScheduler job function: run the callback for one on-time fire."""

    job_id: str
    callback: Callback

    async def __call__(self, scheduled_time: float | None = None) -> None:
        """Await the callback; ``scheduled_time`` is supplied by the executor."""
        if scheduled_time is None:  # run by a foreign executor: best effort
            scheduled_time = datetime.now(UTC).timestamp()
        await self.callback(self.job_id, scheduled_time, False)


class _ScheduledTimeExecutor(BaseExecutor):
    """AsyncIO executor that passes each run's scheduled time to the job function.

    Mirrors APScheduler's ``run_coroutine_job``: a run time late by more than ``misfire_grace``
    seconds is not run but yields ``EVENT_JOB_MISSED``. The grace lives here, not in the job's
    ``misfire_grace_time``, because APScheduler 3.11 accepts only whole seconds there.
    """

    def __init__(self, misfire_grace: float) -> None:
        """Create the executor with a (fractional) grace in seconds."""
        super().__init__()
        self.misfire_grace = timedelta(seconds=misfire_grace)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending: set[asyncio.Task[list[JobExecutionEvent]]] = set()

    def start(self, scheduler: Any, alias: str) -> None:
        """Bind to the scheduler's (running) event loop."""
        super().start(scheduler, alias)
        self._loop = asyncio.get_running_loop()

    def shutdown(self, wait: bool = True) -> None:
        """Cancel in-flight runs unless ``wait`` (awaiting them is left to the caller)."""
        if not wait:
            for task in self.pending:
                task.cancel()

    def _do_submit_job(self, job: Job, run_times: list[datetime]) -> None:
        """Start a task that runs ``job`` for each of ``run_times``."""
        assert self._loop is not None, "executor not started"
        task = self._loop.create_task(self._run(job, run_times), name=f"job:{job.id}")
        self.pending.add(task)
        task.add_done_callback(functools.partial(self._done, job.id))

    def _done(self, job_id: str, task: asyncio.Task[list[JobExecutionEvent]]) -> None:
        """Release the instance slot and dispatch the run's events."""
        self.pending.discard(task)
        if task.cancelled():
            self._run_job_success(job_id, [])
            return
        exc = task.exception()
        if exc is not None:
            self._run_job_error(job_id, exc, exc.__traceback__)
        else:
            self._run_job_success(job_id, task.result())

    async def _run(self, job: Job, run_times: list[datetime]) -> list[JobExecutionEvent]:
        """Run ``job`` once per on-time run time; report late ones as missed."""
        events: list[JobExecutionEvent] = []
        alias = getattr(job, "_jobstore_alias", "default")
        for run_time in run_times:
            if datetime.now(UTC) - run_time > self.misfire_grace:
                events.append(JobExecutionEvent(EVENT_JOB_MISSED, job.id, alias, run_time))
                continue
            try:
                result = job.func(*job.args, scheduled_time=run_time.timestamp(), **job.kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                log.exception("job_failed", job_id=job.id, scheduled=run_time.isoformat())
                events.append(
                    JobExecutionEvent(
                        EVENT_JOB_ERROR,
                        job.id,
                        alias,
                        run_time,
                        exception=exc,
                        traceback=traceback.format_exc(),
                    )
                )
            else:
                events.append(
                    JobExecutionEvent(EVENT_JOB_EXECUTED, job.id, alias, run_time, retval=result)
                )
        return events


class LiveScheduler:
    """Drive the same triggers with APScheduler's AsyncIOScheduler on the live clock.

    Misfire policy: a fire late by more than ``misfire_grace`` seconds is never run; the
    callback is awaited with ``missed=True`` instead (via ``EVENT_JOB_MISSED``). A fire skipped
    because the previous run of the job is still going (``max_instances=1``) is reported the same
    way. ``coalesce=False``, so each missed fire time is reported individually.
    """

    def __init__(self, misfire_grace: float) -> None:
        """Create a stopped scheduler with a misfire grace of ``misfire_grace`` seconds."""
        if not misfire_grace > 0:
            raise ValueError(f"misfire_grace must be > 0, got {misfire_grace!r}")
        self.misfire_grace = float(misfire_grace)
        self._executor = _ScheduledTimeExecutor(self.misfire_grace)
        # misfire_grace_time=None: APScheduler itself never drops a run; the executor applies
        # the (fractional) grace and reports late fires as EVENT_JOB_MISSED.
        self._scheduler = AsyncIOScheduler(
            timezone=UTC,
            executors={"default": self._executor},
            job_defaults={"coalesce": False, "max_instances": 1, "misfire_grace_time": None},
        )
        self._scheduler.add_listener(self._on_skipped, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        self._callbacks: dict[str, Callback] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> bool:
        """Return whether the scheduler is running."""
        return bool(self._scheduler.running)

    def add_job(
        self, job_id: str, trigger: BaseTrigger, callback: Callback, *, start: float | None = None
    ) -> None:
        """Register a job; its first fire time is the first one at or after ``start`` (or now).

        A ``start`` in the past makes APScheduler catch up from there under the misfire policy.
        """
        if job_id in self._callbacks:
            raise ValueError(f"duplicate job id {job_id!r}")
        extra: dict[str, Any] = {}
        if start is not None:
            first = trigger.get_next_fire_time(None, utc_datetime(start))
            if first is None:
                log.warning("job_never_fires", job_id=job_id, trigger=str(trigger))
                return
            extra["next_run_time"] = first
        self._callbacks[job_id] = callback
        self._scheduler.add_job(
            _Fire(job_id, callback),
            trigger=trigger,
            id=job_id,
            name=job_id,
            coalesce=False,
            max_instances=1,
            misfire_grace_time=None,
            **extra,
        )

    def next_fire_time(self, job_id: str) -> float | None:
        """Return the job's next scheduled fire time (None if unknown or not yet computed)."""
        job = self._scheduler.get_job(job_id)
        nxt = getattr(job, "next_run_time", None) if job is not None else None
        return None if nxt is None else nxt.timestamp()

    def start(self) -> None:
        """Start scheduling (must be called from the running event loop)."""
        self._scheduler.start()
        log.info("live_scheduler_started", jobs=list(self._callbacks))

    async def shutdown(self, wait: bool = True) -> None:
        """Stop scheduling new fires; await in-flight runs if ``wait``, else cancel them."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)
            # AsyncIOScheduler defers the real shutdown to the loop; let it run.
            for _ in range(100):
                if not self._scheduler.running:
                    break
                await asyncio.sleep(0)
        while self._executor.pending or self._tasks:
            pending: set[asyncio.Future[Any]] = set(self._executor.pending) | set(self._tasks)
            if not wait:
                for task in pending:
                    task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        log.info("live_scheduler_stopped")

    def _on_skipped(self, event: JobEvent) -> None:
        """Report fires APScheduler did not run (missed or max-instances) as missed."""
        if isinstance(event, JobExecutionEvent):
            run_times: Iterable[datetime] = [event.scheduled_run_time]
        elif isinstance(event, JobSubmissionEvent):
            run_times = event.scheduled_run_times
        else:
            return
        callback = self._callbacks.get(event.job_id)
        if callback is None:
            return
        for run_time in run_times:
            scheduled = run_time.timestamp()
            log.warning("job_missed", job_id=event.job_id, scheduled=run_time.isoformat())
            self._spawn(callback(event.job_id, scheduled, True))

    def _spawn(self, coro: Awaitable[None]) -> None:
        """Run ``coro`` as a tracked task, logging its failure."""

        async def runner() -> None:
            try:
                await coro
            except Exception:
                log.exception("missed_callback_failed")

        task = asyncio.get_running_loop().create_task(runner())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def backfill_missed(
        self,
        job_id: str,
        trigger: BaseTrigger,
        callback: Callback,
        last_done: float | None,
        now: float,
    ) -> list[float]:
        """Settle fire times lost to downtime; return the ones reported missed.

        Fire times in ``(last_done, now - grace)`` are reported with ``missed=True``; those in
        ``[now - grace, now)`` are run now (late but within grace) with ``missed=False``.
        ``now`` itself is excluded: register the live job with ``start=now`` to pick it up.
        With ``last_done=None`` (no history) only the within-grace window is considered.
        """
        cutoff = now - self.misfire_grace
        low = cutoff if last_done is None else last_done
        missed: list[float] = []
        for ft in fire_times(trigger, low, now):
            if (last_done is not None and ft <= last_done) or ft >= now:
                continue
            if ft < cutoff:
                missed.append(ft)
                log.warning("job_missed_during_downtime", job_id=job_id, scheduled=ft)
                await callback(job_id, ft, True)
            else:
                log.info("job_run_late_within_grace", job_id=job_id, scheduled=ft, now=now)
                await callback(job_id, ft, False)
        return missed
