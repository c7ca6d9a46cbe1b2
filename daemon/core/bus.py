"""In-process asyncio event bus with hierarchical topics and per-class delivery policies.

- Topics are dot-separated; subscription patterns use MQTT-style wildcards: ``+`` matches one
  level, ``#`` (last) matches any number of levels (``price.#``, ``decision.+``).
- *Taps* are synchronous callables run inline by :meth:`Bus.publish`, in registration order, before
  any subscriber sees the event. The price cache and the ledger's incremental mark are taps, so
  the cache is always updated before handlers run.
- Each subscriber has its own bounded queue and consumer task. Conflating topic classes (prices by
  default) keep only the latest event per key while the subscriber is behind; memory is bounded by
  ``max_keys`` (the oldest key is dropped and counted beyond it). Every other class is delivered in
  full: a full queue makes ``publish`` wait (backpressure), it never drops.
- A failing handler is logged and counted; delivery to it and to others goes on.
- Guard: a price event whose price, bid or ask is not a finite number >= 0 is dropped before
  any tap or subscriber, counted in ``invalid_prices`` and logged (rate-limited); invalid points
  of a history event are removed. Whatever a source or a recording sends, no cache, ledger or
  history ever holds a NaN or infinite price.

Why one module over 500 lines: the bus's delivery classes, queues, taps and guard share one routing
table and its invariants (taps before subscribers, no drop outside conflation); routes are
:mod:`.price_routes`, columns :mod:`.price_columns`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import msgspec
import structlog

from daemon.core.events import PRICE, Event, HistoryEvent, PriceEvent
from daemon.core.price_columns import PriceColumns
from daemon.core.price_routes import price_pattern_reach

log = structlog.get_logger(__name__)

Handler = Callable[[Any], Awaitable[None] | None]
Tap = Callable[[Event], None]
BatchTap = Callable[[list[Event]], None]
ColumnsTap = Callable[[PriceColumns], None]

_INF = math.inf
DEFAULT_QUEUE_SIZE = 10_000
DEFAULT_MAX_KEYS = 100_000
DEFAULT_CONFLATING: frozenset[str] = frozenset({PRICE})


def _finite_non_negative(x: float) -> bool:
    return 0.0 <= x < math.inf


def guard_prices(event: Event) -> Event | None:
    """Return ``event`` fit for the caches: None for an invalid price, history without bad points.

    A price (and a bid / ask when present) must be a finite number >= 0, as the ledger requires;
    rejecting non-positive quotes is the decoders' job.
    """
    if isinstance(event, PriceEvent):
        ok = _finite_non_negative(event.price) and all(
            q is None or _finite_non_negative(q) for q in (event.bid, event.ask)
        )
        return event if ok else None
    if isinstance(event, HistoryEvent):
        good = tuple(p for p in event.points if math.isfinite(p[0]) and _finite_non_negative(p[1]))
        if len(good) != len(event.points):
            return msgspec.structs.replace(event, points=good)
    return event


def topic_matches(pattern: str, topic: str) -> bool:
    """Return whether ``topic`` matches an MQTT-style ``pattern`` (``+`` one level, ``#`` rest)."""
    p_parts = pattern.split(".")
    t_parts = topic.split(".")
    for i, p in enumerate(p_parts):
        if p == "#":
            return True
        if i >= len(t_parts):
            return False
        if p != "+" and p != t_parts[i]:
            return False
    return len(p_parts) == len(t_parts)


@dataclass(slots=True)
class SubscriptionStats:
    """Delivery counters of one subscriber."""

    delivered: int = 0
    conflated: int = 0
    dropped: int = 0
    failed: int = 0
    blocked: int = 0
    by_class_conflated: dict[str, int] = field(default_factory=dict)
    by_class_dropped: dict[str, int] = field(default_factory=dict)


class Subscription:
    """One subscriber: a pattern, a handler, a bounded queue and the task that drains it."""

    def __init__(
        self,
        bus: Bus,
        name: str,
        patterns: tuple[str, ...],
        handler: Handler,
        *,
        maxsize: int,
        max_keys: int,
        batch: bool,
    ) -> None:
        self.bus = bus
        self.name = name
        self.patterns = patterns
        self.handler = handler
        self.maxsize = maxsize
        self.max_keys = max_keys
        self.batch = batch
        self.stats = SubscriptionStats()
        self._is_async = inspect.iscoroutinefunction(handler)
        self._pending: OrderedDict[Any, Event] = OrderedDict()
        self._n_reliable = 0
        self._n_conflating = 0
        self._seq = count()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def matches(self, topic: str) -> bool:
        """Return whether this subscription wants ``topic``."""
        return any(topic_matches(p, topic) for p in self.patterns)

    @property
    def depth(self) -> int:
        """Return the number of events waiting for this subscriber."""
        return len(self._pending)

    def offer_conflating(self, event: Event) -> None:
        """Queue a conflating event: replace any pending one with the same key; never block."""
        key = (0, event.key)
        pending = self._pending
        if key in pending:
            pending[key] = event
            pending.move_to_end(key)
            self.stats.conflated += 1
            cls = event.topic_class
            self.stats.by_class_conflated[cls] = self.stats.by_class_conflated.get(cls, 0) + 1
        else:
            if self._n_conflating >= self.max_keys:
                self._drop_oldest_conflating()
            pending[key] = event
            self._n_conflating += 1
        self._idle.clear()
        self._wake.set()

    def _drop_oldest_conflating(self) -> None:
        for k, ev in self._pending.items():
            if k[0] == 0:
                del self._pending[k]
                self._n_conflating -= 1
                self.stats.dropped += 1
                cls = ev.topic_class
                self.stats.by_class_dropped[cls] = self.stats.by_class_dropped.get(cls, 0) + 1
                return

    async def put_reliable(self, event: Event) -> None:
        """Queue an event that must not be dropped; wait while the queue is full."""
        while self._n_reliable >= self.maxsize:
            self.stats.blocked += 1
            self._space.clear()
            await self._space.wait()
        self._pending[(1, next(self._seq))] = event
        self._n_reliable += 1
        self._idle.clear()
        self._wake.set()

    def start(self) -> None:
        """Start the consumer task."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"bus-sub-{self.name}"
            )

    async def stop(self) -> None:
        """Cancel the consumer task (call :meth:`Bus.drain` first to deliver what is queued)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _take_all(self) -> list[Event]:
        events = list(self._pending.values())
        self._pending.clear()
        self._n_reliable = 0
        self._n_conflating = 0
        self._space.set()
        return events

    def _take_one(self) -> Event:
        key, event = self._pending.popitem(last=False)
        if key[0] == 0:
            self._n_conflating -= 1
        else:
            self._n_reliable -= 1
            if self._n_reliable < self.maxsize:
                self._space.set()
        return event

    async def _call(self, arg: Any) -> None:
        try:
            result = self.handler(arg)
            if self._is_async or inspect.isawaitable(result):
                await result  # type: ignore[misc]
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing handler must not stop delivery
            self.stats.failed += 1
            log.error("bus handler failed", subscriber=self.name, error=repr(exc))

    async def _run(self) -> None:
        while True:
            if not self._pending:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.batch:
                events = self._take_all()
                await self._call(events)
                self.stats.delivered += len(events)
            else:
                # Deliver what is ready without yielding between sync handlers (throughput).
                while self._pending:
                    await self._call(self._take_one())
                    self.stats.delivered += 1

    async def wait_idle(self) -> None:
        """Wait until the queue is empty and the handler has returned."""
        await self._idle.wait()


class Bus:
    """Publish events to taps (inline) and subscribers (queued, per-class policy)."""

    def __init__(
        self,
        *,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        max_keys: int = DEFAULT_MAX_KEYS,
        conflating: Iterable[str] = DEFAULT_CONFLATING,
    ) -> None:
        self.queue_size = queue_size
        self.max_keys = max_keys
        self.conflating = frozenset(conflating)
        self._taps: list[tuple[str, Tap]] = []
        self._batch_taps: dict[Tap, BatchTap] = {}
        """A tap's batch variant, run once per :meth:`publish_batch` with its events."""
        self._columns_taps: dict[Tap, ColumnsTap] = {}
        """A tap's columns variant, run once per :meth:`publish_columns` with the columns."""
        self._subs: list[Subscription] = []
        self._route_cache: dict[str, tuple[tuple[Tap, ...], tuple[Subscription, ...]]] = {}
        self._market_routes: dict[str, tuple[tuple[Tap, ...], tuple[Subscription, ...]] | None]
        self._market_routes = {}
        """market -> the route of all its prices when no pattern depends on the asset, else
        ``None`` (cleared with the other route caches)."""
        self._started = False
        self.published = 0
        self.published_by_class: dict[str, int] = {}
        self._muted: frozenset[str] = frozenset()
        self.muted_events = 0
        #: Price events dropped (or histories cleaned) by the guard: NaN, inf, negative.
        self.invalid_prices = 0

    def add_tap(self, pattern: str, tap: Tap, *, batch: BatchTap | None = None,
                columns: ColumnsTap | None = None) -> None:
        """Register a synchronous callable run inline, before subscribers, for matching events.

        ``batch`` (optional) does what ``tap`` does for a list of events, in order: a
        :meth:`publish_batch` runs it once instead of ``tap`` once per event. ``columns``
        (optional) does it for a :class:`~daemon.core.price_columns.PriceColumns` batch of prices
        (:meth:`publish_columns`).
        """
        self._taps.append((pattern, tap))
        if batch is not None:
            self._batch_taps[tap] = batch
        if columns is not None:
            self._columns_taps[tap] = columns
        self._route_cache.clear()
        self._market_routes.clear()

    def subscribe(
        self,
        patterns: str | Iterable[str],
        handler: Handler,
        *,
        name: str,
        maxsize: int | None = None,
        max_keys: int | None = None,
        batch: bool = False,
    ) -> Subscription:
        """Subscribe ``handler`` to topics matching ``patterns``; ``batch`` hands it lists."""
        pats = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        sub = Subscription(
            self,
            name,
            pats,
            handler,
            maxsize=maxsize or self.queue_size,
            max_keys=max_keys or self.max_keys,
            batch=batch,
        )
        self._subs.append(sub)
        self._route_cache.clear()
        self._market_routes.clear()
        if self._started:
            sub.start()
        return sub

    def _route(self, topic: str) -> tuple[tuple[Tap, ...], tuple[Subscription, ...]]:
        route = self._route_cache.get(topic)
        if route is None:
            taps = tuple(t for p, t in self._taps if topic_matches(p, topic))
            subs = tuple(s for s in self._subs if s.matches(topic))
            route = (taps, subs)
            if len(self._route_cache) > 200_000:
                self._route_cache.clear()
                self._market_routes.clear()
            self._route_cache[topic] = route
        return route

    def _run_taps(self, taps: tuple[Tap, ...], event: Event) -> None:
        for tap in taps:
            try:
                tap(event)
            except Exception as exc:
                log.error("bus tap failed", topic=event.topic, error=repr(exc))

    def mute(self, topic_classes: Iterable[str]) -> None:
        """Drop (and count) every later event of these classes: e.g. market data once a daemon
        has sealed its recording and stopped scheduling, so nothing reaches the books after."""
        self._muted = frozenset(topic_classes)

    def _guard(self, event: Event) -> Event | None:
        checked = guard_prices(event)
        if checked is not event:
            self.invalid_prices += 1
            if self.invalid_prices <= 10 or self.invalid_prices & (self.invalid_prices - 1) == 0:
                log.warning("invalid price dropped", topic=event.topic,
                            count=self.invalid_prices,
                            what="event" if checked is None else "history points")
        return checked

    async def publish(self, event: Event) -> None:
        """Publish one event: taps first, then every matching subscriber by its class policy."""
        cls = event.topic_class
        if cls in self._muted:
            self.muted_events += 1
            return
        if cls == PRICE or isinstance(event, HistoryEvent):
            checked = self._guard(event)
            if checked is None:
                return
            event = checked
        taps, subs = self._route(event.topic)
        self.published += 1
        self.published_by_class[cls] = self.published_by_class.get(cls, 0) + 1
        if taps:
            self._run_taps(taps, event)
        if cls in self.conflating:
            for sub in subs:
                sub.offer_conflating(event)
        else:
            for sub in subs:
                await sub.put_reliable(event)

    def publish_nowait(self, event: Event) -> None:
        """Publish a conflating-class event from synchronous code (never blocks)."""
        cls = event.topic_class
        if cls not in self.conflating:
            raise ValueError(f"publish_nowait is only for conflating events, not {event.topic}")
        if cls in self._muted:
            self.muted_events += 1
            return
        checked = self._guard(event)
        if checked is None:
            return
        event = checked
        taps, subs = self._route(event.topic)
        self.published += 1
        self.published_by_class[cls] = self.published_by_class.get(cls, 0) + 1
        if taps:
            self._run_taps(taps, event)
        for sub in subs:
            sub.offer_conflating(event)

    def publish_batch(self, events: list[Event]) -> None:
        """Publish conflating-class events (a burst of prices) from synchronous code.

        Each event is guarded, counted and offered to its subscribers as by
        :meth:`publish_nowait`; each tap runs once, with the batch's events it matches in order
        (its batch variant, else the tap per event), taps in the order they first match. Taps
        see the whole batch before subscribers do, as they see each event before subscribers
        do.
        """
        if PRICE in self.conflating and PRICE not in self._muted and events:
            groups, offers = self._group_market_prices(events)
            if groups is None:  # asset-dependent routes, an invalid price, other events
                groups, offers = self._group_events(events)
        else:
            groups, offers = self._group_events(events)
        batch_taps = self._batch_taps
        for tap, evs in groups.items():
            batch = batch_taps.get(tap)
            if batch is None:
                for e in evs:
                    self._run_taps((tap,), e)
                continue
            try:
                batch(evs)
            except Exception as exc:
                log.error("bus tap failed", topic=evs[0].topic, error=repr(exc))
        for subs, ev in offers:
            for sub in subs:
                sub.offer_conflating(ev)

    def publish_columns(self, prices: PriceColumns) -> None:
        """Publish a batch of one market's prices given as columns, from synchronous code.

        The same as :meth:`publish_batch` of ``prices.events()``: guarded, counted, each tap
        once with the batch's prices in order, then offered to subscribers. A tap with a
        columns variant reads the columns; the events are made only if another tap or a
        subscriber needs them. A batch with an invalid price, or a market whose routes depend on
        the asset, goes as its events through :meth:`publish_batch` (dropped prices counted).
        """
        n = len(prices)
        if not n:
            return
        if PRICE in self._muted:
            self.muted_events += n
            return
        route = self._market_route(prices.market) if PRICE in self.conflating else None
        if route is None or not prices.valid():
            self.publish_batch(prices.events())  # type: ignore[arg-type]
            return
        taps, subs = route
        self.published += n
        self.published_by_class[PRICE] = self.published_by_class.get(PRICE, 0) + n
        events: list[Event] | None = None
        columns_taps = self._columns_taps
        for tap in taps:
            fn = columns_taps.get(tap)
            try:
                if fn is not None:
                    fn(prices)
                    continue
                if events is None:
                    events = prices.events()  # type: ignore[assignment]
                batch = self._batch_taps.get(tap)
                if batch is not None:
                    batch(events)  # type: ignore[arg-type]
                    continue
            except Exception as exc:
                log.error("bus tap failed", topic=f"price.{prices.market}", error=repr(exc))
                continue
            for e in events:  # type: ignore[union-attr]
                self._run_taps((tap,), e)
        if subs:
            if events is None:
                events = prices.events()  # type: ignore[assignment]
            for e in events:  # type: ignore[union-attr]
                for sub in subs:
                    sub.offer_conflating(e)

    def _market_route(self, market: str
                      ) -> tuple[tuple[Tap, ...], tuple[Subscription, ...]] | None:
        """Return the route every price of ``market`` takes, or None if it depends on the asset."""
        if market in self._market_routes:
            return self._market_routes[market]
        reach = {p: price_pattern_reach(p, market)
                 for p in {p for p, _ in self._taps} | {p for s in self._subs for p in s.patterns}}
        route = None
        taps = tuple(t for p, t in self._taps if reach[p] == "all")
        if "asset" not in reach.values() and len(set(taps)) == len(taps):
            route = (taps,
                     tuple(s for s in self._subs if any(reach[p] == "all" for p in s.patterns)))
        self._market_routes[market] = route
        return route

    def _group_market_prices(self, events: list[Event]
                             ) -> tuple[dict[Tap, list[Event]] | None,
                                        list[tuple[tuple[Subscription, ...], Event]]]:
        """Route a batch of valid plain prices of one market at once when its route does not
        depend on the asset (one pass checks them); ``(None, [])`` sends it the general way."""
        first = events[0]
        market = getattr(first, "market", None)
        if type(first) is not PriceEvent or market is None:
            return None, []
        route = self._market_route(market)
        if route is None or not all(
                type(e) is PriceEvent and e.market == market  # type: ignore[attr-defined]
                and 0.0 <= e.price < _INF  # type: ignore[attr-defined]
                and (e.bid is None or 0.0 <= e.bid < _INF)  # type: ignore[attr-defined]
                and (e.ask is None or 0.0 <= e.ask < _INF)  # type: ignore[attr-defined]
                for e in events):
            return None, []
        taps, subs = route
        n = len(events)
        self.published += n
        self.published_by_class[PRICE] = self.published_by_class.get(PRICE, 0) + n
        return dict.fromkeys(taps, events), ([(subs, e) for e in events] if subs else [])

    def _group_events(self, events: list[Event]
                      ) -> tuple[dict[Tap, list[Event]],
                                 list[tuple[tuple[Subscription, ...], Event]]]:
        """Guard, count and route any conflating events of :meth:`publish_batch`: each tap's
        events in order (a tap that matches an event twice gets it twice, as one by one)."""
        conflating = self.conflating
        muted = self._muted
        route = self._route
        groups: dict[Tap, list[Event]] = {}
        offers: list[tuple[tuple[Subscription, ...], Event]] = []
        by_class = self.published_by_class
        for event in events:
            cls = event.topic_class
            if cls not in conflating:
                raise ValueError(f"publish_batch is only for conflating events, not {event.topic}")
            if cls in muted:
                self.muted_events += 1
                continue
            checked = self._guard(event)
            if checked is None:
                continue
            taps, subs = route(checked.topic)
            self.published += 1
            by_class[cls] = by_class.get(cls, 0) + 1
            for tap in taps:
                group = groups.get(tap)
                if group is None:
                    groups[tap] = [checked]
                else:
                    group.append(checked)
            if subs:
                offers.append((subs, checked))
        return groups, offers

    async def start(self) -> None:
        """Start every subscriber's consumer task."""
        self._started = True
        for sub in self._subs:
            sub.start()

    async def drain(self) -> None:
        """Wait until every subscriber has handled everything queued (including cascades)."""
        while True:
            busy = [s for s in self._subs if not s._idle.is_set()]
            if not busy:
                # One more turn lets handlers that just published get their events queued.
                await asyncio.sleep(0)
                if all(s._idle.is_set() for s in self._subs):
                    return
                continue
            for s in busy:
                await s.wait_idle()

    async def stop(self) -> None:
        """Deliver what is queued, then stop every consumer task."""
        if self._started:
            await self.drain()
        for sub in self._subs:
            await sub.stop()
        self._started = False

    @property
    def subscriptions(self) -> tuple[Subscription, ...]:
        """Return the current subscriptions."""
        return tuple(self._subs)

    def counters(self) -> dict[str, dict[str, int]]:
        """Return conflated and dropped counts per topic class, summed over subscribers."""
        conflated: dict[str, int] = {}
        dropped: dict[str, int] = {}
        for s in self._subs:
            for k, v in s.stats.by_class_conflated.items():
                conflated[k] = conflated.get(k, 0) + v
            for k, v in s.stats.by_class_dropped.items():
                dropped[k] = dropped.get(k, 0) + v
        return {"conflated": conflated, "dropped": dropped}
