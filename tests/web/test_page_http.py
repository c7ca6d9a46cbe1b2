"""The live page's server side: files and CSP, the event stream, status and paged decisions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.core.events import FillEvent
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.web import page as page_mod
from tests.web.test_alerts import T0, FakeSource, buy, make_config, tick
from tests.web.test_metrics_http import Daemon, start_daemon, stop_daemon


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    d = await start_daemon(tmp_path, sources=[FakeSource("polymarket", market="polymarket")])
    yield d
    await stop_daemon(d)


async def raw(d: Daemon, path: str) -> tuple[int, dict[str, str], bytes]:
    async with d.session.get(f"{d.obs.url}{path}") as r:
        return r.status, dict(r.headers), await r.read()


async def test_page_and_files_are_served_with_a_strict_csp(daemon: Daemon) -> None:
    for path, ctype in (("/", "text/html"), ("/agent/ew", "text/html"),
                        ("/static/app.js", "text/javascript"), ("/static/style.css", "text/css")):
        status, headers, body = await raw(daemon, path)
        assert status == 200, path
        assert headers["Content-Type"].startswith(ctype)
        csp = headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert body
    _, _, html = await raw(daemon, "/")
    assert b"<script>" not in html and b"onload=" not in html  # no inline script at all
    for bad in ("/static/..%2Fpage.py", "/static/page.py", "/static/.hidden", "/static/nope.js"):
        status, _, body = await raw(daemon, bad)
        assert status == 404, bad
        assert "error" in json.loads(body)


async def read_event(resp: aiohttp.ClientResponse, name: str, timeout: float = 10.0
                     ) -> dict[str, Any]:
    """Return the data of the next server-sent event called ``name``."""
    async def _read() -> dict[str, Any]:
        event, data = "", ""
        while True:
            line = (await resp.content.readline()).decode()
            if line == "":
                raise AssertionError("stream ended")
            line = line.rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "":
                if event == name:
                    return json.loads(data)
                event, data = "", ""

    return await asyncio.wait_for(_read(), timeout)


def fill(agent: str, ts: float) -> FillEvent:
    return FillEvent(ts=ts, agent=agent, market="equity", scheduled_ts=ts, trades={"AAA": 1.0},
                     traded_value=100.0, cost=0.1, value_before=1000.0, value_after=999.9,
                     weights={"AAA": 0.1, "CASH": 0.9})


async def test_event_stream_pushes_coalesced_updates(daemon: Daemon,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_mod, "MIN_INTERVAL", 0.3)
    async with daemon.session.get(f"{daemon.obs.url}/api/events") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        await read_event(resp, "hello")
        for i in range(200):  # a burst: coalesced, never one message per event
            await daemon.engine.bus.publish(fill("ew", T0 + i))
        await tick(daemon.engine, T0 + 300, 1.0)
        seen: dict[str, int] = {}
        recent: list[dict[str, Any]] = []
        messages = 0
        while seen.get("fill", 0) < 200 or not seen.get("mark"):
            msg = await read_event(resp, "update")
            messages += 1
            for k, v in msg["counts"].items():
                seen[k] = seen.get(k, 0) + v
            recent += msg["recent"]
        assert messages <= 5
        assert recent[-1]["type"] == "fill" and recent[-1]["agent"] == "ew"
        assert recent[-1]["traded_value"] == 100.0
        assert daemon.obs.server is not None
        assert daemon.obs.server.page.events.clients == 1


async def test_the_stream_counts_every_price_of_a_columnar_burst(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prices are counted by a tap that reads a burst's columns (no event per price): every
    price counts, none is lost to a subscriber's conflation."""
    from daemon.core.price_columns import PriceColumns

    monkeypatch.setattr(page_mod, "MIN_INTERVAL", 0.1)
    async with daemon.session.get(f"{daemon.obs.url}/api/events") as resp:
        await read_event(resp, "hello")
        cols = PriceColumns("polymarket", "test")
        for i in range(30):
            cols.append(f"t{i % 3}", T0 + i, T0 + i, 0.5, None, None)
        daemon.engine.bus.publish_columns(cols)
        marks = 0
        while marks < 30:
            msg = await read_event(resp, "update")
            marks += msg["counts"].get("mark", 0)
            if marks:
                assert "polymarket" in msg["markets"]
        assert marks == 30


async def test_event_streams_take_at_most_half_the_connections(tmp_path: Path) -> None:
    d = await start_daemon(tmp_path, config=make_config(max_connections=6))
    try:
        assert d.obs.server is not None
        assert d.obs.server.page.events.limit == 3
    finally:
        await stop_daemon(d)


