"""Fundamentals: providers normalised, polled from a local fake, seen without look-ahead, recorded
and replayed into the StockBench decision prompt."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agents.base import Fundamentals, LookAheadError, Observation, assert_no_lookahead
from agents.stored_input import load_input
from daemon.app.replay import replay
from daemon.config.settings import parse_config
from daemon.core.events import FundamentalsEvent, decode_event, encode_event
from feeds.fundamentals import (
    FundamentalsSettings,
    FundamentalsSource,
    normalise_finnhub,
    normalise_yahoo,
)
from feeds.recording import RecordingWriter, iter_events, read_header
from tests.agents.test_llm_agent import T, equity_obs
from tests.llm_server import FakeLlmServer
from tests.protocols.test_stockbench import StockBenchModel

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"

YAHOO = {"quoteResponse": {"result": [
    {"symbol": "AAPL", "marketCap": 3.9e12, "trailingPE": 35.2, "dividendYield": 0.41,
     "trailingAnnualDividendRate": 1.02, "fiftyTwoWeekHigh": 260.1, "fiftyTwoWeekLow": 169.2},
    {"symbol": "MSFT", "marketCap": "big", "trailingPE": None,
     "trailingAnnualDividendYield": 0.0072, "fiftyTwoWeekHigh": float("nan"), "fiftyTwoWeekLow": 0},
    {"symbol": "NVDA"},
], "error": None}}
FINNHUB = {"metric": {"marketCapitalization": 4_400_000.5, "peBasicExclExtraTTM": 52.1,
                      "dividendYieldIndicatedAnnual": 0.02, "dividendPerShareAnnual": 0.04,
                      "52WeekHigh": 212.0, "52WeekLow": True}, "series": {}}


def test_yahoo_quote_is_normalised() -> None:
    out = normalise_yahoo(YAHOO)
    assert out == {
        "AAPL": {"market_cap_usd": 3.9e12, "pe_ratio": 35.2, "dividend_yield_pct": 0.41,
                 "dividend_per_share_annual": 1.02, "week52_high": 260.1, "week52_low": 169.2},
        "MSFT": {"dividend_yield_pct": pytest.approx(0.72)},  # junk and non-positive dropped
    }
    with pytest.raises(ValueError, match="not a Yahoo quote answer"):
        normalise_yahoo({"finance": {"error": "Unauthorized"}})


def test_finnhub_metric_is_normalised() -> None:
    assert normalise_finnhub(FINNHUB) == {
        "market_cap_usd": pytest.approx(4.4000005e12), "pe_ratio": 52.1,
        "dividend_yield_pct": 0.02, "dividend_per_share_annual": 0.04, "week52_high": 212.0}
    with pytest.raises(ValueError, match="no 'metric' object"):
        normalise_finnhub({"error": "Invalid API key"})


class FakeProviders:
    """Yahoo's quote endpoint and Finnhub's metric endpoint on a local port."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.runner: web.AppRunner | None = None
        self.base = ""

    async def __aenter__(self) -> FakeProviders:
        app = web.Application()
        app.router.add_get("/v7/finance/quote", self.quote)
        app.router.add_get("/api/v1/stock/metric", self.metric)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def quote(self, request: web.Request) -> web.Response:
        self.requests.append(("quote", dict(request.query)))
        return web.json_response(YAHOO)

    async def metric(self, request: web.Request) -> web.Response:
        self.requests.append(("metric", dict(request.query)))
        if request.query["symbol"] == "MSFT":
            return web.json_response({"error": "boom"}, status=500)
        return web.json_response(FINNHUB)


