"""Tests for daemon.timing.schedule: NYSE calendar, triggers, SimScheduler and LiveScheduler.

Why one module over 500 lines: the calendar, the triggers and both schedulers are checked against
the same session tables and fire-time cases.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest

from daemon.timing.clock import SimClock
from daemon.timing.nyse import NY, NyseCalendar, get_nyse_calendar
from daemon.timing.schedule import LiveScheduler, SimScheduler
from daemon.timing.triggers import NyseSessionTrigger, ScheduleSpec, fire_times, make_trigger
from tests.helpers import HANG_GUARD

HOUR = 3600.0


def ny(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> float:
    """Return epoch seconds for a New York wall time."""
    return datetime(y, mo, d, h, mi, tzinfo=NY).timestamp()


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> float:
    """Return epoch seconds for a UTC wall time."""
    return datetime(y, mo, d, h, mi, s, tzinfo=UTC).timestamp()


def as_utc(ts: list[float]) -> list[datetime]:
    """Convert epoch seconds to UTC datetimes (readable assertion failures)."""
    return [datetime.fromtimestamp(t, UTC) for t in ts]


def nyse(*times: str, tz: str = "America/New_York") -> NyseSessionTrigger:
    """Build an NYSE trigger on the shared calendar."""
    return NyseSessionTrigger(times, timezone=tz, calendar=get_nyse_calendar())


# ------------------------------------------------------------------------------------------
# Calendar
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "open_utc", "close_utc"),
    [
        (date(2026, 3, 6), (14, 30), (21, 0)),  # Fri before the March switch: EST
        (date(2026, 3, 9), (13, 30), (20, 0)),  # Mon after: EDT
        (date(2026, 10, 30), (13, 30), (20, 0)),  # Fri before the November switch: EDT
        (date(2026, 11, 2), (14, 30), (21, 0)),  # Mon after: EST
        (date(2026, 11, 27), (14, 30), (18, 0)),  # day after Thanksgiving: 13:00 ET close
    ],
)
def test_session_bounds(day: date, open_utc: tuple[int, int], close_utc: tuple[int, int]) -> None:
    bounds = get_nyse_calendar().session_bounds(day)
    assert bounds is not None
    open_, close = bounds
    assert open_ == datetime(day.year, day.month, day.day, *open_utc, tzinfo=UTC)
    assert close == datetime(day.year, day.month, day.day, *close_utc, tzinfo=UTC)
    assert open_.astimezone(NY).strftime("%H:%M") == "09:30"


@pytest.mark.parametrize(
    "day",
    [
        date(2026, 11, 26),  # Thanksgiving
        date(2026, 12, 25),  # Christmas (a Friday)
        date(2026, 11, 28),  # Saturday
        date(2026, 11, 29),  # Sunday
    ],
)
def test_closed_days(day: date) -> None:
    cal = get_nyse_calendar()
    assert cal.session_bounds(day) is None
    assert not cal.is_session(day)
    assert not cal.is_open(ny(day.year, day.month, day.day, 12, 0))


def test_is_open_boundaries() -> None:
    cal = get_nyse_calendar()
    assert not cal.is_open(ny(2026, 11, 25, 9, 29))
    assert cal.is_open(ny(2026, 11, 25, 9, 30))
    assert cal.is_open(ny(2026, 11, 25, 15, 59))
    assert not cal.is_open(ny(2026, 11, 25, 16, 0))
    assert cal.is_open(ny(2026, 11, 27, 12, 59))
    assert not cal.is_open(ny(2026, 11, 27, 13, 0))  # half day


def test_next_session() -> None:
    cal = get_nyse_calendar()
    wed_evening = datetime(2026, 11, 25, 17, 0, tzinfo=NY)
    assert cal.next_session(wed_evening) == cal.session_bounds(date(2026, 11, 27))
    in_session = datetime(2026, 11, 27, 11, 0, tzinfo=NY)
    assert cal.next_session(in_session) == cal.session_bounds(date(2026, 11, 27))
    fri_after_close = datetime(2026, 11, 27, 13, 0, tzinfo=NY)
    assert cal.next_session(fri_after_close) == cal.session_bounds(date(2026, 11, 30))


def test_calendar_extends_window_both_ways() -> None:
    cal = NyseCalendar(start=date(2024, 1, 1), end=date(2024, 12, 31))
    assert cal.window == (date(2024, 1, 1), date(2024, 12, 31))
    assert cal.session_bounds(date(2026, 11, 26)) is None
    assert cal.session_bounds(date(2026, 11, 27)) is not None
    start, end = cal.window
    assert start == date(2024, 1, 1)
    assert end >= date(2027, 11, 27)
    assert cal.session_bounds(date(2023, 7, 3)) is not None  # half day, earlier than the window
    assert cal.window[0] <= date(2023, 7, 3)
    assert cal.session_bounds(date(2024, 12, 25)) is None  # old data kept


# ------------------------------------------------------------------------------------------
# NYSE trigger
# ------------------------------------------------------------------------------------------


def test_wall_time_survives_march_dst_switch() -> None:
    fires = fire_times(nyse("10:00"), ny(2026, 3, 5), ny(2026, 3, 11))
    assert as_utc(fires) == [
        datetime(2026, 3, 5, 15, 0, tzinfo=UTC),
        datetime(2026, 3, 6, 15, 0, tzinfo=UTC),  # Fri, EST
        datetime(2026, 3, 9, 14, 0, tzinfo=UTC),  # Mon, EDT
        datetime(2026, 3, 10, 14, 0, tzinfo=UTC),
    ]
    assert {datetime.fromtimestamp(t, NY).strftime("%H:%M") for t in fires} == {"10:00"}


def test_wall_time_survives_november_dst_switch() -> None:
    fires = fire_times(nyse("10:00"), ny(2026, 10, 29), ny(2026, 11, 4))
    assert as_utc(fires) == [
        datetime(2026, 10, 29, 14, 0, tzinfo=UTC),
        datetime(2026, 10, 30, 14, 0, tzinfo=UTC),  # Fri, EDT
        datetime(2026, 11, 2, 15, 0, tzinfo=UTC),  # Mon, EST
        datetime(2026, 11, 3, 15, 0, tzinfo=UTC),
    ]


def test_relative_times_follow_dst() -> None:
    fires = fire_times(nyse("open+30m", "close-30m"), ny(2026, 3, 6), ny(2026, 3, 10))
    assert [datetime.fromtimestamp(t, NY).strftime("%m-%d %H:%M") for t in fires] == [
        "03-06 10:00",
        "03-06 15:30",
        "03-09 10:00",
        "03-09 15:30",
    ]


def test_half_day_and_thanksgiving() -> None:
    start, end = ny(2026, 11, 25), ny(2026, 12, 1)
    close_30 = fire_times(nyse("close-30m"), start, end)
    assert [datetime.fromtimestamp(t, NY).strftime("%m-%d %H:%M") for t in close_30] == [
        "11-25 15:30",
        "11-27 12:30",  # 13:00 close
        "11-30 15:30",
    ]
    wall = fire_times(nyse("15:30"), start, end)
    assert [datetime.fromtimestamp(t, NY).strftime("%m-%d %H:%M") for t in wall] == [
        "11-25 15:30",
        "11-30 15:30",  # skipped on the 11-27 half day, none on Thanksgiving
    ]
    close = fire_times(nyse("close", "close-5m"), ny(2026, 11, 27), ny(2026, 11, 28))
    assert [datetime.fromtimestamp(t, NY).strftime("%H:%M") for t in close] == ["12:55", "13:00"]


def test_relative_times_are_clamped_into_the_session() -> None:
    fires = fire_times(nyse("open+5h"), ny(2026, 11, 27), ny(2026, 11, 28))
    assert [datetime.fromtimestamp(t, NY).strftime("%H:%M") for t in fires] == ["13:00"]


@pytest.mark.parametrize("day", [date(2026, 11, 26), date(2026, 12, 25)])
def test_holidays_never_fire(day: date) -> None:
    trig = nyse("open", "open+30m", "10:00", "12:00", "close-30m", "close")
    assert (
        fire_times(trig, ny(day.year, day.month, day.day), ny(day.year, day.month, day.day, 23))
        == []
    )
    assert trig.fires_on(day) == []


def test_weekends_never_fire() -> None:
    trig = nyse("open", "12:00", "close")
    assert fire_times(trig, ny(2026, 11, 28), ny(2026, 11, 29, 23, 59)) == []
    fires = fire_times(trig, ny(2026, 1, 1), ny(2026, 12, 31, 23, 59))
    cal = get_nyse_calendar()
    days = {datetime.fromtimestamp(t, NY).date() for t in fires}
    assert all(d.weekday() < 5 and cal.is_session(d) for d in days)
    assert len(fires) == 3 * len(days)
    assert date(2026, 11, 27) in days


def test_other_trigger_timezone_uses_real_tz_rules() -> None:
    # 15:30 London is 10:30 New York, except in the weeks the two DST switches disagree.
    trig = nyse("15:30", tz="Europe/London")
    mar10 = fire_times(trig, ny(2026, 3, 10), ny(2026, 3, 11))  # US on EDT, UK still on GMT
    mar31 = fire_times(trig, ny(2026, 3, 31), ny(2026, 4, 1))  # both on summer time
    assert [datetime.fromtimestamp(t, NY).strftime("%H:%M") for t in mar10] == ["11:30"]
    assert [datetime.fromtimestamp(t, NY).strftime("%H:%M") for t in mar31] == ["10:30"]


def test_get_next_fire_time_contract() -> None:
    trig = nyse("10:00")
    ten = datetime(2026, 11, 25, 10, 0, tzinfo=NY)
    # prev None: the first fire at or after now (inclusive).
    assert trig.get_next_fire_time(None, ten) == ten
    # prev given: strictly after prev (Thursday is Thanksgiving).
    nxt = trig.get_next_fire_time(ten, ten)
    assert nxt == datetime(2026, 11, 27, 10, 0, tzinfo=NY)
    # prev given with now far ahead: no skipping, so a scheduler sees every passed fire time.
    later = datetime(2026, 12, 10, tzinfo=NY)
    assert trig.get_next_fire_time(ten, later) == nxt
    assert nxt is not None and nxt.tzinfo is not None


@pytest.mark.parametrize("bad", ["open+", "close-5x", "25:00", "noon", "12:60", ""])
def test_bad_time_specs_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        nyse(bad)


# ------------------------------------------------------------------------------------------
# 24/7 triggers and specs
# ------------------------------------------------------------------------------------------


def test_interval_on_the_hour_including_weekends() -> None:
    trig = make_trigger(ScheduleSpec(kind="interval", every_seconds=HOUR))
    start, end = utc(2026, 11, 28, 0, 17), utc(2026, 11, 29, 23, 59)  # Sat-Sun
    fires = fire_times(trig, start, end)
    assert len(fires) == 47
    assert fires[0] == utc(2026, 11, 28, 1)
    assert all(t % HOUR == 0 for t in fires)
    assert all(b - a == HOUR for a, b in itertools.pairwise(fires))
    # Stable across "restarts": another trigger and start give the same grid.
    other = make_trigger(ScheduleSpec(kind="interval", every_seconds=HOUR))
    assert fire_times(other, utc(2026, 11, 28, 5, 59, 59), end) == [
        t for t in fires if t >= utc(2026, 11, 28, 6)
    ]
    # A start exactly on the grid is included.
    assert fire_times(trig, utc(2026, 11, 28, 6), utc(2026, 11, 28, 6))[0] == utc(2026, 11, 28, 6)


def test_interval_sub_hour_grid() -> None:
    trig = make_trigger(ScheduleSpec(kind="interval", every_seconds=900))
    fires = fire_times(trig, utc(2026, 11, 28, 10, 1), utc(2026, 11, 28, 11, 0))
    assert as_utc(fires) == [datetime(2026, 11, 28, 10, m, tzinfo=UTC) for m in (15, 30, 45)] + [
        datetime(2026, 11, 28, 11, 0, tzinfo=UTC)
    ]


def test_daily_at_midnight_utc() -> None:
    trig = make_trigger(ScheduleSpec(kind="daily", at="00:00", timezone="UTC"))
    fires = fire_times(trig, utc(2026, 11, 27, 0, 0), utc(2026, 11, 30, 12, 0))
    assert as_utc(fires) == [datetime(2026, 11, d, tzinfo=UTC) for d in (27, 28, 29, 30)]


def test_daily_wall_time_across_dst() -> None:
    trig = make_trigger(ScheduleSpec(kind="daily", at="10:00"))  # New York
    fires = fire_times(trig, ny(2026, 3, 7), ny(2026, 3, 9, 23))
    assert as_utc(fires) == [
        datetime(2026, 3, 7, 15, 0, tzinfo=UTC),
        datetime(2026, 3, 8, 14, 0, tzinfo=UTC),  # Sunday of the switch: still 10:00 local
        datetime(2026, 3, 9, 14, 0, tzinfo=UTC),
    ]


def test_schedule_spec_validation_and_mapping() -> None:
    spec = ScheduleSpec.from_mapping({"kind": "nyse", "times": ["open+30m", "close-30m"]})
    assert spec.times == ("open+30m", "close-30m")
    assert isinstance(make_trigger(spec), NyseSessionTrigger)
    assert ScheduleSpec(kind="nyse").times == ("close-30m",)
    with pytest.raises(ValueError):
        ScheduleSpec(kind="interval", every_seconds=0)
    with pytest.raises(ValueError):
        ScheduleSpec(kind="daily", at="24:00")
    with pytest.raises(ValueError):
        ScheduleSpec(kind="weekly")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ScheduleSpec(kind="nyse", times=())
    with pytest.raises(ValueError):
        ScheduleSpec.from_mapping({"kind": "interval", "every": 60})
    with pytest.raises(KeyError):
        ScheduleSpec(kind="daily", timezone="Mars/Olympus")


# ------------------------------------------------------------------------------------------
# SimScheduler
# ------------------------------------------------------------------------------------------


class Recorder:
    """Collect callback invocations with the clock reading at call time."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float, bool, float]] = []

    async def __call__(self, job_id: str, scheduled: float, missed: bool) -> None:
        self.calls.append((job_id, scheduled, missed, self.clock.now()))


