"""Triggers: when rounds fire, on NYSE sessions or around the clock.

A :class:`ScheduleSpec` (a market's ``[markets.*.schedule]``) becomes an APScheduler trigger
(:func:`make_trigger`): a :class:`NyseSessionTrigger` at times relative to the session's open or
close or at wall times on session days, or an interval or cron trigger around the clock.
:func:`fire_times` lists a trigger's fire times in a window.

Trigger convention (shared by every trigger here and by APScheduler's own triggers):
``get_next_fire_time(None, now)`` returns the first fire time ``>= now``;
``get_next_fire_time(prev, now)`` returns the first fire time ``> prev``. The second form does
not skip ahead to ``now``, so a scheduler walking from ``prev`` sees every fire time it passed
and can report each one as missed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo

import structlog
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from daemon.timing.clock import utc_datetime
from daemon.timing.nyse import EPOCH, MAX_SCAN_DAYS, NY, NyseCalendar, get_nyse_calendar

log = structlog.get_logger(__name__)

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
