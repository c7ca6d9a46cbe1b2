"""Stock fundamentals, polled and normalised into :class:`~daemon.core.events.FundamentalsEvent`.

Two providers, one normalised shape (a figure a provider does not give is left out):

- ``market_cap_usd``, market capitalisation in USD: Yahoo ``marketCap``; Finnhub
  ``marketCapitalization`` (given in millions);
- ``pe_ratio``, trailing P/E: Yahoo ``trailingPE``; Finnhub ``peTTM``, else
  ``peBasicExclExtraTTM``;
- ``dividend_yield_pct``, in percent: Yahoo ``dividendYield``, else
  ``trailingAnnualDividendYield`` x 100; Finnhub ``currentDividendYieldTTM``, else
  ``dividendYieldIndicatedAnnual``;
- ``dividend_per_share_annual``, USD over the last year: Yahoo ``trailingAnnualDividendRate``;
  Finnhub ``dividendPerShareTTM``, else ``dividendPerShareAnnual``;
- ``week52_high`` / ``week52_low``: Yahoo ``fiftyTwoWeekHigh`` / ``fiftyTwoWeekLow``; Finnhub
  ``52WeekHigh`` / ``52WeekLow``.

Only finite JSON numbers are kept (strings, booleans, nulls and NaN are dropped); a market
capitalisation or 52-week bound <= 0 is dropped. An event's ``ts`` is the time the poll received
the figures, never a provider date, so a decision sees only figures fetched before it (the same
look-ahead rule as news). Events are recorded and replayed like prices.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import BaseModel, ConfigDict, Field

from daemon.core.durations import Duration
from daemon.core.events import FundamentalsEvent
from feeds.source_contract import SourceCounters, SourceState

log = structlog.get_logger(__name__)

Provider = Literal["yahoo", "finnhub"]

#: normalised name -> (provider field names in order of preference, factor)
YAHOO_FIELDS: dict[str, tuple[tuple[str, ...], float]] = {
    "market_cap_usd": (("marketCap",), 1.0),
    "pe_ratio": (("trailingPE",), 1.0),
    "dividend_yield_pct": (("dividendYield",), 1.0),
    "dividend_per_share_annual": (("trailingAnnualDividendRate",), 1.0),
    "week52_high": (("fiftyTwoWeekHigh",), 1.0),
    "week52_low": (("fiftyTwoWeekLow",), 1.0),
}
FINNHUB_FIELDS: dict[str, tuple[tuple[str, ...], float]] = {
    "market_cap_usd": (("marketCapitalization",), 1e6),
    "pe_ratio": (("peTTM", "peBasicExclExtraTTM"), 1.0),
    "dividend_yield_pct": (("currentDividendYieldTTM", "dividendYieldIndicatedAnnual"), 1.0),
    "dividend_per_share_annual": (("dividendPerShareTTM", "dividendPerShareAnnual"), 1.0),
    "week52_high": (("52WeekHigh",), 1.0),
    "week52_low": (("52WeekLow",), 1.0),
}
_POSITIVE = ("market_cap_usd", "week52_high", "week52_low")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _pick(raw: Mapping[str, Any], fields: Mapping[str, tuple[tuple[str, ...], float]]) -> dict[
    str, float
]:
    out: dict[str, float] = {}
    for name, (keys, factor) in fields.items():
        for key in keys:
            x = _number(raw.get(key))
            if x is not None:
                out[name] = x * factor
                break
    for name in _POSITIVE:
        if name in out and out[name] <= 0:
            del out[name]
    return out


def normalise_yahoo(payload: Any) -> dict[str, dict[str, float]]:
    """Return symbol -> normalised metrics from a Yahoo ``/v7/finance/quote`` answer."""
    try:
        results = payload["quoteResponse"]["result"]
    except (KeyError, TypeError):
        raise ValueError("not a Yahoo quote answer (no quoteResponse.result)") from None
    if not isinstance(results, list):
        raise ValueError("Yahoo quoteResponse.result is not a list")
    out: dict[str, dict[str, float]] = {}
    for item in results:
        if not isinstance(item, Mapping) or not isinstance(item.get("symbol"), str):
            continue
        metrics = _pick(item, YAHOO_FIELDS)
        if "dividend_yield_pct" not in metrics:
            frac = _number(item.get("trailingAnnualDividendYield"))
            if frac is not None:
                metrics["dividend_yield_pct"] = frac * 100.0
        if metrics:
            out[item["symbol"]] = metrics
    return out


def normalise_finnhub(payload: Any) -> dict[str, float]:
    """Return the normalised metrics of a Finnhub ``/stock/metric?metric=all`` answer."""
    metric = payload.get("metric") if isinstance(payload, Mapping) else None
    if not isinstance(metric, Mapping):
        raise ValueError("not a Finnhub metric answer (no 'metric' object)")
    return _pick(metric, FINNHUB_FIELDS)


class FundamentalsSettings(BaseModel):
    """The ``[sources.fundamentals]`` section: whether, where and how often fundamentals are polled.

    Off unless asked for: by default (``enabled`` unset) the source runs exactly when some agent
    uses ``protocol = "stockbench"``, the only prompt that shows fundamentals.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool | None = Field(
        default=None,
        description="true/false; unset: on when some agent uses protocol 'stockbench'",
    )
    provider: Provider = Field(
        default="yahoo",
        description="'yahoo' (keyless, one request for all stocks) or 'finnhub' (key, one each)",
    )
    poll_interval: Duration = Field(
        default=21_600.0, gt=0, description="between polls (default 6h: the figures move slowly)"
    )
    retry_interval: Duration = Field(
        default=300.0, gt=0, description="after a poll that got no figures, retry this soon"
    )
    request_timeout: Duration = Field(default=10.0, gt=0, description="per HTTP request")
    yahoo_url: str = Field(default="https://query1.finance.yahoo.com/v7/finance/quote",
                           description="Yahoo quote endpoint")
    finnhub_url: str = Field(default="https://finnhub.io/api/v1/stock/metric",
                             description="Finnhub metrics endpoint")
    finnhub_key_env: str = Field(default="FINNHUB_API_KEY",
                                 description="environment variable holding the Finnhub key")

    def wanted(self, protocols: Iterable[str]) -> bool:
        """Return whether the source runs, given the protocols of the configured agents."""
        if self.enabled is not None:
            return self.enabled
        return "stockbench" in set(protocols)


