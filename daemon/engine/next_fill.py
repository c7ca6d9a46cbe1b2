"""Fill a round at the first prices after its decision (``fill_at = "next_price"``).

LiveTradeBench's state transition (its Eq. 2) rebalances the holdings decided at ``t`` at the
prices of ``t + 1``: ``q_{t+1} = v^-_{t+1} a_t / p_{t+1}``. A round of a market scheduled with
``fill_at = "next_price"`` stores its decisions at once (outcome ``ok``, reason
:data:`NEXT_PRICE_REASON`) and keeps each valid target pending; a price tap records, for every
asset a pending target buys or an agent holds, the first marking price stamped after the
decision. An agent's target is filled once each of its assets has that price, at those prices
(the fill is stamped with the latest of them), in one batch commit:

- in a replay, at the start of the market's next job (its next round or daily mark), so the fill
  happens at the same point of the event stream in every replay (byte-identical stores);
- live, as soon as the last price arrives (a task), and at the next job otherwise.

A later round of the market drops the targets still waiting (logged: their assets had no new
price); so does a restart (pending targets are kept in memory only). A target that needs no
asset (all cash, nothing held) is filled at the decision's own time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import structlog

from agents.base import CASH, PricePoint
from daemon.core.events import FillEvent, Market, PriceEvent
from daemon.core.price_columns import PriceColumns
from daemon.core.sparse_rows import fill_columns
from daemon.market.open_fill import at_prices
from daemon.market.state import MarketState
from daemon.store.records import FillRecord, RoundCommit
from daemon.timing.clock import Clock, SimClock
from scoring.ledger.batch import rebalance_many
from scoring.ledger.ledger import Book
from scoring.ledger.types import RebalanceRejected

log = structlog.get_logger(__name__)

#: The reason stored with a decision whose fill waits for the next prices.
NEXT_PRICE_REASON = "fills at the next price"


class FillHost(Protocol):
    """What the fills need from the engine (:class:`daemon.engine.engine.Engine` is one)."""

    clock: Clock
    books: dict[str, Book]
    state: MarketState
    book_lock: asyncio.Lock

    @property
    def bus(self) -> Any:
        """Return the bus the price taps are added to."""
        ...

    async def commit(self, rc: RoundCommit, *, locked: bool = False) -> None:
        """Commit ``rc`` with the books and a checkpoint, atomically."""
        ...

    def add_equity_rows(self, rc: RoundCommit, market: str, ts: float, kind: str) -> None:
        """Append a (value, cash) snapshot of every agent in ``market`` to ``rc``."""
        ...


@dataclass(frozen=True, slots=True)
class _Target:
    scheduled_ts: float
    weights: Mapping[str, float]
    needs: frozenset[str]
    """The assets that must have a price after the decision: bought or held."""


class NextPriceFills:
    """The targets of one market's latest round waiting for their next prices."""

    def __init__(self, engine: FillHost, market: str,
                 on_ready: Callable[[], Awaitable[None]]) -> None:
        """Watch ``market``'s prices on ``engine``'s bus; ``on_ready`` fills (live only)."""
        self.engine = engine
        self.market: Market = cast(Market, market)
        self._on_ready = on_ready
        self.decided_ts = 0.0
        self.pending: dict[str, _Target] = {}
        self.first: dict[str, PricePoint] = {}
        """Asset -> its first marking price stamped after :attr:`decided_ts`."""
        self._watched: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None
        engine.bus.add_tap("price.#", self.on_price, batch=self.on_prices,  # type: ignore[arg-type]
                           columns=self.on_price_columns)

    # -- the round's side -----------------------------------------------------------------------
    def defer(self, decided_ts: float, scheduled_ts: float,
              targets: list[tuple[str, Mapping[str, float], Mapping[str, float]]]) -> None:
        """Keep ``(agent, target weights, holdings)`` of a round decided at ``decided_ts``."""
        if self.pending:
            log.warning("next-price fills dropped: no price after their decision",
                        market=self.market, decided_ts=self.decided_ts,
                        agents=sorted(self.pending))
        self.decided_ts = decided_ts
        self.first = {}
        self.pending = {
            agent: _Target(scheduled_ts, dict(w), frozenset(
                [a for a, x in w.items() if a != CASH and x > 0.0]
                + [a for a, q in held.items() if q != 0.0]))
            for agent, w, held in targets
        }
        self._watched = frozenset().union(*(t.needs for t in self.pending.values()))

    # -- taps (synchronous, inline on the bus) --------------------------------------------------
    def _see(self, asset: str, ts: float, price: float) -> None:
        if asset in self._watched and ts > self.decided_ts and asset not in self.first:
            self.first[asset] = PricePoint(ts, price)
            if self.first.keys() >= self._watched:
                self._ready()

    def on_price(self, ev: PriceEvent) -> None:
        """Record ``ev`` if it is a watched asset's first price after the decision."""
        if ev.market != self.market or not self._watched or not ev.marks:
            return
        ts = ev.recv_ts if ev.recv_ts and ev.ts > ev.recv_ts else ev.ts
        self._see(ev.asset, ts, ev.price)

    def on_prices(self, events: list[PriceEvent]) -> None:
        """Do :meth:`on_price` for each event, in order."""
        if self._watched:
            for ev in events:
                self.on_price(ev)

    def on_price_columns(self, prices: PriceColumns) -> None:
        """Do :meth:`on_price` for a columnar batch (only while targets wait)."""
        if self._watched and prices.market == self.market:
            self.on_prices(prices.events())

    def _ready(self) -> None:
        """Fill now when live (a replay fills at the market's next job: deterministic)."""
        if isinstance(self.engine.clock, SimClock):
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._fill())

    async def _fill(self) -> None:
        await self._on_ready()

    # -- the fill -------------------------------------------------------------------------------
    async def settle_or_roll_back(self) -> tuple[list[FillRecord], list[FillEvent]]:
        """Do :meth:`settle`; if it fails (a store write), put the book back as it was and
        log it (the targets are dropped: their decisions stay stored without a fill)."""
        engine = self.engine
        before = engine.books[self.market].state()
        resolved = set(engine.state.resolved)
        try:
            return await self.settle()
        except Exception as exc:
            roll_back = getattr(engine, "_roll_back_book", None)
            if roll_back is not None:
                roll_back(self.market, before, resolved)
            log.error("next-price fills not stored", market=self.market, error=str(exc))
            return [], []

    async def settle(self) -> tuple[list[FillRecord], list[FillEvent]]:
        """Fill every pending target whose assets all have their next price; return the fills
        stored and their events (rejections are logged and dropped)."""
        ready = [(a, t) for a, t in sorted(self.pending.items()) if t.needs <= self.first.keys()]
        if not ready:
            return [], []
        engine = self.engine
        market = self.market
        book = engine.books[market]
        rc = RoundCommit()
        events: list[FillEvent] = []
        async with engine.book_lock:
            for agent, _ in ready:
                del self.pending[agent]
            self._watched = frozenset().union(*(t.needs for t in self.pending.values()))
            prices = {a: self.first[a] for a in frozenset().union(*(t.needs for _, t in ready))}
            with at_prices(book, prices):
                applied = rebalance_many(book, [(a, t.weights) for a, t in ready])
                last = self.decided_ts
                for i, (agent, target) in enumerate(ready):
                    res = applied[i]
                    if isinstance(res, RebalanceRejected):
                        log.warning("next-price fill rejected", agent=agent, market=market,
                                    reason=str(res))
                        continue
                    ts = max((prices[a].ts for a in target.needs), default=self.decided_ts)
                    last = max(last, ts)
                    trades = {a: q for a, q in zip(res.assets, res.trades.tolist(), strict=True)
                              if q != 0.0}
                    wjson, wsha, wassets, tjson = fill_columns(res.weights_after, trades)
                    fill = FillRecord(agent, market, target.scheduled_ts, ts, trades,
                                      res.traded_value, res.cost, res.value_before,
                                      res.value_after, res.weights_after, trades_json=tjson,
                                      weights_json=wjson, assets_sha256=wsha,
                                      assets_json=wassets)
                    rc.fills.append(fill)
                    events.append(FillEvent(
                        ts=ts, recv_ts=ts, agent=agent, market=market,
                        scheduled_ts=target.scheduled_ts, trades=trades,
                        traded_value=res.traded_value, cost=res.cost,
                        value_before=res.value_before, value_after=res.value_after,
                        weights=res.weights_after))
                engine.add_equity_rows(rc, market, last, "decision")
            await engine.commit(rc, locked=True)
        return rc.fills, events
