"""``build-recording`` writes daily OHLCV bars (issue 29, point 1): a split, a missing day and
malformed bars from the fake Yahoo chart history; the replay keeps the bars."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import date
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.core.events import BarEvent, PriceEvent
from feeds.recording import iter_events, read_header
from tests.fakes.yahoo_server import FakeYahoo, chart_payload
from tests.feeds.test_history_recording import END, START, _config
from tests.helpers import nyse_sessions

SESSIONS = nyse_sessions(START, END)
SPLIT = date(2020, 3, 9)  # TSLA 4:1: Yahoo serves the earlier bars divided by 4
MISSING = date(2020, 3, 5)  # no AAPL bar that day
INVERTED = date(2020, 3, 10)  # AAPL's high below its low
BAD_VOLUME = date(2020, 3, 11)  # AAPL's volume is a string


def ohlcv_payload(symbol: str, rows: dict[date, tuple[float, float, float, float, Any]]
                  ) -> dict[str, Any]:
    """Return a chart payload whose quote has open, high, low, close and volume per day."""
    opens = {d: int(o) for d, o, _ in SESSIONS}
    payload = chart_payload(symbol, None, 0, [(opens[d], r[3]) for d, r in rows.items()])
    quote = payload["chart"]["result"][0]["indicators"]["quote"][0]
    for i, k in enumerate(("open", "high", "low", "close", "volume")):
        quote[k] = [r[i] for r in rows.values()]
    return payload


def tsla_rows() -> dict[date, tuple[float, float, float, float, Any]]:
    """TSLA's bars as Yahoo serves them across a 4:1 split: the earlier bars split-adjusted
    (traded prices / 4, volume x 4)."""
    out: dict[date, tuple[float, float, float, float, Any]] = {}
    for i, (d, _, _) in enumerate(SESSIONS):
        f = 4.0 if d < SPLIT else 1.0  # traded before the split at 4x the price
        o, h, lo, c, v = ((400.0 + i) * f, (410.0 + i) * f, (390.0 + i) * f, (405.0 + i) * f,
                          (1_000_000 + i) / f)
        out[d] = (o / f, h / f, lo / f, c / f, v * f)
    return out


def aapl_rows() -> dict[date, tuple[float, float, float, float, Any]]:
    out: dict[date, tuple[float, float, float, float, Any]] = {}
    for i, (d, _, _) in enumerate(SESSIONS):
        if d == MISSING:
            continue
        o, c = 300.0 + i, 301.0 + i
        h, lo = (c + 2, o - 2) if d != INVERTED else (o - 2, c + 2)
        out[d] = (o, h, lo, c, "x" if d == BAD_VOLUME else 50_000 + i)
    return out


@pytest.fixture
async def yahoo() -> AsyncIterator[FakeYahoo]:
    fake = FakeYahoo()
    await fake.start()
    fake.charts["TSLA"] = ohlcv_payload("TSLA", tsla_rows())
    at = int(next(o for d, o, _ in SESSIONS if d == SPLIT))
    fake.charts["TSLA"]["chart"]["result"][0]["events"] = {"splits": {str(at): {
        "date": at, "numerator": 4, "denominator": 1, "splitRatio": "4:1"}}}
    fake.charts["AAPL"] = ohlcv_payload("AAPL", aapl_rows())
    yield fake
    await fake.stop()


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_bars_with_a_split_a_missing_day_and_bad_bars(
        yahoo: FakeYahoo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, cfg = tmp_path / "ohlcv.jsonl.gz", _config(tmp_path, yahoo)
    assert await _cli("build-recording", "--tickers", "TSLA,AAPL", "--start", str(START),
                      "--end", str(END), "--out", str(out), "--config", str(cfg)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    # One line per problem of a ticker, naming its first day; never a traceback.
    _, hi, lo, _, _ = aapl_rows()[INVERTED]
    assert err == [
        f"paperarena: build-recording: AAPL: 2 of {len(SESSIONS) - 1} bars without usable"
        f" OHLCV (first {INVERTED}: high {hi:g} is below low {lo:g}); their open and close"
        " only",
        f"paperarena: build-recording: AAPL: no bar on 1 session(s) (first {MISSING});"
        " nothing recorded for it those days",
    ]
    header = read_header(out)
    assert header.meta["bars"] == "ohlcv"
    assert header.meta["adjustment"].startswith("split-adjusted, not dividend-adjusted")
    events = [e for _, e in iter_events(out)]
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    bars = [e for e in events if isinstance(e, BarEvent)]
    closes = {d: c for d, _, c in SESSIONS}
    want = [(closes[d], "TSLA", d.isoformat(), *r) for d, r in tsla_rows().items()]
    want += [(closes[d], "AAPL", d.isoformat(), *r) for d, r in aapl_rows().items()
             if d not in (INVERTED, BAD_VOLUME)]
    assert sorted((e.ts, e.asset, e.day, e.open, e.high, e.low, e.close, e.volume)
                  for e in bars) == sorted(want)
    # The split is served adjusted: no 4x jump across it, in any of the four prices.
    tsla = [e for e in bars if e.asset == "TSLA"]
    for a, b in pairwise(tsla):
        assert all(0.9 < getattr(b, k) / getattr(a, k) < 1.1
                   for k in ("open", "high", "low", "close"))
    # Each bar comes after the session's prints, at its close; the refused bars keep their
    # open and close prints, the missing day has none.
    aapl_days = {e.ts for e in events if isinstance(e, PriceEvent) and e.asset == "AAPL"}
    opens = {d: o for d, o, _ in SESSIONS}
    assert {opens[INVERTED], closes[INVERTED], opens[BAD_VOLUME]} <= aapl_days
    assert not {opens[MISSING], closes[MISSING]} & aapl_days
    for i, e in enumerate(events):
        if isinstance(e, BarEvent):
            assert any(isinstance(p, PriceEvent) and p.asset == e.asset and p.ts == e.ts
                       and p.price == e.close for p in events[:i])

    db = tmp_path / "r.db"
    assert await _cli("replay", str(out), "--config", str(cfg), "--db", str(db),
                      "--no-progress") == 0
    con = sqlite3.connect(db)
    stored = con.execute("SELECT COUNT(*) FROM market_events WHERE kind = 'BarEvent'"
                         ).fetchone()[0]
    con.close()
    assert stored == len(bars)


async def test_closes_only_source_writes_no_bars(yahoo: FakeYahoo, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A chart without high and low (only closes) writes no BarEvent and says so once."""
    yahoo.charts["MSFT"] = chart_payload("MSFT", None, 0, [
        (int(o), 170.0 + i) for i, (_, o, _) in enumerate(SESSIONS)])
    quote = yahoo.charts["MSFT"]["chart"]["result"][0]["indicators"]["quote"][0]
    quote["high"] = quote["low"] = [None] * len(SESSIONS)
    out = tmp_path / "c.jsonl"
    assert await _cli("build-recording", "--tickers", "MSFT", "--start", str(START),
                      "--end", str(END), "--out", str(out), "--config",
                      str(_config(tmp_path, yahoo))) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"paperarena: build-recording: MSFT: {len(SESSIONS)} of {len(SESSIONS)}"
                   f" bars without usable OHLCV (first {START}: no high or low reported);"
                   " their open and close only"]
    assert "bars" not in read_header(out).meta
    assert not [e for _, e in iter_events(out) if isinstance(e, BarEvent)]
