"""Clock abstraction shared by live and replay runs.

Live runs use :class:`LiveClock` (wall clock); replays use :class:`SimClock`, which only moves
when the replay driver advances it, so a replayed run is deterministic. Times are float epoch
seconds (UTC) at every interface.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "LiveClock", "SimClock", "utc_datetime"]

#: Longest single ``asyncio.sleep`` taken by :meth:`LiveClock.sleep_until`, in seconds.
MAX_SLEEP_CHUNK = 60.0


def utc_datetime(t: float) -> datetime:
    """Convert epoch seconds to a tz-aware UTC datetime."""
    return datetime.fromtimestamp(t, tz=UTC)


@runtime_checkable
class Clock(Protocol):
    """Source of the current time and of timed waits."""

    def now(self) -> float:
        """Return the current time as epoch seconds (UTC)."""
        ...

    async def sleep_until(self, t: float) -> None:
        """Wait until the clock reads at least ``t`` (epoch seconds)."""
        ...


class LiveClock:
    """Wall clock backed by :func:`time.time`."""

    def __init__(self, max_chunk: float = MAX_SLEEP_CHUNK) -> None:
        """Create a live clock that sleeps at most ``max_chunk`` seconds at a time."""
        if not max_chunk > 0:
            raise ValueError(f"max_chunk must be > 0, got {max_chunk!r}")
        self._max_chunk = max_chunk

    def now(self) -> float:
        """Return the wall-clock time as epoch seconds."""
        return time.time()

    async def sleep_until(self, t: float) -> None:
        """Sleep until wall time ``t``, in bounded chunks so wall-clock jumps are tolerated."""
        while True:
            remaining = t - time.time()
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, self._max_chunk))


class SimClock:
    """Simulated clock that moves only when :meth:`advance` is called."""

    def __init__(self, start: float) -> None:
        """Create a simulated clock reading ``start``."""
        if not math.isfinite(start):
            raise ValueError(f"start must be finite, got {start!r}")
        self._now = float(start)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        """Return the simulated time."""
        return self._now

    def advance(self, t: float) -> None:
        """Move the clock to ``t`` and wake sleepers due by then, earliest first.

        Raise ValueError if ``t`` is before the current time. Woken sleepers resume (in wake
        order) once the caller yields to the event loop, and they observe ``now() == t``.
        """
        if not math.isfinite(t):
            raise ValueError(f"cannot advance to non-finite time {t!r}")
        if t < self._now:
            raise ValueError(f"SimClock is monotonic: cannot move from {self._now!r} back to {t!r}")
        self._now = float(t)
        while self._sleepers and self._sleepers[0][0] <= t:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

    async def sleep_until(self, t: float) -> None:
        """Return at once if ``t`` has passed, else wait until the clock is advanced to ``t``."""
        if t <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (t, next(self._seq), fut))
        await fut

    def pending_sleepers(self) -> int:
        """Return how many sleepers are still waiting."""
        return sum(1 for _, _, fut in self._sleepers if not fut.done())
