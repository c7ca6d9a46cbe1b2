"""Build a replayable recording from historical daily bars (Yahoo's keyless chart history, or
with keys Alpaca's or Finnhub's historical bars, :mod:`feeds.history_keyed_bars`).

For each NYSE session in ``[start, end]`` and each ticker, two
:class:`~daemon.core.events.PriceEvent` are written: the bar's **opening print** at the bar's own
start, or at the session's open when the bar starts earlier (crypto's 00:00 UTC bars: that price
was known by then), so a StockBench replay (``fill_at = "session_open"``) fills at the recorded
open; and the bar's close at the session's official close time (from
:func:`daemon.timing.nyse.get_nyse_calendar`). A bar without an open (null) has its close only.
After the closes, each ticker's complete bar is a :class:`~daemon.core.events.BarEvent` (open,
high, low, close, volume; header ``meta.bars = "ohlcv"``); a bar whose high, low or volume is
missing or inconsistent (:func:`feeds.daily_bars.bar_problem`) keeps its two prints only, and
each ticker with such bars or with missing days gets one line in ``notes``.
Prices are Yahoo's quote prices: split-adjusted, not dividend-adjusted; with ``dividends``
(``build-recording --dividend-adjusted``) the close is Yahoo's dividend-adjusted close
(``adjclose``) and the open, high and low are scaled by the same factor (adjusted close / close;
volume as reported), as Alpaca's ``adjustment=all`` and Finnhub's ``adjusted=true`` bars are.
The header's ``meta`` says which (``adjustment``, and ``dividend_adjusted``). A bar without an
adjusted close in a dividend-adjusted build stops it (one line). The recording ends with a
:class:`~daemon.core.events.ClockEvent` one hour after the last close so a replay marks the last
day. Bars on days the calendar does not list as sessions are skipped (crypto weekends), and a bar is
dated by its own trading day (:data:`BAR_DAY_SHIFT`). Every problem (unknown ticker, no bars in the
window, unreachable server, an empty or inverted window) raises :class:`HistoryError` with one line.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path

import aiohttp
import msgspec

from daemon.core.events import ClockEvent, NewsEvent, PriceEvent
from daemon.timing.nyse import NY
from feeds.daily_bars import (
    BAR_DAY_SHIFT,
    Bar,
    HistoryError,
    HistoryWindow,
    bar_event,
    bar_problem,
    yahoo_adjcloses,
    yahoo_quotes,
)
from feeds.equities import EquitySourcesSettings
from feeds.health import short_error
from feeds.news import NewsSettings
from feeds.recording import RecordingHeader, RecordingWriter
from feeds.yahoo import ChartError, RateLimited, YahooSettings, parse_chart, read_limited

__all__ = ["Bar", "HistoryError", "HistoryWindow", "build_history_recording",
           "fetch_daily_bars"]

#: Seconds after the last session's close at which the closing :class:`ClockEvent` sits.
END_MARGIN = 3600.0
SOURCE = "yahoo-history"
#: What the recorded prices are, written into the header's ``meta``.
ADJUSTMENT = "split-adjusted, not dividend-adjusted (Yahoo's quote open, high, low and close)"
ADJUSTMENT_DIVIDENDS = ("split- and dividend-adjusted (Yahoo's adjclose; open, high and low"
                        " scaled by adjclose / close)")


def _bar_of(t: float, close: float, quote: dict[str, float | None], factor: float = 1.0) -> Bar:
    """Return the bar starting at ``t`` from its close and its chart quote values, its prices
    times ``factor`` (a dividend adjustment: adjusted close / close)."""
    o = quote.get("open")

    def scaled(x: float | None) -> float | None:
        return None if x is None else x * factor
    return Bar(t, o * factor if o is not None and math.isfinite(o) and o > 0 else None,
               close * factor, scaled(quote.get("high")), scaled(quote.get("low")),
               quote.get("volume"))


async def _fetch_one(session: aiohttp.ClientSession, settings: YahooSettings, symbol: str,
                     window: HistoryWindow, dividends: bool = False) -> dict[date, Bar]:
    """Return the daily bars of ``symbol`` by session day inside ``window`` (``dividends``:
    dividend-adjusted, from the chart's ``adjclose``)."""
    period1, period2 = window.period()
    url = f"{settings.chart_url.rstrip('/')}/{symbol}"
    params = {"period1": str(period1), "period2": str(period2), "interval": "1d"}
    headers = {"User-Agent": settings.user_agent, "Accept": "application/json"}
    timeout = aiohttp.ClientTimeout(total=settings.rest_timeout)
    try:
        async with session.get(url, params=params, headers=headers, timeout=timeout) as resp:
            if resp.status in (429, 403):
                raise RateLimited(resp.status, None)
            body = await read_limited(resp, settings.rest_max_bytes)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise HistoryError(f"{symbol}: chart server unreachable: {short_error(exc)}") from None
    except ChartError as exc:
        raise HistoryError(f"{symbol}: {short_error(exc)}") from None
    if status == 404:
        raise HistoryError(f"{symbol}: unknown ticker (chart endpoint answered 404)")
    if status != 200:
        raise HistoryError(f"{symbol}: chart endpoint answered HTTP {status}")
    try:
        payload = msgspec.json.decode(body)
        result = parse_chart(symbol, payload)
    except msgspec.DecodeError:
        raise HistoryError(f"{symbol}: chart endpoint answered invalid JSON") from None
    except ChartError as exc:
        raise HistoryError(f"{symbol}: {exc}") from None
    quotes = yahoo_quotes(payload)
    adjusted = yahoo_adjcloses(payload) if dividends else {}
    bars: dict[date, Bar] = {}
    for t, close in result.daily_closes:
        day = datetime.fromtimestamp(t + BAR_DAY_SHIFT, UTC).astimezone(NY).date()
        if day not in window.sessions:
            continue
        factor = 1.0
        if dividends:
            adj = adjusted.get(t)
            if adj is None:
                raise HistoryError(f"{symbol}: the chart history has no dividend-adjusted close"
                                   f" (adjclose) for {day}")
            factor = adj / close
        bars[day] = _bar_of(t, close, quotes.get(t, {}), factor)
    if not bars:
        raise HistoryError(f"{symbol}: no daily bars between {window.start} and {window.end}")
    return bars


async def fetch_daily_bars(settings: YahooSettings, tickers: Sequence[str],
                           window: HistoryWindow, dividends: bool = False
                           ) -> dict[str, dict[date, Bar]]:
    """Fetch the daily bars of every ticker (``rest_concurrency`` at a time; ``dividends``:
    dividend-adjusted)."""
    sem = asyncio.Semaphore(settings.rest_concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(symbol: str) -> dict[date, Bar]:
            async with sem:
                return await _fetch_one(session, settings, symbol, window, dividends)

        results = await asyncio.gather(*(one(s) for s in tickers))
    return dict(zip(tickers, results, strict=True))


def parse_tickers(text: str) -> list[str]:
    """Split ``"AAPL, MSFT"`` into unique upper-case tickers; raise if there are none."""
    tickers = list(dict.fromkeys(t.strip().upper() for t in text.split(",") if t.strip()))
    if not tickers:
        raise HistoryError("--tickers names no ticker")
    return tickers


def bar_notes(tickers: Sequence[str], bars: dict[str, dict[date, Bar]],
              window: HistoryWindow) -> tuple[dict[str, set[date]], list[str]]:
    """Return each ticker's days with a usable OHLCV bar and one line per ticker with a problem.

    A problem is a session of the window without a bar (a missing day: nothing is recorded for
    that ticker that day) or bars without a usable high/low/volume (:func:`bar_problem`: their
    open and close are recorded, no :class:`~daemon.core.events.BarEvent`).
    """
    usable: dict[str, set[date]] = {}
    notes: list[str] = []
    for symbol in tickers:
        own = bars[symbol]
        usable[symbol] = set()
        bad: list[tuple[date, str]] = []
        for day in sorted(own):
            why = bar_problem(own[day])
            if why is None:
                usable[symbol].add(day)
            else:
                bad.append((day, why))
        if bad:
            notes.append(f"{symbol}: {len(bad)} of {len(own)} bars without usable OHLCV "
                         f"(first {bad[0][0]}: {bad[0][1]}); their open and close only")
        missing = [d for d in sorted(window.sessions) if d not in own]
        if missing:
            notes.append(f"{symbol}: no bar on {len(missing)} session(s) (first {missing[0]});"
                         " nothing recorded for it those days")
    return usable, notes


def build_history_recording(settings: YahooSettings, tickers: Sequence[str], start: date,
                            end: date, out: str | Path, *,
                            news: NewsSettings | None = None, provider: str = "finnhub",
                            notes: list[str] | None = None, bars: str = "yahoo",
                            equity: EquitySourcesSettings | None = None,
                            dividends: bool = False) -> int:
    """Fetch the bars (Yahoo's chart history, or with ``bars`` ``alpaca``/``finnhub`` that
    source's from ``equity``'s settings, :mod:`feeds.history_keyed_bars`) and, with ``news``,
    the ``provider``'s company news of the window (:mod:`feeds.history_news`), and write the
    recording to ``out``; return the number of events. One line per ticker whose bars had
    problems is appended to ``notes``. ``dividends``: the prices are dividend-adjusted too
    (Yahoo's ``adjclose``, Alpaca's ``adjustment=all``, Finnhub's ``adjusted=true``, whatever
    the config says of the latter two)."""
    window = HistoryWindow.of(start, end)
    notes = [] if notes is None else notes
    if bars == "yahoo":
        got = asyncio.run(fetch_daily_bars(settings, tickers, window, dividends))
        source, origin = SOURCE, "Yahoo chart history"
        adjustment = ADJUSTMENT_DIVIDENDS if dividends else ADJUSTMENT
    else:
        from feeds import history_keyed_bars as keyed

        eq = equity or EquitySourcesSettings()
        if dividends:
            eq = eq.model_copy(update={
                "alpaca": eq.alpaca.model_copy(update={"bars_adjustment": "all"}),
                "finnhub": eq.finnhub.model_copy(update={"bars_adjusted": True})})
        fetch = keyed.fetch_alpaca_bars if bars == "alpaca" else keyed.fetch_finnhub_bars
        cfg = eq.alpaca if bars == "alpaca" else eq.finnhub
        got = asyncio.run(fetch(cfg, tickers, window, notes))  # type: ignore[arg-type]
        source, origin = f"{bars}-history", f"{bars.capitalize()} historical bars"
        adjustment = keyed.keyed_adjustment(bars, eq.alpaca, eq.finnhub)
    return write_history_recording(got, tickers, window, out, news=news, provider=provider,
                                   notes=notes, source=source, adjustment=adjustment,
                                   origin=origin)


def dividend_adjusted(adjustment: str) -> bool:
    """Return whether a header's ``adjustment`` says the prices are dividend-adjusted."""
    return "dividend-adjusted" in adjustment and "not dividend-adjusted" not in adjustment


def write_history_recording(bars: dict[str, dict[date, Bar]], tickers: Sequence[str],
                            window: HistoryWindow, out: str | Path, *,
                            news: NewsSettings | None, provider: str,
                            notes: list[str] | None, source: str, adjustment: str,
                            origin: str) -> int:
    """Write the recording of fetched ``bars`` (see the module doc); return the event count."""
    start, end = window.start, window.end
    days = sorted(window.sessions)
    last_close = max(window.sessions[d][1] for d in days if any(d in b for b in bars.values()))
    usable, problems = bar_notes(tickers, bars, window)
    if notes is not None:
        notes.extend(problems)
    stories: list[NewsEvent] = []
    if news is not None:
        from feeds.history_news import NewsHistoryError, fetch_news_history

        try:
            stories = asyncio.run(fetch_news_history(provider, news, tickers, start, end,
                                                     last_close))
        except NewsHistoryError as exc:
            raise HistoryError(str(exc)) from None
    ohlcv = any(usable.values())
    header = RecordingHeader(
        start=min([window.sessions[days[0]][0], *(e.ts for e in stories[:1])]),
        end=last_close + END_MARGIN,
        description=(f"daily {'OHLCV bars' if ohlcv else 'opens and closes'} {start}..{end}"
                     f" from {origin}"),
        equities=tuple(tickers),
        meta={"source": source, "window": [start.isoformat(), end.isoformat()],
              "interval": "1d", "prints": ["open", "close"], "adjustment": adjustment,
              "dividend_adjusted": dividend_adjusted(adjustment),
              **({"bars": "ohlcv"} if ohlcv else {}),
              **({"news": provider} if news is not None else {})},
    )
    first = window.sessions[days[0]][0]
    with RecordingWriter(out, header) as writer:
        for story in stories:  # before the first session: the lead days' news
            if story.ts < first:
                writer.write(story)
        later = [s for s in stories if s.ts >= first]
        for day in days:
            open_ts, close_ts = window.sessions[day]
            prints: list[tuple[float, int, str, float]] = []
            for k, symbol in enumerate(tickers):
                bar = bars[symbol].get(day)
                if bar is None:
                    continue  # a missing day: nothing for this ticker
                if bar.open is not None:
                    prints.append((min(max(bar.start, open_ts), close_ts), k, symbol, bar.open))
                prints.append((close_ts, len(tickers) + k, symbol, bar.close))
            for ts, _, symbol, price in sorted(prints):
                while later and later[0].ts <= ts:  # news published by then comes first
                    writer.write(later.pop(0))
                writer.write(PriceEvent(ts=ts, recv_ts=ts, market="equity", asset=symbol,
                                        price=price, source=source))
            for symbol in tickers:  # the day's complete bars, at its close
                if day in usable[symbol]:
                    writer.write(bar_event(bars[symbol][day], ts=close_ts, asset=symbol,
                                           day=day.isoformat(), source=source))
        for story in later:
            writer.write(story)
        writer.write(ClockEvent(ts=header.end, recv_ts=header.end, reason="end of history"))
        return writer.count
