"""Historical company news for a history recording (``build-recording --news finnhub|alpaca``).

Both sources serve a date range, from :data:`LEAD_DAYS` days before the window (the news an
agent may read at the first decision) to the window's last close:

- Finnhub's ``company-news`` (``from``/``to``, days): one request per ticker per
  :data:`CHUNK_DAYS` days; the token from ``[sources.news] finnhub_key_env``;
- Alpaca's news (``start``/``end``, RFC 3339): per chunk of ``alpaca_symbols_per_request``
  tickers, oldest first, following every ``next_page_token`` (up to :data:`MAX_PAGES`); the key
  and secret from ``alpaca_key_env`` / ``alpaca_secret_env``.

Each item becomes a
:class:`~daemon.core.events.NewsEvent` stamped with its **publication time** (``ts`` and
``recv_ts``), so a replay shows it to a decision only once published: the market state never
shows news stamped after a decision (:func:`agents.base.assert_no_lookahead`). Items published
after the window's end are dropped; credentials come from the environment and are never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

import aiohttp

from daemon.core.events import NewsEvent
from feeds.alpaca import MissingCredentialError, secret_from_env
from feeds.news import FetchError, NewsSettings, _get, _json, _rfc3339
from feeds.news_parse import NewsItem, NewsParseError, parse_alpaca_news, parse_finnhub_news

__all__ = ["CHUNK_DAYS", "LEAD_DAYS", "MAX_PAGES", "NewsHistoryError", "fetch_alpaca_history",
           "fetch_finnhub_history", "fetch_news_history"]

#: Pages of one Alpaca request followed at most (50 stories a page).
MAX_PAGES = 200

#: Days of one ``company-news`` request.
CHUNK_DAYS = 30
#: Days of news fetched before the window's first day.
LEAD_DAYS = 3


class NewsHistoryError(Exception):
    """Historical news cannot be fetched (one-line message)."""


def _chunks(first: date, last: date) -> list[tuple[date, date]]:
    out, day = [], first
    while day <= last:
        end = min(last, day + timedelta(days=CHUNK_DAYS - 1))
        out.append((day, end))
        day = end + timedelta(days=1)
    return out


async def fetch_finnhub_history(settings: NewsSettings, tickers: Sequence[str], start: date,
                                end: date, until: float) -> list[NewsEvent]:
    """Return the company news of ``tickers`` published from ``LEAD_DAYS`` before ``start``
    to ``until`` (epoch seconds), oldest first, one event per item (duplicates dropped)."""
    try:
        token = secret_from_env(settings.finnhub_key_env)
    except MissingCredentialError as exc:
        raise NewsHistoryError(f"--news finnhub: {exc}") from None
    url = f"{settings.finnhub_url.rstrip('/')}/company-news"
    lead = start - timedelta(days=LEAD_DAYS)
    since = datetime.combine(lead, time(0), UTC).timestamp()
    events: dict[str, NewsEvent] = {}
    async with aiohttp.ClientSession() as session:
        for symbol in tickers:
            for a, b in _chunks(lead, end + timedelta(days=1)):
                params = {"symbol": symbol, "from": a.isoformat(), "to": b.isoformat(),
                          "token": token}
                try:
                    body = await _get(session, settings, url, params)
                    items, _ = parse_finnhub_news(_json(body), symbol,
                                                  max_items=settings.max_items_per_response,
                                                  max_summary=settings.max_summary_chars)
                except (FetchError, NewsParseError) as exc:
                    raise NewsHistoryError(f"{symbol}: finnhub company-news: {exc}") from None
                except Exception as exc:  # rate limited and the like: one line
                    raise NewsHistoryError(f"{symbol}: finnhub company-news: {exc!r}") from None
                _keep(events, items, since, until)
                await asyncio.sleep(0)
    return sorted(events.values(), key=lambda e: (e.ts, e.id))


def _keep(events: dict[str, NewsEvent], items: Sequence[NewsItem], since: float,
          until: float) -> None:
    """Add each of ``items`` published in ``[since, until]`` to ``events`` (once by id)."""
    for it in items:
        if since <= it.published <= until and it.event_id not in events:
            events[it.event_id] = NewsEvent(
                ts=it.published, recv_ts=it.published, id=it.event_id, headline=it.headline,
                source=it.source, url=it.url, summary=it.summary, keys=it.keys)


async def fetch_alpaca_history(settings: NewsSettings, tickers: Sequence[str], start: date,
                               end: date, until: float) -> list[NewsEvent]:
    """Return Alpaca's news of ``tickers`` published from ``LEAD_DAYS`` before ``start`` to
    ``until``, oldest first, one event per story (duplicates dropped)."""
    try:
        headers = {"APCA-API-KEY-ID": secret_from_env(settings.alpaca_key_env),
                   "APCA-API-SECRET-KEY": secret_from_env(settings.alpaca_secret_env)}
    except MissingCredentialError as exc:
        raise NewsHistoryError(f"--news alpaca: {exc}") from None
    since = datetime.combine(start - timedelta(days=LEAD_DAYS), time(0), UTC).timestamp()
    del end  # the window ends at ``until`` (its last close)
    n = settings.alpaca_symbols_per_request
    events: dict[str, NewsEvent] = {}
    async with aiohttp.ClientSession() as session:
        for i in range(0, len(tickers), n):
            chunk = list(tickers[i:i + n])
            params = {"symbols": ",".join(chunk), "start": _rfc3339(since),
                      "end": _rfc3339(until), "limit": "50", "sort": "asc"}
            for _ in range(MAX_PAGES):
                try:
                    body = await _get(session, settings, settings.alpaca_url, params, headers)
                    items, _, token = parse_alpaca_news(
                        _json(body), chunk, max_items=settings.max_items_per_response,
                        max_summary=settings.max_summary_chars)
                except (FetchError, NewsParseError) as exc:
                    raise NewsHistoryError(f"{','.join(chunk)}: alpaca news: {exc}") from None
                except Exception as exc:  # rate limited and the like: one line
                    raise NewsHistoryError(
                        f"{','.join(chunk)}: alpaca news: {exc!r}") from None
                _keep(events, items, since, until)
                if token is None:
                    break
                params = {**params, "page_token": token}
    return sorted(events.values(), key=lambda e: (e.ts, e.id))


async def fetch_news_history(provider: str, settings: NewsSettings, tickers: Sequence[str],
                             start: date, end: date, until: float) -> list[NewsEvent]:
    """Return :func:`fetch_finnhub_history` or :func:`fetch_alpaca_history` by ``provider``."""
    fetch = fetch_alpaca_history if provider == "alpaca" else fetch_finnhub_history
    return await fetch(settings, tickers, start, end, until)
