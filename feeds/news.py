"""News pollers: Google News RSS (keyless default), Finnhub company news, Alpaca news.

Each provider is one :class:`NewsPoller` source. A poll cycle runs one request per query (per
asset for Google and Finnhub, per chunk of symbols for Alpaca), spaced by ``request_spacing``,
then publishes the new items with ``await bus.publish`` and sleeps until ``poll_interval`` after
the cycle start. The pure side (items, payload parsers, de-duplication memory, query
builders) lives in :mod:`feeds.news_parse`.

Rules applied to every item:

- ``ts`` is the item's own publication time (UTC epoch seconds), ``recv_ts`` the poll time.
- Duplicates are dropped across polls and across providers: an item is a duplicate when its
  provider id (Google guid, Finnhub / Alpaca id) or its normalised headline was already seen
  (bounded LRU memory shared by the sources of one :func:`build_news_sources` call). Within one
  cycle, the same item found for several keys is published once with all of its keys.
- Future-dated items: published more than ``future_skew`` after now are DROPPED (counted as
  ``rejected``, not remembered, so they come through once their time has come); items within the
  skew are CLAMPED to now, so that ``ts <= recv_ts`` always holds and an observation taken at a
  decision time never contains an item stamped after it.
- Items older than ``max_age`` and items without a parsable time are skipped.
- HTTP 429 (and 403) back off with ``rate_limit_penalty`` (and at least Retry-After) and retry
  the same request; other failures back off and move on to the next request.
- Bodies above ``max_bytes`` are refused; RSS with DTD / entity declarations is refused.

Why one module over 500 lines: the pollers of the three providers share the de-duplication across
polls and providers, the query rotation and the backoff; the pure parsing of every payload is
:mod:`feeds.news_parse`.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import aiohttp
import msgspec
import structlog
from pydantic import ConfigDict, Field

from daemon.core.bus import Bus
from daemon.core.durations import Duration
from daemon.core.events import NewsEvent, SourceStatus
from feeds.alpaca import secret_from_env
from feeds.backoff import Backoff, BackoffSettings
from feeds.finnhub import redact_text
from feeds.health import failure_is_news, short_error
from feeds.news_parse import (
    NewsDeduper,
    NewsItem,
    NewsParseError,
    normalise_title,
    parse_alpaca_news,
    parse_finnhub_news,
    parse_google_rss,
)
from feeds.source_contract import SourceCounters, SourceState
from feeds.yahoo import (
    BROWSER_USER_AGENT,
    PayloadTooLarge,
    RateLimited,
    read_limited,
    retry_after_of,
)

__all__ = [
    "NewsPoller",
    "NewsSettings",
    "build_news_sources",
]

log = structlog.get_logger(__name__)

NewsProvider = Literal["google", "finnhub", "alpaca"]

_TICKER = re.compile(r"[A-Z][A-Z0-9.\-]{0,9}")


class NewsSettings(BackoffSettings):
    """News polling settings; credentials come from the named environment variables."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: tuple[NewsProvider, ...] = ("google",)
    google_url: str = "https://news.google.com/rss/search"
    google_when: str = "1d"
    google_hl: str = "en-US"
    google_gl: str = "US"
    google_ceid: str = "US:en"
    finnhub_url: str = "https://finnhub.io/api/v1"
    finnhub_key_env: str = "FINNHUB_API_KEY"
    alpaca_url: str = "https://data.alpaca.markets/v1beta1/news"
    alpaca_key_env: str = "APCA_API_KEY_ID"
    alpaca_secret_env: str = "APCA_API_SECRET_KEY"
    alpaca_symbols_per_request: int = Field(default=10, ge=1)
    alpaca_max_pages: int = Field(default=3, ge=1)
    poll_interval: Duration = Field(default=300.0, gt=0)
    request_spacing: Duration = Field(default=1.0, ge=0)
    lookback: Duration = Field(default=172_800.0, gt=0, description="Finnhub/Alpaca query window")
    max_age: Duration = Field(default=172_800.0, gt=0, description="older items are skipped")
    future_skew: Duration = Field(default=300.0, ge=0)
    max_items_per_response: int = Field(default=200, ge=1)
    max_bytes: int = Field(default=5_000_000, gt=0)
    max_summary_chars: int = Field(default=1000, ge=0)
    request_timeout: Duration = Field(default=20.0, gt=0)
    dedupe_capacity: int = Field(default=50_000, ge=1)
    user_agent: str = BROWSER_USER_AGENT
    backoff_initial: Duration = Field(default=5.0, gt=0)
    backoff_max: Duration = Field(default=900.0, gt=0)
    rate_limit_penalty: float = Field(default=4.0, ge=1.0)
    down_after: int = Field(default=5, ge=1)