async def test_sim_fires_in_time_order_with_clock_at_fire_time() -> None:
    start, end = utc(2026, 11, 23), utc(2026, 11, 28)
    clock = SimClock(start)
    rec = Recorder(clock)
    sched = SimScheduler(clock, misfire_grace=60.0)
    six_hourly = make_trigger(ScheduleSpec(kind="interval", every_seconds=6 * HOUR))
    session = nyse("open+30m", "close-30m")
    sched.add_job("six", six_hourly, rec, start=start)
    sched.add_job("nyse", session, rec, start=start)

    n = await sched.run_until(end, inclusive=True)

    expected = sorted(
        [(t, "six") for t in fire_times(six_hourly, start, end)]
        + [(t, "nyse") for t in fire_times(session, start, end)]
    )
    assert n == len(expected) == len(rec.calls)
    assert [(t, j) for j, t, _, _ in rec.calls] == expected
    assert all(now == t and not missed for _, t, missed, now in rec.calls)
    assert clock.now() == expected[-1][0]
    nxt = sched.next_fire_time()
    assert nxt is not None and nxt > end


async def test_sim_run_until_boundary() -> None:
    start = utc(2026, 11, 28)
    boundary = utc(2026, 11, 28, 5)
    clock = SimClock(start - 1)
    rec = Recorder(clock)
    sched = SimScheduler(clock, misfire_grace=0.0)
    sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), rec, start=start)
    assert sched.next_fire_time() == start

    assert await sched.run_until(boundary, inclusive=False) == 5  # 00:00 .. 04:00
    assert [t for _, t, _, _ in rec.calls][-1] == utc(2026, 11, 28, 4)
    assert clock.now() == utc(2026, 11, 28, 4)
    assert sched.next_fire_time() == boundary

    assert await sched.run_until(boundary, inclusive=False) == 0
    assert await sched.run_until(boundary, inclusive=True) == 1
    assert rec.calls[-1][1] == boundary
    assert clock.now() == boundary
    assert await sched.run_until(boundary, inclusive=True) == 0


