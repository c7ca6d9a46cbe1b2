"""``build-recording --dividend-adjusted`` records Yahoo's dividend-adjusted closes, with the
open, high and low scaled alike, and says so in the header (issue 29, CapitalBench's adjusted
closes)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.core.events import BarEvent, PriceEvent
from feeds.recording import iter_events, read_header
from tests.feeds.test_history_ohlcv import SESSIONS, ohlcv_payload
from tests.feeds.test_history_recording import END, START, _config

EX = SESSIONS[4][0]  # the ex-dividend day
DIVIDEND = 2.5


def _rows() -> dict[date, tuple[float, float, float, float, float]]:
    return {d: (100.0 + i, 103.0 + i, 98.0 + i, 101.0 + i, 1000.0 + i)
            for i, (d, _, _) in enumerate(SESSIONS)}


def _adjusted() -> dict[date, float]:
    """Yahoo's adjclose: closes before the ex-date times 1 - dividend / the last close before."""
    rows = _rows()
    before = max(d for d in rows if d < EX)
    f = 1 - DIVIDEND / rows[before][3]
    return {d: r[3] * f if d < EX else r[3] for d, r in rows.items()}


@pytest.fixture
async def yahoo() -> AsyncIterator[Any]:
    from tests.fakes.yahoo_server import FakeYahoo

    fake = FakeYahoo()
    await fake.start()
    fake.charts["XLU"] = ohlcv_payload("XLU", _rows())
    adj = _adjusted()
    fake.charts["XLU"]["chart"]["result"][0]["indicators"]["adjclose"] = [
        {"adjclose": [adj[d] for d, _, _ in SESSIONS]}]
    yield fake
    await fake.stop()


async def _build(tmp_path: Path, yahoo: Any, *flags: str) -> Path:
    out = tmp_path / f"x{len(flags)}.jsonl.gz"
    assert await asyncio.to_thread(main, [
        "build-recording", "--tickers", "XLU", "--start", str(START), "--end", str(END),
        "--out", str(out), "--config", str(_config(tmp_path, yahoo)), *flags]) == 0
    return out


async def test_dividend_adjusted_prices_and_header(yahoo: Any, tmp_path: Path) -> None:
    adj, rows = _adjusted(), _rows()
    out = await _build(tmp_path, yahoo, "--dividend-adjusted")
    meta = read_header(out).meta
    assert meta["dividend_adjusted"] is True and "adjclose" in meta["adjustment"]
    events = [e for _, e in iter_events(out)]
    bars = {e.day: e for e in events if isinstance(e, BarEvent)}
    opens = {d: o for d, o, _ in SESSIONS}
    prints = {e.ts: e.price for e in events if isinstance(e, PriceEvent)}
    for d, _, close_ts in SESSIONS:
        o, h, lo, c, v = rows[d]
        f = adj[d] / c
        assert f < 1 if d < EX else f == 1
        b = bars[d.isoformat()]
        assert (b.open, b.high, b.low, b.close, b.volume) == pytest.approx(
            (o * f, h * f, lo * f, adj[d], v), rel=1e-12)
        assert prints[close_ts] == pytest.approx(adj[d]) and prints[opens[d]] == pytest.approx(
            o * f)
    # Across the ex-date the adjusted return is the close over the previous close less the
    # dividend (Yahoo's multiplicative adjustment), above the quoted return.
    before = SESSIONS[3][0]
    assert adj[EX] / adj[before] - 1 == pytest.approx(
        rows[EX][3] / (rows[before][3] - DIVIDEND) - 1)
    assert adj[EX] / adj[before] > rows[EX][3] / rows[before][3]
    plain = await _build(tmp_path, yahoo)
    pmeta = read_header(plain).meta
    assert pmeta["dividend_adjusted"] is False and pmeta["adjustment"].startswith(
        "split-adjusted, not dividend-adjusted")
    assert sorted(e.close for _, e in iter_events(plain) if isinstance(e, BarEvent)) == sorted(
        r[3] for r in rows.values())


async def test_a_missing_adjusted_close_is_one_line(yahoo: Any, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ind = yahoo.charts["XLU"]["chart"]["result"][0]["indicators"]
    ind["adjclose"][0]["adjclose"][2] = None
    assert await asyncio.to_thread(main, [
        "build-recording", "--tickers", "XLU", "--start", str(START), "--end", str(END),
        "--out", str(tmp_path / "y.jsonl.gz"), "--config", str(_config(tmp_path, yahoo)),
        "--dividend-adjusted"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"paperarena: build-recording: XLU: the chart history has no"
                   f" dividend-adjusted close (adjclose) for {SESSIONS[2][0]}"]


async def test_the_flag_asks_keyed_sources_for_dividend_adjusted_bars(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the flag, Alpaca is asked for ``adjustment=all`` and Finnhub for ``adjusted=true``
    although the config leaves both at their split-only defaults."""
    from tests.feeds.test_history_keyed_bars import FakeBars
    from tests.feeds.test_history_keyed_bars import _config as keyed_config

    for k, v in (("PA_TEST_APCA_KEY", "ak"), ("PA_TEST_APCA_SECRET", "as"),
                 ("PA_TEST_FINNHUB_KEY", "fk")):
        monkeypatch.setenv(k, v)
    fake = FakeBars()
    await fake.start()
    try:
        cfg = keyed_config(tmp_path, fake)
        for provider, key, want in (("alpaca", "adjustment", "all"),
                                    ("finnhub", "adjusted", "true")):
            out = tmp_path / f"{provider}.jsonl"
            fake.asked.clear()
            assert await asyncio.to_thread(main, [
                "build-recording", "--bars", provider, "--tickers", "TSLA", "--start",
                str(START), "--end", str(END), "--out", str(out), "--config", str(cfg),
                "--dividend-adjusted"]) == 0
            assert fake.asked[0][1].get(key) == want, provider
            assert read_header(out).meta["dividend_adjusted"] is True
    finally:
        await fake.stop()
