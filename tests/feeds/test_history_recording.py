"""``paperarena build-recording``: daily bars from the (fake) Yahoo chart history, replayed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from daemon.app.cli import main
from daemon.core.events import ClockEvent, PriceEvent
from daemon.core.sparse_rows import FILLS, fill_map
from feeds.recording import iter_events, read_header
from tests.fakes.yahoo_server import FakeYahoo, chart_payload
from tests.helpers import nyse_sessions

START, END = date(2020, 3, 2), date(2020, 3, 13)


#: Bars from a week before to a week after the window (the builder must keep only the window).
BARS = {
    sym: {day: round(base * (1 + 0.03 * ((i * k) % 5 - 2)), 2)
          for i, (day, _, _) in enumerate(nyse_sessions(date(2020, 2, 24), date(2020, 3, 20)))}
    for sym, base, k in (("AAPL", 300.0, 1), ("MSFT", 170.0, 3))
}


@pytest.fixture
async def yahoo() -> AsyncIterator[FakeYahoo]:
    fake = FakeYahoo()
    await fake.start()
    opens = {d: int(o) for d, o, _ in nyse_sessions(date(2020, 2, 24), date(2020, 3, 20))}
    for sym, bars in BARS.items():
        fake.charts[sym] = chart_payload(sym, None, 0, [(opens[d], c) for d, c in bars.items()])
    yield fake
    await fake.stop()


def _config(tmp_path: Path, fake: FakeYahoo) -> Path:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f"""
[sources.equity.yahoo]
chart_url = "{fake.chart_url}"

[markets.equity]
assets = ["AAPL", "MSFT"]
stale_after = "2d"
cost = {{ fee_bps = 0, slippage_bps = 0 }}
[markets.equity.schedule]
kind = "nyse"
times = ["close-30m"]

[markets.polymarket]
enabled = false