async def test_sim_same_time_fires_in_insertion_order() -> None:
    start = utc(2026, 11, 28)
    clock = SimClock(start)
    rec = Recorder(clock)
    sched = SimScheduler(clock, misfire_grace=0.0)
    sched.add_job("b", make_trigger(ScheduleSpec(kind="interval")), rec, start=start)
    sched.add_job(
        "a", make_trigger(ScheduleSpec(kind="daily", at="00:00", timezone="UTC")), rec, start=start
    )
    sched.add_job(
        "c", make_trigger(ScheduleSpec(kind="interval", every_seconds=1800)), rec, start=start
    )
    await sched.run_until(utc(2026, 11, 28, 1), inclusive=True)
    assert [(j, t) for j, t, _, _ in rec.calls] == [
        ("b", start),
        ("a", start),
        ("c", start),
        ("c", start + 1800),
        ("b", start + HOUR),
        ("c", start + HOUR),
    ]


async def _replay(events: list[float]) -> list[tuple[str, float, bool, float, int]]:
    """Replay events the way the daemon does; return decisions with the events they saw."""
    clock = SimClock(events[0])
    sched = SimScheduler(clock, misfire_grace=1.0)
    seen: list[float] = []
    log: list[tuple[str, float, bool, float, int]] = []

    async def decide(job_id: str, scheduled: float, missed: bool) -> None:
        assert all(e <= scheduled for e in seen)  # nothing from the future
        log.append((job_id, scheduled, missed, clock.now(), len(seen)))

    sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), decide, start=events[0])
    sched.add_job("nyse", nyse("open+30m", "close-30m"), decide, start=events[0])
    sched.add_job(
        "daily", make_trigger(ScheduleSpec(kind="daily", at="16:00")), decide, start=events[0]
    )
    for e in events:
        await sched.run_until(e, inclusive=False)
        clock.advance(e)
        seen.append(e)
    await sched.run_until(events[-1], inclusive=True)
    return log


