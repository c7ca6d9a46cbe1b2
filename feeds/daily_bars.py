"""Daily OHLCV bars of history sources: the bar, its checks, and Yahoo's chart arrays.

A :class:`Bar` is what a history endpoint says of one session: its start, open, high, low,
close and volume. :func:`bar_problem` names what makes a bar unusable as OHLCV (a missing or
non-finite high or low, a high below the low, a range that does not hold the open or the close,
a negative volume); such a bar keeps its open and close prints but gets no
:class:`~daemon.core.events.BarEvent` (the builder reports it in one line).
:func:`yahoo_quotes` reads the ``open``/``high``/``low``/``volume`` arrays of a chart payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from daemon.core.events import BarEvent

__all__ = ["Bar", "bar_event", "bar_problem", "number", "yahoo_quotes"]

#: Relative slack allowed when checking that the range holds the open and the close (sources
#: round adjusted prices independently).
RANGE_SLACK = 1e-6


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
