"""Generate the shipped sample recording (synthetic, seeded, byte-for-byte reproducible).

    python examples/make_sample_recording.py --out examples/sample.jsonl.gz --seed 7

Equities: 15 tickers, one PriceEvent per ticker per minute of every XNYS regular session (times
from ``exchange_calendars``), from a market + sector + idiosyncratic factor model with per-name
beta and volatility, overnight gaps, earnings gaps, a U-shaped intraday volatility profile and a
three-session sell-off whose equal-weight return is pinned. Polymarket: binary questions priced
24/7 every 5 minutes by a bounded logit-space walk (optionally pulled toward a scripted path),
with YES/NO books mirrored around 1, resolutions and a market that swings hard then resolves NO.
News: headlines per ticker and per question, some tied to the simulated moves. See README.md.

Why one module over 500 lines: one deterministic generator: every part of the sample (prices,
questions, news, resolutions) draws from one seeded stream in a fixed order, so the recording is
byte-identical; split, the order would be spread over modules.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import exchange_calendars as xcals
import numpy as np

if __package__ in (None, ""):  # run as a script from anywhere: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.core.events import (
    Event,
    MarketListed,
    NewsEvent,
    PriceEvent,
    ResolutionEvent,
)
from feeds.recording import RecordingHeader, RecordingWriter

NY = ZoneInfo("America/New_York")
GENERATOR = "examples/make_sample_recording.py"
SOURCE = "sample"
MINUTES_PER_DAY = 390
TRADING_DAYS = 252

# --------------------------------------------------------------------------------------------
# Universe


@dataclass(frozen=True)
class Stock:
    """One simulated equity: starting price, beta, annualised vol, spread and earnings."""

    ticker: str
    name: str
    sector: str
    price: float
    beta: float
    vol: float
    spread_bps: float
    earnings: tuple[str, str, float] | None = None  # (date, "bmo" | "amc", typical move)


STOCKS: tuple[Stock, ...] = (
    Stock("AAPL", "Apple", "tech", 255.0, 1.15, 0.27, 0.6, ("2026-10-29", "amc", 0.04)),
    Stock("MSFT", "Microsoft", "tech", 515.0, 1.05, 0.25, 0.8, ("2026-10-28", "amc", 0.045)),
    Stock("NVDA", "Nvidia", "tech", 185.0, 1.75, 0.52, 0.8),
    Stock("META", "Meta", "tech", 720.0, 1.30, 0.38, 1.2, ("2026-10-28", "amc", 0.07)),
    Stock("JPM", "JPMorgan", "financials", 305.0, 1.05, 0.24, 1.0),
    Stock("V", "Visa", "financials", 345.0, 0.95, 0.21, 1.0, ("2026-10-27", "amc", 0.035)),
    Stock("XOM", "Exxon Mobil", "energy", 114.0, 0.60, 0.26, 1.2, ("2026-10-30", "bmo", 0.025)),
    Stock("CAT", "Caterpillar", "industrials", 520.0, 1.10, 0.31, 2.0, ("2026-10-29", "bmo", 0.05)),
    Stock("TSLA", "Tesla", "discretionary", 440.0, 2.00, 0.60, 1.0, ("2026-10-21", "amc", 0.08)),
    Stock(
        "PG", "Procter & Gamble", "staples", 152.0, 0.40, 0.17, 1.0, ("2026-10-20", "bmo", 0.025)
    ),
    Stock("KO", "Coca-Cola", "staples", 69.0, 0.45, 0.16, 1.5, ("2026-10-21", "bmo", 0.025)),
    Stock("AMZN", "Amazon", "discretionary", 225.0, 1.30, 0.33, 0.7, ("2026-10-29", "amc", 0.06)),
    Stock("WMT", "Walmart", "staples", 103.0, 0.50, 0.20, 1.5, ("2026-11-17", "bmo", 0.04)),
    Stock("JNJ", "Johnson & Johnson", "health", 190.0, 0.45, 0.17, 1.2),
    Stock("UNH", "UnitedHealth", "health", 345.0, 0.70, 0.34, 2.0),
)

#: Annualised volatility of each sector factor (loading 1 for its members).
SECTOR_VOL: dict[str, float] = {
    "tech": 0.11,
    "financials": 0.10,
    "energy": 0.16,
    "industrials": 0.10,
    "discretionary": 0.12,
    "staples": 0.08,
    "health": 0.10,
}
SECTORS: tuple[str, ...] = tuple(SECTOR_VOL)
SECTOR_LABEL = {
    "tech": "tech",
    "financials": "bank and payments",
    "energy": "energy",
    "industrials": "industrial",
    "discretionary": "consumer",
    "staples": "consumer staples",
    "health": "health-care",
}

MARKET_VOL = 0.15  # annualised market-factor vol in calm regimes
MARKET_DRIFT = 0.07  # annualised
OVERNIGHT_SHARE = 0.2  # share of a day's variance realised overnight
STUDENT_DF = 5.0

# Stress episode: three sessions whose equal-weight mean log return is pinned, then a rebound.
STRESS_RETURN = math.log(0.90)
STRESS_SPLIT = (0.30, 0.45, 0.25)
STRESS_VOL = (2.4, 3.0, 2.6, 2.0, 1.6, 1.35, 1.15)
STRESS_SPREAD = (1.6, 2.2, 1.9, 1.4, 1.2)
STRESS_TILT = {  # extra sector log return over the episode
    "tech": -0.035,
    "financials": -0.015,
    "energy": 0.0,
    "industrials": -0.01,
    "discretionary": -0.025,
    "staples": 0.025,
    "health": 0.02,
}
REBOUND = (0.012, 0.009, 0.006)


# --------------------------------------------------------------------------------------------
# Time helpers


def et(day: str, hhmm: str) -> float:
    """Return epoch seconds of a New York wall-clock time (DST-aware)."""
    y, m, d = (int(x) for x in day.split("-"))
    hh, mm = (int(x) for x in hhmm.split(":"))
    return datetime(y, m, d, hh, mm, tzinfo=NY).timestamp()


def et_of(ts: float, hhmm: str) -> float:
    """Return the epoch seconds of ``hhmm`` New York time on the New York date of ``ts``."""
    return et(datetime.fromtimestamp(ts, NY).date().isoformat(), hhmm)


def ny_date(ts: float) -> date:
    """Return the New York calendar date of an epoch time."""
    return datetime.fromtimestamp(ts, NY).date()


@dataclass(frozen=True)
class Session:
    """One NYSE session: its date and open/close epoch seconds."""

    day: date
    open: float
    close: float

    @property
    def minutes(self) -> int:
        """Return the number of regular-session minutes."""
        return round((self.close - self.open) / 60)


def nyse_sessions(start: str, count: int) -> list[Session]:
    """Return ``count`` consecutive XNYS sessions from ``start`` (half days and holidays kept)."""
    first = datetime.strptime(start, "%Y-%m-%d").date()
    cal = xcals.get_calendar("XNYS")
    days = cal.sessions_in_range(first.isoformat(), (first + timedelta(days=2 * count + 14)))
    if len(days) < count:
        raise ValueError(f"the XNYS calendar has only {len(days)} sessions from {start}")
    return [
        Session(d.date(), cal.session_open(d).timestamp(), cal.session_close(d).timestamp())
        for d in days[:count]
    ]


# --------------------------------------------------------------------------------------------
# Equities


def tnoise(rng: np.random.Generator, size: int | None = None) -> Any:
    """Draw unit-variance Student-t noise (fat-tailed minute returns)."""
    scale = math.sqrt((STUDENT_DF - 2.0) / STUDENT_DF)
    return rng.standard_t(STUDENT_DF, size) * scale


def intraday_shape(n: int) -> np.ndarray:
    """Return the U-shaped per-minute variance profile (mean 1 over a full day)."""
    m = np.arange(n, dtype=float)
    shape = 1.0 + 2.2 * np.exp(-m / 20.0) + 0.9 * np.exp(-(n - 1 - m) / 25.0)
    full = np.arange(MINUTES_PER_DAY, dtype=float)
    norm = (
        1.0 + 2.2 * np.exp(-full / 20.0) + 0.9 * np.exp(-(MINUTES_PER_DAY - 1 - full) / 25.0)
    ).mean()
    return shape / norm


@dataclass
class EquityPaths:
    """Simulated equity minutes: times, prices/bids/asks in cents, and bookkeeping."""

    ts: np.ndarray  # (T,) minute-end epoch seconds
    session_of: np.ndarray  # (T,) session index
    cents: np.ndarray  # (n_stocks, T)
    bid: np.ndarray
    ask: np.ndarray
    close_idx: list[int]  # index of each session's last minute
    #: ticker -> (session index of the earnings gap, log jump)
    earnings: dict[str, tuple[int, float]] = field(default_factory=dict)


def _gap_variance_factor(prev: Session | None, cur: Session) -> float:
    if prev is None:
        return 1.0
    return 1.3 if (cur.day - prev.day).days > 1 else 1.0


def simulate_equities(
    rng: np.random.Generator, sessions: Sequence[Session], stress_at: int | None
) -> EquityPaths:
    """Simulate minute prices for every stock over the sessions.

    Log return of stock i = beta_i * market + sector(i) + idiosyncratic (+ earnings gap). All
    noise is drawn first, then drifts are added, so each stress session's equal-weight average
    log return can be pinned exactly (``STRESS_RETURN`` split by ``STRESS_SPLIT``).
    """
    n_days = len(sessions)
    n_stocks = len(STOCKS)
    beta = np.array([s.beta for s in STOCKS])
    sector_ix = np.array([SECTORS.index(s.sector) for s in STOCKS])
    sector_vol = np.array([SECTOR_VOL[s] for s in SECTORS])
    total_var = np.array([s.vol**2 for s in STOCKS])
    idio_vol = np.sqrt(
        np.maximum(total_var - (beta * MARKET_VOL) ** 2 - sector_vol[sector_ix] ** 2, 0.05**2)
    )
    day = 1.0 / math.sqrt(TRADING_DAYS)
    stress_days = (
        [stress_at + k for k in range(3)]
        if stress_at is not None and stress_at + 3 <= n_days
        else []
    )

    # Volatility regime: AR(1) in log space, multiplied up during and after the stress episode.
    regime = np.empty(n_days)
    logm = 0.0
    for d in range(n_days):
        logm = 0.7 * logm + 0.12 * rng.standard_normal()
        regime[d] = math.exp(logm)
    stress_mult = np.ones(n_days)
    spread_mult = np.ones(n_days)
    if stress_days:
        for k, v in enumerate(STRESS_VOL):
            if stress_days[0] + k < n_days:
                stress_mult[stress_days[0] + k] = v
        for k, v in enumerate(STRESS_SPREAD):
            if stress_days[0] + k < n_days:
                spread_mult[stress_days[0] + k] = v
    regime *= stress_mult
    sector_regime = 1.0 + 0.5 * (regime - 1.0)
    idio_regime = np.where(stress_mult > 1.0, 1.0 + 0.15 * (stress_mult - 1.0), 1.0)

    # Earnings gaps (announced before the open, or after the previous close).
    earn_gap = np.zeros((n_stocks, n_days))
    earn_day = np.zeros((n_stocks, n_days), dtype=bool)
    earnings: dict[str, tuple[int, float]] = {}
    day_index = {s.day.isoformat(): d for d, s in enumerate(sessions)}
    for i, st in enumerate(STOCKS):
        if st.earnings is None:
            continue
        when, timing, move = st.earnings
        z = rng.standard_normal()
        jump = math.copysign(move * max(0.35, abs(z)), z)
        d = day_index.get(when)
        if d is None:
            continue
        d = d + 1 if timing == "amc" else d
        if d >= n_days:
            continue
        earn_gap[i, d] = jump
        earn_day[i, d] = True
        earnings[st.ticker] = (d, jump)

    # Noise, session by session: market factor, sectors, idiosyncratic, spread jitter.
    m_gap = np.empty(n_days)
    m_min: list[np.ndarray] = []
    x_gap: list[np.ndarray] = []  # non-market part of each stock's overnight gap
    x_min: list[np.ndarray] = []  # non-market part of each stock's minute returns
    jitter: list[np.ndarray] = []
    for d, s in enumerate(sessions):
        n = s.minutes
        gap_var = OVERNIGHT_SHARE * (_gap_variance_factor(sessions[d - 1], s) if d else 1.0)
        minute_sd = np.sqrt((1 - OVERNIGHT_SHARE) / MINUTES_PER_DAY * intraday_shape(n))
        sig = MARKET_VOL * day * regime[d]
        m_gap[d] = sig * math.sqrt(gap_var) * tnoise(rng)
        m_min.append(sig * minute_sd * tnoise(rng, n))
        sec_sig = sector_vol * day * sector_regime[d]
        s_gap = sec_sig * math.sqrt(gap_var) * tnoise(rng, len(SECTORS))
        s_min = sec_sig[:, None] * minute_sd[None, :] * tnoise(rng, (len(SECTORS), n))
        if d in stress_days:
            tilt = np.array([STRESS_TILT[k] for k in SECTORS])
            w = STRESS_SPLIT[stress_days.index(d)]
            s_gap += 0.35 * w * tilt
            s_min += (0.65 * w * tilt / n)[:, None]
        i_sig = idio_vol * day * idio_regime[d]
        i_gap = i_sig * math.sqrt(gap_var) * tnoise(rng, n_stocks)
        burst = np.where(earn_day[:, d][:, None], 1.0 + 1.5 * np.exp(-np.arange(n) / 45.0), 1.0)
        i_min = i_sig[:, None] * minute_sd[None, :] * burst * tnoise(rng, (n_stocks, n))
        x_gap.append(s_gap[sector_ix] + i_gap + earn_gap[:, d])
        x_min.append(s_min[sector_ix] + i_min)
        jitter.append(np.exp(0.25 * rng.standard_normal((n_stocks, n))))

    # Drifts: a small market drift, the pinned sell-off, then a relief rally.
    def add_market(d: int, total: float, gap_share: float) -> None:
        m_gap[d] += gap_share * total
        m_min[d] += (1.0 - gap_share) * total / sessions[d].minutes

    for d in range(n_days):
        if d in stress_days:
            w = STRESS_SPLIT[stress_days.index(d)]
            current = float(
                np.mean(beta * (m_gap[d] + m_min[d].sum()) + x_gap[d] + x_min[d].sum(axis=1))
            )
            add_market(d, (w * STRESS_RETURN - current) / float(beta.mean()), 0.35)
        else:
            add_market(d, MARKET_DRIFT / TRADING_DAYS, OVERNIGHT_SHARE)
    if stress_days:
        for k, r in enumerate(REBOUND):
            d = stress_days[-1] + 1 + k
            if d < n_days:
                add_market(d, r, 0.4)

    logp = np.log(np.array([s.price for s in STOCKS]))
    cents_days: list[np.ndarray] = []
    bid_days: list[np.ndarray] = []
    ask_days: list[np.ndarray] = []
    bps = np.array([s.spread_bps for s in STOCKS])
    for d, s in enumerate(sessions):
        n = s.minutes
        gap = beta * m_gap[d] + x_gap[d]
        rets = beta[:, None] * m_min[d][None, :] + x_min[d]
        path = logp[:, None] + gap[:, None] + np.cumsum(rets, axis=1)
        logp = path[:, -1]
        cents = np.rint(np.exp(path) * 100.0).astype(np.int64)
        open_mult = 1.0 + 1.5 * np.exp(-np.arange(n) / 8.0)
        quoted = cents * bps[:, None] / 1e4 * open_mult[None, :] * spread_mult[d] * jitter[d]
        spread = np.maximum(1, np.rint(quoted)).astype(np.int64)
        bid = cents - spread // 2
        cents_days.append(cents)
        bid_days.append(bid)
        ask_days.append(bid + spread)

    minutes = [s.minutes for s in sessions]
    return EquityPaths(
        ts=np.concatenate([s.open + 60.0 * np.arange(1, s.minutes + 1) for s in sessions]),
        session_of=np.repeat(np.arange(n_days), minutes),
        cents=np.concatenate(cents_days, axis=1),
        bid=np.concatenate(bid_days, axis=1),
        ask=np.concatenate(ask_days, axis=1),
        close_idx=[int(x) for x in np.cumsum(minutes) - 1],
        earnings=earnings,
    )


def latencies(rng: np.random.Generator, n: int, median: float, lo: float, hi: float) -> np.ndarray:
    """Draw receive latencies (lognormal around ``median``, clipped)."""
    return np.clip(median * np.exp(0.5 * rng.standard_normal(n)), lo, hi)


def equity_events(rng: np.random.Generator, paths: EquityPaths) -> list[Event]:
    """Turn simulated paths into one PriceEvent per ticker per minute."""
    n_stocks, n_ts = paths.cents.shape
    lat = latencies(rng, n_stocks * n_ts, 0.15, 0.05, 0.5).reshape(n_ts, n_stocks)
    ts_list = paths.ts.tolist()
    cents = paths.cents.T.tolist()
    bids = paths.bid.T.tolist()
    asks = paths.ask.T.tolist()
    lat_list = lat.tolist()
    tickers = [s.ticker for s in STOCKS]
    out: list[Event] = []
    for k, ts in enumerate(ts_list):
        row, brow, arow, lrow = cents[k], bids[k], asks[k], lat_list[k]
        for i, ticker in enumerate(tickers):
            out.append(
                PriceEvent(
                    ts=ts,
                    recv_ts=round(ts + lrow[i], 3),
                    market="equity",
                    asset=ticker,
                    price=row[i] / 100,
                    bid=brow[i] / 100,
                    ask=arow[i] / 100,
                    source=SOURCE,
                )
            )
    return out


# --------------------------------------------------------------------------------------------
# Polymarket


@dataclass
class Question:
    """One simulated binary question and its scripted path."""

    qid: str
    text: str
    p0: float
    vol: float  # logit-space vol per sqrt(day)
    end: float  # question end date (epoch s)
    kappa: float = 0.3  # pull toward the anchor path, per day
    anchors: list[tuple[float, float]] = field(default_factory=list)  # (ts, probability)
    jumps: list[tuple[float, float]] = field(default_factory=list)  # (ts, new probability)
    resolution: tuple[float, str] | None = None  # (ts, "yes" | "no" | "split")
    jump_rate: float = 0.3  # unscripted news jumps per day
    settle: float | None = None  # after this ts (outcome known) vol drops and the pull tightens
    yes: str = ""
    no: str = ""


def token_id(rng: np.random.Generator) -> str:
    """Draw a 77-digit decimal id like a real CLOB ERC-1155 token id."""
    n = int.from_bytes(rng.bytes(32), "big") % (9 * 10**76)
    return str(10**76 + n)


def logit(p: float) -> float:
    """Return log(p / (1 - p))."""
    return math.log(p / (1.0 - p))


@dataclass(frozen=True)
class StressTimes:
    """Key instants of the stress episode (epoch s)."""

    open0: float
    close0: float
    close1: float
    mid2: float
    close2: float
    close4: float
    close6: float


def questions(stress: StressTimes | None) -> list[Question]:
    """Return the simulated questions (ids look like Gamma market ids)."""
    fed_oct = Question(
        "711042",
        "Will the Fed cut rates at its October 2026 meeting?",
        0.74,
        0.25,
        et("2026-10-28", "14:00"),
        kappa=2.0,
        anchors=[
            (et("2026-10-19", "00:00"), 0.74),
            (et("2026-10-27", "12:00"), 0.85),
            (et("2026-10-28", "13:55"), 0.90),
            (et("2026-10-28", "14:05"), 0.992),
        ],
        jumps=[(et("2026-10-28", "14:00"), 0.985)],
        resolution=(et("2026-10-28", "16:30"), "yes"),
        settle=et("2026-10-28", "14:00"),
        jump_rate=0.1,
    )
    fed_dec = Question(
        "711057",
        "Will the Fed cut rates at its December 2026 meeting?",
        0.41,
        0.30,
        et("2026-12-09", "14:00"),
        kappa=1.0,
        anchors=[(et("2026-10-19", "00:00"), 0.41), (et("2026-10-28", "14:00"), 0.44)],
        jumps=[(et("2026-11-06", "08:30"), 0.58)],
    )
    unemp = Question(
        "713390",
        "Will the US unemployment rate for October 2026 be 4.6% or higher?",
        0.48,
        0.35,
        et("2026-11-06", "08:30"),
        kappa=0.5,
        anchors=[
            (et("2026-10-19", "00:00"), 0.48),
            (et("2026-11-06", "08:25"), 0.55),
            (et("2026-11-06", "08:30"), 0.985),
        ],
        jumps=[(et("2026-11-06", "08:30"), 0.97)],
        resolution=(et("2026-11-06", "10:45"), "yes"),
        settle=et("2026-11-06", "08:30"),
    )
    vix = Question(
        "714405",
        "Will the VIX close above 40 before November 14, 2026?",
        0.30,
        0.40,
        et("2026-11-13", "16:15"),
        kappa=0.5,
        anchors=[(et("2026-10-19", "00:00"), 0.30)],
        resolution=(et("2026-11-13", "19:30"), "no"),
        settle=et("2026-11-13", "16:15"),
    )
    starship = Question(
        "715112",
        "Will SpaceX's Starship complete a full orbit before November 15, 2026?",
        0.24,
        0.30,
        et("2026-11-14", "23:59"),
        kappa=1.5,
        anchors=[
            (et("2026-10-19", "00:00"), 0.24),
            (et("2026-11-01", "12:00"), 0.16),
            (et("2026-11-10", "12:00"), 0.08),
            (et("2026-11-14", "00:00"), 0.03),
            (et("2026-11-14", "23:59"), 0.004),
        ],
        jumps=[(et("2026-11-12", "13:10"), 0.05)],
        resolution=(et("2026-11-15", "14:00"), "no"),
        settle=et("2026-11-14", "23:59"),
    )
    nba = Question(
        "716873",
        "Will the Lakers beat the Celtics on November 8, 2026?",
        0.44,
        0.25,
        et("2026-11-08", "19:30"),
        kappa=0.8,
        anchors=[
            (et("2026-10-19", "00:00"), 0.44),
            (et("2026-11-08", "17:05"), 0.44),
            (et("2026-11-08", "17:10"), 0.5),
        ],
        jumps=[(et("2026-11-08", "17:10"), 0.5)],
        resolution=(et("2026-11-09", "12:00"), "split"),
        settle=et("2026-11-08", "17:10"),
    )
    btc = Question(
        "718204",
        "Will Bitcoin trade above $150,000 before December 31, 2026?",
        0.27,
        0.45,
        et("2026-12-31", "23:59"),
        kappa=0.4,
        anchors=[(et("2026-10-19", "00:00"), 0.27)],
    )
    nvda = Question(
        "719966",
        "Will Nvidia be the world's largest company by market cap on December 31, 2026?",
        0.63,
        0.30,
        et("2026-12-31", "23:59"),
        kappa=0.3,
        anchors=[(et("2026-10-19", "00:00"), 0.63)],
    )
    if stress is not None:
        late = et("2026-11-13", "12:00")
        vix.kappa = 6.0
        vix.anchors = [
            (et("2026-10-19", "00:00"), 0.30),
            (stress.open0, 0.30),
            (stress.close0, 0.50),
            (stress.close1, 0.76),
            (stress.mid2, 0.86),
            (stress.close2, 0.74),
            (stress.close4, 0.36),
            (stress.close6, 0.20),
        ]
        if late > stress.close6:
            vix.anchors += [(late, 0.05), (et("2026-11-13", "16:15"), 0.01)]
        fed_dec.anchors += [
            (stress.open0, 0.45),
            (stress.close2, 0.66),
            (stress.close6, 0.60),
        ]
        btc.anchors += [(stress.open0, 0.27), (stress.close2, 0.17), (stress.close6, 0.22)]
        nvda.anchors += [(stress.open0, 0.63), (stress.close2, 0.52), (stress.close6, 0.58)]
    for q in (fed_dec, btc, nvda):
        q.anchors.sort()
    return [fed_oct, fed_dec, unemp, vix, starship, nba, btc, nvda]


def _anchor_path(q: Question, grid: np.ndarray) -> np.ndarray:
    times = np.array([t for t, _ in q.anchors])
    values = np.array([logit(p) for _, p in q.anchors])
    return np.interp(grid, times, values)


def simulate_question(
    rng: np.random.Generator, q: Question, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return the YES mid path in ticks (1..999) and the half-spread in ticks, on ``grid``."""
    dt = float(grid[1] - grid[0]) / 86400.0 if len(grid) > 1 else 300 / 86400
    anchor = _anchor_path(q, grid)
    noise = tnoise(rng, len(grid)) * q.vol * math.sqrt(dt)
    jump_hit = rng.random(len(grid)) < q.jump_rate * dt
    jump_size = rng.standard_normal(len(grid)) * 0.35
    half = np.where(rng.random(len(grid)) < 0.6, 1, 2)
    scripted = sorted(q.jumps)
    settle = q.settle if q.settle is not None else math.inf
    x = logit(q.p0)
    out = np.empty(len(grid))
    j = 0
    for k, t in enumerate(grid.tolist()):
        if t < settle:
            x += q.kappa * dt * (anchor[k] - x) + noise[k]
            if jump_hit[k]:
                x += jump_size[k]
        else:
            x += min(1.0, 24.0 * dt) * (anchor[k] - x) + 0.1 * noise[k]
        while j < len(scripted) and scripted[j][0] <= t:
            x = logit(scripted[j][1])
            j += 1
        x = min(max(x, -5.3), 5.3)
        out[k] = x
    mid = np.clip(np.rint(1000.0 / (1.0 + np.exp(-out))), 1, 999).astype(np.int64)
    return mid, half


