"""Stock fundamentals, polled and normalised into :class:`~daemon.events.FundamentalsEvent`.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import structlog

from daemon.events import FundamentalsEvent

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


@dataclass(frozen=True, slots=True)
class FundamentalsSettings:
    """Where and how often fundamentals are polled."""

    provider: Provider = "yahoo"
    """``yahoo`` (keyless, one request for all symbols) or ``finnhub`` (token, one per symbol)."""
    interval: float = 21_600.0
    """Seconds between polls (default 6 h: the figures change slowly)."""
    timeout: float = 10.0
    """Seconds per HTTP request."""
    yahoo_url: str = "https://query1.finance.yahoo.com/v7/finance/quote"
    finnhub_url: str = "https://finnhub.io/api/v1/stock/metric"


class FundamentalsSource:
    """Poll a provider for the universe's fundamentals and publish one event per stock."""

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
        self._token = token
        self._clock = clock
        self.errors = 0
        self.last_error = ""

    async def run(self) -> None:
        """Poll forever, every ``interval`` seconds; a failed poll is logged and retried later."""
        async with aiohttp.ClientSession() as session:
            while True:
                await self.poll_once(session)
                await asyncio.sleep(self.settings.interval)

    async def poll_once(self, session: aiohttp.ClientSession) -> list[FundamentalsEvent]:
        """Fetch every symbol once, publish the events and return them."""
        try:
            if self.settings.provider == "yahoo":
                by_symbol = await self._yahoo(session)
            else:
                by_symbol = await self._finnhub(session)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._failed(exc)
            return []
        now = self._clock()
        events = [
            FundamentalsEvent(ts=now, recv_ts=now, asset=s, metrics=by_symbol[s],
                              source=self.settings.provider)
            for s in self.symbols if s in by_symbol
        ]
        for ev in events:
            await self.publish(ev)
        return events

    async def _get(self, session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> Any:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
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
