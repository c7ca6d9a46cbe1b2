"""``build-recording --bars alpaca|finnhub``: daily OHLCV from fake Alpaca and Finnhub bar
endpoints speaking their real JSON (issue 29, point 1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from daemon.app.cli import main
from daemon.core.events import BarEvent, PriceEvent
from daemon.timing.nyse import NY
from feeds.recording import iter_events, read_header
from tests.feeds.test_history_ohlcv import (
    BAD_VOLUME,
    INVERTED,
    MISSING,
    SESSIONS,
    aapl_rows,
    tsla_rows,
)
from tests.feeds.test_history_recording import END, START

ROWS = {"TSLA": tsla_rows(), "AAPL": aapl_rows()}
#: A row whose close is not a number: dropped, named in a note.
BROKEN_DAY = date(2020, 3, 12)


class FakeBars:
    """Alpaca's ``/v2/stocks/bars`` (pages of 4 bars) and Finnhub's ``/stock/candle``."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def rows(self, symbol: str) -> list[tuple[date, tuple[Any, ...]]]:
        out: list[tuple[date, tuple[Any, ...]]] = sorted(ROWS.get(symbol, {}).items())
        if symbol == "AAPL":  # a broken row: close "x"
            out = [(d, (*r[:3], "x", r[4]) if d == BROKEN_DAY else r) for d, r in out]
        return out

    async def alpaca(self, request: web.Request) -> web.Response:
        q = dict(request.query)
        self.asked.append(("alpaca", q, dict(request.headers)))
        if (request.headers.get("APCA-API-KEY-ID") != "ak"
                or request.headers.get("APCA-API-SECRET-KEY") != "as"):
            return web.json_response({"message": "forbidden."}, status=403)
        lo = datetime.fromisoformat(q["start"].replace("Z", "+00:00"))
        hi = datetime.fromisoformat(q["end"].replace("Z", "+00:00"))
        flat = []
        for sym in q["symbols"].split(","):
            for d, (o, h, low, c, v) in self.rows(sym):
                t = datetime.combine(d, time(0), NY)  # Alpaca: a day bar starts at NY midnight
                if lo <= t <= hi:
                    flat.append((sym, {"t": t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                       "o": o, "h": h, "l": low, "c": c, "v": v, "n": 10,
                                       "vw": c}))
        page = int(q.get("page_token", "0"))
        bars: dict[str, list[dict[str, Any]]] = {}
        for sym, bar in flat[4 * page:4 * page + 4]:
            bars.setdefault(sym, []).append(bar)
        more = len(flat) > 4 * page + 4
        return web.json_response({"bars": bars, "next_page_token": str(page + 1) if more
                                  else None})

    async def finnhub(self, request: web.Request) -> web.Response:
        q = dict(request.query)
        self.asked.append(("finnhub", q, dict(request.headers)))
        if q.get("token") != "fk":
            return web.json_response({"error": "Invalid API key"}, status=401)
        lo, hi = int(q["from"]), int(q["to"])
        rows = [(int(datetime.combine(d, time(0), UTC).timestamp()), r)
                for d, r in self.rows(q["symbol"])]
        rows = [(t, r) for t, r in rows if lo <= t <= hi]
        if not rows:
            return web.json_response({"s": "no_data"})
        cols = {k: [r[i] for _, r in rows] for i, k in enumerate("ohlcv")}
        return web.json_response({"t": [t for t, _ in rows], **cols, "s": "ok"})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v2/stocks/bars", self.alpaca)
        app.router.add_get("/api/v1/stock/candle", self.finnhub)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def bars_server() -> AsyncIterator[FakeBars]:
    fake = FakeBars()
    await fake.start()
    yield fake
    await fake.stop()


