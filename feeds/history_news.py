"""Historical company news for a history recording (``build-recording --news finnhub``).

Finnhub's ``company-news`` serves a date range (``from``/``to``, days): one request per ticker
per :data:`CHUNK_DAYS` days, from :data:`LEAD_DAYS` days before the window (the news an agent
may read at the first decision) to the window's last day. Each item becomes a
:class:`~daemon.core.events.NewsEvent` stamped with its **publication time** (``ts`` and
``recv_ts``), so a replay shows it to a decision only once published: the market state never
shows news stamped after a decision (:func:`agents.base.assert_no_lookahead`). Items published
after the window's end are dropped. The token comes from the environment
(``[sources.news] finnhub_key_env``, default ``FINNHUB_API_KEY``) and is never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

import aiohttp

from daemon.core.events import NewsEvent
from feeds.alpaca import MissingCredentialError, secret_from_env
from feeds.news import FetchError, NewsSettings, _get, _json
from feeds.news_parse import NewsParseError, parse_finnhub_news

__all__ = ["CHUNK_DAYS", "LEAD_DAYS", "NewsHistoryError", "fetch_finnhub_history"]

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
                for it in items:
                    if since <= it.published <= until and it.event_id not in events:
                        events[it.event_id] = NewsEvent(
                            ts=it.published, recv_ts=it.published, id=it.event_id,
                            headline=it.headline, source=it.source, url=it.url,
                            summary=it.summary, keys=it.keys)
                await asyncio.sleep(0)
    return sorted(events.values(), key=lambda e: (e.ts, e.id))