async def test_sim_replay_is_deterministic_and_causal() -> None:
    base = ny(2026, 11, 24, 9, 0)
    # Irregular event times, some exactly on fire times (10:00 is open+30m and a full hour).
    events = [base + i * 97.0 for i in range(3000)] + [ny(2026, 11, 27, 12, 30)]
    events += [ny(2026, 11, 27, 12, 30) + 600 * i for i in range(1, 20)]
    events.sort()
    first = await _replay(events)
    second = await _replay(events)
    assert first == second
    assert len(first) > 50
    for job_id, scheduled, missed, now, n_seen in first:
        assert not missed
        assert now == scheduled
        # A decision at T has seen exactly the events with ts <= T.
        assert n_seen == sum(1 for e in events if e <= scheduled), (job_id, scheduled)
    half_day = [s for j, s, _, _, _ in first if j == "nyse" and s >= ny(2026, 11, 27)]
    assert ny(2026, 11, 27, 12, 30) in half_day


async def test_sim_misfire_when_clock_jumped() -> None:
    start = utc(2026, 11, 28)
    clock = SimClock(start)
    rec = Recorder(clock)
    sched = SimScheduler(clock, misfire_grace=30.0)
    sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), rec, start=start + 1)
    clock.advance(utc(2026, 11, 28, 2, 0) + 10)  # driver jumped the clock past two fires
    n = await sched.run_until(utc(2026, 11, 28, 3), inclusive=True)
    assert n == 3
    assert [(t, missed) for _, t, missed, _ in rec.calls] == [
        (utc(2026, 11, 28, 1), True),  # late by 1h10s > grace
        (utc(2026, 11, 28, 2), False),  # late by 10 s: run, clock not moved back
        (utc(2026, 11, 28, 3), False),
    ]
    assert rec.calls[1][3] == utc(2026, 11, 28, 2) + 10
    assert clock.now() == utc(2026, 11, 28, 3)


