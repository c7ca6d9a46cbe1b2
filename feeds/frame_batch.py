"""Publish the prices of frames that arrive together as one bus batch.

A socket read hands the read loop every frame that arrived with it without suspending: those
frames' conflating events (prices) wait here and go to :meth:`~daemon.bus.Bus.publish_batch` in
one call when the loop next suspends (a callback scheduled with ``call_soon``), when
:data:`MAX_BATCH_FRAMES` frames wait, or before any other event, so every tap (price cache,
books, store, alerts) runs once per burst and events keep their order. Books, equity and peaks
are current after every batch.
"""

from __future__ import annotations

import asyncio
from typing import Final

from daemon.bus import Bus
from daemon.events import Event

__all__ = ["MAX_BATCH_FRAMES", "FrameBatcher"]

#: Most frames whose prices wait for one batch. Bounds the added latency: a burst's first frame
#: waits while at most this many frames are decoded (about 2 ms of decoding at 64).
MAX_BATCH_FRAMES: Final[int] = 64


class FrameBatcher:
    """Collect the conflating events of a burst of frames and publish them as one batch."""

    __slots__ = ("_bus", "_frames", "_handle", "_loop", "_pending", "max_frames")

    def __init__(self, bus: Bus, *, max_frames: int = MAX_BATCH_FRAMES) -> None:
        """Batch for ``bus``; publish at the latest when ``max_frames`` frames wait."""
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        self._bus = bus
        self._loop = asyncio.get_running_loop()
        self._pending: list[Event] = []
        self._frames = 0
        self._handle: asyncio.Handle | None = None
        self.max_frames = max_frames

    @property
    def waiting(self) -> int:
        """Return how many events wait for the next batch."""
        return len(self._pending)

    def add(self, events: list[Event]) -> None:
        """Queue one frame's conflating events (publish the batch if it is full)."""
        self._pending.extend(events)
        self._frames += 1
        if self._frames >= self.max_frames:
            self.flush()
        elif self._handle is None:
            self._handle = self._loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self._handle = None
        self.flush()

    def flush(self) -> None:
        """Publish what waits, in order, as one batch (nothing if nothing waits)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._frames = 0
        self._bus.publish_batch(pending)

    def close(self) -> None:
        """Publish what waits and drop the scheduled flush (the read loop ends)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.flush()