def polymarket_events(
    rng: np.random.Generator, qs: Sequence[Question], start: float, end: float, step: float
) -> list[Event]:
    """Return MarketListed, YES/NO PriceEvents every ``step`` s, and ResolutionEvents."""
    out: list[Event] = []
    for q in qs:
        q.yes, q.no = token_id(rng), token_id(rng)
        out.append(
            MarketListed(
                ts=start + 60.0,
                recv_ts=start + 60.25,
                question_id=q.qid,
                question=q.text,
                yes_asset=q.yes,
                no_asset=q.no,
                end_ts=q.end,
            )
        )
    grid = np.arange(start + step, end + 1.0, step)
    for q in qs:
        mid, half = simulate_question(rng, q, grid)
        no_noise = rng.choice(np.array([-1, 0, 0, 0, 0, 0, 0, 0, 1]), size=len(grid))
        lat = latencies(rng, 2 * len(grid), 0.12, 0.05, 0.5).tolist()
        stop = q.resolution[0] if q.resolution and q.resolution[0] <= end else math.inf
        for k, t in enumerate(grid.tolist()):
            if t >= stop:
                break
            m, h = int(mid[k]), int(half[k])
            bid, ask = max(1, m - h), min(999, m + h)
            no_mid = min(max(1000 - m + int(no_noise[k]), 1000 - ask), 1000 - bid)
            for asset, p, b, a, lt in (
                (q.yes, m, bid, ask, lat[2 * k]),
                (q.no, no_mid, 1000 - ask, 1000 - bid, lat[2 * k + 1]),
            ):
                out.append(
                    PriceEvent(
                        ts=t,
                        recv_ts=round(t + lt, 3),
                        market="polymarket",
                        asset=asset,
                        price=p / 1000,
                        bid=b / 1000,
                        ask=a / 1000,
                        source=SOURCE,
                    )
                )
        if q.resolution and q.resolution[0] <= end:
            ts, outcome = q.resolution
            payouts = {"yes": (1.0, 0.0), "no": (0.0, 1.0), "split": (0.5, 0.5)}[outcome]
            out.append(
                ResolutionEvent(
                    ts=ts,
                    recv_ts=ts + 2.5,
                    question_id=q.qid,
                    payouts={q.yes: payouts[0], q.no: payouts[1]},
                    source=SOURCE,
                )
            )
    return out


