"""The event loop's heartbeat: how late it wakes up, the liveness answer of ``GET /healthz``.

A :class:`LoopLagMonitor` ticks every ``interval`` seconds on the event loop and records how late
each tick woke up (the last lag and the largest over a minute, reported to ``on_lag`` for the
metrics); the loop is unhealthy when it lags, or stops ticking, beyond ``unhealthy_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class LoopLagMonitor:
    """Measure how late a periodic heartbeat wakes up on the event loop."""

    def __init__(self, *, interval: float = 0.5, unhealthy_after: float = 2.0,
                 on_lag: Callable[[float, float], None] | None = None) -> None:
        """Tick every ``interval`` s; a lag or silence beyond ``unhealthy_after`` s is unhealthy."""
        self.interval = interval
        self.unhealthy_after = unhealthy_after
        self.lag = 0.0
        self.last_tick: float | None = None
        self._recent: deque[float] = deque(maxlen=max(1, int(60 / interval)))
        self._on_lag = on_lag
        self._task: asyncio.Task[None] | None = None

    @property
    def max_lag(self) -> float:
        """Return the largest lag over the last minute."""
        return max(self._recent, default=0.0)

    def start(self) -> None:
        """Start the heartbeat task."""
        if self._task is None:
            self.last_tick = time.monotonic()
            self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        """Stop the heartbeat task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            self.record(max(0.0, now - t0 - self.interval), now)

    def record(self, lag: float, now: float) -> None:
        """Record one heartbeat that woke ``lag`` s late at monotonic ``now``."""
        self.lag = lag
        self.last_tick = now
        self._recent.append(lag)
        if self._on_lag is not None:
            self._on_lag(lag, self.max_lag)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Return (healthy, details)."""
        now = time.monotonic()
        since = None if self.last_tick is None else now - self.last_tick
        problems = []
        if self._task is None or self._task.done():
            problems.append("loop monitor is not running")
        if since is not None and since > self.interval + self.unhealthy_after:
            problems.append(f"no loop heartbeat for {since:.1f}s")
        if self.lag > self.unhealthy_after:
            problems.append(f"event loop lagging by {self.lag:.2f}s")
        return not problems, {"loop_lag_s": round(self.lag, 6),
                              "loop_lag_max_1m_s": round(self.max_lag, 6),
                              "since_last_tick_s": None if since is None else round(since, 3),
                              "problems": problems}
