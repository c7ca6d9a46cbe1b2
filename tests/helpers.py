"""Small helpers shared by the feed tests."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from daemon.bus import Bus
from daemon.events import Event


async def wait_for(pred: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> None:
    """Poll ``pred`` until true or raise TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
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
