"""Free what a round built a slice at a time, yielding to the event loop between slices.

At 5,000 agents a round holds tens of thousands of objects (observations, answers, records,
events, rebalance results). Freed all at once when the round's frame ends they took 30-65 ms
of one event-loop turn, during which no price was handled (issue 31 point 3). Emptied here a
slice at a time, after the round's commit and publication, with the round's pause between
slices, they are freed by reference counting as before, only not in one turn. Nothing is
read or written: the round's results and what it stored are the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["SLICE", "release"]

#: Items dropped between two pauses (a pause yields only once its time budget is spent).
SLICE = 128


async def release(pause: Callable[[], Awaitable[None]], *containers: list[Any] | dict[Any, Any]
                  ) -> None:
    """Empty each list or dict of ``containers`` from its end, ``SLICE`` items at a time,
    awaiting ``pause`` after each slice (the items go where their last reference went)."""
    for items in containers:
        if isinstance(items, list):
            while items:
                del items[-SLICE:]
                await pause()
        else:
            while items:
                for _ in range(min(SLICE, len(items))):
                    items.popitem()
                await pause()
