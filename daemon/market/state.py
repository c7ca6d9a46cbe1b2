"""What the daemon knows of the markets: latest prices, daily closes, news and questions.

:class:`MarketState` is a set of bus *taps* (run inline, before any handler): it updates the price
cache, the daily-close history, the news cache and the books' incremental mark, applies
Polymarket listings and resolutions to the books, and builds look-ahead-free observations.
Its state round-trips through :meth:`MarketState.state` for checkpoints.

Why one module over 500 lines: the market state is one object whose caches (prices, closes, news,
questions) are fed by the same taps and read together to build an observation; pending bursts are
:mod:`.pending_lasts`, coverage :mod:`.coverage`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import structlog

from agents.base import (
    Fundamentals,
    MarketView,
    NewsItem,
    Observation,
    PastAllocation,
    PricePoint,
    Question,
)
from daemon.core.events import (
    BarEvent,
    FundamentalsEvent,
    HistoryEvent,
    MarketListed,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
)
from daemon.core.price_columns import AssetTable, PriceColumns
from daemon.market.bars import DailyBars
from daemon.market.coverage import PriceCoverage, nyse_open_seconds
from daemon.market.pending_lasts import PendingLasts, book_columns
from scoring.ledger.ledger import Book
from scoring.ledger.types import BookSnapshot

log = structlog.get_logger(__name__)

NY = ZoneInfo("America/New_York")
HISTORY_DAYS = 30
NEWS_PER_KEY = 50
#: Fundamentals snapshots kept per stock (the latest one before a decision is shown).
FUNDAMENTALS_KEPT = 4


class _DayClock:
    """Map epoch seconds to a local calendar day quickly (cached day bounds)."""

    __slots__ = ("_end", "_key", "_start", "tz")

    def __init__(self, tz: ZoneInfo) -> None:
        self.tz = tz
        self._start = 0.0
        self._end = -1.0
        self._key = ""

    def day(self, ts: float) -> str:
        if self._start <= ts < self._end:
            return self._key
        local = datetime.fromtimestamp(ts, self.tz)
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        nxt = (midnight + timedelta(days=1)).replace(tzinfo=None)
        self._start = midnight.timestamp()
        self._end = nxt.replace(tzinfo=self.tz).timestamp()
        self._key = midnight.date().isoformat()
        return self._key


class _AssetHistory:
    """Daily closes of one asset plus the current day's latest price (and first, for equities)."""

    __slots__ = ("closes", "day", "first", "last")

    def __init__(self, days: int) -> None:
        self.closes: deque[PricePoint] = deque(maxlen=days)
        self.day = ""
        self.last: tuple[float, float] | None = None
        """(ts, price) of the latest tick (a tuple: built once per tick, on the hot path)."""
        self.first: tuple[float, float] | None = None
        """(ts, price) of the day's first marking tick at or after the NYSE session's open:
        the session's opening price (equities only; ``None`` before it)."""