async def test_sim_resume_from_and_errors() -> None:
    start = utc(2026, 11, 28)
    clock = SimClock(start)
    sched = SimScheduler(clock, misfire_grace=0.0)

    async def boom(job_id: str, scheduled: float, missed: bool) -> None:
        raise RuntimeError("agent failed")

    sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), boom, start=start)
    with pytest.raises(ValueError):
        sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), boom, start=start)
    with pytest.raises(RuntimeError, match="agent failed"):
        await sched.run_until(start + 10 * HOUR, inclusive=False)
    assert sched.next_fire_time() == start + HOUR  # state advanced before the callback ran
    sched.resume_from(start + 5.5 * HOUR)
    assert sched.next_fire_time() == start + 6 * HOUR
    sched.remove_job("hourly")
    assert sched.next_fire_time() is None
    assert await sched.run_until(start + 100 * HOUR, inclusive=True) == 0


# ------------------------------------------------------------------------------------------
# LiveScheduler
# ------------------------------------------------------------------------------------------


class LiveRecorder:
    """Collect live callbacks with the wall time they ran at."""

    def __init__(self, hold_first: float = 0.0) -> None:
        self.calls: list[tuple[str, float, bool, float]] = []
        self.hold_first = hold_first
        self.ran = asyncio.Event()

    async def __call__(self, job_id: str, scheduled: float, missed: bool) -> None:
        self.calls.append((job_id, scheduled, missed, time.time()))
        if not missed:
            self.ran.set()
            if self.hold_first:
                hold, self.hold_first = self.hold_first, 0.0
                await asyncio.sleep(hold)

    def runs(self) -> list[float]:
        return [t for _, t, missed, _ in self.calls if not missed]

    def missed(self) -> list[float]:
        return [t for _, t, missed, _ in self.calls if missed]


