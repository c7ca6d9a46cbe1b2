"""Tests for daemon.timing.clock."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from daemon.timing.clock import Clock, LiveClock, SimClock, utc_datetime
from tests.helpers import HANG_GUARD


async def _settle() -> None:
    """Let woken tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_utc_datetime() -> None:
    dt = utc_datetime(1_800_000_000.5)
    assert dt == datetime(2027, 1, 15, 8, 0, 0, 500_000, tzinfo=UTC)
    assert dt.tzinfo is UTC
    assert dt.timestamp() == 1_800_000_000.5


def test_clocks_satisfy_protocol() -> None:
    assert isinstance(LiveClock(), Clock)
    assert isinstance(SimClock(0.0), Clock)


def test_simclock_now_and_monotonic() -> None:
    clock = SimClock(100.0)
    assert clock.now() == 100.0
    clock.advance(100.0)  # same time is allowed
    clock.advance(150.5)
    assert clock.now() == 150.5
    with pytest.raises(ValueError):
        clock.advance(150.4)
    assert clock.now() == 150.5
    with pytest.raises(ValueError):
        clock.advance(float("nan"))


async def test_simclock_advance_wakes_sleepers_in_time_order() -> None:
    clock = SimClock(0.0)
    woke: list[tuple[float, float]] = []

    async def sleeper(t: float) -> None:
        await clock.sleep_until(t)
        woke.append((t, clock.now()))

    tasks = [asyncio.create_task(sleeper(t)) for t in (5.0, 3.0, 4.0, 3.0, 10.0)]
    await _settle()
    assert woke == []
    assert clock.pending_sleepers() == 5

    clock.advance(2.0)
    await _settle()
    assert woke == []

    clock.advance(4.0)
    await _settle()
    assert [t for t, _ in woke] == [3.0, 3.0, 4.0]
    assert all(now == 4.0 for _, now in woke)
    assert clock.pending_sleepers() == 2

    clock.advance(20.0)
    await _settle()
    assert [t for t, _ in woke] == [3.0, 3.0, 4.0, 5.0, 10.0]
    await asyncio.gather(*tasks)
    assert clock.pending_sleepers() == 0


async def test_simclock_sleep_until_past_returns_immediately() -> None:
    clock = SimClock(50.0)
    # No advance happens: these would hang if they waited.
    await asyncio.wait_for(clock.sleep_until(10.0), timeout=HANG_GUARD)
    await asyncio.wait_for(clock.sleep_until(50.0), timeout=HANG_GUARD)
    assert clock.pending_sleepers() == 0


async def test_simclock_cancelled_sleeper_is_skipped() -> None:
    clock = SimClock(0.0)
    task = asyncio.create_task(clock.sleep_until(5.0))
    await _settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.advance(10.0)  # must not raise on the cancelled future
    assert clock.pending_sleepers() == 0


async def test_liveclock_sleep_until() -> None:
    clock = LiveClock(max_chunk=0.02)
    start = clock.now()
    assert abs(start - time.time()) < 1.0
    target = start + 0.1
    await clock.sleep_until(target)
    assert clock.now() >= target
    # A past time returns without sleeping at all: no other callback gets to run meanwhile.
    slept: list[bool] = []
    asyncio.get_running_loop().call_soon(slept.append, True)
    await clock.sleep_until(start - 10.0)
    assert not slept


def test_liveclock_rejects_bad_chunk() -> None:
    with pytest.raises(ValueError):
        LiveClock(max_chunk=0.0)
