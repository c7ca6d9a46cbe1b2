"""Historical daily bars from keyed sources for ``build-recording --bars alpaca|finnhub``.

- Alpaca (``[sources.equity.alpaca] bars_url``, key and secret from ``key_env``/``secret_env``):
  ``timeframe=1Day`` bars of every ticker in one request, following each ``next_page_token``
  (up to :data:`MAX_PAGES`); ``adjustment`` is ``bars_adjustment`` (``split`` by default).
- Finnhub (``[sources.equity.finnhub] rest_url`` + ``/stock/candle``, token from ``key_env``):
  ``resolution=D`` candles per ticker; daily candles are split-adjusted, ``bars_adjusted``
  asks for dividend adjustment too.

Each source's bars become :class:`~feeds.daily_bars.Bar` by session day, as Yahoo's do
(:mod:`feeds.history_recording` writes them); a row without a valid time or close is dropped and
named in one note line per ticker. Every failure (key not set, refused key, unreachable server,
malformed answer, a ticker with no bar) raises :class:`~feeds.daily_bars.HistoryError`
with one line that never holds a credential.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import aiohttp
import msgspec

from daemon.timing.nyse import NY
from feeds.alpaca import AlpacaSettings, MissingCredentialError, secret_from_env
from feeds.daily_bars import BAR_DAY_SHIFT, Bar, HistoryError, HistoryWindow, number
from feeds.finnhub import FinnhubSettings, redact_text
from feeds.yahoo import PayloadTooLarge, read_limited

__all__ = ["MAX_PAGES", "fetch_alpaca_bars", "fetch_finnhub_bars", "keyed_adjustment"]

#: Pages of one Alpaca bars request followed at most.
MAX_PAGES = 500
TIMEOUT = 30.0
MAX_BYTES = 32 << 20

Rows = list[tuple[Any, Any, Any, Any, Any, Any]]
"""Raw rows of a source: (time, open, high, low, close, volume) as received."""


def keyed_adjustment(provider: str, alpaca: AlpacaSettings, finnhub: FinnhubSettings) -> str:
    """Return what the ``provider``'s bars are adjusted for (the header's ``adjustment``)."""
    if provider == "alpaca":
        return {"raw": "not adjusted (Alpaca raw bars)",
                "split": "split-adjusted, not dividend-adjusted (Alpaca adjustment=split)",
                "dividend": "dividend-adjusted, not split-adjusted (Alpaca adjustment=dividend)",
                "all": "split- and dividend-adjusted (Alpaca adjustment=all)",
                }[alpaca.bars_adjustment]
    if finnhub.bars_adjusted:
        return "split- and dividend-adjusted (Finnhub adjusted=true)"
    return "split-adjusted, not dividend-adjusted (Finnhub daily candles)"


async def _get(session: aiohttp.ClientSession, url: str, params: Mapping[str, str],
               headers: Mapping[str, str], what: str) -> Any:
    """Return the decoded JSON answer of one request; raise :class:`HistoryError` (one line)."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT)
    try:
        async with session.get(url, params=params, headers=headers, timeout=timeout) as resp:
            status = resp.status
            body = await read_limited(resp, MAX_BYTES) if status == 200 else b""
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise HistoryError(redact_text(f"{what}: bars server unreachable: {exc!r}")[:300]
                           ) from None
    except PayloadTooLarge as exc:
        raise HistoryError(f"{what}: {exc}") from None
    if status in (401, 403):
        raise HistoryError(f"{what}: the bars endpoint refused the key (HTTP {status})")
    if status != 200:
        raise HistoryError(f"{what}: the bars endpoint answered HTTP {status}")
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise HistoryError(f"{what}: the bars endpoint answered invalid JSON") from None


def _bars_of(symbol: str, rows: Rows, window: HistoryWindow, notes: list[str]
             ) -> dict[date, Bar]:
    """Return the bars of ``rows`` by session day inside ``window``; note dropped rows."""
    bars: dict[date, Bar] = {}
    dropped: list[str] = []
    for t, o, h, lo, c, v in rows:
        ts, close = _time(t), number(c)
        if ts is None or close is None or close <= 0:
            dropped.append(f"time {str(t)[:40]!r}, close {str(c)[:40]!r}")
            continue
        day = datetime.fromtimestamp(ts + BAR_DAY_SHIFT, UTC).astimezone(NY).date()
        if day not in window.sessions:
            continue
        op = number(o)
        bars[day] = Bar(ts, op if op is not None and op > 0 else None, close, _value(h),
                        _value(lo), _value(v))
    if dropped:
        notes.append(f"{symbol}: {len(dropped)} bar(s) without a valid time or close dropped"
                     f" (first: {dropped[0]})")
    if not bars:
        raise HistoryError(f"{symbol}: no daily bars between {window.start} and {window.end}")
    return bars