# --------------------------------------------------------------------------------- fetchers


class FetchError(Exception):
    """A news request failed (network, HTTP status, payload)."""


@dataclass(frozen=True)
class _Request:
    label: str
    keys: tuple[str, ...]
    query: str


class _Fetcher(Protocol):
    provider: str

    def requests(self, queries: Mapping[str, str]) -> list[_Request]: ...

    async def fetch(
        self, session: aiohttp.ClientSession, req: _Request, now: float
    ) -> tuple[list[NewsItem], int]: ...


async def _get(
    session: aiohttp.ClientSession,
    settings: NewsSettings,
    url: str,
    params: Mapping[str, str],
    headers: Mapping[str, str] | None = None,
) -> bytes:
    hdrs = {"User-Agent": settings.user_agent, **(headers or {})}
    timeout = aiohttp.ClientTimeout(total=settings.request_timeout)
    try:
        async with session.get(url, params=params, headers=hdrs, timeout=timeout) as resp:
            if resp.status in (429, 403):
                raise RateLimited(resp.status, retry_after_of(resp))
            if resp.status != 200:
                raise FetchError(f"HTTP {resp.status}")
            return await read_limited(resp, settings.max_bytes)
    except PayloadTooLarge as exc:
        raise FetchError(str(exc)) from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise FetchError(redact_text(f"request failed: {exc!r}")) from exc


