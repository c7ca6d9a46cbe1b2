"""Yahoo Finance: keyless streamer (WebSocket + protobuf) and the chart REST endpoint.

- :class:`YahooStreamAdapter` speaks the streamer protocol for :class:`StreamingSource`: send
  ``{"subscribe": [...]}`` (at most ``max_per_connection`` symbols per connection, the server
  silently truncates beyond 100), re-send the full list every ``resubscribe_interval`` seconds,
  decode ``{"type":"pricing","message":"<base64 PricingData>"}`` frames into
  :class:`~daemon.core.events.PriceEvent`. A snapshot only counts as DATA for the staleness watchdog
  when its own time is recent (the first snapshot after subscribing can be days old).
- :func:`fetch_chart` reads ``/v8/finance/chart/<symbol>`` (last price, its time, daily closes
  with nulls skipped); :func:`backfill_daily_closes` runs it for many symbols at start-up.
- :class:`YahooRestFallback` polls the chart endpoint for every symbol whose streamed price is
  stale while the market is open and publishes it with ``source="yahoo-rest"``.

Why one module over 500 lines: the streamer and its chart-REST fallback share the symbols' staleness
and sharding state; the protobuf decoding is :mod:`feeds.yahoo_proto`.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import structlog
from pydantic import ConfigDict, Field
from websockets.asyncio.client import ClientConnection

from daemon.core.bus import Bus
from daemon.core.durations import Duration, retry_after_seconds
from daemon.core.events import NonMarkingPrice, PriceEvent, SourceStatus
from feeds.backoff import Backoff, EquityStreamSettings
from feeds.health import short_error
from feeds.source_contract import DecodeResult, SourceCounters, SourceState, http_status_of
from feeds.yahoo_proto import ProtoDecodeError, clean_float32, decode_pricing_b64

__all__ = [
    "BROWSER_USER_AGENT",
    "ChartError",
    "ChartResult",
    "PayloadTooLarge",
    "RateLimited",
    "YahooRestFallback",
    "YahooSettings",
    "YahooStreamAdapter",
    "backfill_daily_closes",
    "fetch_chart",
    "read_limited",
]

log = structlog.get_logger(__name__)

#: A current desktop browser User-Agent (Yahoo answers 429 to default library agents).
BROWSER_USER_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Safari/537.36"
)


#: Yahoo quote types (PricingData field 6) that mark by default.
EQUITY, ETF = 8, 20


class YahooSettings(EquityStreamSettings):
    """Yahoo streamer and chart endpoint settings (every endpoint configurable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ws_url: str = "wss://streamer.finance.yahoo.com/?version=2"
    chart_url: str = "https://query1.finance.yahoo.com/v8/finance/chart"
    max_per_connection: int = Field(default=100, ge=1, le=100)
    resubscribe_interval: Duration = Field(default=15.0, gt=0)
    rate_limit_penalty: float = Field(default=4.0, ge=1.0)
    user_agent: str = BROWSER_USER_AGENT
    rest_poll_interval: Duration = Field(default=60.0, gt=0)
    rest_check_interval: Duration = Field(default=5.0, gt=0)
    rest_timeout: Duration = Field(default=10.0, gt=0)
    rest_max_bytes: int = Field(default=2_000_000, gt=0)
    rest_concurrency: int = Field(default=4, ge=1)
    mark_quote_types: tuple[int, ...] = Field(
        default=(EQUITY, ETF),
        description="Yahoo quote types whose snapshots mark prices (8 equity, 20 ETF); other "
        "types (e.g. 41 crypto, 9 index) are data only",
    )


# --------------------------------------------------------------------------------- streaming

#: ``market_hours`` values of PricingData other than 1 (regular session).
_OFF_SESSION = {0: "pre-market", 2: "post-market", 3: "extended hours"}


class _Frame(msgspec.Struct):
    type: str = ""
    message: str = ""


_frame_decoder = msgspec.json.Decoder(_Frame)
_encoder = msgspec.json.Encoder()


class YahooStreamAdapter:
    """Protocol adapter of the Yahoo streamer (``{"subscribe":[...]}`` + protobuf snapshots)."""

    def __init__(self, settings: YahooSettings, *, name: str = "yahoo") -> None:
        """Create an adapter for ``settings``."""
        self.settings = settings
        self.name = name
        self.max_keys_per_connection = settings.max_per_connection

    def url(self) -> str:
        """Return the streamer URL."""
        return self.settings.ws_url

    async def on_open(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Subscribe every key of this connection."""
        await self.subscribe(ws, keys)

    async def subscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Add ``keys`` to a live connection."""
        if keys:
            await ws.send(_encoder.encode({"subscribe": list(keys)}).decode())

    async def unsubscribe(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Remove ``keys`` from a live connection."""
        if keys:
            await ws.send(_encoder.encode({"unsubscribe": list(keys)}).decode())

    async def heartbeat(self, ws: ClientConnection) -> None:
        """Return at once: the streamer needs no application-level ping."""

    async def periodic(self, ws: ClientConnection, keys: Sequence[str]) -> None:
        """Re-send the full subscription list every ``resubscribe_interval`` seconds."""
        while True:
            await asyncio.sleep(self.settings.resubscribe_interval)
            await self.subscribe(ws, list(keys))

    def backoff_penalty(self, exc: BaseException | None, close_code: int | None) -> float:
        """Back off longer after HTTP 429 on the upgrade."""
        if http_status_of(exc) == 429:
            return self.settings.rate_limit_penalty
        return 1.0

    def _not_a_mark(self, quote_type: int, market_hours: int) -> str:
        """Return why a snapshot is data only ("" when it marks): session or instrument type."""
        if quote_type not in self.settings.mark_quote_types:
            return f"quote type {quote_type}"
        if market_hours != 1 and not self.settings.extended_hours_marks:
            return _OFF_SESSION.get(market_hours, f"market hours {market_hours}")
        return ""

    def decode(self, frame: str | bytes, now: float) -> DecodeResult:
        """Decode one streamer frame into at most one price event.

        Regular-session snapshots of the ``mark_quote_types`` are :class:`PriceEvent` marks;
        others are :class:`NonMarkingPrice` (data only) unless the settings ask for marks.
        """
        res = DecodeResult()
        try:
            msg = _frame_decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError):
            res.decode_errors = 1
            return res
        if msg.type != "pricing":
            res.unknown = 1
            return res
        try:
            pd = decode_pricing_b64(msg.message)
        except ProtoDecodeError:
            res.decode_errors = 1
            return res
        price = pd.price
        if not pd.id or not (price > 0 and math.isfinite(price)) or pd.time <= 0:
            res.decode_errors = 1  # garbage is never a price, nor stamped with the receive time
            return res
        ts = pd.time / 1000.0
        bid = clean_float32(pd.bid) if pd.bid > 0 and math.isfinite(pd.bid) else None
        ask = clean_float32(pd.ask) if pd.ask > 0 and math.isfinite(pd.ask) else None
        if bid is not None and ask is not None and bid > ask:
            bid = ask = None  # a crossed quote is never published; the price still is
        event = PriceEvent(
            ts=ts,
            recv_ts=now,
            market="equity",
            asset=pd.id,
            price=clean_float32(price),
            bid=bid,
            ask=ask,
            source=self.name,
        )
        reason = self._not_a_mark(pd.quote_type, pd.market_hours)
        if reason:
            event = NonMarkingPrice(**msgspec.structs.asdict(event), reason=reason)
        res.events.append(event)
        if now - ts <= self.settings.stale_after:
            res.data_keys.append(pd.id)
        return res


# --------------------------------------------------------------------------------- REST


class ChartError(Exception):
    """The chart endpoint failed or answered something unusable."""


class RateLimited(ChartError):
    """HTTP 429 (or 403 anti-bot) from an HTTP endpoint."""

    def __init__(self, status: int, retry_after: float | None) -> None:
        """Record the status and the server's Retry-After, if any."""
        super().__init__(f"HTTP {status} (rate limited)")
        self.status = status
        self.retry_after = retry_after


class PayloadTooLarge(ChartError):
    """A response body exceeded the configured limit."""


async def read_limited(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """Read the decompressed body of ``resp``; raise :class:`PayloadTooLarge` past ``max_bytes``."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise PayloadTooLarge(f"Content-Length {resp.content_length} > {max_bytes}")
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(65536):
        buf += chunk
        if len(buf) > max_bytes:
            raise PayloadTooLarge(f"body larger than {max_bytes} bytes")
    return bytes(buf)


def retry_after_of(resp: aiohttp.ClientResponse) -> float | None:
    """Return the Retry-After header in seconds, if it is a number."""
    return retry_after_seconds(resp.headers.get("Retry-After"))


@dataclass(frozen=True)
class ChartResult:
    """What the chart endpoint says about one symbol.

    ``daily_closes`` are ``(t, close)`` pairs in time order, ``t`` being Yahoo's bar time (epoch
    seconds of the session start); bars with a null close are skipped. ``session_start`` /
    ``session_end`` bound the current regular session when Yahoo reports it.
    """

    symbol: str
    last_price: float | None
    last_time: float | None
    daily_closes: list[tuple[float, float]] = field(default_factory=list)
    session_start: float | None = None
    session_end: float | None = None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def parse_chart(symbol: str, payload: Any) -> ChartResult:
    """Parse a decoded chart JSON payload; raise :class:`ChartError` if it has no result."""
    try:
        chart = payload["chart"]
        result = chart.get("result")
        if not result:
            err = chart.get("error")
            desc = err.get("description") if isinstance(err, dict) else err
            raise ChartError(f"no chart result for {symbol}: {desc}")
        r0 = result[0]
        meta = r0.get("meta") or {}
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ChartError(f"malformed chart payload for {symbol}: {exc!r}") from exc
    price = _num(meta.get("regularMarketPrice"))
    if price is not None and price <= 0:
        price = None
    last_time = _num(meta.get("regularMarketTime"))
    stamps = r0.get("timestamp") or []
    closes: list[Any] = []
    try:
        closes = r0["indicators"]["quote"][0].get("close") or []
    except (KeyError, TypeError, IndexError, AttributeError):
        closes = []
    daily: list[tuple[float, float]] = []
    for t, c in zip(stamps, closes, strict=False):
        tf, cf = _num(t), _num(c)
        if tf is not None and cf is not None and cf > 0:
            daily.append((tf, cf))
    daily.sort()
    regular: Any = {}
    period = meta.get("currentTradingPeriod")
    if isinstance(period, dict) and isinstance(period.get("regular"), dict):
        regular = period["regular"]
    return ChartResult(
        symbol=symbol,
        last_price=price,
        last_time=last_time,
        daily_closes=daily,
        session_start=_num(regular.get("start")),
        session_end=_num(regular.get("end")),
    )


async def fetch_chart(
    session: aiohttp.ClientSession,
    settings: YahooSettings,
    symbol: str,
    *,
    range_: str = "5d",
    interval: str = "1d",
) -> ChartResult:
    """Fetch ``chart/<symbol>?range=..&interval=..`` with a browser User-Agent and parse it.

    Raise :class:`RateLimited` on 429/403, :class:`ChartError` on any other failure.
    """
    url = f"{settings.chart_url.rstrip('/')}/{symbol}"
    params = {"range": range_, "interval": interval}
    headers = {"User-Agent": settings.user_agent, "Accept": "application/json"}
    timeout = aiohttp.ClientTimeout(total=settings.rest_timeout)
    try:
        async with session.get(url, params=params, headers=headers, timeout=timeout) as resp:
            if resp.status in (429, 403):
                raise RateLimited(resp.status, retry_after_of(resp))
            body = await read_limited(resp, settings.rest_max_bytes)
            if resp.status != 200:
                raise ChartError(f"HTTP {resp.status} for {symbol}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ChartError(f"request for {symbol} failed: {exc!r}") from exc
    try:
        payload = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise ChartError(f"invalid JSON for {symbol}") from exc
    return parse_chart(symbol, payload)


def _completed(result: ChartResult, now: float) -> list[tuple[float, float]]:
    closes = result.daily_closes
    if (
        closes
        and result.session_start is not None
        and result.session_end is not None
        and closes[-1][0] >= result.session_start - 1.0
        and now < result.session_end
    ):
        return closes[:-1]  # today's bar is still moving: its "close" is the live price
    return list(closes)


async def backfill_daily_closes(
    session: aiohttp.ClientSession,
    settings: YahooSettings,
    symbols: Sequence[str],
    *,
    now: Callable[[], float],
    range_: str = "3mo",
    attempts: int = 3,
    errors: dict[str, str] | None = None,
) -> dict[str, list[tuple[float, float]]]:
    """Return completed daily closes ``(t, close)`` per symbol (empty list if it failed).

    A bar of the session still in progress is left out. Failed requests are retried with
    backoff up to ``attempts`` times; nothing raises on network errors. Failures are logged as
    one summary line; ``errors`` (if given) receives a short error per failed symbol.
    """
    sem = asyncio.Semaphore(settings.rest_concurrency)
    out: dict[str, list[tuple[float, float]]] = {}
    failed: dict[str, str] = {} if errors is None else errors

    async def one(symbol: str) -> None:
        backoff = Backoff(settings.backoff_policy())
        for attempt in range(attempts):
            try:
                async with sem:
                    res = await fetch_chart(session, settings, symbol, range_=range_)
                out[symbol] = _completed(res, now())
                return
            except RateLimited as exc:
                failed[symbol] = short_error(exc)
                delay = backoff.next_delay(penalty=settings.rate_limit_penalty)
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, settings.backoff_max))
            except ChartError as exc:
                failed[symbol] = short_error(exc)
                log.debug("yahoo backfill attempt failed", symbol=symbol, error=failed[symbol])
                delay = backoff.next_delay()
            if attempt + 1 < attempts:
                await asyncio.sleep(delay)
        out[symbol] = []

    wanted = list(dict.fromkeys(symbols))
    await asyncio.gather(*(one(s) for s in wanted))
    for s in wanted:
        if out.get(s):
            failed.pop(s, None)
    if failed:
        common = Counter(failed.values()).most_common(1)[0][0]
        log.warning("yahoo backfill failed", failed=len(failed), of=len(wanted), error=common,
                    attempts=attempts, symbols=",".join(sorted(failed))[:120])
    return {s: out.get(s, []) for s in wanted}


class YahooRestFallback:
    """Poll the chart endpoint for symbols whose streamed price is stale while the market is open.

    Staleness is judged from the bus: a tap on ``price.equity.#`` records the data time of
    every streamed price (any source but this one). A symbol is polled when its latest streamed
    price is older than ``stale_after`` (counted from start-up at the earliest), at most once per
    ``rest_poll_interval``; a polled price is published only if newer than what was streamed.
    """

    def __init__(
        self,
        settings: YahooSettings,
        symbols: Sequence[str],
        *,
        bus: Bus,
        now: Callable[[], float],
        is_open: Callable[[float], bool] = lambda _t: True,
        stale_after: float | None = None,
        name: str = "yahoo-rest",
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        """Prepare the fallback; the bus tap is installed at once, polling starts in :meth:`run`."""
        self.settings = settings
        self.name = name
        self.state = SourceState.CONNECTING
        self.counters = SourceCounters()
        self.symbols = list(dict.fromkeys(symbols))
        self.stale_after = stale_after if stale_after is not None else settings.stale_after
        self._bus = bus
        self._now = now
        self._is_open = is_open
        self._session = session
        self._streamed: dict[str, float] = {}
        self._published: dict[str, float] = {}
        self._polled: dict[str, float] = {}
        self._started = now()
        self._backoff = Backoff(settings.backoff_policy())
        self._status: SourceState | None = None
        #: True while no symbol needs polling (market closed or the stream is fresh).
        self.standby = True
        #: Short name of the last poll failure; "" after a successful poll.
        self.last_error = ""
        self._warned = ""
        bus.add_tap("price.equity.#", self._on_price)

    def _on_price(self, ev: Any) -> None:
        if (
            isinstance(ev, PriceEvent)
            and ev.source != self.name
            and ev.ts > self._streamed.get(ev.asset, 0.0)
        ):
            self._streamed[ev.asset] = ev.ts

    def _stream_stale(self, now: float) -> list[str]:
        """Return the symbols whose streamed price is older than ``stale_after``."""
        return [
            s
            for s in self.symbols
            if now - max(self._streamed.get(s, 0.0), self._started) > self.stale_after
        ]

    def stale_symbols(self, now: float) -> list[str]:
        """Return the symbols that need a REST poll at ``now``."""
        interval = self.settings.rest_poll_interval
        return [
            s
            for s in self._stream_stale(now)
            if now - self._polled.get(s, -math.inf) >= interval
        ]

    async def _set_state(self, state: SourceState, detail: str = "") -> None:
        self.state = state
        if state == self._status:
            return
        self._status = state
        now = self._now()
        log.info("feed state", source=self.name, state=str(state), detail=detail)
        await self._bus.publish(
            SourceStatus(ts=now, recv_ts=now, source=self.name, state=str(state), detail=detail)
        )

    async def run(self) -> None:
        """Poll until cancelled; never raise on network errors."""
        own = self._session is None
        session = self._session or aiohttp.ClientSession()
        try:
            await self._set_state(SourceState.LIVE, "idle")
            while True:
                delay = await self._tick(session)
                await asyncio.sleep(delay)
        finally:
            if own:
                await session.close()

    async def _tick(self, session: aiohttp.ClientSession) -> float:
        now = self._now()
        try:
            open_ = self._is_open(now)
        except Exception as exc:
            log.error("is_open failed", source=self.name, error=repr(exc))
            open_ = True
        needed = open_ and bool(self._stream_stale(now))
        due = self.stale_symbols(now) if needed else []
        self.standby = not needed
        if not needed and self.state is not SourceState.LIVE:
            self.last_error = ""  # not needed any more: a past failure does not matter
            await self._set_state(SourceState.LIVE, "idle")
        failed: dict[str, str] = {}
        for symbol in due:
            try:
                res = await fetch_chart(session, self.settings, symbol, range_="1d")
            except RateLimited as exc:
                delay = self._backoff.next_delay(penalty=self.settings.rate_limit_penalty)
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                await self._set_state(SourceState.BACKING_OFF, str(exc))
                log.warning("yahoo rest rate limited", source=self.name, delay=round(delay, 3))
                return delay
            except ChartError as exc:
                self.counters.rejected += 1
                self._polled[symbol] = self._now()
                failed[symbol] = short_error(exc)
                continue
            self._backoff.reset()
            self.last_error = ""
            await self._set_state(SourceState.LIVE, "polling")
            t = self._now()
            self._polled[symbol] = t
            self.counters.messages += 1
            self.counters.last_message_ts = t
            self._publish(res, t)
        if failed:
            await self._poll_failed(failed, len(due))
        return self.settings.rest_check_interval

    async def _poll_failed(self, failed: dict[str, str], polled: int) -> None:
        """Log one line per tick, at warning only when the error changes (no per-symbol flood)."""
        error = Counter(failed.values()).most_common(1)[0][0]
        if len(failed) == polled:
            self.last_error = error
            await self._set_state(SourceState.BACKING_OFF, error)
        (log.warning if error != self._warned else log.debug)(
            "yahoo rest poll failed", source=self.name, failed=len(failed), of=polled,
            error=error,
        )
        self._warned = error

    def _publish(self, res: ChartResult, recv: float) -> None:
        if res.last_price is None or res.last_time is None:
            self.counters.rejected += 1
            return
        sym = res.symbol
        if res.last_time <= max(self._streamed.get(sym, 0.0), self._published.get(sym, 0.0)):
            return  # nothing newer than what we already have
        self._published[sym] = res.last_time
        self.counters.data_messages += 1
        self.counters.last_data_ts = recv
        self._bus.publish_nowait(
            PriceEvent(
                ts=res.last_time,
                recv_ts=recv,
                market="equity",
                asset=sym,
                price=res.last_price,
                source=self.name,
            )
        )

    def symbol_times(self) -> Mapping[str, float]:
        """Return the latest streamed data time per symbol (for diagnostics)."""
        return dict(self._streamed)