async def test_yahoo_poll_publishes_one_event_per_stock() -> None:
    got: list[FundamentalsEvent] = []

    async def publish(ev: FundamentalsEvent) -> None:
        got.append(ev)

    async with FakeProviders() as fake, aiohttp.ClientSession() as session:
        settings = FundamentalsSettings(yahoo_url=f"{fake.base}/v7/finance/quote")
        src = FundamentalsSource(settings, ["AAPL", "MSFT", "NVDA"], publish, clock=lambda: T)
        events = await src.poll_once(session)
    assert fake.requests == [("quote", {"symbols": "AAPL,MSFT,NVDA"})]
    assert events == got and [e.asset for e in got] == ["AAPL", "MSFT"]
    assert got[0].ts == got[0].recv_ts == T and got[0].source == "yahoo"
    assert decode_event(encode_event(got[0])) == got[0]  # recordable as is


async def test_finnhub_poll_keeps_going_past_a_bad_symbol() -> None:
    got: list[FundamentalsEvent] = []

    async def publish(ev: FundamentalsEvent) -> None:
        got.append(ev)

    async with FakeProviders() as fake, aiohttp.ClientSession() as session:
        settings = FundamentalsSettings(provider="finnhub",
                                        finnhub_url=f"{fake.base}/api/v1/stock/metric")
        src = FundamentalsSource(settings, ["MSFT", "AAPL"], publish, token="tok-secret-1",
                                 clock=lambda: T)
        await src.poll_once(session)
    assert [q["symbol"] for _, q in fake.requests] == ["MSFT", "AAPL"]
    assert all(q["token"] == "tok-secret-1" and q["metric"] == "all" for _, q in fake.requests)
    assert [e.asset for e in got] == ["AAPL"]
    assert src.errors == 1 and "HTTP 500" in src.last_error
    with pytest.raises(ValueError, match="needs a token"):
        FundamentalsSource(settings, ["AAPL"], publish)


async def test_unreachable_provider_is_one_logged_error() -> None:
    async def publish(ev: FundamentalsEvent) -> None:
        raise AssertionError("nothing to publish")

    async with aiohttp.ClientSession() as session:
        src = FundamentalsSource(FundamentalsSettings(
            yahoo_url="http://127.0.0.1:9/v7/finance/quote", request_timeout=2), ["AAPL"], publish)
        assert await src.poll_once(session) == []
    assert src.errors == 1 and src.last_error


def test_observation_keeps_fundamentals_without_look_ahead() -> None:
    base = equity_obs()
    plain = base.to_dict()
    assert "fundamentals" not in plain  # hashes of observations without them are unchanged
    obs = dataclasses.replace(base, fundamentals={
        "AAPL": Fundamentals(T - 3600, {"pe_ratio": 30.0}, "yahoo")})
    assert Observation.from_dict(obs.to_dict()) == obs
    assert obs.sha256() != base.sha256()
    assert_no_lookahead(obs)
    late = dataclasses.replace(base, fundamentals={"AAPL": Fundamentals(T + 1, {}, "yahoo")})
    with pytest.raises(LookAheadError, match="fundamentals of AAPL"):
        assert_no_lookahead(late)


def _recording_with_fundamentals(path: Path, end: float) -> list[FundamentalsEvent]:
    """Write the sample's first sessions plus pre-open fundamentals for AAPL each day."""
    header = read_header(SAMPLE)
    added: list[FundamentalsEvent] = []
    for day, cap in (("2026-10-19", 3.0e12), ("2026-10-20", 3.1e12)):
        ts = datetime.fromisoformat(f"{day}T12:00:00+00:00").timestamp()  # 08:00 EDT
        added.append(FundamentalsEvent(ts=ts, recv_ts=ts, asset="AAPL", source="yahoo",
                                       metrics={"market_cap_usd": cap, "pe_ratio": 33.0}))
    # A figure fetched after the second decision must not reach it.
    late = datetime.fromisoformat("2026-10-20T14:00:00+00:00").timestamp()
    added.append(FundamentalsEvent(ts=late, recv_ts=late, asset="AAPL", source="yahoo",
                                   metrics={"market_cap_usd": 9.9e12}))
    pending = sorted(added, key=lambda e: e.ts)
    with RecordingWriter(path, dataclasses.replace(header, end=end)) as w:
        for _, ev in iter_events(SAMPLE):
            if ev.ts >= end:
                break
            while pending and pending[0].ts <= ev.ts:
                w.write(pending.pop(0))
            w.write(ev)
    return added