def _json(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise NewsParseError("invalid JSON") from exc


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d")


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GoogleNewsFetcher:
    """One RSS search per key: ``<google_url>?q=<query> when:1d&hl=..&gl=..&ceid=..``."""

    provider = "google"

    def __init__(self, settings: NewsSettings) -> None:
        """Create the fetcher."""
        self.settings = settings

    def requests(self, queries: Mapping[str, str]) -> list[_Request]:
        """Return one request per key."""
        return [_Request(k, (k,), q) for k, q in queries.items() if q.strip()]

    async def fetch(
        self, session: aiohttp.ClientSession, req: _Request, now: float
    ) -> tuple[list[NewsItem], int]:
        """Run one search and parse it."""
        s = self.settings
        q = f"{req.query} when:{s.google_when}" if s.google_when else req.query
        params = {"q": q, "hl": s.google_hl, "gl": s.google_gl, "ceid": s.google_ceid}
        body = await _get(session, s, s.google_url, params)
        return parse_google_rss(
            body, req.keys[0], max_items=s.max_items_per_response, max_summary=s.max_summary_chars
        )


class FinnhubNewsFetcher:
    """One ``company-news`` request per ticker over the last ``lookback`` seconds."""

    provider = "finnhub"

    def __init__(self, settings: NewsSettings, token: str, symbols: Sequence[str]) -> None:
        """Create the fetcher for ``symbols`` (the token is never logged)."""
        self.settings = settings
        self._token = token
        self.symbols = list(symbols)

    def requests(self, queries: Mapping[str, str]) -> list[_Request]:
        """Return one request per ticker key."""
        return [_Request(s, (s,), s) for s in self.symbols]

    async def fetch(
        self, session: aiohttp.ClientSession, req: _Request, now: float
    ) -> tuple[list[NewsItem], int]:
        """Fetch and parse the company news of one symbol."""
        s = self.settings
        params = {
            "symbol": req.query,
            "from": _day(now - s.lookback),
            "to": _day(now),
            "token": self._token,
        }
        body = await _get(session, s, f"{s.finnhub_url.rstrip('/')}/company-news", params)
        return parse_finnhub_news(
            _json(body),
            req.keys[0],
            max_items=s.max_items_per_response,
            max_summary=s.max_summary_chars,
        )


class AlpacaNewsFetcher:
    """Alpaca news per chunk of symbols, newest first, following a few pages."""

    provider = "alpaca"

    def __init__(
        self, settings: NewsSettings, key: str, secret: str, symbols: Sequence[str]
    ) -> None:
        """Create the fetcher for ``symbols`` (credentials are never logged)."""
        self.settings = settings
        self._headers = {"APCA-API-KEY-ID": key, "APCA-API-SECRET-KEY": secret}
        self.symbols = list(symbols)

    def requests(self, queries: Mapping[str, str]) -> list[_Request]:
        """Return one request per chunk of symbols."""
        n = self.settings.alpaca_symbols_per_request
        out = []
        for i in range(0, len(self.symbols), n):
            chunk = tuple(self.symbols[i : i + n])
            out.append(_Request(",".join(chunk), chunk, ",".join(chunk)))
        return out

    async def fetch(
        self, session: aiohttp.ClientSession, req: _Request, now: float
    ) -> tuple[list[NewsItem], int]:
        """Fetch up to ``alpaca_max_pages`` pages of news for one chunk."""
        s = self.settings
        params = {
            "symbols": req.query,
            "start": _rfc3339(now - s.lookback),
            "end": _rfc3339(now + 60.0),
            "limit": "50",
            "sort": "desc",
        }
        items: list[NewsItem] = []
        bad = 0
        for _ in range(s.alpaca_max_pages):
            body = await _get(session, s, s.alpaca_url, params, self._headers)
            page, page_bad, token = parse_alpaca_news(
                _json(body),
                req.keys,
                max_items=s.max_items_per_response,
                max_summary=s.max_summary_chars,
            )
            items.extend(page)
            bad += page_bad
            if token is None:
                break
            params = {**params, "page_token": token}
        return items, bad


# --------------------------------------------------------------------------------- poller


class NewsPoller:
    """A polling news :class:`~feeds.source_contract.Source` for one provider."""

    def __init__(
        self,
        fetcher: _Fetcher,
        settings: NewsSettings,
        queries: Mapping[str, str],
        *,
        bus: Bus,
        now: Callable[[], float],
        deduper: NewsDeduper | None = None,
        session: aiohttp.ClientSession | None = None,
        name: str | None = None,
    ) -> None:
        """Prepare the poller; nothing is requested before :meth:`run`."""
        self.fetcher = fetcher
        self.settings = settings
        self.name = name or f"news-{fetcher.provider}"
        self.state = SourceState.CONNECTING
        self.counters = SourceCounters()
        #: Short name of the last failure ("connect refused", "HTTP 429"); "" once it works.
        self.last_error = ""
        #: News feeds no price: its health never decides whether rounds have prices.
        self.provides_prices = False
        self.deduper = deduper if deduper is not None else NewsDeduper(settings.dedupe_capacity)
        self.published = 0
        self.duplicates = 0
        self.future_dropped = 0
        self.cycles = 0
        self.backoff = Backoff(settings.backoff_policy())
        self.last_delay: float | None = None
        self._queries = dict(queries)
        self._bus = bus
        self._now = now
        self._session = session
        self._failures = 0
        self._status: SourceState | None = None

    def set_queries(self, queries: Mapping[str, str]) -> None:
        """Replace the key -> query map (takes effect at the next cycle)."""
        self._queries = dict(queries)

    async def run(self) -> None:
        """Poll until cancelled; never raise on network or payload errors."""
        own = self._session is None
        session = self._session or aiohttp.ClientSession()
        try:
            await self._set_state(SourceState.CONNECTING)
            while True:
                start = self._now()
                await self.poll_once(session)
                wait = start + self.settings.poll_interval - self._now()
                await asyncio.sleep(max(wait, 0.0))
        finally:
            if own:
                await session.close()

    async def poll_once(self, session: aiohttp.ClientSession) -> int:
        """Run one cycle over every request; publish and return the number of new items."""
        collected: dict[str, NewsItem] = {}
        by_title: dict[str, str] = {}
        requests = self.fetcher.requests(self._queries)
        for i, req in enumerate(requests):
            if i and self.settings.request_spacing:
                await asyncio.sleep(self.settings.request_spacing)
            items = await self._fetch_with_backoff(session, req)
            for item in items:
                norm = normalise_title(item.headline)
                ident = by_title.get(norm, item.event_id) if norm else item.event_id
                prev = collected.get(ident)
                if prev is None:
                    collected[ident] = item
                    if norm:
                        by_title.setdefault(norm, ident)
                else:
                    keys = tuple(dict.fromkeys(prev.keys + item.keys))
                    collected[ident] = replace(prev, keys=keys)
        self.cycles += 1
        return await self._publish(list(collected.values()))

    async def _fetch_with_backoff(
        self, session: aiohttp.ClientSession, req: _Request
    ) -> list[NewsItem]:
        while True:
            try:
                items, bad = await self.fetcher.fetch(session, req, self._now())
            except RateLimited as exc:
                delay = self.backoff.next_delay(penalty=self.settings.rate_limit_penalty)
                if exc.retry_after is not None:
                    delay = max(delay, exc.retry_after)
                await self._failed(exc, req.label, delay)
                continue  # retry the same request
            except (FetchError, NewsParseError) as exc:
                if isinstance(exc, NewsParseError):
                    self.counters.decode_errors += 1
                delay = self.backoff.next_delay()
                await self._failed(exc, req.label, delay)
                return []
            self._failures = 0
            self.last_error = ""
            self.backoff.reset()
            now = self._now()
            self.counters.messages += 1
            self.counters.last_message_ts = now
            self.counters.decode_errors += bad
            await self._set_state(SourceState.LIVE)
            return items

    async def _failed(self, exc: Exception, label: str, delay: float) -> None:
        self._failures += 1
        self.last_delay = delay
        self.last_error = redact_text(short_error(exc))
        state = (
            SourceState.DOWN
            if self._failures >= self.settings.down_after
            else SourceState.BACKING_OFF
        )
        # An outage does not flood the log: the health line (feeds.health) sums it up.
        (log.warning if failure_is_news(self._failures) else log.debug)(
            "news request failed",
            source=self.name,
            error=self.last_error,
            request=redact_text(label)[:80],
            failures=self._failures,
            delay=round(delay, 3),
        )
        await self._set_state(state, self.last_error)
        await asyncio.sleep(delay)

    async def _publish(self, items: list[NewsItem]) -> int:
        now = self._now()
        s = self.settings
        fresh: list[NewsItem] = []
        for item in sorted(items, key=lambda it: it.published):
            if not math.isfinite(item.published):
                continue
            if item.published > now + s.future_skew:
                self.future_dropped += 1
                self.counters.rejected += 1
                continue
            if item.published < now - s.max_age:
                continue
            if self.deduper.is_duplicate(item):
                self.duplicates += 1
                continue
            self.deduper.remember(item)
            fresh.append(item)
        for item in fresh:
            await self._bus.publish(
                NewsEvent(
                    ts=min(item.published, now),
                    recv_ts=now,
                    id=item.event_id,
                    headline=item.headline,
                    source=item.source,
                    url=item.url,
                    summary=item.summary,
                    keys=item.keys,
                )
            )
        if fresh:
            self.published += len(fresh)
            self.counters.data_messages += 1
            self.counters.last_data_ts = now
        return len(fresh)

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


# --------------------------------------------------------------------------------- builders


def build_news_sources(
    settings: NewsSettings,
    keys_to_queries: Mapping[str, str],
    *,
    bus: Bus,
    now: Callable[[], float],
    symbols: Sequence[str] | None = None,
) -> list[NewsPoller]:
    """Build one poller per configured provider, sharing one de-duplication memory.

    Google searches every key's query; Finnhub and Alpaca only query tickers (``symbols``,
    by default the keys that look like tickers). Raise ``MissingCredentialError`` when a keyed
    provider has no credentials.
    """
    tickers = (
        list(symbols)
        if symbols is not None
        else [k for k in keys_to_queries if _TICKER.fullmatch(k)]
    )
    deduper = NewsDeduper(settings.dedupe_capacity)
    sources: list[NewsPoller] = []
    for provider in dict.fromkeys(settings.providers):
        fetcher: _Fetcher
        if provider == "google":
            fetcher = GoogleNewsFetcher(settings)
        elif provider == "finnhub":
            fetcher = FinnhubNewsFetcher(
                settings, secret_from_env(settings.finnhub_key_env), tickers
            )
        else:
            fetcher = AlpacaNewsFetcher(
                settings,
                secret_from_env(settings.alpaca_key_env),
                secret_from_env(settings.alpaca_secret_env),
                tickers,
            )
        sources.append(
            NewsPoller(fetcher, settings, keys_to_queries, bus=bus, now=now, deduper=deduper)
        )
    return sources