async def _wait_for(pred: object, timeout: float) -> None:
    """Poll ``pred()`` until true or fail after ``timeout`` seconds."""
    assert callable(pred)
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_live_blocked_loop_reports_missed_and_never_runs_late() -> None:
    grace = 0.2
    sched = LiveScheduler(misfire_grace=grace)
    rec = LiveRecorder()
    sched.add_job("tick", make_trigger(ScheduleSpec(kind="interval", every_seconds=1.0)), rec)
    sched.start()
    try:
        await asyncio.wait_for(rec.ran.wait(), timeout=HANG_GUARD)
        first = rec.runs()[0]
        time.sleep(1.5)  # block the loop well past first+1 (by more than the grace)
        await _wait_for(lambda: first + 2 in rec.runs(), timeout=HANG_GUARD)
    finally:
        await sched.shutdown()
    assert first + 1 in rec.missed()
    assert first + 1 not in rec.runs()
    for _, scheduled, missed, ran_at in rec.calls:
        if not missed:
            assert ran_at - scheduled <= grace + 0.05
    # After shutdown nothing fires any more.
    count = len(rec.calls)
    await asyncio.sleep(1.1)
    assert len(rec.calls) == count
    assert not sched.running


async def test_live_overlapping_run_is_reported_missed() -> None:
    sched = LiveScheduler(misfire_grace=0.2)
    rec = LiveRecorder(hold_first=1.3)  # first run still going when the next fire comes
    sched.add_job("tick", make_trigger(ScheduleSpec(kind="interval", every_seconds=1.0)), rec)
    sched.start()
    try:
        await asyncio.wait_for(rec.ran.wait(), timeout=HANG_GUARD)
        first = rec.runs()[0]
        await _wait_for(lambda: first + 2 in rec.runs(), timeout=HANG_GUARD)
    finally:
        await sched.shutdown()
    assert first + 1 in rec.missed()
    assert first + 1 not in rec.runs()


