"""Immutable typed events carried by the bus, stored, recorded and replayed.

Every event is a frozen ``msgspec.Struct`` tagged by its class name, so a recording is a stream of
JSON objects that decode back to the exact same events. Times are float epoch seconds (UTC):
``ts`` is when the event happened at the source, ``recv_ts`` when we received it.

Topics are hierarchical and dot-separated (``price.equity.AAPL``); the first level is the topic
class that decides the bus delivery policy (prices conflate; the rest never drop).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

Market = Literal["equity", "polymarket"]
MARKETS: tuple[Market, ...] = ("equity", "polymarket")

PRICE = "price"
NEWS = "news"
MARKET = "market"
RESOLUTION = "resolution"
DECISION = "decision"
FILL = "fill"
ALERT = "alert"
STATUS = "status"
HISTORY = "history"
CLOCK = "clock"
FUNDAMENTALS = "fundamentals"
BAR = "bar"


class Event(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """Base of every bus event."""

    topic_class: ClassVar[str] = ""
    ts: float
    recv_ts: float = 0.0

    @property
    def topic(self) -> str:
        """Return the full hierarchical topic of this event."""
        raise NotImplementedError

    @property
    def key(self) -> str:
        """Return the conflation key (latest per key wins for conflating classes)."""
        return self.topic


class PriceEvent(Event, frozen=True, tag=True, kw_only=True):
    """A new marking price for one asset of one market (equity symbol or Polymarket token)."""

    topic_class: ClassVar[str] = PRICE
    #: Whether the price marks the asset (price cache, book marks, daily closes, report panel).
    marks: ClassVar[bool] = True
    market: Market
    asset: str
    price: float
    bid: float | None = None
    ask: float | None = None
    source: str = ""

    @property
    def topic(self) -> str:
        return f"price.{self.market}.{self.asset}"


class NonMarkingPrice(PriceEvent, frozen=True, tag=True, kw_only=True):
    """A price kept as data but never a mark, and why (``reason``).

    Sources publish it for an equity's pre-/post-market or extended-hours snapshot and for a quote
    of an instrument type the market does not trade (unless their config asks for marks). It is
    recorded, replayed and stored (``market_events.kind = 'NonMarkingPrice'``), but never enters
    the price cache, the daily closes or the report's daily panel, which use the regular session.
    """

    marks: ClassVar[bool] = False
    reason: str = ""

    @property
    def key(self) -> str:
        # Conflates apart from marks: a later after-hours snapshot never replaces the close.
        return f"{self.topic}.data"


class NewsEvent(Event, frozen=True, tag=True, kw_only=True):
    """One normalised news item; ``keys`` are the assets or Polymarket questions it belongs to."""

    topic_class: ClassVar[str] = NEWS
    id: str
    headline: str
    source: str = ""
    url: str = ""
    summary: str = ""
    keys: tuple[str, ...] = ()

    @property
    def topic(self) -> str:
        return f"news.{self.keys[0] if self.keys else 'general'}"

    @property
    def key(self) -> str:
        return f"news.{self.id}"


class MarketListed(Event, frozen=True, tag=True, kw_only=True):
    """A Polymarket binary question became tradable with its YES and NO tokens."""

    topic_class: ClassVar[str] = MARKET
    market: Market = "polymarket"
    question_id: str
    question: str
    yes_asset: str
    no_asset: str
    end_ts: float | None = None

    @property
    def topic(self) -> str:
        return f"market.{self.market}.{self.question_id}"


class ResolutionEvent(Event, frozen=True, tag=True, kw_only=True):
    """A Polymarket question resolved; ``payouts`` maps each token to its payout (1/0, 0.5/0.5)."""

    topic_class: ClassVar[str] = RESOLUTION
    market: Market = "polymarket"
    question_id: str
    payouts: dict[str, float]
    source: str = ""

    @property
    def topic(self) -> str:
        return f"resolution.{self.market}.{self.question_id}"


class DecisionEvent(Event, frozen=True, tag=True, kw_only=True):
    """An agent's decision for one scheduled round, whatever its outcome."""

    topic_class: ClassVar[str] = DECISION
    agent: str
    market: Market
    scheduled_ts: float
    outcome: str
    allocation: dict[str, float] | None = None
    reason: str = ""
    duration_s: float = 0.0

    @property
    def topic(self) -> str:
        return f"decision.{self.agent}"


