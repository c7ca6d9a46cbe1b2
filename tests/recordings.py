"""Small synthetic recordings for tests (deterministic, seconds to build)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np

from daemon.core.events import Event, MarketListed, NewsEvent, PriceEvent, ResolutionEvent
from daemon.timing.nyse import get_nyse_calendar
from feeds.recording import RecordingHeader, RecordingWriter

TICKERS = ("AAPL", "MSFT", "NVDA", "JPM")
TINY_CONFIG = """
[markets.equity]
assets = ["AAPL", "MSFT", "NVDA", "JPM"]
cost = { preset = "realistic" }

[markets.polymarket]
cost = { fee_bps = 5 }
[markets.polymarket.schedule]
kind = "interval"
every = "6h"
timezone = "UTC"

[[agents]]
id = "bh"
kind = "buy_and_hold"
[[agents]]
id = "ew"
kind = "equal_weight"
[[agents]]
id = "mom"
kind = "momentum"
lookback_days = 2
top_k = 2
[[agents]]
id = "cash"
kind = "cash"
"""


def make_recording(path: Path, *, days: int = 8, step: float = 300.0, seed: int = 1,
                   extra: Sequence[Event] = ()) -> int:
    """Write a recording of ``days`` calendar days starting Mon 2026-11-02; return its size.

    ``extra`` events are merged in by time (e.g. an after-hours print).
    """
    cal = get_nyse_calendar()
    rng = np.random.default_rng(seed)
    start = datetime(2026, 11, 2, tzinfo=UTC).timestamp()
    evs: list = [MarketListed(ts=start + 1, recv_ts=start + 1, question_id="q1",
                              question="Will it rain?", yes_asset="y1", no_asset="n1"),
                 MarketListed(ts=start + 1, recv_ts=start + 1, question_id="q2",
                              question="Will it snow?", yes_asset="y2", no_asset="n2")]
    px = dict.fromkeys(TICKERS, 100.0)
    for k in range(days):
        bounds = cal.session_bounds(date(2026, 11, 2) + timedelta(days=k))
        if bounds is None:
            continue
        t, close = bounds[0].timestamp() + step, bounds[1].timestamp()
        while t <= close:
            for s in TICKERS:
                px[s] *= float(np.exp(rng.normal(0.0002, 0.002)))
                evs.append(PriceEvent(ts=t, recv_ts=t + 0.1, market="equity", asset=s,
                                      price=round(px[s], 2)))
            t += step
    p = {"q1": 0.4, "q2": 0.7}
    for h in range(24 * days):
        t = start + 3600 * h + 5
        for q, (y, n) in {"q1": ("y1", "n1"), "q2": ("y2", "n2")}.items():
            p[q] = min(0.95, max(0.05, p[q] + float(rng.normal(0, 0.03))))
            evs.append(PriceEvent(ts=t, recv_ts=t, market="polymarket", asset=y,
                                  price=round(p[q], 3)))
            evs.append(PriceEvent(ts=t, recv_ts=t, market="polymarket", asset=n,
                                  price=round(1 - p[q], 3)))
    for i in range(3 * days):
        t = start + 28_800 * i + 17
        evs.append(NewsEvent(ts=t, recv_ts=t + 1, id=f"n{i}", headline=f"headline {i}",
                             source="wire", keys=(TICKERS[i % len(TICKERS)],)))
    evs.sort(key=lambda e: e.ts)
    mid = start + 86_400 * days / 2
    evs.append(ResolutionEvent(ts=mid, recv_ts=mid, question_id="q1",
                               payouts={"y1": 1.0, "n1": 0.0}))
    evs = [e for e in evs if not (e.ts > mid and getattr(e, "asset", "") in ("y1", "n1"))]
    evs.extend(extra)
    evs.sort(key=lambda e: e.ts)
    header = RecordingHeader(
        start=start, end=evs[-1].ts, description="test recording", equities=TICKERS,
        questions=({"id": "q1", "question": "Will it rain?", "yes": "y1", "no": "n1"},
                   {"id": "q2", "question": "Will it snow?", "yes": "y2", "no": "n2"}),
    )
    with RecordingWriter(path, header) as w:
        for e in evs:
            w.write(e)
    return len(evs)