def _time(t: Any) -> float | None:
    """Return epoch seconds of a Unix time or an RFC 3339 string, else ``None``."""
    if isinstance(t, str):
        try:
            parsed = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed.timestamp() if parsed.tzinfo is not None else None
    return number(t)


def _value(x: Any) -> float | None:
    """Return a reported value: ``None`` when absent, NaN when not a finite number."""
    if x is None:
        return None
    v = number(x)
    return float("nan") if v is None else v


async def fetch_alpaca_bars(settings: AlpacaSettings, tickers: Sequence[str],
                            window: HistoryWindow, notes: list[str]
                            ) -> dict[str, dict[date, Bar]]:
    """Return the daily bars of ``tickers`` from Alpaca's historical bars endpoint."""
    try:
        headers = {"APCA-API-KEY-ID": secret_from_env(settings.key_env),
                   "APCA-API-SECRET-KEY": secret_from_env(settings.secret_env),
                   "Accept": "application/json"}
    except MissingCredentialError as exc:
        raise HistoryError(f"--bars alpaca: {exc}") from None
    p1, p2 = window.period()
    params = {"symbols": ",".join(tickers), "timeframe": "1Day", "start": _rfc3339(p1),
              "end": _rfc3339(p2), "adjustment": settings.bars_adjustment, "limit": "10000"}
    if settings.bars_feed:
        params["feed"] = settings.bars_feed
    rows: dict[str, Rows] = {s: [] for s in tickers}
    async with aiohttp.ClientSession() as session:
        token: str | None = None
        for _ in range(MAX_PAGES):
            page = await _get(session, settings.bars_url,
                              {**params, **({"page_token": token} if token else {})},
                              headers, "alpaca bars")
            got = page.get("bars") if isinstance(page, dict) else None
            if got is not None and not isinstance(got, dict):
                raise HistoryError("alpaca bars: the answer's 'bars' is not an object")
            for symbol, items in (got or {}).items():
                if symbol in rows and isinstance(items, list):
                    rows[symbol] += [(b.get("t"), b.get("o"), b.get("h"), b.get("l"),
                                      b.get("c"), b.get("v")) if isinstance(b, dict)
                                     else (None,) * 6 for b in items]
            nxt = page.get("next_page_token") if isinstance(page, dict) else None
            if not isinstance(nxt, str) or not nxt:
                break
            token = nxt
        else:
            raise HistoryError(f"alpaca bars: more than {MAX_PAGES} pages; shorten the window")
    return {s: _bars_of(s, rows[s], window, notes) for s in tickers}


async def fetch_finnhub_bars(settings: FinnhubSettings, tickers: Sequence[str],
                             window: HistoryWindow, notes: list[str]
                             ) -> dict[str, dict[date, Bar]]:
    """Return the daily candles of ``tickers`` from Finnhub's ``stock/candle`` endpoint."""
    try:
        token = secret_from_env(settings.key_env)
    except MissingCredentialError as exc:
        raise HistoryError(f"--bars finnhub: {exc}") from None
    p1, p2 = window.period()
    url = f"{settings.rest_url.rstrip('/')}/stock/candle"
    out: dict[str, dict[date, Bar]] = {}
    async with aiohttp.ClientSession() as session:
        for symbol in tickers:
            params = {"symbol": symbol, "resolution": "D", "from": str(p1), "to": str(p2),
                      "token": token}
            if settings.bars_adjusted:
                params["adjusted"] = "true"
            got = await _get(session, url, params, {"Accept": "application/json"},
                             f"{symbol}: finnhub candles")
            if not isinstance(got, dict) or got.get("s") not in ("ok", "no_data"):
                raise HistoryError(f"{symbol}: finnhub candles: not a candle answer")
            cols = [got.get(k) or [] for k in ("t", "o", "h", "l", "c", "v")]
            if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols[:5]
                                                                   if c}) > 1:
                raise HistoryError(f"{symbol}: finnhub candles: arrays of different lengths")
            n = len(cols[0])
            rows: Rows = [tuple(c[i] if i < len(c) else None for c in cols)  # type: ignore[misc]
                          for i in range(n)]
            out[symbol] = _bars_of(symbol, rows, window, notes)
    return out


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