# --------------------------------------------------------------------------------------------
# News

PUBLISHERS: tuple[tuple[str, str, float], ...] = (
    ("Reuters", "www.reuters.com", 0.18),
    ("Bloomberg", "www.bloomberg.com", 0.14),
    ("CNBC", "www.cnbc.com", 0.12),
    ("MarketWatch", "www.marketwatch.com", 0.10),
    ("The Wall Street Journal", "www.wsj.com", 0.08),
    ("Barron's", "www.barrons.com", 0.07),
    ("Yahoo Finance", "finance.yahoo.com", 0.08),
    ("Investor's Business Daily", "www.investors.com", 0.05),
    ("Benzinga", "www.benzinga.com", 0.06),
    ("Financial Times", "www.ft.com", 0.04),
    ("Associated Press", "apnews.com", 0.04),
    ("The Motley Fool", "www.fool.com", 0.04),
)
BROKERS = (
    "Morgan Stanley",
    "Goldman Sachs",
    "JPMorgan",
    "BofA Securities",
    "Citi",
    "UBS",
    "Barclays",
    "Wells Fargo",
    "Bernstein",
    "Evercore ISI",
    "Jefferies",
    "Wedbush",
)
RATING_UP = ("Buy", "Overweight", "Outperform")
RATING_DOWN = ("Neutral", "Equal Weight", "Hold", "Market Perform")