[[agents]]
id = "buy_and_hold"
kind = "buy_and_hold"
""")
    return cfg


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_build_and_replay_daily_marks_match_bars(yahoo: FakeYahoo, tmp_path: Path) -> None:
    cfg, out, db = _config(tmp_path, yahoo), tmp_path / "covid.jsonl.gz", tmp_path / "r.db"
    assert await _cli("build-recording", "--tickers", "AAPL,msft", "--start", str(START),
                      "--end", str(END), "--out", str(out), "--config", str(cfg)) == 0
    header = read_header(out)
    assert header.equities == ("AAPL", "MSFT")
    sessions = nyse_sessions(START, END)
    events = [e for _, e in iter_events(out)]
    prices = [e for e in events if isinstance(e, PriceEvent)]
    # Each session: the opening prints (the fake's open is its close), then the closes.
    assert [(e.ts, e.asset, e.price) for e in prices] == [
        (t, sym, BARS[sym][day]) for day, o, close in sessions for t in (o, close)
        for sym in ("AAPL", "MSFT")]
    assert header.meta["adjustment"].startswith("split-adjusted, not dividend-adjusted")
    assert isinstance(events[-1], ClockEvent) and events[-1].ts == header.end

    assert await _cli("replay", str(out), "--config", str(cfg), "--db", str(db),
                      "--no-progress") == 0
    con = sqlite3.connect(db)
    stored = con.execute("SELECT ts, asset, price FROM market_events WHERE kind = 'price' "
                         "ORDER BY ts, asset").fetchall()
    assert stored == [(e.ts, e.asset, e.price) for e in prices]
    marks = con.execute("SELECT ts, value FROM equity WHERE agent = 'buy_and_hold' "
                        "AND market = 'equity' AND kind = 'daily' ORDER BY ts").fetchall()
    fills = con.execute(f"SELECT f.trades_json, s.assets_json FROM {FILLS}"
                        " WHERE f.agent = 'buy_and_hold'").fetchall()
    con.close()
    assert len(fills) == 1  # buy and hold: one purchase, then held
    qty: dict[str, float] = fill_map(*fills[0])
    assert set(qty) == {"AAPL", "MSFT"}
    closes = {close: day for day, _, close in sessions}
    marked = [(closes[ts], v) for ts, v in marks if ts in closes]
    assert [d for d, _ in marked] == [d for d, _, _ in sessions]
    # Once bought, each day's value moves by exactly the held shares times the close change.
    held = [(d, v) for d, v in marked if d > sessions[0][0]]
    assert len(held) == len(sessions) - 1
    for (d0, v0), (d1, v1) in pairwise(held):
        move = sum(q * (BARS[s][d1] - BARS[s][d0]) for s, q in qty.items())
        assert v1 - v0 == pytest.approx(move, rel=1e-9, abs=1e-6)


async def test_crypto_bars_at_utc_midnight_keep_their_day(yahoo: FakeYahoo,
                                                          tmp_path: Path) -> None:
    days = [(date(2020, 3, d), 8000.0 + d) for d in range(1, 16)]  # every day, weekends too
    yahoo.charts["BTC-USD"] = chart_payload("BTC-USD", None, 0, [
        (int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()), c) for d, c in days])
    out = tmp_path / "btc.jsonl"
    assert await _cli("build-recording", "--tickers", "BTC-USD", "--start", str(START), "--end",
                      str(END), "--out", str(out), "--config", str(_config(tmp_path, yahoo))) == 0
    got = [(e.ts, e.price) for _, e in iter_events(out) if isinstance(e, PriceEvent)]
    # The 00:00 UTC open is printed at the NYSE open of its day (known by then), never before.
    assert got == [(t, 8000.0 + day.day) for day, o, close in nyse_sessions(START, END)
                   for t in (o, close)]


@pytest.mark.parametrize(("tickers", "start", "end", "needle"), [
    ("AAPL,NOPE", "2020-03-02", "2020-03-13", "NOPE: unknown ticker"),
    ("AAPL", "2020-03-13", "2020-03-02", "is after --end"),
    ("AAPL", "2020-03-07", "2020-03-08", "no NYSE session"),
    ("AAPL", "2021-01-04", "2021-01-08", "AAPL: no daily bars"),
    ("AAPL", "2020-3-2x", "2020-03-13", "invalid date"),
    (" , ", "2020-03-02", "2020-03-13", "names no ticker"),
])
async def test_bad_input_is_one_line_exit_2(yahoo: FakeYahoo, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], tickers: str,
                                            start: str, end: str, needle: str) -> None:
    out = tmp_path / "x.jsonl.gz"
    rc = await _cli("build-recording", "--tickers", tickers, "--start", start, "--end", end,
                    "--out", str(out), "--config", str(_config(tmp_path, yahoo)))
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


async def test_unreachable_server_exit_2(yahoo: FakeYahoo, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, yahoo)
    await yahoo.stop()
    rc = await _cli("build-recording",
                        "--tickers", "AAPL", "--start", "2020-03-02", "--end",
                    "2020-03-13", "--out", str(tmp_path / "x.jsonl"), "--config", str(cfg))
    err = capsys.readouterr().err
    assert rc == 2 and "unreachable" in err and len(err.strip().splitlines()) == 1, err


def test_bad_input_in_a_fresh_process_prints_one_line_and_no_log(tmp_path: Path) -> None:
    """A fresh process (nothing configured, no calendar cached) prints no debug log line."""
    import subprocess
    import sys

    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[sources.equity.yahoo]\nchart_url = "http://127.0.0.1:9/v8/finance/chart"\n')
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "daemon.app.cli", "build-recording",
                        "--tickers", "AAPL",
                        "--start", "2020-03-02", "--end", "2020-03-13", "--out",
                        str(tmp_path / "x.jsonl"), "--config", str(cfg)],
                       cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paperarena: build-recording: "), p.stderr


async def test_opens_splits_and_missing_days(yahoo: FakeYahoo, tmp_path: Path) -> None:
    """Distinct opens are printed at the open (a StockBench replay fills at them), a bar with a
    null open has its close only, a missing day has nothing, and a split-adjusted series (as
    Yahoo serves it: a 4:1 split on 2020-03-09) is recorded as served."""
    sessions = nyse_sessions(START, END)
    opens = {d: int(o) for d, o, _ in sessions}
    split = date(2020, 3, 9)
    closes = {d: (400.0 + i) / 4 for i, (d, _, _) in enumerate(sessions)}  # adjusted: /4
    payload = chart_payload("TSLA", None, 0, [(opens[d], c) for d, c in closes.items()])
    quote = payload["chart"]["result"][0]["indicators"]["quote"][0]
    quote["open"] = [None if d == date(2020, 3, 4) else c - 0.5 for d, c in closes.items()]
    payload["chart"]["result"][0]["events"] = {"splits": {str(opens[split]): {
        "date": opens[split], "numerator": 4, "denominator": 1, "splitRatio": "4:1"}}}
    yahoo.charts["TSLA"] = payload
    missing = date(2020, 3, 5)
    yahoo.charts["AAPL"] = chart_payload("AAPL", None, 0, [
        (opens[d], BARS["AAPL"][d]) for d, _, _ in sessions if d != missing])
    out = tmp_path / "t.jsonl.gz"
    assert await _cli("build-recording", "--tickers", "TSLA,AAPL", "--start", str(START),
                      "--end", str(END), "--out", str(out), "--config",
                      str(_config(tmp_path, yahoo))) == 0
    got = [(e.ts, e.asset, e.price) for _, e in iter_events(out) if isinstance(e, PriceEvent)]
    want = []
    for day, o, close in sessions:
        day_prints = []
        if day != date(2020, 3, 4):
            day_prints.append((o, "TSLA", closes[day] - 0.5))
        if day != missing:
            day_prints.append((o, "AAPL", BARS["AAPL"][day]))
        day_prints.append((close, "TSLA", closes[day]))
        if day != missing:
            day_prints.append((close, "AAPL", BARS["AAPL"][day]))
        want += day_prints
    assert got == want
    # Across the split the series stays continuous (adjusted): no 4x jump is introduced.
    tsla = [p for _, a, p in got if a == "TSLA"]
    assert max(b / a for a, b in pairwise(tsla)) < 1.1

    # StockBench's opening-price fills take the recorded open (buy-and-hold buys once).
    cfg = tmp_path / "open.toml"
    cfg.write_text(_config(tmp_path, yahoo).read_text()
                   .replace('assets = ["AAPL", "MSFT"]', 'assets = ["TSLA"]')
                   .replace('times = ["close-30m"]',
                            'times = ["open+30m"]\nfill_at = "session_open"'))
    db = tmp_path / "o.db"
    assert await _cli("replay", str(out), "--config", str(cfg), "--db", str(db),
                      "--no-progress") == 0
    con = sqlite3.connect(db)
    row = con.execute(f"SELECT f.scheduled_ts, f.trades_json, s.assets_json, f.value_before"
                      f" FROM {FILLS} WHERE f.agent = 'buy_and_hold'").fetchone()
    con.close()
    day = datetime.fromtimestamp(row[0], UTC).date()
    qty = fill_map(row[1], row[2])["TSLA"]
    assert day == START and qty == pytest.approx(row[3] / (closes[START] - 0.5), rel=1e-9)


@pytest.mark.parametrize("provider", ["finnhub", "alpaca"])
async def test_historical_news_is_never_shown_before_it_was_published(
        yahoo: FakeYahoo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        provider: str) -> None:
    """``--news finnhub|alpaca``: company news of the window stamped with its publication
    time; a story published one second after a decision is not in that decision's observation,
    only in the next one (issue 29, point 2). Alpaca's answer comes in pages of two."""
    from aiohttp import web

    from daemon.timing.nyse import NY

    sessions = nyse_sessions(START, END)
    decision = datetime.combine(sessions[1][0], datetime.min.time(), NY).replace(
        hour=15, minute=30).timestamp()  # close-30m of the second session
    stories: list[dict[str, Any]] = [
        {"id": 1, "headline": "Apple before the decision", "datetime": int(decision - 60)},
        {"id": 2, "headline": "Apple just after the decision", "datetime": int(decision + 1)},
        {"id": 3, "headline": "Apple in the lead days",
         "datetime": int(sessions[0][1] - 86_400 * 2)},
        {"id": 4, "headline": "Apple after the window", "datetime": int(sessions[-1][2] + 7200)},
    ]
    asked: list[dict[str, str]] = []

    async def company_news(request: web.Request) -> web.Response:
        q = dict(request.query)
        asked.append(q)
        if q.get("token") != "fh-test" or q.get("symbol") != "AAPL":
            return web.json_response([])
        lo = datetime.fromisoformat(q["from"]).replace(tzinfo=UTC).timestamp()
        hi = datetime.fromisoformat(q["to"]).replace(tzinfo=UTC).timestamp() + 86_400
        return web.json_response([dict(s, source="Wire", url=f"u{s['id']}", summary="")
                                  for s in stories if lo <= s["datetime"] < hi])

    async def alpaca_news(request: web.Request) -> web.Response:
        q = dict(request.query)
        asked.append(q | {"token": request.headers.get("APCA-API-KEY-ID", "")})
        if request.headers.get("APCA-API-SECRET-KEY") != "al-secret":
            return web.json_response({"message": "forbidden"}, status=403)
        lo = datetime.fromisoformat(q["start"].replace("Z", "+00:00")).timestamp()
        hi = datetime.fromisoformat(q["end"].replace("Z", "+00:00")).timestamp()
        got = sorted((x for x in stories if lo <= x["datetime"] <= hi),
                     key=lambda x: x["datetime"])
        page = int(q.get("page_token", "0"))
        body = [{"id": x["id"], "headline": x["headline"], "source": "Wire", "url": "",
                 "summary": "", "symbols": ["AAPL"],
                 "created_at": datetime.fromtimestamp(x["datetime"], UTC).strftime(
                     "%Y-%m-%dT%H:%M:%SZ")} for x in got[2 * page:2 * page + 2]]
        more = len(got) > 2 * page + 2
        return web.json_response({"news": body,
                                  "next_page_token": str(page + 1) if more else None})

    app = web.Application()
    app.router.add_get("/api/v1/company-news", company_news)
    app.router.add_get("/v1beta1/news", alpaca_news)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        monkeypatch.setenv("PA_TEST_FINNHUB", "fh-test")
        monkeypatch.setenv("PA_TEST_ALPACA_KEY", "fh-test")
        monkeypatch.setenv("PA_TEST_ALPACA_SECRET", "al-secret")
        cfg = _config(tmp_path, yahoo)
        cfg.write_text(cfg.read_text() + f'\n[sources.news]\nfinnhub_url = '
                       f'"http://127.0.0.1:{port}/api/v1"\nfinnhub_key_env = "PA_TEST_FINNHUB"\n'
                       f'alpaca_url = "http://127.0.0.1:{port}/v1beta1/news"\n'
                       'alpaca_key_env = "PA_TEST_ALPACA_KEY"\n'
                       'alpaca_secret_env = "PA_TEST_ALPACA_SECRET"\n')
        out = tmp_path / "news.jsonl.gz"
        assert await _cli("build-recording", "--tickers", "AAPL,MSFT", "--start", str(START),
                          "--end", str(END), "--out", str(out), "--config", str(cfg),
                          "--news", provider) == 0
    finally:
        await runner.cleanup()
    if provider == "alpaca":  # one request for both tickers, both pages read
        assert [q["symbols"] for q in asked] == ["AAPL,MSFT"] * 2
        assert asked[1]["page_token"] == "1"
    else:
        assert {q["symbol"] for q in asked} == {"AAPL", "MSFT"}
    assert all(q["token"] == "fh-test" for q in asked)
    from daemon.core.events import NewsEvent

    news = [e for _, e in iter_events(out) if isinstance(e, NewsEvent)]
    assert [(e.ts, e.headline) for e in news] == [
        (float(s["datetime"]), s["headline"]) for s in sorted(stories[:3],
                                                              key=lambda s: s["datetime"])]
    assert all(e.recv_ts == e.ts for e in news)
    events = [e for _, e in iter_events(out)]
    assert [e.ts for e in events] == sorted(e.ts for e in events)

    db = tmp_path / "n.db"
    assert await _cli("replay", str(out), "--config", str(cfg), "--db", str(db),
                      "--no-progress") == 0
    con = sqlite3.connect(db)
    seen = dict(con.execute("SELECT decision_ts, market_json FROM observations"
                            " WHERE market = 'equity'").fetchall())
    con.close()
    assert "Apple before the decision" in seen[decision]
    assert "Apple just after the decision" not in seen[decision]
    later = min(t for t in seen if t > decision)
    assert "Apple just after the decision" in seen[later]


async def test_news_without_its_key_is_one_line(yahoo: FakeYahoo, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FINNHUB_API_KEY", raising=False)
    out = tmp_path / "x.jsonl.gz"
    rc = await _cli("build-recording", "--tickers", "AAPL", "--start", str(START), "--end",
                    str(END), "--out", str(out), "--config", str(_config(tmp_path, yahoo)),
                    "--news", "finnhub")
    err = capsys.readouterr().err
    assert rc == 2 and "FINNHUB_API_KEY is not set" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