def _config(tmp_path: Path, fake: FakeBars, extra: str = "") -> Path:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"""
[sources.equity.alpaca]
bars_url = "http://127.0.0.1:{fake.port}/v2/stocks/bars"
key_env = "PA_TEST_APCA_KEY"
secret_env = "PA_TEST_APCA_SECRET"
{extra}
[sources.equity.finnhub]
rest_url = "http://127.0.0.1:{fake.port}/api/v1"
key_env = "PA_TEST_FINNHUB_KEY"
""")
    return cfg


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PA_TEST_APCA_KEY", "ak")
    monkeypatch.setenv("PA_TEST_APCA_SECRET", "as")
    monkeypatch.setenv("PA_TEST_FINNHUB_KEY", "fk")


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize("provider", ["alpaca", "finnhub"])
async def test_keyed_bars_are_recorded_like_yahoos(
        bars_server: FakeBars, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        provider: str) -> None:
    out = tmp_path / f"{provider}.jsonl.gz"
    assert await _cli("build-recording", "--bars", provider, "--tickers", "TSLA,AAPL",
                      "--start", str(START), "--end", str(END), "--out", str(out),
                      "--config", str(_config(tmp_path, bars_server))) == 0
    err = capsys.readouterr().err
    for needle in ("AAPL: 1 bar(s) without a valid time or close dropped",
                   f"AAPL: 2 of {len(SESSIONS) - 2} bars without usable OHLCV (first"
                   f" {INVERTED}: high", f"AAPL: no bar on 2 session(s) (first {MISSING})"):
        assert needle in err, err
    assert "Traceback" not in err and "ak" not in err and "fk" not in err
    if provider == "alpaca":  # one request for both tickers, every page followed
        pages = [q for p, q, _ in bars_server.asked]
        assert len(pages) > 2 and {q["symbols"] for q in pages} == {"TSLA,AAPL"}
        assert [q.get("page_token") for q in pages] == [None, *map(str, range(1, len(pages)))]
        assert {q["timeframe"] for q in pages} == {"1Day"} and pages[0]["adjustment"] == "split"
    else:
        assert sorted(q["symbol"] for _, q, _ in bars_server.asked) == ["AAPL", "TSLA"]
        assert {q["resolution"] for _, q, _ in bars_server.asked} == {"D"}
    header = read_header(out)
    assert header.meta["source"] == f"{provider}-history" and header.meta["bars"] == "ohlcv"
    assert header.meta["adjustment"].startswith("split-adjusted, not dividend-adjusted")
    events = [e for _, e in iter_events(out)]
    closes = {d: c for d, _, c in SESSIONS}
    opens = {d: o for d, o, _ in SESSIONS}
    want = [(closes[d], "TSLA", d.isoformat(), *r) for d, r in tsla_rows().items()]
    want += [(closes[d], "AAPL", d.isoformat(), *r) for d, r in aapl_rows().items()
             if d not in (INVERTED, BAD_VOLUME, BROKEN_DAY)]
    assert sorted((e.ts, e.asset, e.day, e.open, e.high, e.low, e.close, e.volume)
                  for e in events if isinstance(e, BarEvent)) == sorted(want)
    # StockBench's fills: each session's open printed at the open, the close at the close.
    tsla = [(e.ts, e.price) for e in events if isinstance(e, PriceEvent) and e.asset == "TSLA"]
    assert tsla == [(t, p) for d, r in tsla_rows().items()
                    for t, p in ((opens[d], r[0]), (closes[d], r[3]))]


@pytest.mark.parametrize(("provider", "env", "needle"), [
    ("alpaca", {}, "--bars alpaca: environment variable PA_TEST_APCA_KEY is not set"),
    ("finnhub", {}, "--bars finnhub: environment variable PA_TEST_FINNHUB_KEY is not set"),
    ("alpaca", {"PA_TEST_APCA_KEY": "ak", "PA_TEST_APCA_SECRET": "wrong"},
     "alpaca bars: the bars endpoint refused the key (HTTP 403)"),
    ("finnhub", {"PA_TEST_FINNHUB_KEY": "wrong"},
     "TSLA: finnhub candles: the bars endpoint refused the key (HTTP 401)"),
])
async def test_keyed_bars_failures_are_one_line(
        bars_server: FakeBars, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, provider: str, env: dict[str, str],
        needle: str) -> None:
    for k in ("PA_TEST_APCA_KEY", "PA_TEST_APCA_SECRET", "PA_TEST_FINNHUB_KEY"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "x.jsonl"
    rc = await _cli("build-recording", "--bars", provider, "--tickers", "TSLA", "--start",
                    str(START), "--end", str(END), "--out", str(out), "--config",
                    str(_config(tmp_path, bars_server)))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0], err
    assert "wrong" not in err[0] and not out.exists()


@pytest.mark.usefixtures("keys")
async def test_unknown_ticker_and_dividend_adjustment(
        bars_server: FakeBars, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, bars_server, 'bars_adjustment = "all"\n')
    out = tmp_path / "all.jsonl"
    assert await _cli("build-recording", "--bars", "alpaca", "--tickers", "TSLA", "--start",
                      str(START), "--end", str(END), "--out", str(out), "--config",
                      str(cfg)) == 0
    assert bars_server.asked[0][1]["adjustment"] == "all"
    assert read_header(out).meta["adjustment"] == (
        "split- and dividend-adjusted (Alpaca adjustment=all)")
    capsys.readouterr()
    for provider in ("alpaca", "finnhub"):
        rc = await _cli("build-recording", "--bars", provider, "--tickers", "TSLA,NOPE",
                        "--start", str(START), "--end", str(END), "--out",
                        str(tmp_path / "n.jsonl"), "--config", str(cfg))
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err == [f"paperarena: build-recording: NOPE: no daily bars between"
                                   f" {START} and {END}"], err