async def test_event_streams_are_bounded_and_end_when_the_server_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(page_mod, "MAX_CLIENTS", 2)
    d = await start_daemon(tmp_path)
    url = f"{d.obs.url}/api/events"
    streams = [await d.session.get(url) for _ in range(2)]
    for s in streams:
        await read_event(s, "hello")
    status, body = await d.get("/api/events")
    assert status == 503 and "too many event streams (at most 2)" in body["error"]
    status, _ = await d.get("/api/status")  # the API still answers
    assert status == 200
    ends = [asyncio.ensure_future(s.content.read()) for s in streams]
    await asyncio.wait_for(d.obs.stop(), 10)  # open streams do not hold the shutdown
    await asyncio.wait_for(asyncio.gather(*ends), 5)
    for s in streams:
        s.release()
    await d.session.close()
    from tests.web.test_alerts import close_engine

    await close_engine(d.engine)


async def test_status_names_sources_rounds_and_agents(daemon: Daemon) -> None:
    eng = daemon.engine
    await tick(eng, T0 + 60, 1.0)
    await buy(eng, T0 + 61)
    await eng.rounds["equity"].run(T0 + 3600, missed=True)
    status, st = await daemon.get("/api/status")
    assert status == 200
    src = st["sources"][0]
    assert src["name"] == "polymarket" and src["state"] == "live"
    assert src["data_age_s"] == pytest.approx(eng.clock.now() - T0)
    eq = st["rounds"]["equity"]
    assert eq["last_ts"] == T0 + 3600 and eq["missed"] == 3 and eq["last_outcomes"] == {"missed": 3}
    assert eq["outcomes"]["ok"] >= 2
    agents = {a["agent"]: a for a in st["agents"]}
    assert agents["ew"]["status"] == "active"
    # Provisional exactly when the leaderboard says so (a reason with it).
    assert daemon.obs.server is not None and daemon.obs.server.board_cache is not None
    board = await daemon.obs.server.board_cache.get()
    flagged = {(r["agent"], r["market"]) for r in board["rows"] if r.get("provisional")}
    for a in st["agents"]:
        assert a["provisional"] == ((a["agent"], a["market"]) in flagged)
        assert bool(a["provisional_reason"]) == a["provisional"]


async def test_decisions_are_paged_with_their_audit_trail(daemon: Daemon) -> None:
    store = daemon.engine.store
    obs = {"news": {"AAA": [[T0, "<b>Headline</b>", "Wire", "", ""]]}}
    recs = [DecisionRecord("ew", "equity", T0 + i, T0 + i, "ok", reason=f"r{i}",
                           input_json=json.dumps(obs), input_sha256=f"{i:064x}",
                           raw_output=f'{{"n": {i}}}', allocation={"CASH": 1.0}, attempts=1,
                           calls=[{"attempt": 1, "ts": T0 + i, "model": "m", "raw_response": "x",
                                   "tokens_in": 10, "tokens_out": 2, "latency_s": 0.5,
                                   "cost_usd": 0.001, "step": "selection", "outcome": "ok",
                                   "input_sha256": "ab" * 32, "parsed": {"pick": ["AAA"]}}])
            for i in range(45)]
    await store.commit_round(RoundCommit(decisions=recs))
    status, page = await daemon.get("/api/agents/ew/decisions?offset=40&limit=20")
    assert status == 200
    assert page["total"] == 45 and len(page["decisions"]) == 5
    first = page["decisions"][0]
    assert first["scheduled_ts"] == T0 + 4  # newest first: 44..0, offset 40
    assert first["input_sha256"] == f"{4:064x}" and first["raw_output"] == '{"n": 4}'
    assert first["headlines"] == [{"key": "AAA", "ts": T0, "headline": "<b>Headline</b>",
                                   "source": "Wire"}]
    assert first["calls"][0]["tokens_in"] == 10 and first["calls"][0]["latency_s"] == 0.5
    # Multi-step protocols: each call names its step, the hash of its prompt and its answer.
    assert {k: first["calls"][0][k] for k in ("step", "outcome", "input_sha256", "parsed")} == {
        "step": "selection", "outcome": "ok", "input_sha256": "ab" * 32,
        "parsed": {"pick": ["AAA"]}}
    status, page = await daemon.get("/api/agents/ew/decisions")
    assert page["limit"] == 20 and page["decisions"][0]["scheduled_ts"] == T0 + 44
    for bad in ("offset=-1", "limit=x", "page=2"):
        status, body = await daemon.get(f"/api/agents/ew/decisions?{bad}")
        assert status == 400, bad
        assert "\n" not in body["error"]
    status, body = await daemon.get("/api/agents/nobody/decisions")
    assert status == 404


async def test_a_served_daemon_reads_a_polymarket_burst_as_columns_only(daemon: Daemon) -> None:
    """Every tap a Polymarket price reaches in a daemon serving its page reads columns, and no
    subscriber takes prices: a burst never becomes an event per price (the ingest path)."""
    bus = daemon.engine.bus
    route = bus._market_route("polymarket")
    assert route is not None
    taps, subs = route
    assert taps and all(t in bus._columns_taps for t in taps), taps
    assert subs == ()
