"""Keep the cyclic garbage collector's full scans out of decision rounds (issue 31, point 3).

A round allocates per agent (observations, allocations, fills, records); what survives it goes
to the oldest generation, which CPython re-scans in full each time it grew by a quarter. The
start-up heap is frozen once (:func:`daemon.engine.engine.freeze_heap`), but everything rounds
keep since then is not: at 5,000 agents one or two full scans of 10-25 ms fell inside every
round, collecting nothing, while prices waited.

While any round runs, the collector keeps collecting its young generations but never starts a
full scan. When the last running round ends, the young generations are collected (cycles made by
the round freed) and what survives is frozen like the start-up heap: the per-agent state rounds
build joins the permanent generation as it is created, so the full scans that still run between
rounds only ever see what was allocated since the last round. Objects that die later are still
freed by reference counting; only a reference cycle kept past the end of its round is never
collected.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_full_collection"]

#: The oldest generation's threshold while a round runs: never reached.
_NEVER = 1 << 30


class _RoundGc:
    """How many rounds run now, and the thresholds to restore when none does."""

    def __init__(self) -> None:
        self.running = 0
        self.saved: tuple[int, int, int] | None = None

    def enter(self) -> None:
        """Stop full collections (the first round to start)."""
        if self.running == 0:
            t0, t1, t2 = gc.get_threshold()
            self.saved = (t0, t1, t2)
            gc.set_threshold(t0, t1, _NEVER)
        self.running += 1

    def leave(self) -> None:
        """Collect the young generations, freeze the survivors and restore the thresholds
        (the last round to end)."""
        self.running -= 1
        if self.running == 0 and self.saved is not None:
            gc.collect(1)
            gc.freeze()
            gc.set_threshold(*self.saved)
            self.saved = None


_STATE = _RoundGc()


@contextmanager
def no_full_collection() -> Iterator[None]:
    """Run the body (a round) without full garbage collections; freeze what it left after."""
    _STATE.enter()
    try:
        yield
    finally:
        _STATE.leave()