class FundamentalsSource:
    """Poll a provider for the universe's fundamentals and publish one event per stock.

    A :class:`~feeds.source_contract.Source`: ``connecting`` until the first poll, then ``live``
    while the last poll brought figures (it stays live through the long wait between polls, so a
    6 h interval raises no stale-feed alert) and ``down`` with ``last_error`` when it brought
    none (retried after ``retry_interval``).
    """

    #: Figures of stocks: a failure matters (alerts, /readyz) only while NYSE is open.
    market = "equity"
    #: No prices: its health never decides whether rounds have prices.
    provides_prices = False

    def __init__(
        self,
        settings: FundamentalsSettings,
        symbols: Sequence[str],
        publish: Callable[[FundamentalsEvent], Awaitable[None]],
        *,
        token: str | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "fundamentals",
    ) -> None:
        """Build the source; ``token`` is required by ``finnhub``."""
        if settings.provider == "finnhub" and not token:
            raise ValueError("fundamentals provider 'finnhub' needs a token")
        self.settings = settings
        self.symbols = tuple(symbols)
        self.publish = publish
        self.name = name
        self.state = SourceState.CONNECTING
        self.counters = SourceCounters()
        self._token = token
        self._clock = clock
        self.errors = 0
        #: Why the last poll (or one of its symbols) failed; "" once a poll goes through.
        self.last_error = ""

    async def run(self) -> None:
        """Poll until cancelled; a poll without figures is retried after ``retry_interval``."""
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    events = await self.poll_once(session)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # never let one odd answer end the source
                    self._failed(exc)
                    events = []
                ok = bool(events)
                if not ok:
                    self.state = SourceState.DOWN
                    self.last_error = self.last_error or "no figures for any stock"
                s = self.settings
                await asyncio.sleep(s.poll_interval if ok else min(s.retry_interval,
                                                                   s.poll_interval))

    async def poll_once(self, session: aiohttp.ClientSession) -> list[FundamentalsEvent]:
        """Fetch every symbol once, publish the events and return them."""
        self.last_error = ""
        try:
            if self.settings.provider == "yahoo":
                by_symbol = await self._yahoo(session)
            else:
                by_symbol = await self._finnhub(session)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._failed(exc)
            self.state = SourceState.DOWN
            return []
        now = self._clock()
        events = [
            FundamentalsEvent(ts=now, recv_ts=now, asset=s, metrics=by_symbol[s],
                              source=self.settings.provider)
            for s in self.symbols if s in by_symbol
        ]
        for ev in events:
            await self.publish(ev)
        self.counters.messages += len(events)
        self.counters.data_messages += len(events)
        if events:
            self.counters.last_message_ts = self.counters.last_data_ts = now
            self.state = SourceState.LIVE
        return events

    async def _get(self, session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> Any:
        timeout = aiohttp.ClientTimeout(total=self.settings.request_timeout)
        async with session.get(url, params=params, timeout=timeout) as resp:
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status} from {url}")
            return await resp.json(content_type=None)

    async def _yahoo(self, session: aiohttp.ClientSession) -> dict[str, dict[str, float]]:
        payload = await self._get(session, self.settings.yahoo_url,
                                  {"symbols": ",".join(self.symbols)})
        return normalise_yahoo(payload)

    async def _finnhub(self, session: aiohttp.ClientSession) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for s in self.symbols:
            try:
                payload = await self._get(session, self.settings.finnhub_url,
                                          {"symbol": s, "metric": "all",
                                           "token": self._token or ""})
                metrics = normalise_finnhub(payload)
            except ValueError as exc:  # one symbol's bad answer does not lose the others
                self._failed(exc, symbol=s)
                continue
            if metrics:
                out[s] = metrics
        return out

    def _failed(self, exc: BaseException, symbol: str = "") -> None:
        self.errors += 1
        text = str(exc) or type(exc).__name__
        if self._token:
            text = text.replace(self._token, "[redacted]")
        self.last_error = " ".join(text.split())[:300]
        log.warning("fundamentals.poll_failed", provider=self.settings.provider, symbol=symbol,
                    error=self.last_error)