ANALYST_TEMPLATES = (
    "{broker} raises {co} price target to ${up_target}, keeps {rating_up} rating",
    "{broker} cuts {co} price target to ${down_target}",
    "{broker} upgrades {co} to {rating_up}",
    "{broker} downgrades {co} to {rating_down}, citing valuation",
    "{broker} initiates coverage of {co} with {rating_up} rating",
    "Options traders position for bigger swings in {co}",
    "{co} stock: what analysts are watching this week",
)
#: Used at most once per ticker over the recording.
ONE_SHOT_TEMPLATES = (
    "{co} to present at {broker} conference next week",
    "Hedge funds added to {co} stakes last quarter, filings show",
    "{co} director sells shares, filing shows",
    "{co} declares regular quarterly dividend",
)
NO_DIVIDEND = frozenset({"TSLA", "AMZN"})
UP_TEMPLATES = (
    "{co} shares rise {pct}",
    "{co} stock climbs {pct} as {up_reason}",
)
OUTPERFORM_TEMPLATE = "{co} gains {pct}, outpacing the broader market"
DOWN_TEMPLATES = (
    "{co} shares fall {pct}",
    "{co} stock slides {pct} as {down_reason}",
    "{co} drops {pct}, among the weakest {sector} names",
)
UP_REASONS = (
    "analysts turn more bullish",
    "investors rotate back into {sector} names",
    "bond yields ease",
    "trading volume picks up",
)
DOWN_REASONS = (
    "investors take profits",
    "bond yields climb",
    "{sector} stocks come under pressure",
    "analysts flag valuation concerns",
)
SPECIFIC: dict[str, tuple[str, ...]] = {
    "AAPL": (
        "Apple expands Apple Intelligence to more languages in iOS update",
        "Apple supplier checks point to steady iPhone 18 Pro demand",
        "Apple faces EU deadline over App Store fee changes",
        "Apple adds AI servers to its US data-center buildout, report says",
        "Apple wins dismissal of smartwatch sensor patent suit",
    ),
    "MSFT": (
        "Microsoft signs multiyear Azure AI deal with European bank",
        "Microsoft expands Copilot agents for enterprise customers",
        "Microsoft to build new data centers in the Midwest",
        "Microsoft says Azure capacity constraints to ease next year",
        "Microsoft faces UK review of cloud licensing terms",
    ),
    "NVDA": (
        "Nvidia unveils next-generation networking chips for AI data centers",
        "Nvidia partners with automakers on self-driving compute platform",
        "TSMC says AI chip demand remains strong, a positive read for Nvidia",
        "US weighs tighter AI chip export rules; Nvidia says it complies with regulations",
        "Nvidia invests in AI cloud startup",
    ),
    "META": (
        "Meta rolls out new AI assistant features across WhatsApp and Instagram",
        "Meta's Reality Labs unveils lighter smart glasses",
        "Meta faces EU scrutiny over pay-or-consent advertising model",
        "Meta signs long-term power deal for data centers",
    ),
    "JPM": (
        "JPMorgan expands branch network in the Southeast",
        "JPMorgan CEO warns of risks from elevated asset prices",
        "JPMorgan launches AI tools for wealth advisers",
        "JPMorgan named lead underwriter on large tech IPO",
    ),
    "V": (
        "Visa expands tap-to-pay partnerships in Asia",
        "Visa widens stablecoin settlement pilot to more banks",
        "Visa and Mastercard face renewed merchant fee litigation",
        "Visa sees steady holiday spending trends, executive says",
    ),
    "XOM": (
        "Exxon boosts Permian output target",
        "Exxon starts production at new Guyana project",
        "Oil prices slip as OPEC+ weighs another output increase",
        "Exxon expands lithium project in Arkansas",
    ),
    "CAT": (
        "Caterpillar sees strong demand for data-center power generators",
        "Caterpillar dealer inventories edge lower, data show",
        "Caterpillar to expand engine plant capacity",
        "Caterpillar mining equipment orders rise",
    ),
    "TSLA": (
        "Tesla expands robotaxi service to more cities",
        "Tesla's European registrations fall again in October",
        "Tesla China sales rise in October",
        "Tesla recalls vehicles over software issue",
        "Tesla Semi production ramps at Nevada plant",
        "Tesla cuts Model Y prices in some markets",
    ),
    "PG": (
        "Procter & Gamble raises prices on select household products",
        "P&G says consumers remain cautious but market share is steady",
        "Procter & Gamble expands restructuring program",
    ),
    "KO": (
        "Coca-Cola launches new zero-sugar flavors for the holidays",
        "Coca-Cola bottler reports steady volumes in Latin America",
        "Coca-Cola expands ready-to-drink coffee line",
    ),
    "AMZN": (
        "Amazon Web Services unveils new custom AI chips",
        "Amazon expands same-day delivery network",
        "Amazon to hire seasonal workers for holiday rush",
        "Amazon's Project Kuiper launches more satellites",
        "Amazon announces dates for holiday shopping event",
    ),
    "WMT": (
        "Walmart expands drone delivery to more stores",
        "Walmart kicks off holiday deals earlier than usual",
        "Walmart adds online grocery pickup slots",
        "Walmart raises pay for store managers",
    ),
    "JNJ": (
        "Johnson & Johnson wins FDA approval for new cancer drug combination",
        "J&J launches surgical robot in Europe",
        "Court sets new hearing date in J&J talc litigation",
        "Johnson & Johnson presents late-stage data at medical conference",
    ),
    "UNH": (
        "UnitedHealth names new head of insurance unit",
        "UnitedHealth faces scrutiny over Medicare Advantage billing",
        "UnitedHealth's Optum expands value-based care clinics",
        "UnitedHealth reaffirms full-year outlook at investor conference",
    ),
}
QUESTION_NEWS: dict[str, tuple[str, ...]] = {
    "711042": (
        "Fed officials signal openness to another rate cut",
        "Traders price high odds of an October Fed rate cut",
        "Fed governor backs further easing as labor market cools",
    ),
    "711057": (
        "Fed speakers offer mixed signals on further easing",
        "Economists split on whether the Fed cuts again in December",
        "Futures traders trim bets on back-to-back Fed cuts",
    ),
    "713390": (
        "Jobless claims edge higher as hiring cools",
        "Economists expect October unemployment rate to tick up",
        "Private payrolls growth slows, ADP data show",
    ),
    "714405": (
        "Volatility sellers return as stocks grind higher",
        "VIX futures curve signals calm ahead of key data",
        "Wall Street's fear gauge hovers near multi-month lows",
    ),
    "715112": (
        "SpaceX targets mid-November for next Starship flight",
        "FAA yet to issue license for next Starship launch",
        "SpaceX completes static fire test of Starship booster",
    ),
    "716873": (
        "Lakers vs. Celtics preview: injury report and odds",
        "Celtics rally late to extend win streak",
        "Lakers star listed as probable for weekend game",
    ),
    "718204": (
        "Bitcoin ETF inflows slow as crypto rally stalls",
        "Bitcoin edges higher as risk appetite improves",
        "Crypto options traders eye year-end upside",
    ),
    "719966": (
        "Analysts debate whether Nvidia can keep its market-cap crown",
        "Big Tech market values jostle for top spot",
        "Nvidia supply chain signals strong data-center orders into 2027",
    ),
}
_DOMAIN_SECTION = ("markets", "business", "technology", "investing", "news")


