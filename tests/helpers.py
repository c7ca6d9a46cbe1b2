"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import random
import socket
import time
import urllib.request
from collections.abc import Callable
from datetime import date, timedelta

from daemon.core.bus import Bus
from daemon.core.events import Event

#: The least time a wait gives its condition: waits are bound by events, and their timeout is
#: only a guard against a hang, never a speed requirement (a loaded machine is slow).
HANG_GUARD = 60.0


async def wait_for(pred: Callable[[], bool], timeout: float = HANG_GUARD,
                   interval: float = 0.01) -> None:
    """Poll ``pred`` until true or raise TimeoutError after ``timeout`` seconds (at least
    :data:`HANG_GUARD`: a hang guard, not a speed requirement)."""
    deadline = time.monotonic() + max(timeout, HANG_GUARD)
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


class MaxRng(random.Random):
    """Make full-jitter backoff deterministic: always the cap."""

    def uniform(self, a: float, b: float) -> float:
        return b


def collecting_bus() -> tuple[Bus, list[Event]]:
    """Return a bus and the list every event published on it is appended to (by a tap)."""
    bus = Bus()
    seen: list[Event] = []
    bus.add_tap("#", seen.append)
    return bus, seen


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(base: str, timeout: float = 30.0) -> None:
    """Poll ``base``/readyz until it answers 200 (a daemon started in a subprocess)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:  # refused, or an HTTP error status (not ready yet)
            pass
        assert time.monotonic() < deadline, "daemon not ready"
        time.sleep(0.2)


def nyse_sessions(first: date, last: date) -> list[tuple[date, float, float]]:
    """Return (day, open, close as UNIX seconds) of every NYSE session from ``first`` to
    ``last``."""
    from daemon.timing.nyse import get_nyse_calendar

    cal, out, day = get_nyse_calendar(), [], first
    while day <= last:
        b = cal.session_bounds(day)
        if b is not None:
            out.append((day, b[0].timestamp(), b[1].timestamp()))
        day += timedelta(days=1)
    return out
