"""Recorded daily OHLCV bars per asset (history recordings' ``BarEvent``), look-ahead free.

:class:`DailyBars` keeps the last ``days`` bars of each asset of the universe, oldest first, one
per session day. A bar that is not usable (:func:`feeds.daily_bars.bar_problem`: a NaN, a high
below the low, a range that does not hold the open or close, a negative volume) is logged in one
line and never kept; so is a bar older than the asset's last one (out of order). A recording
without bars leaves it empty, so observations (and their hashes) are as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from agents.base import DailyBar
from daemon.core.events import BarEvent
from feeds.daily_bars import Bar, bar_problem

log = structlog.get_logger(__name__)


class DailyBars:
    """Daily OHLCV bars per asset (a bus tap, :meth:`on_bar`), checkpointed with the state."""

    def __init__(self, days: int, known: Callable[[str, str], bool]) -> None:
        """Keep ``days`` bars per asset; ``known(market, asset)``: the asset is in a book."""
        self.days = days
        self.known = known
        self.bars: dict[str, dict[str, deque[DailyBar]]] = {}

    def on_bar(self, ev: BarEvent) -> None:
        """Keep one recorded bar (refused in one log line when it is not usable)."""
        if not self.known(ev.market, ev.asset):
            return
        why = bar_problem(Bar(ev.ts, ev.open, ev.close, ev.high, ev.low, ev.volume))
        ts = min(ev.ts, ev.recv_ts) if ev.recv_ts else ev.ts
        q = self.bars.setdefault(ev.market, {}).get(ev.asset)
        if why is None and q and (q[-1].ts >= ts or q[-1].day >= ev.day):
            why = f"not after the last bar kept ({q[-1].day})"
        if why is not None:
            log.warning("bar refused", asset=ev.asset, day=ev.day, why=why)
            return
        if q is None:
            q = self.bars[ev.market][ev.asset] = deque(maxlen=self.days)
        q.append(DailyBar(ts, ev.day, ev.open, ev.high, ev.low, ev.close, ev.volume))

    def view(self, market: str, assets: tuple[str, ...], decision_ts: float
             ) -> dict[str, tuple[DailyBar, ...]]:
        """Return each asset's bars complete by ``decision_ts`` (assets without any: absent)."""
        own = self.bars.get(market)
        if not own:
            return {}
        out: dict[str, tuple[DailyBar, ...]] = {}
        for a in assets:
            q = own.get(a)
            if q:
                seen = tuple(b for b in q if b.ts <= decision_ts)
                if seen:
                    out[a] = seen
        return out

    def state(self) -> dict[str, Any]:
        """Return a JSON-ready snapshot (empty when no bar was kept)."""
        return {m: {a: [b.to_list() for b in q] for a, q in sorted(own.items())}
                for m, own in sorted(self.bars.items()) if own}

    def restore(self, st: dict[str, Any]) -> None:
        """Load a snapshot made by :meth:`state`."""
        self.bars = {m: {a: deque((DailyBar.from_list(b) for b in items), maxlen=self.days)
                         for a, items in own.items()} for m, own in st.items()}