@dataclass
class NewsMaker:
    """Build NewsEvents with unique ids, plausible urls and publisher sources."""

    rng: np.random.Generator
    start: float
    end: float
    events: list[Event] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    headlines: set[str] = field(default_factory=set)

    def publisher(self) -> tuple[str, str]:
        """Draw a publisher (name, domain) by weight."""
        weights = np.array([w for _, _, w in PUBLISHERS])
        k = int(self.rng.choice(len(PUBLISHERS), p=weights / weights.sum()))
        return PUBLISHERS[k][0], PUBLISHERS[k][1]

    def add(
        self,
        ts: float,
        headline: str,
        keys: tuple[str, ...],
        *,
        source: tuple[str, str] | None = None,
        summary: str = "",
    ) -> None:
        """Add one item if it falls inside the window and its headline is new (feeds dedupe)."""
        if not self.start < ts <= self.end or headline in self.headlines:
            return
        self.headlines.add(headline)
        name, domain = source or self.publisher()
        digest = hashlib.sha1(f"{ts}|{headline}|{keys}".encode()).hexdigest()[:16]
        nid = digest
        n = 1
        while nid in self.ids:
            nid = f"{digest}-{n}"
            n += 1
        self.ids.add(nid)
        slug = "-".join(re.findall(r"[a-z0-9]+", headline.lower()))[:80].rstrip("-")
        section = _DOMAIN_SECTION[int(self.rng.integers(len(_DOMAIN_SECTION)))]
        stamp = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")
        lag = float(np.clip(1.5 * math.exp(0.6 * self.rng.standard_normal()), 0.3, 8.0))
        self.events.append(
            NewsEvent(
                ts=ts,
                recv_ts=round(ts + lag, 3),
                id=nid,
                headline=headline,
                source=name,
                url=f"https://{domain}/{section}/{slug}-{stamp}/",
                summary=summary,
                keys=keys,
            )
        )


