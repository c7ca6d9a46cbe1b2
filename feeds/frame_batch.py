"""Publish the prices of frames that arrive together as one bus batch.

A socket read hands the read loop every frame that arrived with it without suspending: those
frames' conflating events (prices) wait here and go to :meth:`~daemon.core.bus.Bus.publish_batch` in
one call when the loop next suspends (a callback scheduled with ``call_soon``), when
:data:`MAX_BATCH_FRAMES` frames wait, or before any other event, so every tap (price cache,
books, store, alerts) runs once per burst and events keep their order. Books, equity and peaks
are current after every batch.

A columnar adapter (:class:`~feeds.source_contract.ColumnDecoder`) appends its prices to
:attr:`FrameBatcher.prices` instead; they go to :meth:`~daemon.core.bus.Bus.publish_columns` at the
same moments (:meth:`FrameBatcher.frame_done` after each frame that added prices).
"""

from __future__ import annotations

import asyncio
from typing import Final

from daemon.core.bus import Bus
from daemon.core.events import Event
from daemon.core.price_columns import PriceColumns

__all__ = ["MAX_BATCH_FRAMES", "FrameBatcher"]

#: Most frames whose prices wait for one batch. Bounds the added latency: a burst's first frame
#: waits while at most this many frames are decoded (about 2 ms of decoding at 64).
MAX_BATCH_FRAMES: Final[int] = 64


class FrameBatcher:
    """Collect the conflating events of a burst of frames and publish them as one batch."""

    __slots__ = ("_bus", "_frames", "_handle", "_loop", "_pending", "max_frames", "prices")

    def __init__(self, bus: Bus, *, max_frames: int = MAX_BATCH_FRAMES,
                 prices: PriceColumns | None = None) -> None:
        """Batch for ``bus``; publish at the latest when ``max_frames`` frames wait.
        ``prices``: the columns a columnar adapter fills (published by :meth:`flush`)."""
        if max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {max_frames}")
        self._bus = bus
        self._loop = asyncio.get_running_loop()
        self._pending: list[Event] = []
        self._frames = 0
        self._handle: asyncio.Handle | None = None
        self.max_frames = max_frames
        self.prices = prices

    @property
    def waiting(self) -> int:
        """Return how many events (or prices) wait for the next batch."""
        return len(self._pending) + (len(self.prices) if self.prices is not None else 0)

    def add(self, events: list[Event]) -> None:
        """Queue one frame's conflating events (publish the batch if it is full)."""
        self._pending.extend(events)
        self.frame_done()

    def frame_done(self) -> None:
        """Count one frame whose prices wait (publish the batch if it is full)."""
        self._frames += 1
        if self._frames >= self.max_frames:
            self.flush()
        elif self._handle is None:
            self._handle = self._loop.call_soon(self._scheduled)

    def _scheduled(self) -> None:
        self._handle = None
        self.flush()

    def flush(self, prices: int | None = None) -> None:
        """Publish what waits, in order, as one batch (nothing if nothing waits); of the
        columns only the first ``prices`` if given (the rest came after what comes next)."""
        pending = self._pending
        if pending:
            self._pending = []
            self._frames = 0
            self._bus.publish_batch(pending)
        cols = self.prices
        if cols is not None and len(cols) and prices != 0:
            self._frames = 0
            self._bus.publish_columns(cols.take(prices))

    def close(self) -> None:
        """Publish what waits and drop the scheduled flush (the read loop ends)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.flush()