class FillEvent(Event, frozen=True, tag=True, kw_only=True):
    """An applied rebalance (paper fill) of one agent in one market."""

    topic_class: ClassVar[str] = FILL
    agent: str
    market: Market
    scheduled_ts: float
    trades: dict[str, float]
    traded_value: float
    cost: float
    value_before: float
    value_after: float
    weights: dict[str, float]

    @property
    def topic(self) -> str:
        return f"fill.{self.agent}"


class AlertEvent(Event, frozen=True, tag=True, kw_only=True):
    """An operator-facing alert (drawdown breach, stale feed, ...)."""

    topic_class: ClassVar[str] = ALERT
    kind: str
    severity: str = "warning"
    agent: str = ""
    market: str = ""
    value: float = 0.0
    limit: float = 0.0
    message: str = ""

    @property
    def topic(self) -> str:
        return f"alert.{self.kind}"

    @property
    def key(self) -> str:
        return f"alert.{self.kind}.{self.agent}.{self.market}.{self.ts}"


class SourceStatus(Event, frozen=True, tag=True, kw_only=True):
    """A feed source changed state (connecting, live, stale, backing_off, down)."""

    topic_class: ClassVar[str] = STATUS
    source: str
    state: str
    detail: str = ""

    @property
    def topic(self) -> str:
        return f"status.{self.source}"


class HistoryEvent(Event, frozen=True, tag=True, kw_only=True):
    """Backfilled daily closes of one asset (from a REST history endpoint), oldest first."""

    topic_class: ClassVar[str] = HISTORY
    market: Market
    asset: str
    points: tuple[tuple[float, float], ...]
    source: str = ""

    @property
    def topic(self) -> str:
        return f"history.{self.market}.{self.asset}"


class FundamentalsEvent(Event, frozen=True, tag=True, kw_only=True):
    """A snapshot of one stock's fundamentals, normalised (see :mod:`feeds.fundamentals`).

    ``metrics`` maps a normalised name (``market_cap_usd``, ``pe_ratio``, ``dividend_yield_pct``,
    ``dividend_per_share_annual``, ``week52_high``, ``week52_low``) to its value; a figure the
    source did not give is absent.
    """

    topic_class: ClassVar[str] = FUNDAMENTALS
    market: Market = "equity"
    asset: str
    metrics: dict[str, float]
    source: str = ""

    @property
    def topic(self) -> str:
        return f"fundamentals.{self.market}.{self.asset}"


class BarEvent(Event, frozen=True, tag=True, kw_only=True):
    """One asset's daily OHLCV bar of one session (``day``, ISO date), from a history endpoint.

    Published at the session's close (when the bar is complete); data, never a mark (the
    session's prices are :class:`PriceEvent`). ``open`` and ``volume`` are ``None`` when the
    source did not report them; ``low <= open, close <= high``. Whether the prices are adjusted
    for splits and dividends is the recording header's ``meta.adjustment``.
    """

    topic_class: ClassVar[str] = BAR
    market: Market = "equity"
    asset: str
    day: str
    open: float | None
    high: float
    low: float
    close: float
    volume: float | None = None
    source: str = ""

    @property
    def topic(self) -> str:
        return f"bar.{self.market}.{self.asset}"

    @property
    def key(self) -> str:
        return f"bar.{self.market}.{self.asset}.{self.day}"


class ClockEvent(Event, frozen=True, tag=True, kw_only=True):
    """Time passed with no market data (e.g. the end of a live recording); moves replay clocks."""

    topic_class: ClassVar[str] = CLOCK
    reason: str = ""

    @property
    def topic(self) -> str:
        return "clock.tick"


AnyEvent = (
    PriceEvent
    | NonMarkingPrice
    | NewsEvent
    | MarketListed
    | ResolutionEvent
    | DecisionEvent
    | FillEvent
    | AlertEvent
    | SourceStatus
    | HistoryEvent
    | ClockEvent
    | FundamentalsEvent
    | BarEvent
)

#: Events that come from the outside world (recorded and replayed).
MarketData = (
    PriceEvent
    | NonMarkingPrice
    | NewsEvent
    | MarketListed
    | ResolutionEvent
    | HistoryEvent
    | ClockEvent
    | FundamentalsEvent
    | BarEvent
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    """Encode an event as compact JSON bytes (tagged with its type)."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> AnyEvent:
    """Decode JSON from :func:`encode_event`; raise ``msgspec.ValidationError`` if invalid."""
    return _decoder.decode(data)