def _pct(x: float) -> str:
    return f"{abs(x) * 100:.1f}%"


def _round_to(x: float, step: int) -> int:
    return int(step * max(1, round(x / step)))


def _random_news_time(rng: np.random.Generator, day: date, weekend: bool) -> float:
    if weekend:
        minutes = 8 * 60 + rng.integers(12 * 60)
    else:
        u = rng.random()
        if u < 0.55:
            minutes = 9 * 60 + 30 + rng.integers(390)
        elif u < 0.80:
            minutes = 6 * 60 + rng.integers(210)
        else:
            minutes = 16 * 60 + rng.integers(360)
    h, m = divmod(int(minutes), 60)
    return et(day.isoformat(), f"{h:02d}:{m:02d}") + float(rng.integers(60))


class Prices:
    """Look up the last simulated equity price at a time and the previous session close."""

    def __init__(self, paths: EquityPaths, sessions: Sequence[Session]) -> None:
        """Index the paths."""
        self.paths = paths
        self.sessions = sessions

    def move(self, i: int, ts: float) -> tuple[float, float, bool] | None:
        """Return (last price, move of its session, whether that session is today) at ``ts``.

        ``None`` before the first minute of data. The move is measured from the previous
        session's close (0 for the first session).
        """
        k = int(np.searchsorted(self.paths.ts, ts, side="right")) - 1
        if k < 0:
            return None
        d = int(self.paths.session_of[k])
        price = self.paths.cents[i, k] / 100
        today = self.sessions[d].day == ny_date(ts)
        if d == 0:
            return price, 0.0, today
        prev = self.paths.cents[i, self.paths.close_idx[d - 1]] / 100
        return price, price / prev - 1.0, today

    def index_move_at(self, ts: float) -> float:
        """Return the equal-weight move since the previous close at ``ts``."""
        moves = [self.move(i, ts) for i in range(len(STOCKS))]
        return float(np.mean([m[1] for m in moves if m is not None])) if moves[0] else 0.0

    def index_move(self, d: int) -> float:
        """Return the equal-weight close-to-close move of session ``d``."""
        c = self.paths.cents
        k, prev = self.paths.close_idx[d], self.paths.close_idx[d - 1] if d > 0 else 0
        return float(np.mean(c[:, k] / c[:, prev]) - 1.0)