class MarketState:
    """Price cache, history, news and question registry for every market; bus taps."""

    def __init__(
        self,
        books: dict[str, Book],
        *,
        history_days: int = HISTORY_DAYS,
        on_resolved: Callable[[ResolutionEvent, Any], None] | None = None,
    ) -> None:
        self.books = books
        self.history_days = history_days
        self._days = {"equity": _DayClock(NY), "polymarket": _DayClock(ZoneInfo("UTC"))}
        self._history: dict[str, dict[str, _AssetHistory]] = {m: {} for m in books}
        self._pending: dict[str, PendingLasts] = {}
        """Per market: the latest prices of columnar bursts not yet in :attr:`history`."""
        self._columns: dict[str, tuple[Book, AssetTable, np.ndarray]] = {}
        """Per market: its book, the last asset table seen and the book column of each of its
        indices (cached)."""
        self.news: dict[str, deque[NewsEvent]] = {}
        self._news_ids: set[str] = set()
        self.questions: dict[str, Question] = {}
        self.fundamentals: dict[str, deque[Fundamentals]] = {}
        """Latest fundamentals snapshots per stock, oldest first (a few, for look-ahead)."""
        self.resolved: dict[str, dict[str, float]] = {}
        self.on_resolved = on_resolved
        self.offset = 0
        self.clock = 0.0
        self._opens: dict[str, float | None] = {}
        """NY day -> epoch seconds of that NYSE session's open (``None``: no session)."""
        self.daily_bars = DailyBars(
            history_days, lambda m, a: m in books and books[m].has_asset(a))
        """Recorded daily OHLCV bars (history recordings only)."""

    @property
    def history(self) -> dict[str, dict[str, _AssetHistory]]:
        """Return market -> asset -> daily closes and latest prices (settled: current)."""
        if self._pending:
            for market in list(self._pending):
                self._settle(market)
        return self._history

    def _settle(self, market: str) -> None:
        """Move the latest prices columnar bursts left pending into ``market``'s history."""
        pending = self._pending.pop(market, None)
        if pending is not None:
            days = self.history_days
            pending.settle(self._history[market], lambda: _AssetHistory(days),
                           lambda last: PricePoint(*last))

    def _session_open(self, day: str) -> float | None:
        """Return the epoch seconds of the NYSE open on ``day`` (cached; ``None`` if closed)."""
        if day not in self._opens:
            from daemon.timing.nyse import get_nyse_calendar

            bounds = get_nyse_calendar().session_bounds(date.fromisoformat(day))
            self._opens[day] = None if bounds is None else bounds[0].timestamp()
        return self._opens[day]

    # -- taps -----------------------------------------------------------------------------------
    def on_price(self, ev: PriceEvent) -> None:
        """Update cache, history and the book's incremental mark for one price."""
        book = self.books.get(ev.market)
        if book is None or not ev.marks:  # extended-hours / non-traded quotes: data, not marks
            return
        ts = ev.ts
        if ev.recv_ts and ts > ev.recv_ts:
            ts = ev.recv_ts  # never trust a source clock ahead of ours
        if self._pending:
            self._settle(ev.market)  # prices of earlier bursts come first
        known = book.has_asset(ev.asset)
        hist = self._history[ev.market].get(ev.asset)
        if hist is None:
            if ev.market == "equity" and not known:
                return  # not in the configured universe
            hist = self._history[ev.market][ev.asset] = _AssetHistory(self.history_days)
        day = self._days[ev.market].day(ts)
        if day != hist.day:
            if hist.last is not None:
                hist.closes.append(PricePoint(*hist.last))
            hist.day = day
            hist.first = None
        hist.last = (ts, ev.price)
        if hist.first is None and ev.market == "equity":
            opens = self._session_open(day)
            if opens is not None and ts >= opens:
                hist.first = hist.last
        if known:
            book.set_price(ev.asset, ev.price, ts)  # ignored for resolved tokens

    def on_prices(self, events: list[PriceEvent], *, checked: bool = True) -> None:
        """Batch tap: what :meth:`on_price` does for each event, in order, with each book
        marked once for the batch (the last price of each asset; equity and peaks current).

        ``checked``: the prices passed the bus's guard (finite, >= 0), as a tap's always do.
        """
        # market -> (column -> position in the lists, columns, prices, times): the last price of
        # each column, in the order columns first appear (set_prices takes each column once).
        marks: dict[str, tuple[dict[int, int], list[int], list[float], list[float]]] = {}
        books, history, days = self.books, self.history, self._days  # settled
        current = None  # the market of the previous event, and its lookups
        cols: Any = None
        hists: dict[str, _AssetHistory] = {}
        clock: Any = None
        pos: dict[int, int] = {}
        jl: list[int] = []
        pl: list[float] = []
        tl: list[float] = []
        for ev in events:
            market = ev.market
            if market != current:
                book = books.get(market)
                if book is None:
                    continue
                current = market
                cols, hists, clock = book.asset_columns, history[market], days[market]
                got = marks.get(market)
                if got is None:
                    got = marks[market] = ({}, [], [], [])
                pos, jl, pl, tl = got
            if not ev.marks:
                continue
            ts = ev.ts
            recv = ev.recv_ts
            if recv and ts > recv:
                ts = recv
            asset = ev.asset
            j = cols.get(asset)
            hist = hists.get(asset)
            if hist is None:
                if market == "equity" and j is None:
                    continue
                hist = hists[asset] = _AssetHistory(self.history_days)
            # _DayClock.day, its cached-day test inline
            day = clock._key if clock._start <= ts < clock._end else clock.day(ts)
            if day != hist.day:
                if hist.last is not None:
                    hist.closes.append(PricePoint(*hist.last))
                hist.day = day
                hist.first = None
            price = ev.price
            hist.last = (ts, price)
            if hist.first is None and market == "equity":  # the session's opening price
                opens = self._session_open(day)
                if opens is not None and ts >= opens:
                    hist.first = hist.last
            if j is not None:
                k = pos.get(j)
                if k is None:
                    pos[j] = len(jl)
                    jl.append(j)
                    pl.append(price)
                    tl.append(ts)
                else:
                    pl[k] = price
                    tl[k] = ts
        for mk, (_, cl, prl, tsl) in marks.items():
            if cl:
                books[mk].set_prices(np.array(cl, dtype=np.intp),
                                     np.array(prl, dtype=np.float64),
                                     np.array(tsl, dtype=np.float64), checked=checked)

    def on_price_columns(self, prices: PriceColumns) -> None:
        """Columns tap: what :meth:`on_prices` does for ``prices.events()``, read from the
        columns. When every price falls in the market's current day (the usual case) only each
        asset's last price of the batch can change its history and mark, so only those are
        visited; otherwise (a day boundary inside the batch, equities' opening prices) the
        events go through :meth:`on_prices`."""
        market = prices.market
        book = self.books.get(market)
        if book is None or not len(prices):
            return
        t = np.frombuffer(prices.ts, dtype=np.float64)
        r = np.frombuffer(prices.recv_ts, dtype=np.float64)
        late = (t > r) & (r != 0.0)
        if late.any():
            t = np.where(late, r, t)  # never trust a source clock ahead of ours
        hi = float(t.max())
        clock = self._days[market]
        clock.day(float(t.min()))
        if market == "equity" or not hi < clock._end:
            self.on_prices(prices.events())
            return
        day = clock._key
        table = prices.table
        pending = self._pending.get(market)
        if pending is None or pending.table is not table or pending.day != day:
            self._settle(market)  # another day or another source's table: history first
            pending = self._pending[market] = PendingLasts(table, day)
        a = np.frombuffer(prices.a, dtype=np.int64)
        idx, first = np.unique(a[::-1], return_index=True)  # each asset once, from the end
        at = len(a) - 1 - first  # the position of each asset's last price
        ts = t[at]
        price = np.frombuffer(prices.price, dtype=np.float64)[at]
        pending.record(idx, ts, price)
        cached = self._columns.get(market)
        cols = book_columns(table, book.asset_columns, cached[2] if cached is not None
                            and cached[0] is book and cached[1] is table else None)
        self._columns[market] = (book, table, cols)
        j = cols[idx]
        known = j >= 0
        if known.all():
            book.set_prices(j, price, ts, checked=True)
        elif known.any():
            book.set_prices(j[known], price[known], ts[known], checked=True)

    def on_fundamentals(self, ev: FundamentalsEvent) -> None:
        """Keep the last few fundamentals snapshots of a stock of the universe."""
        book = self.books.get(ev.market)
        if book is None or not book.has_asset(ev.asset):
            return
        ts = min(ev.ts, ev.recv_ts) if ev.recv_ts else ev.ts
        q = self.fundamentals.get(ev.asset)
        if q is None:
            q = self.fundamentals[ev.asset] = deque(maxlen=FUNDAMENTALS_KEPT)
        if q and ts < q[-1].ts:
            return  # out of order: an older snapshot never replaces a newer one
        q.append(Fundamentals(ts, dict(ev.metrics), ev.source))

    def on_bar(self, ev: BarEvent) -> None:
        """Keep a recorded daily OHLCV bar (:class:`~daemon.market.bars.DailyBars`)."""
        self.daily_bars.on_bar(ev)

    def on_history(self, ev: HistoryEvent) -> None:
        """Seed an asset's daily closes from a backfill (only points before the event time)."""
        if ev.market in self.history:
            self.seed_history(ev.market, ev.asset, [(t, p) for t, p in ev.points if t <= ev.ts])

    def on_news(self, ev: NewsEvent) -> None:
        """Keep a bounded, de-duplicated news list per key."""
        if ev.id in self._news_ids:
            return
        self._news_ids.add(ev.id)
        for key in ev.keys or ("general",):
            q = self.news.get(key)
            if q is None:
                q = self.news[key] = deque(maxlen=NEWS_PER_KEY)
            if q and len(q) == q.maxlen:
                self._news_ids.discard(q[0].id)
            q.append(ev)

    def on_listed(self, ev: MarketListed) -> None:
        """Make a Polymarket question's YES and NO tokens tradable assets of its book."""
        book = self.books.get(ev.market)
        if book is None or ev.question_id in self.resolved:
            return
        if ev.question_id not in self.questions:
            self.questions[ev.question_id] = Question(
                ev.question_id, ev.question, ev.yes_asset, ev.no_asset
            )
        book.add_asset(ev.yes_asset, question=ev.question_id)
        book.add_asset(ev.no_asset, question=ev.question_id)

    def on_resolution(self, ev: ResolutionEvent) -> None:
        """Pay out a resolved question exactly once."""
        book = self.books.get(ev.market)
        if book is None or ev.question_id in self.resolved:
            return
        if ev.question_id not in book.questions():
            log.warning("resolution of an unknown question ignored", question=ev.question_id)
            return
        paid = book.resolve(ev.question_id, ev.payouts, ev.ts)
        self.resolved[ev.question_id] = dict(ev.payouts)
        if self.on_resolved is not None:
            self.on_resolved(ev, paid)

    # -- observations ---------------------------------------------------------------------------
    def observation(
        self,
        agent: str,
        market: str,
        decision_ts: float,
        *,
        recent: list[tuple[float, dict[str, float], float]],
        news_window: float,
        news_per_key: int,
    ) -> Observation:
        """Build what ``agent`` may know at ``decision_ts``: nothing timestamped after it."""
        view = self.market_view(market, decision_ts, news_window=news_window,
                                news_per_key=news_per_key)
        return self.agent_observation(view, agent, recent, self.books[market].snapshot())

    def market_view(self, market: str, decision_ts: float, *, news_window: float,
                    news_per_key: int, prices_at: Mapping[str, PricePoint] | None = None
                    ) -> MarketView:
        """Build the market-wide part of observations at ``decision_ts`` (once per round).

        ``prices_at`` replaces the latest prices (the session's opening prices of a round that
        fills at the open, :meth:`opening_prices`).
        """
        book = self.books[market]
        hist_map = self.history[market]
        tradable = book.tradable
        assets = tuple(a for i, a in enumerate(book.assets) if tradable[i])
        prices: dict[str, PricePoint] = {}
        history: dict[str, tuple[PricePoint, ...]] = {}
        for a in assets:
            h = hist_map.get(a)
            if h is None:
                continue
            closes = tuple(p for p in h.closes if p.ts <= decision_ts)
            if h.last is not None and h.last[0] <= decision_ts:
                prices[a] = PricePoint(*h.last)
            elif closes:
                prices[a] = closes[-1]
            history[a] = closes
        if prices_at is not None:
            prices.update((a, p) for a, p in prices_at.items() if a in history)
        listed = set(assets)  # a set: membership per question in O(1), not O(assets)
        questions = tuple(
            q for q in self.questions.values() if q.yes in listed and q.no in listed
        )
        news: dict[str, tuple[NewsItem, ...]] = {}
        keys = list(assets) if market == "equity" else [q.id for q in questions]
        lo = decision_ts - news_window
        for k in keys:
            items = [n for n in self.news.get(k, ()) if lo <= n.ts <= decision_ts]
            if items:
                items.sort(key=lambda n: (n.ts, n.id), reverse=True)
                news[k] = tuple(
                    NewsItem(n.ts, n.headline, n.source, n.summary, n.url)
                    for n in items[:news_per_key]
                )
        fundamentals: dict[str, Fundamentals] = {}
        if market == "equity":
            for a in assets:
                seen = [f for f in self.fundamentals.get(a, ()) if f.ts <= decision_ts]
                if seen:
                    fundamentals[a] = seen[-1]
        return MarketView.build(market, decision_ts, assets, prices, history, news, questions,
                                fundamentals, self.daily_bars.view(market, assets, decision_ts))

    def agent_observation(self, view: MarketView, agent: str,
                          recent: list[tuple[float, dict[str, float], float]],
                          snapshot: BookSnapshot) -> Observation:
        """Add ``agent``'s part (holdings, cash, value, weights, past allocations) to ``view``."""
        init = self.books[view.market].initial_cash
        past = tuple(
            PastAllocation(ts, w, v / init - 1.0) for ts, w, v in recent
            if ts <= view.decision_ts
        )
        i = snapshot.index[agent]
        return view.observation(
            agent,
            holdings=snapshot.holdings_of(agent),
            cash=float(snapshot.cash[i]),
            value=float(snapshot.values[i]),
            initial_value=init,
            weights=snapshot.weights_of(agent),
            recent_allocations=past,
        )

    def opening_prices(self, market: str, decision_ts: float
                       ) -> tuple[dict[str, PricePoint], tuple[str, ...]]:
        """Return the session's opening price of every tradable asset at ``decision_ts`` and the
        assets without one yet.

        The opening price is the first regular-session price at or after the NYSE open on the
        decision's New York day, received no later than ``decision_ts``.
        """
        book = self.books[market]
        hist_map = self.history[market]
        day = self._days[market].day(decision_ts)
        opens: dict[str, PricePoint] = {}
        missing: list[str] = []
        for i, a in enumerate(book.assets):
            if not book.tradable[i]:
                continue
            h = hist_map.get(a)
            if h is None or h.day != day or h.first is None or h.first[0] > decision_ts:
                missing.append(a)
            else:
                opens[a] = PricePoint(*h.first)
        return opens, tuple(sorted(missing))

    def price_coverage(self, market: str, decision_ts: float, stale_after: float
                       ) -> PriceCoverage:
        """Count the tradable assets of ``market`` with a price younger than ``stale_after``.

        The price is the one an observation shows (latest tick at or before ``decision_ts``, else
        the latest daily close). Equity ages count NYSE regular-session time only (a Friday close
        is still the price on Monday before the open); Polymarket trades 24/7.
        """
        book = self.books[market]
        hist_map = self.history[market]
        tradable = book.tradable
        fresh = 0
        stale: list[tuple[str, float | None]] = []
        assets = [a for i, a in enumerate(book.assets) if tradable[i]]
        for a in assets:
            h = hist_map.get(a)
            ts: float | None = None
            if h is not None:
                if h.last is not None and h.last[0] <= decision_ts:
                    ts = h.last[0]
                else:
                    ts = max((p.ts for p in h.closes if p.ts <= decision_ts), default=None)
            if ts is None:
                stale.append((a, None))
                continue
            age = decision_ts - ts
            if market == "equity":
                age_open = nyse_open_seconds(ts, decision_ts, stale_after)
            else:
                age_open = age
            if age_open <= stale_after:
                fresh += 1
            else:
                stale.append((a, age))
        return PriceCoverage(len(assets), fresh, tuple(sorted(stale)))

    # -- checkpoint -----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Return a JSON-ready snapshot (history, news, questions, resolutions, offset)."""
        return {
            "offset": self.offset,
            "clock": self.clock,
            "history": {
                m: {
                    a: {
                        "closes": [[p.ts, p.price] for p in h.closes],
                        "day": h.day,
                        "last": None if h.last is None else list(h.last),
                    } | ({} if h.first is None else {"first": list(h.first)})
                    for a, h in sorted(hm.items())
                }
                for m, hm in sorted(self.history.items())
            },
            "news": {
                k: [n_to_list(n) for n in q] for k, q in sorted(self.news.items())
            },
            "questions": [[q.id, q.question, q.yes, q.no] for q in self.questions.values()],
            "resolved": self.resolved,
            "fundamentals": {
                a: [[f.ts, f.metrics, f.source] for f in q]
                for a, q in sorted(self.fundamentals.items())
            },
            # Only when kept, so that the checkpoint of a replay without bars is unchanged.
            **({"bars": bars} if (bars := self.daily_bars.state()) else {}),
        }

    def restore(self, st: dict[str, Any]) -> None:
        """Load a snapshot made by :meth:`state`."""
        self.offset = int(st.get("offset", 0))
        self.clock = float(st.get("clock", 0.0))
        for m, hm in st.get("history", {}).items():
            target = self.history.setdefault(m, {})
            for a, h in hm.items():
                ah = _AssetHistory(self.history_days)
                ah.closes.extend(PricePoint(t, p) for t, p in h["closes"])
                ah.day = h["day"]
                ah.last = None if h["last"] is None else (h["last"][0], h["last"][1])
                first = h.get("first")
                ah.first = None if first is None else (first[0], first[1])
                target[a] = ah
        self.news.clear()
        self._news_ids.clear()
        for k, items in st.get("news", {}).items():
            q = self.news[k] = deque(maxlen=NEWS_PER_KEY)
            for it in items:
                ev = n_from_list(it)
                q.append(ev)
                self._news_ids.add(ev.id)
        self.questions = {q[0]: Question(*q) for q in st.get("questions", [])}
        self.resolved = {k: dict(v) for k, v in st.get("resolved", {}).items()}
        self.fundamentals = {
            a: deque((Fundamentals(float(t), dict(m), str(src)) for t, m, src in items),
                     maxlen=FUNDAMENTALS_KEPT)
            for a, items in st.get("fundamentals", {}).items()
        }
        self.daily_bars.restore(st.get("bars", {}))

    def seed_history(self, market: str, asset: str, closes: list[tuple[float, float]]) -> None:
        """Add backfilled daily closes (from a REST history endpoint) before live data."""
        h = self.history[market].setdefault(asset, _AssetHistory(self.history_days))
        existing = {p.ts for p in h.closes}
        merged = sorted({*((p.ts, p.price) for p in h.closes),
                         *((t, p) for t, p in closes if t not in existing)})
        h.closes.clear()
        h.closes.extend(PricePoint(t, p) for t, p in merged[-self.history_days :])


def n_to_list(n: NewsEvent) -> list[Any]:
    """Serialise a news event compactly."""
    return [n.ts, n.recv_ts, n.id, n.headline, n.source, n.url, n.summary, list(n.keys)]


def n_from_list(it: list[Any]) -> NewsEvent:
    """Inverse of :func:`n_to_list`."""
    ts, recv, id_, headline, source, url, summary, keys = it
    return NewsEvent(ts=ts, recv_ts=recv, id=id_, headline=headline, source=source, url=url,
                     summary=summary, keys=tuple(keys))


def utc_iso(ts: float) -> str:
    """Format epoch seconds as an ISO-8601 UTC string."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
