"""Metrics (own registry, names, bounded labels) and the HTTP server (health, readiness, API)."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.config.runtime import HttpConfig
from daemon.config.settings import Config, parse_config
from daemon.core.events import DecisionEvent
from daemon.engine.engine import Engine
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.web import http as http_mod
from daemon.web.metrics import LlmUsage, Metrics
from daemon.web.observability import Observability
from daemon.web.server import HttpBindError
from tests.helpers import HANG_GUARD
from tests.web.test_alerts import (
    SATURDAY,
    T0,
    FakeSource,
    buy,
    close_engine,
    make_config,
    make_engine,
    tick,
)

ALLOWED_LABELS = {"agent", "market", "outcome", "direction", "kind", "source", "state",
                  "status", "topic_class", "subscriber", "version", "notifier", "result",
                  "handler", "code", "le"}
REQUIRED = (
    "paperarena_portfolio_value_usd", "paperarena_portfolio_return_ratio",
    "paperarena_portfolio_drawdown_ratio", "paperarena_portfolio_max_drawdown_ratio",
    "paperarena_portfolio_cash_ratio", "paperarena_portfolio_drawdown_limit_ratio",
    "paperarena_portfolio_sharpe", "paperarena_portfolio_sortino", "paperarena_feed_up",
    "paperarena_feed_messages_total", "paperarena_feed_last_message_timestamp_seconds",
    "paperarena_feed_reconnects_total", "paperarena_feed_market_open",
    "paperarena_decisions_total", "paperarena_decision_duration_seconds_bucket",
    "paperarena_llm_tokens_total", "paperarena_llm_cost_usd_total",
    "paperarena_llm_budget_used_ratio", "paperarena_bus_dropped_events_total",
    "paperarena_alerts_total", "paperarena_build_info", "paperarena_agent_status",
    "paperarena_event_loop_lag_seconds",
)


class Daemon:
    """An engine with the observability component serving HTTP on a free port."""

    def __init__(self, engine: Engine, obs: Observability) -> None:
        self.engine = engine
        self.obs = obs
        self.session = aiohttp.ClientSession()

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"{self.obs.url}{path}") as r:
            text = await r.text()
            return r.status, json.loads(text) if r.content_type == "application/json" else text

    async def post(self, path: str, body: Any = None, *, content_type: str = "application/json"
                   ) -> tuple[int, Any]:
        data = json.dumps(body if body is not None else {})
        async with self.session.post(f"{self.obs.url}{path}", data=data,
                                     headers={"Content-Type": content_type}) as r:
            return r.status, await r.json()

    async def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        status, text = await self.get("/metrics")
        assert status == 200
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
        return out


async def start_daemon(tmp_path: Path, config: Config | None = None,
                       sources: list[Any] | None = None, t0: float = T0) -> Daemon:
    cfg = config or make_config()
    engine = await make_engine(tmp_path / "d.db", cfg, t0=t0)
    obs = Observability(cfg, mode="live", http=True, port=0, version="9.9.9")
    await obs.start(engine, sources=sources or [])
    return Daemon(engine, obs)


async def stop_daemon(d: Daemon) -> None:
    await d.session.close()
    await d.obs.stop()
    await close_engine(d.engine)


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    d = await start_daemon(tmp_path, sources=[FakeSource("polymarket", market="polymarket")])
    yield d
    await stop_daemon(d)


def value(samples: list[tuple[dict[str, str], float]], **labels: str) -> float:
    hits = [v for lab, v in samples if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (labels, samples)
    return hits[0]


async def test_metrics_names_labels_and_values(daemon: Daemon) -> None:
    eng = daemon.engine
    await tick(eng, T0 + 60, 1.0)
    await buy(eng, T0 + 61)
    await tick(eng, T0 + 120, 0.95)
    await eng.bus.drain()
    m = await daemon.metrics()
    for name in REQUIRED:
        assert name in m, name
    for name, samples in m.items():
        if name.startswith("paperarena_"):
            for labels, _ in samples:
                assert set(labels) <= ALLOWED_LABELS, (name, labels)
                assert "AAA" not in labels.values()  # never a label per asset
    assert value(m["paperarena_portfolio_value_usd"], agent="ew") == pytest.approx(950.0)
    assert value(m["paperarena_portfolio_return_ratio"], agent="ew") == pytest.approx(-0.05)
    assert value(m["paperarena_portfolio_drawdown_ratio"], agent="ew") == pytest.approx(0.05)
    assert value(m["paperarena_portfolio_max_drawdown_ratio"], agent="ew") == pytest.approx(0.05)
    assert value(m["paperarena_portfolio_drawdown_limit_ratio"], agent="ew") == 0.10
    assert value(m["paperarena_portfolio_drawdown_limit_ratio"], agent="bh") == 0.30
    assert value(m["paperarena_portfolio_drawdown_limit_ratio"], agent="cash") == 0.20
    assert value(m["paperarena_portfolio_cash_ratio"], agent="cash") == 1.0
    assert value(m["paperarena_agent_status"], agent="ew", status="active") == 1.0
    assert value(m["paperarena_decisions_total"], agent="ew", outcome="ok") == 1.0
    assert value(m["paperarena_decisions_total"], agent="ew", outcome="error") == 0.0
    assert value(m["paperarena_decision_duration_seconds_count"], market="equity") == 1.0
    assert value(m["paperarena_build_info"], version="9.9.9") == 1.0
    assert value(m["paperarena_feed_up"], source="polymarket") == 1.0
    assert value(m["paperarena_feed_market_open"], source="polymarket") == 1.0
    assert value(m["paperarena_llm_budget_used_ratio"], agent="ew") == 0.0
    assert value(m["paperarena_llm_tokens_total"], agent="bh", direction="in") == 0.0
    assert value(m["paperarena_bus_dropped_events_total"], topic_class="price") == 0.0
    assert value(m["paperarena_alerts_total"], kind="drawdown_breach") == 0.0
    assert value(m["paperarena_clock_timestamp_seconds"]) == pytest.approx(T0 + 120)
    # A breach is counted from the bus and shows on the limit gauges.
    await tick(eng, T0 + 180, 0.8)
    await daemon.obs.monitor.drain()  # type: ignore[union-attr]
    await eng.bus.drain()
    m = await daemon.metrics()
    assert value(m["paperarena_alerts_total"], kind="drawdown_breach") == 1.0
    assert value(m["paperarena_agent_status"], agent="ew", status="halted") == 1.0


async def test_each_daemon_has_its_own_registry(tmp_path: Path) -> None:
    a = await start_daemon(tmp_path / "a")
    b = await start_daemon(tmp_path / "b")
    try:
        await tick(a.engine, T0 + 60, 1.0)
        await buy(a.engine, T0 + 61)
        await a.engine.bus.drain()
        ma, mb = await a.metrics(), await b.metrics()
        assert value(ma["paperarena_decisions_total"], agent="ew", outcome="ok") == 1.0
        assert value(mb["paperarena_decisions_total"], agent="ew", outcome="ok") == 0.0
        assert a.obs.registry is not b.obs.registry
    finally:
        await stop_daemon(a)
        await stop_daemon(b)


async def test_llm_usage_counts_calls_and_budget_share(tmp_path: Path) -> None:
    cfg = parse_config({
        "markets": {"polymarket": {"enabled": False}},
        "agents": [{"id": "gpt", "kind": "llm", "model": "openai/x", "daily_budget_usd": 0.5,
                    "daily_budget_tokens": 10_000}],
    })
    from daemon.store.store import Store
    from daemon.timing.clock import SimClock

    store = await Store.open(tmp_path / "llm.db")
    eng = Engine(cfg, clock=SimClock(T0), store=store)  # agents not built: no model needed
    metrics = Metrics()
    usage = LlmUsage(eng, metrics)
    calls = [{"attempt": 1, "ts": T0, "tokens_in": 1000, "tokens_out": 200, "cost_usd": 0.1,
              "error": "timeout"},
             {"attempt": 2, "ts": T0, "tokens_in": 1100, "tokens_out": 300, "cost_usd": 0.2}]
    await store.commit_round(RoundCommit(decisions=[DecisionRecord(
        "gpt", "equity", T0, T0, "ok", calls=calls)]))
    ev = DecisionEvent(ts=T0, agent="gpt", market="equity", scheduled_ts=T0, outcome="ok")
    await usage.on_decision(ev)
    await usage.on_decision(ev)  # counted once
    reg = metrics.registry
    assert reg.get_sample_value("paperarena_llm_tokens_total",
                                {"agent": "gpt", "direction": "in"}) == 2100
    assert reg.get_sample_value("paperarena_llm_tokens_total",
                                {"agent": "gpt", "direction": "out"}) == 500
    assert reg.get_sample_value("paperarena_llm_cost_usd_total",
                                {"agent": "gpt"}) == pytest.approx(0.3)
    assert reg.get_sample_value("paperarena_llm_calls_total",
                                {"agent": "gpt", "result": "error"}) == 1
    assert usage.budget_ratios(T0) == {"gpt": pytest.approx(0.6)}  # 0.3 of 0.5 USD
    assert usage.budget_ratios(T0 + 86_400) == {"gpt": 0.0}  # a new UTC day
    restored = LlmUsage(eng, Metrics())
    await restored.restore()
    assert restored.budget_ratios(T0) == {"gpt": pytest.approx(0.6)}
    await store.close()


async def test_a_taken_port_is_one_clear_line(daemon: Daemon, tmp_path: Path) -> None:
    assert daemon.obs.server is not None
    other = Observability(make_config(), mode="live", port=daemon.obs.server.port)
    engine = await make_engine(tmp_path / "other.db", make_config())
    with pytest.raises(HttpBindError) as err:
        await other.start(engine, sources=[])
    assert len(err.value.problems) == 1 and "cannot listen on 127.0.0.1:" in str(err.value)
    assert other.server is None and other.monitor is not None and not other.monitor._tasks
    await close_engine(engine)


async def test_healthz_reports_loop_lag(daemon: Daemon) -> None:
    status, body = await daemon.get("/healthz")
    assert status == 200 and body["healthy"]
    lag = daemon.obs.lag
    lag.record(5.0, lag.last_tick or 0.0)
    status, body = await daemon.get("/healthz")
    assert status == 503 and "lagging" in body["problems"][0]
    m = await daemon.metrics()
    assert value(m["paperarena_event_loop_lag_seconds"]) == 5.0


async def test_readyz_checks_store_and_feeds(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    poly = FakeSource("polymarket", "live", market="polymarket")
    yahoo = FakeSource("yahoo", "stale")
    d = await start_daemon(tmp_path, sources=[poly, yahoo], t0=SATURDAY)
    try:
        status, body = await d.get("/readyz")
        assert status == 200 and body["ready"] and body["store"] == "ok"
        assert body["feeds"]["yahoo"] == {"state": "stale", "market": "equity",
                                          "market_open": False, "ok": True}
        poly.state = "down"
        status, body = await d.get("/readyz")
        assert status == 503
        assert body["problems"] == ["feed polymarket is down while polymarket is open"]
        poly.state = "live"
        # Another writer holds the database: the write probe does not get through in time.
        monkeypatch.setattr(http_mod, "PROBE_TIMEOUT", 0.2)
        con = sqlite3.connect(tmp_path / "d.db", isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        status, body = await d.get("/readyz")
        assert status == 503 and "store write probe" in body["store"]
        con.execute("ROLLBACK")
        con.close()
        deadline = time.monotonic() + HANG_GUARD  # a hang guard only
        while time.monotonic() < deadline:  # the probe in flight gets through once unlocked
            status, body = await d.get("/readyz")
            if status == 200:
                break
            await asyncio.sleep(0.1)
        assert status == 200, body
    finally:
        await stop_daemon(d)


async def test_api_leaderboard_agent_and_resume(daemon: Daemon) -> None:
    eng = daemon.engine
    await tick(eng, T0 + 60, 1.0)
    await buy(eng, T0 + 61)
    await eng.mark("equity", T0 + 62)
    await tick(eng, T0 + 120, 0.85)  # ew (10% limit) breaches and is halted
    await daemon.obs.monitor.drain()  # type: ignore[union-attr]
    status, board = await daemon.get("/api/leaderboard")
    assert status == 200
    assert {(r["agent"], r["market"]) for r in board["rows"]} >= {("ew", "equity")}
    live = {r["agent"]: r for r in board["live"]}
    assert live["ew"]["status"] == "halted" and live["ew"]["drawdown"] == pytest.approx(0.15)
    status, agents = await daemon.get("/api/agents")
    assert status == 200 and set(agents["agents"]) == {"ew", "bh", "cash"}
    status, ew = await daemon.get("/api/agents/ew")
    assert status == 200
    assert ew["current"][0]["status"] == "halted"
    assert set(ew["current"][0]["weights"]) == {"AAA", "BBB", "CASH"}
    assert [e["kind"] for e in ew["equity"]] == ["decision", "daily"]
    assert ew["allocations"][0]["weights"]["AAA"] == pytest.approx(0.5)
    assert ew["decisions"][0]["outcome"] == "ok"
    assert ew["alerts"][0]["kind"] == "drawdown_breach"
    assert (await daemon.get("/api/agents/nobody"))[0] == 404
    assert (await daemon.get("/api/agents/ew?limit=x"))[0] == 400
    # Resume: JSON only (no cross-site form posts), halted agents only.
    assert (await daemon.post("/api/agents/ew/resume", content_type="text/plain"))[0] == 415
    status, body = await daemon.post("/api/agents/bh/resume")
    assert status == 409 and body["status"] == {"equity": "active"}
    assert (await daemon.post("/api/agents/nobody/resume"))[0] == 404
    assert (await daemon.post("/api/agents/ew/resume", {"market": "mars"}))[0] == 400
    status, body = await daemon.post("/api/agents/ew/resume", {"market": "equity", "by": "bob"})
    assert status == 200 and body == {"agent": "ew", "resumed": ["equity"],
                                      "status": {"equity": "active"}}
    assert eng.slots["equity"]["ew"].status == "active"
    rows = await eng.store.fetchall("SELECT status, reason FROM agent_state WHERE agent='ew'")
    assert rows[0][0] == "active" and "bob" in rows[0][1]
    m = await daemon.metrics()
    assert value(m["paperarena_http_requests_total"], handler="/api/agents/{id}/resume",
                 code="200") == 1.0


async def test_replay_serves_metrics_only_when_asked(tmp_path: Path) -> None:
    from daemon.app.replay import replay
    from tests.recordings import make_recording

    assert HttpConfig().replay is False
    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=2)
    cfg = make_config(replay=True)
    cfg = cfg.model_copy(update={"markets": cfg.markets.model_copy(update={
        "equity": cfg.markets.equity.model_copy(update={"assets": ("AAPL", "MSFT")})})})
    obs = Observability.from_config(cfg, mode="replay")
    assert obs is not None and obs.http_enabled
    seen: dict[str, Any] = {}

    class Probe:
        """A component started after the observability one: scrapes it during the replay."""

        name = "probe"

        async def start(self, engine: Engine, *, sources: list[Any]) -> None:
            assert obs is not None and sources == []
            async with aiohttp.ClientSession() as s, s.get(f"{obs.url}/metrics") as r:
                seen["text"] = await r.text()

        async def stop(self) -> None:
            async with aiohttp.ClientSession() as s, s.get(f"{obs.url}/metrics") as r:
                seen["end"] = await r.text()

    summary = await replay(rec, cfg, tmp_path / "r.db", progress=False, speed=None,
                           components=[obs, Probe()])
    assert re.search(r'paperarena_feed_up\{source="replay"\} 1\.0', seen["text"])
    n = re.search(r'paperarena_feed_messages_total\{source="replay"\} (\S+)', seen["end"])
    assert n and float(n[1]) == summary.events
    assert obs.url is None  # stopped with the replay


async def test_leaderboard_figures_are_exported_after_daily_marks(tmp_path: Path) -> None:
    """Issue 7's live figures (rolling-k, CapitalBench, VaR...) reach /metrics, bounded labels."""
    from daemon.app.replay import replay
    from daemon.config.settings import load_config
    from daemon.engine.engine import Engine
    from daemon.store.store import Store
    from daemon.web.metrics import LeaderboardFigures
    from tests.recordings import TINY_CONFIG, make_recording

    rec = tmp_path / "r.jsonl.gz"
    make_recording(rec)
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(TINY_CONFIG)
    cfg = load_config(cfg_path)
    db = tmp_path / "r.db"
    await replay(rec, cfg, db, progress=False)
    store = await Store.open(db)
    try:
        from daemon.timing.clock import SimClock

        eng = Engine(cfg, clock=SimClock(0.0), store=store)
        board = LeaderboardFigures(eng)
        await board.refresh()
        fams = list(board.collect())
    finally:
        await store.close()
    samples = fams[0].samples
    assert fams[0].name == "paperarena_leaderboard_figure"
    figures = {s.labels["figure"] for s in samples}
    assert {"cumulative_return", "sharpe", "capitalbench_score"} <= figures
    assert {s.labels["market"] for s in samples} <= {"equity", "polymarket"}
    agents = {s.labels["agent"] for s in samples}
    assert agents == {"bh", "ew", "mom", "cash"}


async def test_a_daily_mark_refreshes_the_figures_at_once(daemon: Daemon) -> None:
    """The figures follow a daily mark without waiting for the periodic refresh (15 s)."""
    perf = daemon.obs.performance
    assert perf is not None
    agent = next(iter(daemon.engine.slots["equity"]))
    before = perf.days("equity", agent)
    await daemon.engine.mark("equity", daemon.engine.clock.now())
    for _ in range(100):  # at most 5 s, a third of the periodic interval
        if perf.days("equity", agent) > before:
            break
        await asyncio.sleep(0.05)
    assert perf.days("equity", agent) == before + 1