def stock_news(
    rng: np.random.Generator,
    maker: NewsMaker,
    paths: EquityPaths,
    sessions: Sequence[Session],
) -> None:
    """Add a few items per ticker per calendar day, some describing the simulated move."""
    prices = Prices(paths, sessions)
    first = ny_date(maker.start)
    last = ny_date(maker.end)
    session_days = {s.day for s in sessions}
    specific_left = {t: list(v) for t, v in SPECIFIC.items()}
    one_shot_left = {
        st.ticker: [
            t for t in ONE_SHOT_TEMPLATES if "dividend" not in t or st.ticker not in NO_DIVIDEND
        ]
        for st in STOCKS
    }
    day = first
    while day <= last:
        weekend = day not in session_days
        for i, st in enumerate(STOCKS):
            n = int(rng.poisson(0.7 if weekend else 2.2))
            for _ in range(n):
                ts = _random_news_time(rng, day, weekend)
                pm = prices.move(i, ts)
                price, move, live = pm if pm else (st.price, 0.0, False)
                sector = SECTOR_LABEL[st.sector]
                brokers = [b for b in BROKERS if b != st.name]
                slots = {
                    "co": st.name,
                    "pct": _pct(move),
                    "sector": sector,
                    "broker": brokers[int(rng.integers(len(brokers)))],
                    "rating_up": RATING_UP[int(rng.integers(len(RATING_UP)))],
                    "rating_down": RATING_DOWN[int(rng.integers(len(RATING_DOWN)))],
                    "up_target": _round_to(price * rng.uniform(1.08, 1.30), 5),
                    "down_target": _round_to(price * rng.uniform(0.85, 1.02), 5),
                    "up_reason": UP_REASONS[int(rng.integers(len(UP_REASONS)))].format(
                        sector=sector
                    ),
                    "down_reason": DOWN_REASONS[int(rng.integers(len(DOWN_REASONS)))].format(
                        sector=sector
                    ),
                }
                u = rng.random()
                summary = ""
                if live and abs(move) >= 0.012 and u < 0.45:
                    pool = UP_TEMPLATES if move > 0 else DOWN_TEMPLATES
                    if move > 0 and move > prices.index_move_at(ts) + 0.01:
                        pool = (*pool, OUTPERFORM_TEMPLATE)
                    template = pool[int(rng.integers(len(pool)))]
                    summary = (
                        f"{st.name} ({st.ticker}) last traded at ${price:.2f}, "
                        f"{'up' if move > 0 else 'down'} {_pct(move)} from the previous close."
                    )
                elif 0.45 <= u < 0.6 and specific_left[st.ticker]:
                    left = specific_left[st.ticker]
                    template = left.pop(int(rng.integers(len(left))))
                elif 0.6 <= u < 0.7 and one_shot_left[st.ticker]:
                    left = one_shot_left[st.ticker]
                    template = left.pop(int(rng.integers(len(left))))
                else:
                    template = ANALYST_TEMPLATES[int(rng.integers(len(ANALYST_TEMPLATES)))]
                headline = template.format(**slots)
                maker.add(ts, headline, (st.ticker,), summary=summary)
        day += timedelta(days=1)

    # Earnings: a preview the session before, the result when it is published.
    day_of = {s.day.isoformat(): d for d, s in enumerate(sessions)}
    for st in STOCKS:
        if st.earnings is None:
            continue
        when, timing, _ = st.earnings
        d = day_of.get(when)
        if d is None:
            continue
        if d > 0:
            maker.add(
                et_of(sessions[d - 1].open, "08:05"),
                f"{st.name} earnings preview: what Wall Street expects from third-quarter results",
                (st.ticker,),
            )
        if st.ticker not in paths.earnings:
            continue
        _, jump = paths.earnings[st.ticker]
        move = math.exp(jump) - 1.0
        beat = jump > 0
        if timing == "amc":
            ts, session_word = et(when, "16:05") + 20.0, "after hours"
        else:
            ts, session_word = et(when, "07:00") + 35.0, "premarket"
        verb = "tops" if beat else "misses"
        shares = f"shares {'rise' if beat else 'fall'} {_pct(move)} {session_word}"
        maker.add(
            ts,
            f"{st.name} {verb} third-quarter estimates; {shares}",
            (st.ticker,),
            source=("Reuters", "www.reuters.com"),
        )
    nv = [s.ticker for s in STOCKS].index("NVDA")
    if STOCKS[nv].earnings is None:
        maker.add(
            et("2026-11-10", "08:00"),
            "Nvidia to report third-quarter results on November 18",
            ("NVDA",),
            source=("Benzinga", "www.benzinga.com"),
        )


def stress_news(
    maker: NewsMaker, prices: Prices, stress_at: int, sessions: Sequence[Session]
) -> None:
    """Add the headlines of the sell-off and of the relief rally."""
    tech = ("NVDA", "MSFT", "META", "AAPL", "AMZN")
    s0, s1, s2 = (sessions[stress_at + k] for k in range(3))
    day0 = prices.index_move(stress_at)
    three = float(
        np.mean(
            prices.paths.cents[:, prices.paths.close_idx[stress_at + 2]]
            / prices.paths.cents[:, prices.paths.close_idx[stress_at - 1]]
        )
        - 1.0
    )
    reuters = ("Reuters", "www.reuters.com")
    items: list[tuple[float, str, tuple[str, ...]]] = [
        (
            et_of(s0.open, "10:40"),
            "Stocks slide as Treasury yields jump and AI spending worries hit tech",
            tech,
        ),
        (
            et_of(s0.open, "16:20"),
            f"Wall Street closes sharply lower; blue chips lose {_pct(day0)}",
            (*tech, "JPM", "CAT"),
        ),
        (
            et_of(s1.open, "07:30"),
            "Stock futures slide for a second day as credit worries spread",
            ("JPM", "V"),
        ),
        (et_of(s1.open, "11:25"), "VIX jumps above 30 as the selloff deepens", ("714405",)),
        (
            et_of(s1.open, "13:10"),
            "Traders pile into bets on VIX above 40 as volatility spikes",
            ("714405",),
        ),
        (et_of(s1.open, "15:20"), "High-flying tech and EV stocks lead losses", ("NVDA", "TSLA")),
        (
            et_of(s1.open, "18:00"),
            "Bitcoin falls with risk assets during stock sell-off",
            ("718204",),
        ),
        (
            et_of(s2.open, "12:05"),
            "Defensive stocks hold up as investors rotate into staples and health care",
            ("PG", "KO", "WMT", "JNJ"),
        ),
        (
            et_of(s2.open, "14:30"),
            "Sell-off lifts market odds of a December Fed rate cut",
            ("711057",),
        ),
        (
            et_of(s2.open, "16:15"),
            f"Stocks post steepest three-day slide in months as blue chips shed {_pct(three)}",
            (*tech, "JPM", "XOM", "CAT", "TSLA"),
        ),
    ]
    if stress_at + 3 < len(sessions):
        s3 = sessions[stress_at + 3]
        items += [
            (et_of(s3.open, "09:50"), "Stocks rebound as Treasury yields ease", tech),
            (
                et_of(s3.open, "15:45"),
                "VIX retreats as the selloff pauses; bets on a spike above 40 fade",
                ("714405",),
            ),
        ]
    for ts, headline, keys in items:
        maker.add(ts, headline, keys, source=reuters)


