"""The NYSE calendar: its sessions (open and close, early closes) from exchange_calendars, cached
and extended on demand, and New York time."""

from __future__ import annotations

import threading
import warnings
from datetime import UTC, date, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import exchange_calendars as xcals
import structlog

from daemon.timing.clock import utc_datetime

log = structlog.get_logger(__name__)

NY = ZoneInfo("America/New_York")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: First day of the calendar window (old enough to replay past data).
CALENDAR_START = date(2019, 1, 1)
#: How far past the latest requested day a (re)built calendar window reaches.
CALENDAR_HORIZON = timedelta(days=366)
#: Longest run of days a trigger scans for a fire time before giving up.
MAX_SCAN_DAYS = 45




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