async def test_live_add_job_with_start() -> None:
    sched = LiveScheduler(misfire_grace=1.0)
    rec = LiveRecorder()
    later = time.time() + 10 * HOUR
    sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), rec, start=later)
    with pytest.raises(ValueError):
        sched.add_job("hourly", make_trigger(ScheduleSpec(kind="interval")), rec)
    sched.start()
    try:
        nxt = sched.next_fire_time("hourly")
        assert nxt is not None and later <= nxt < later + HOUR and nxt % HOUR == 0
        assert sched.next_fire_time("nope") is None
    finally:
        await sched.shutdown(wait=False)
    assert rec.calls == []


async def test_backfill_missed_after_downtime() -> None:
    sched = LiveScheduler(misfire_grace=60.0)
    rec = LiveRecorder()
    trig = make_trigger(ScheduleSpec(kind="interval"))
    last_done = utc(2026, 11, 28, 10)
    now = utc(2026, 11, 28, 14, 0) + 30  # 14:00 is late by 30 s: within grace
    missed = await sched.backfill_missed("hourly", trig, rec, last_done, now)
    assert missed == [utc(2026, 11, 28, h) for h in (11, 12, 13)]
    assert [(t, m) for _, t, m, _ in rec.calls] == [
        (utc(2026, 11, 28, 11), True),
        (utc(2026, 11, 28, 12), True),
        (utc(2026, 11, 28, 13), True),
        (utc(2026, 11, 28, 14), False),
    ]


async def test_backfill_missed_edges() -> None:
    sched = LiveScheduler(misfire_grace=60.0)
    trig = make_trigger(ScheduleSpec(kind="interval"))
    rec = LiveRecorder()
    # Nothing lost: last run was the latest fire time.
    assert (
        await sched.backfill_missed(
            "h", trig, rec, utc(2026, 11, 28, 14), utc(2026, 11, 28, 14, 30)
        )
        == []
    )
    assert rec.calls == []
    # A fire exactly at ``now`` is left to the live job (add_job(start=now)).
    now = utc(2026, 11, 28, 15)
    assert await sched.backfill_missed("h", trig, rec, utc(2026, 11, 28, 14), now) == []
    assert rec.calls == []
    # No history: nothing is reported missed, a fire within grace still runs.
    assert await sched.backfill_missed("h", trig, rec, None, now + 59) == []
    assert [(t, m) for _, t, m, _ in rec.calls] == [(now, False)]
    # NYSE trigger across a long weekend: Thanksgiving and the weekend report nothing.
    rec2 = LiveRecorder()
    got = await sched.backfill_missed(
        "close", nyse("close-30m"), rec2, ny(2026, 11, 25, 15, 30), ny(2026, 11, 30, 16, 0)
    )
    assert got == [ny(2026, 11, 27, 12, 30), ny(2026, 11, 30, 15, 30)]


def test_live_scheduler_rejects_zero_grace() -> None:
    with pytest.raises(ValueError):
        LiveScheduler(misfire_grace=0.0)


def test_zoneinfo_sanity() -> None:
    assert ZoneInfo("America/New_York") == NY