async def test_fundamentals_are_recorded_and_replayed_into_the_prompt(
    tmp_path: Path, monkeypatch: Any
) -> None:
    end = datetime(2026, 10, 21, tzinfo=UTC).timestamp()  # two sessions
    rec = tmp_path / "fund.jsonl.gz"
    _recording_with_fundamentals(rec, end)
    data = tomllib.loads((ROOT / "examples" / "stockbench.toml").read_text())
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")

    class PicksApple(StockBenchModel):
        async def _respond(self, body: dict[str, Any]) -> Any:
            if self.step_of(body) == "overview":
                self.push(ok_pick("AAPL"))
                return await FakeLlmServer._respond(self, body)
            return await super()._respond(body)

    async with PicksApple() as model:
        data["agents"][0].update(api_base=model.api_base, timeout=10)
        await replay(rec, parse_config(data), tmp_path / "f.db", progress=False)
    decisions = [p for p, s in zip(model.prompts(), model.steps, strict=True) if s == "decision"]
    assert len(decisions) == 2
    first, second = (p.split("FUNDAMENTALS OF THE SELECTED STOCKS", 1)[1] for p in decisions)
    assert "AAPL: (as of 2026-10-19 08:00, source yahoo)" in first
    assert "market capitalisation: 3,000.0 billion USD" in first
    assert "P/E ratio (trailing): 33.00" in first
    assert "dividend yield: unavailable (not given by the source)" in first
    assert "market capitalisation: 3,100.0 billion USD" in second
    assert "9,900.0" not in second  # fetched after the decision
    con = sqlite3.connect(tmp_path / "f.db")
    stored = con.execute("SELECT COUNT(*) FROM market_events WHERE kind='FundamentalsEvent'"
                         ).fetchone()[0]
    inputs = [json.loads(load_input(con, "stockbench", m, t) or "") for m, t in con.execute(
        "SELECT market, scheduled_ts FROM decisions WHERE agent='stockbench'"
        " ORDER BY scheduled_ts").fetchall()]
    con.close()
    assert stored == 3
    assert inputs[1]["fundamentals"]["AAPL"][1]["market_cap_usd"] == 3.1e12


def ok_pick(*tickers: str) -> Any:
    from tests.protocols.test_stockbench import pick

    return pick(*tickers)


def test_market_state_keeps_the_latest_snapshot_across_a_restart() -> None:
    from daemon.market.state import MarketState
    from scoring.ledger.ledger import Book

    def state() -> MarketState:
        book = Book("equity")
        book.add_agent("a")
        book.add_asset("AAPL")
        book.set_price("AAPL", 200.0, T - 60)
        return MarketState({"equity": book})

    st = state()
    for ts, pe in ((T - 200, 30.0), (T - 100, 31.0), (T - 150, 99.0), (T + 50, 32.0)):
        st.on_fundamentals(FundamentalsEvent(ts=ts, recv_ts=ts, asset="AAPL",
                                             metrics={"pe_ratio": pe}, source="yahoo"))
    st.on_fundamentals(FundamentalsEvent(ts=T, recv_ts=T, asset="ZZZ", metrics={"pe_ratio": 1.0}))
    again = state()
    again.restore(json.loads(json.dumps(st.state())))
    for s in (st, again):
        obs = s.observation("a", "equity", T, recent=[], news_window=3600, news_per_key=5)
        # The latest before the decision; the out-of-order older one and the later one are not.
        assert obs.fundamentals == {"AAPL": Fundamentals(T - 100, {"pe_ratio": 31.0}, "yahoo")}
        assert_no_lookahead(obs)