def question_news(
    rng: np.random.Generator,
    maker: NewsMaker,
    qs: Sequence[Question],
    calm_until: float | None,
) -> None:
    """Add scripted resolution-related items and a few random ones per question."""
    ap = ("Associated Press", "apnews.com")
    scripted: list[tuple[float, str, tuple[str, ...], tuple[str, str] | None]] = [
        (
            et("2026-10-27", "07:00"),
            "Fed meeting preview: markets price high odds of a cut",
            ("711042",),
            None,
        ),
        (
            et("2026-10-28", "14:00") + 4,
            "Fed cuts rates by a quarter point, signals data-dependent path",
            ("711042", "711057"),
            ap,
        ),
        (
            et("2026-10-28", "14:50"),
            "Fed chair says a December cut is not a foregone conclusion",
            ("711057",),
            None,
        ),
        (
            et("2026-11-06", "08:30") + 6,
            "US unemployment rate rises to 4.7% in October as hiring slows",
            ("713390", "711057"),
            ap,
        ),
        (
            et("2026-11-08", "17:10") + 12,
            "Lakers-Celtics game postponed after arena power outage",
            ("716873",),
            ap,
        ),
        (
            et("2026-11-09", "11:30"),
            "NBA says postponed Lakers-Celtics game will be rescheduled",
            ("716873",),
            None,
        ),
        (
            et("2026-11-12", "13:10") + 30,
            "SpaceX pushes next Starship flight to late November",
            ("715112",),
            None,
        ),
        (et("2026-11-13", "16:20"), "VIX ends week near 17 as stocks steady", ("714405",), None),
    ]
    for ts, headline, keys, source in scripted:
        maker.add(ts, headline, keys, source=source)
    for q in qs:
        # Background items only before the question's first scripted jump, resolution or swing.
        cutoffs = [maker.end] + [t for t, _ in q.jumps]
        if q.resolution:
            cutoffs.append(q.resolution[0])
        if q.qid == "714405" and calm_until is not None:
            cutoffs.append(calm_until)
        last = min(cutoffs)
        for headline in QUESTION_NEWS[q.qid]:
            ts = maker.start + rng.uniform(0.0, max(last - maker.start - 3600.0, 60.0))
            maker.add(float(round(ts)), headline, (q.qid,))


# --------------------------------------------------------------------------------------------
# Assembly

_RANK: dict[type, int] = {MarketListed: 0, PriceEvent: 1, NewsEvent: 2, ResolutionEvent: 3}


def build_events(
    seed: int, sessions: Sequence[Session], *, poly_step: float, stress_at: int | None
) -> tuple[list[Event], list[Question], float, float, dict[str, Any]]:
    """Simulate every event of the sample and return them sorted by (ts, kind)."""
    rng = np.random.default_rng(seed)
    start = datetime.combine(sessions[0].day, datetime.min.time(), UTC).timestamp()
    end = sessions[-1].close
    if stress_at is not None and (stress_at < 1 or stress_at + 3 > len(sessions)):
        stress_at = None
    paths = simulate_equities(rng, sessions, stress_at)
    stress: StressTimes | None = None
    if stress_at is not None:
        ss = sessions

        def close(k: int) -> float:
            return ss[min(stress_at + k, len(ss) - 1)].close

        stress = StressTimes(
            open0=ss[stress_at].open,
            close0=close(0),
            close1=close(1),
            mid2=et_of(ss[stress_at + 2].open, "13:00"),
            close2=close(2),
            close4=close(4),
            close6=close(6),
        )
    qs = questions(stress)
    events: list[Event] = []
    events += equity_events(rng, paths)
    events += polymarket_events(rng, qs, start, end, poly_step)
    maker = NewsMaker(rng, start, end)
    stock_news(rng, maker, paths, sessions)
    question_news(rng, maker, qs, stress.open0 if stress else None)
    prices = Prices(paths, sessions)
    info: dict[str, Any] = {}
    if stress_at is not None:
        stress_news(maker, prices, stress_at, sessions)
        c = paths.cents
        before, after = paths.close_idx[stress_at - 1], paths.close_idx[stress_at + 2]
        info["stress"] = {
            "sessions": [sessions[stress_at + k].day.isoformat() for k in range(3)],
            "pinned_mean_log_return": round(STRESS_RETURN, 4),
            "equal_weight_return": round(float(np.mean(c[:, after] / c[:, before]) - 1.0), 4),
            "swing_question": "714405",
        }
    events += maker.events
    events.sort(key=lambda e: (e.ts, _RANK[type(e)]))
    return events, qs, start, end, info


def generate(
    seed: int,
    out: str | Path,
    *,
    sessions: int = 22,
    start: str = "2026-10-19",
    poly_step: float = 300.0,
    stress_at: int | None = 11,
    compresslevel: int = 9,
) -> dict[str, int]:
    """Write the sample recording to ``out`` and return event counts by type."""
    days = nyse_sessions(start, sessions)
    events, qs, t0, _, info = build_events(seed, days, poly_step=poly_step, stress_at=stress_at)
    description = (
        f"Synthetic sample: {len(STOCKS)} US equities at 1-minute resolution over "
        f"{len(days)} XNYS sessions ({days[0].day} to {days[-1].day}), {len(qs)} Polymarket "
        f"binary questions every {poly_step / 60:g} minutes 24/7 with resolutions, and news"
    )
    if "stress" in info:
        stress_days = info["stress"]["sessions"]
        description += f"; sell-off {stress_days[0]}..{stress_days[-1]}"
    header = RecordingHeader(
        start=t0,
        end=events[-1].ts,
        description=description,
        equities=tuple(s.ticker for s in STOCKS),
        questions=tuple({"id": q.qid, "question": q.text, "yes": q.yes, "no": q.no} for q in qs),
        meta={
            "seed": seed,
            "generator": GENERATOR,
            "synthetic": True,
            "calendar": "XNYS",
            "sessions": len(days),
            "first_session": days[0].day.isoformat(),
            "last_session": days[-1].day.isoformat(),
            "equity_step_s": 60,
            "polymarket_step_s": poly_step,
            **info,
        },
    )
    counts: dict[str, int] = {}
    with RecordingWriter(out, header, compresslevel=compresslevel) as writer:
        for event in events:
            writer.write(event)
            name = type(event).__name__
            counts[name] = counts.get(name, 0) + 1
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, generate the sample and print a one-line summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="examples/sample.jsonl.gz", help="output path")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=22, help="number of NYSE sessions")
    parser.add_argument("--start", default="2026-10-19", help="first session (YYYY-MM-DD)")
    parser.add_argument("--poly-step", type=float, default=300.0, help="Polymarket cadence (s)")
    parser.add_argument(
        "--stress-at", type=int, default=11, help="index of the first sell-off session (-1: none)"
    )
    args = parser.parse_args(argv)
    counts = generate(
        args.seed,
        args.out,
        sessions=args.sessions,
        start=args.start,
        poly_step=args.poly_step,
        stress_at=None if args.stress_at < 0 else args.stress_at,
    )
    size = Path(args.out).stat().st_size
    summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    print(f"wrote {args.out}: {size / 1e6:.2f} MB, {sum(counts.values())} events ({summary})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
