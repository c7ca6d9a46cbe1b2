"""Generate PortBench's multi-asset sample recording (synthetic, seeded, reproducible).

    python examples/make_portbench_sample.py --out examples/portbench-sample.jsonl.gz

One closing price per ticker per XNYS session (at the session's official close, as
``paperarena build-recording`` writes historical bars) from May to August 2026 for ten
instruments of PortBench's six asset classes: equities (SPY, QQQ, EFA), bonds (TLT, IEF),
commodities (GLD, DBC), real estate (VNQ), cash (BIL) and crypto (BTC-USD). Returns come from a
market factor and a bond factor (negatively correlated) with per-instrument loadings and noise,
and a five-session sell-off in July (stocks, real estate and crypto down, bonds and gold up);
a few headlines a week. The data is made up: it exercises the protocol, it is not a market.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from anywhere: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.core.events import ClockEvent, Event, NewsEvent, PriceEvent
from daemon.timing.nyse import get_nyse_calendar
from feeds.recording import RecordingHeader, RecordingWriter

START, END = date(2026, 5, 1), date(2026, 8, 31)
SOURCE = "portbench-sample"
#: ticker: (class, start price, loading on the market, on bonds, daily drift, noise sd)
UNIVERSE: dict[str, tuple[str, float, float, float, float, float]] = {
    "SPY": ("equities", 520.0, 1.0, 0.0, 0.0003, 0.002),
    "QQQ": ("equities", 450.0, 1.25, 0.0, 0.0004, 0.004),
    "EFA": ("equities", 80.0, 0.8, 0.0, 0.0001, 0.005),
    "TLT": ("bonds", 92.0, 0.0, 1.6, 0.0, 0.002),
    "IEF": ("bonds", 95.0, 0.0, 0.7, 0.0001, 0.001),
    "GLD": ("commodities", 220.0, 0.1, 0.3, 0.0002, 0.009),
    "DBC": ("commodities", 23.0, 0.3, 0.0, 0.0001, 0.011),
    "VNQ": ("real_estate", 85.0, 0.9, 0.4, 0.0001, 0.007),
    "BIL": ("cash", 91.5, 0.0, 0.0, 0.00017, 0.00005),
    "BTC-USD": ("crypto", 65000.0, 1.5, 0.0, 0.0006, 0.028),
}
SELL_OFF = (date(2026, 7, 13), date(2026, 7, 17))
HEADLINES = {
    "SPY": ("Stocks edge higher as earnings beat forecasts", "Equities slip on growth worries"),
    "TLT": ("Treasuries rally as inflation cools", "Long bonds fall on strong payrolls"),
    "GLD": ("Gold firms as investors seek safety", "Gold eases as the dollar strengthens"),
    "BTC-USD": ("Bitcoin climbs on ETF inflows", "Crypto slides as risk appetite fades"),
}


def events(seed: int = 13) -> tuple[RecordingHeader, list[Event]]:
    """Return the header and the events, sorted by time."""
    cal = get_nyse_calendar()
    rng = np.random.default_rng(seed)
    sessions = []
    d = START
    while d <= END:
        bounds = cal.session_bounds(d)
        if bounds is not None:
            sessions.append((d, bounds[0].timestamp(), bounds[1].timestamp()))
        d = date.fromordinal(d.toordinal() + 1)
    price = {t: spec[1] for t, spec in UNIVERSE.items()}
    out: list[Event] = []
    for k, (day, open_ts, close_ts) in enumerate(sessions):
        stressed = SELL_OFF[0] <= day <= SELL_OFF[1]
        market = rng.normal(-0.025 if stressed else 0.0004, 0.011)
        bonds = -0.3 * (market - 0.0004) * 0.45 + rng.normal(0.004 if stressed else 0.0, 0.004)
        for ticker, (_, _, beta, duration, drift, sd) in UNIVERSE.items():
            r = drift + beta * market + duration * bonds + rng.normal(0.0, sd)
            price[ticker] *= float(np.exp(r))
            out.append(PriceEvent(ts=close_ts, recv_ts=close_ts, market="equity", asset=ticker,
                                  price=round(price[ticker], 4), source=SOURCE))
        if k % 2 == 0:  # a headline every other session, before the decision at close-30m
            ticker = sorted(HEADLINES)[(k // 2) % len(HEADLINES)]
            up, down = HEADLINES[ticker]
            ts = open_ts + 3600.0
            out.append(NewsEvent(ts=ts, recv_ts=ts, id=f"pbs-{day.isoformat()}-{ticker}",
                                 headline=down if market < 0 else up, source="Sample Wire",
                                 keys=(ticker,)))
    out.sort(key=lambda e: e.ts)
    end = sessions[-1][2] + 3600.0
    out.append(ClockEvent(ts=end, recv_ts=end, reason="end of sample"))
    header = RecordingHeader(
        start=sessions[0][1], end=end, equities=tuple(UNIVERSE),
        description=f"PortBench multi-asset sample: daily closes {START}..{END} (synthetic)",
        meta={"source": SOURCE, "generator": "examples/make_portbench_sample.py", "seed": seed,
              "classes": {t: spec[0] for t, spec in UNIVERSE.items()}},
    )
    return header, out


def main(argv: list[str] | None = None) -> int:
    """Write the sample recording."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--out", default="examples/portbench-sample.jsonl.gz")
    p.add_argument("--seed", type=int, default=13)
    args = p.parse_args(argv)
    header, evs = events(args.seed)
    with RecordingWriter(args.out, header) as w:
        for e in evs:
            w.write(e)
    sys.stderr.write(f"wrote {len(evs)} events to {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
