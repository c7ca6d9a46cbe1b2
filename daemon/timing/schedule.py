"""Schedulers: the live and simulated schedulers that run the triggers of
:mod:`daemon.timing.triggers`.

The same APScheduler trigger objects drive both modes: :class:`LiveScheduler` hands them to
APScheduler's :class:`~apscheduler.schedulers.asyncio.AsyncIOScheduler` on the wall clock, and
:class:`SimScheduler` evaluates them against a :class:`~daemon.timing.clock.SimClock` in replay,
so a replayed run makes its decisions at exactly the times the live run would have."""

from __future__ import annotations

import asyncio
import functools
import inspect
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

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

from daemon.timing.clock import SimClock, utc_datetime
from daemon.timing.triggers import fire_times

log = structlog.get_logger(__name__)

Callback = Callable[[str, float, bool], Awaitable[None]]
"""Job callback: ``(job_id, scheduled_time, missed)``."""

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
