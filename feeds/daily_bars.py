"""Daily OHLCV bars of history sources: the window, the bar, its checks, Yahoo's chart arrays.

:class:`HistoryWindow` is the NYSE sessions of a date window and :class:`HistoryError` the
one-line failure of every history fetch.

A :class:`Bar` is what a history endpoint says of one session: its start, open, high, low,
close and volume. :func:`bar_problem` names what makes a bar unusable as OHLCV (a missing or
non-finite high or low, a high below the low, a range that does not hold the open or the close,
a negative volume); such a bar keeps its open and close prints but gets no
:class:`~daemon.core.events.BarEvent` (the builder reports it in one line).
:func:`yahoo_quotes` reads the ``open``/``high``/``low``/``volume`` arrays of a chart payload,
:func:`yahoo_adjcloses` its dividend-adjusted closes (``indicators.adjclose``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from daemon.core.events import BarEvent
from daemon.timing.nyse import NY, get_nyse_calendar

__all__ = ["BAR_DAY_SHIFT", "Bar", "HistoryError", "HistoryWindow", "bar_event", "bar_problem",
           "number", "yahoo_adjcloses", "yahoo_quotes"]

#: Seconds added to a bar's start before taking its New York date: a bar starts at its own
#: exchange's open (09:30 New York for US stocks, 00:00 UTC for crypto, 09:30 Shanghai), which is
#: on the trading day itself once shifted half a day forward.
BAR_DAY_SHIFT = 12 * 3600.0

#: Relative slack allowed when checking that the range holds the open and the close (sources
#: round adjusted prices independently).
RANGE_SLACK = 1e-6


class HistoryError(Exception):
    """The history recording cannot be built (one-line message)."""


@dataclass(frozen=True)
class HistoryWindow:
    """The NYSE sessions of a date window: session day -> (open, close) epoch seconds."""

    start: date
    end: date
    sessions: dict[date, tuple[float, float]]

    @classmethod
    def of(cls, start: date, end: date) -> HistoryWindow:
        """Return the sessions of ``[start, end]``; raise if the window is inverted or empty."""
        if start > end:
            raise HistoryError(f"--start {start} is after --end {end}")
        cal = get_nyse_calendar()
        sessions: dict[date, tuple[float, float]] = {}
        day = start
        while day <= end:
            bounds = cal.session_bounds(day)
            if bounds is not None:
                sessions[day] = (bounds[0].timestamp(), bounds[1].timestamp())
            day += timedelta(days=1)
        if not sessions:
            raise HistoryError(f"no NYSE session between {start} and {end}")
        return cls(start, end, sessions)

    def period(self) -> tuple[int, int]:
        """Return Yahoo's ``period1``/``period2`` with a day to spare on each side.

        The margin keeps bars that start before New York midnight (crypto at 00:00 UTC, Asian
        exchanges); bars outside the window are dropped by their day afterwards.
        """
        first = datetime.combine(self.start - timedelta(days=1), time(0), NY)
        after = datetime.combine(self.end + timedelta(days=2), time(0), NY)
        return int(first.timestamp()), int(after.timestamp())


@dataclass(frozen=True, slots=True)
class Bar:
    """One daily bar: its start (epoch seconds), open (``None``: not reported), close, and
    high, low and volume (``None``: not reported)."""

    start: float
    open: float | None
    close: float
    high: float | None = None
    low: float | None = None
    volume: float | None = None


def number(x: Any) -> float | None:
    """Return ``x`` as a finite float (an int or a float, not a bool), else ``None``."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def bar_problem(bar: Bar) -> str | None:
    """Return why ``bar`` is not a usable OHLCV bar (one phrase), or ``None`` if it is."""
    hi, lo = bar.high, bar.low
    if hi is None or lo is None:
        return "no high or low reported"
    if not (math.isfinite(hi) and math.isfinite(lo) and lo > 0):
        return f"high {hi!r} or low {lo!r} is not a positive number"
    if hi < lo:
        return f"high {hi:g} is below low {lo:g}"
    slack = RANGE_SLACK * hi
    for name, v in (("open", bar.open), ("close", bar.close)):
        if v is not None and not lo - slack <= v <= hi + slack:
            return f"{name} {v:g} is outside the range {lo:g}..{hi:g}"
    if bar.volume is not None and (not math.isfinite(bar.volume) or bar.volume < 0):
        return f"volume {bar.volume!r} is not a non-negative number"
    return None


def bar_event(bar: Bar, *, ts: float, asset: str, day: str, source: str) -> BarEvent:
    """Return the bar as an event at ``ts`` (the session's close); the bar must be usable."""
    assert bar.high is not None and bar.low is not None
    return BarEvent(ts=ts, recv_ts=ts, market="equity", asset=asset, day=day, open=bar.open,
                    high=bar.high, low=bar.low, close=bar.close, volume=bar.volume,
                    source=source)


def yahoo_quotes(payload: Any) -> dict[float, dict[str, float | None]]:
    """Return bar start -> ``open``/``high``/``low``/``volume`` of a chart payload.

    A null or absent value is ``None`` (not reported); a value that is not a finite number is
    NaN, so :func:`bar_problem` names it; an unreadable payload gives ``{}``.
    """
    try:
        r0 = payload["chart"]["result"][0]
        stamps, quote = r0["timestamp"], r0["indicators"]["quote"][0]
        cols = {k: quote.get(k) or [] for k in ("open", "high", "low", "volume")}
    except (KeyError, TypeError, IndexError, AttributeError):
        return {}
    if not isinstance(stamps, list) or not all(isinstance(c, list) for c in cols.values()):
        return {}
    out: dict[float, dict[str, float | None]] = {}
    for i, t in enumerate(stamps):
        ts = number(t)
        if ts is None:
            continue
        row: dict[str, float | None] = {}
        for k, col in cols.items():
            v = col[i] if i < len(col) else None
            row[k] = None if v is None else (number(v) if number(v) is not None else math.nan)
        out[ts] = row
    return out


def yahoo_adjcloses(payload: Any) -> dict[float, float | None]:
    """Return bar start -> dividend-adjusted close (``indicators.adjclose``) of a chart payload.

    A null, absent, non-finite or non-positive value is ``None``; an unreadable payload or one
    without the array gives ``{}``.
    """
    try:
        r0 = payload["chart"]["result"][0]
        stamps, adj = r0["timestamp"], r0["indicators"]["adjclose"][0]["adjclose"]
    except (KeyError, TypeError, IndexError, AttributeError):
        return {}
    if not isinstance(stamps, list) or not isinstance(adj, list):
        return {}
    out: dict[float, float | None] = {}
    for i, t in enumerate(stamps):
        ts = number(t)
        if ts is None:
            continue
        v = number(adj[i]) if i < len(adj) and adj[i] is not None else None
        out[ts] = v if v is not None and math.isfinite(v) and v > 0 else None
    return out
