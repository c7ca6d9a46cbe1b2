"""In-daemon alerts: drawdown limits, hysteresis, halts and resume, stale feeds, notifiers.

Why one module over 500 lines: the alert rules' tests share the monitor fixtures and the webhook
sink; other tests import them.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from agents.config import AgentConfig
from daemon.alerts.config import AlertsConfig, WebhookConfig, drawdown_limit, parse_alerts_config
from daemon.alerts.delivery import WebhookNotifier, build_notifiers, safe_url
from daemon.alerts.kinds import (
    AGENT_RESUMED,
    DRAWDOWN_BREACH,
    DRAWDOWN_RECOVERED,
    FEED_RECOVERED,
    FEED_STALE,
    Alert,
)
from daemon.alerts.rules import AlertMonitor
from daemon.app.components import default_components
from daemon.config.settings import Config, ConfigError, parse_config
from daemon.core.events import AlertEvent, PriceEvent
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import LiveClock, SimClock
from daemon.web.observability import Observability
from tests.helpers import wait_for

ASSETS = ("AAA", "BBB")
#: Tuesday 2026-11-03 15:00 UTC: the NYSE is open.
T0 = datetime(2026, 11, 3, 15, 0, tzinfo=UTC).timestamp()
#: Saturday 2026-11-07 15:00 UTC: the NYSE is closed.
SATURDAY = datetime(2026, 11, 7, 15, 0, tzinfo=UTC).timestamp()


def make_config(alerts: dict[str, Any] | None = None, **http: Any) -> Config:
    """Return an equity-only config: ew (conservative, halts), bh (max_drawdown 0.3), cash."""
    return parse_config({
        "markets": {
            "equity": {"assets": list(ASSETS), "cost": {"preset": "none"},
                       "schedule": {"kind": "interval", "every": "1h", "timezone": "UTC"}},
            "polymarket": {"enabled": False},
        },
        "agents": [
            {"id": "ew", "kind": "equal_weight", "risk_profile": "conservative",
             "halt_on_breach": True, "daily_budget_usd": 2.0},
            {"id": "bh", "kind": "buy_and_hold", "max_drawdown": 0.3},
            {"id": "cash", "kind": "cash"},
        ],
        "http": {"port": 0, **http},
        "alerts": alerts or {},
    })


async def make_engine(db: Path | str, config: Config, t0: float = T0) -> Engine:
    """Return a restored engine on a simulated clock with its bus started."""
    store = await Store.open(db)
    engine = Engine(config, clock=SimClock(t0), store=store)
    engine.add_equity_universe(config.markets.equity.assets)
    engine.build_agents()
    await engine.restore()
    await engine.bus.start()
    return engine


async def close_engine(engine: Engine) -> None:
    """Stop the bus and close the store."""
    await engine.bus.stop()
    await engine.store.close()


async def tick(engine: Engine, ts: float, factor: float) -> None:
    """Publish every asset at ``100 * factor`` just before ``ts``, then one again at ``ts``.

    A check runs on the first price event past the interval, with the book as of that event:
    the final tick makes the checks at ``ts`` see every asset moved.
    """
    clock = engine.clock
    assert isinstance(clock, SimClock)
    price = round(100.0 * factor, 6)
    for t, assets in ((ts - 0.5, ASSETS), (ts, ASSETS[:1])):
        if t > clock.now():
            clock.advance(t)
        for a in assets:
            await engine.bus.publish(PriceEvent(ts=t, recv_ts=t, market="equity", asset=a,
                                                price=price))


async def buy(engine: Engine, ts: float) -> None:
    """Run a decision round at ``ts`` (ew and bh invest everything)."""
    await engine.rounds["equity"].run(ts)


@dataclass
class FakeCounters:
    """The counters of a source (same names as feeds.connection.SourceCounters)."""

    messages: int = 10
    data_messages: int = 8
    decode_errors: int = 0
    reconnects: int = 1
    last_message_ts: float | None = T0
    last_data_ts: float | None = T0


@dataclass
class FakeSource:
    """A source as the daemon sees it."""

    name: str
    state: str = "live"
    market: str | None = None
    counters: FakeCounters = field(default_factory=FakeCounters)


class Sink:
    """A local webhook receiver that answers with scripted statuses."""

    def __init__(self) -> None:
        """Start with no script (always 200)."""
        self.received: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.script: list[int] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        """Record the request; answer with the next scripted status."""
        body = await request.json()
        self.received.append((request.path, body, dict(request.headers)))
        status = self.script.pop(0) if self.script else 200
        return web.json_response({}, status=status)

    async def start(self) -> None:
        """Listen on a free local port."""
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    def url(self, path: str) -> str:
        """Return the URL of ``path`` on this sink."""
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self, path: str) -> list[dict[str, Any]]:
        """Return the JSON bodies received on ``path``."""
        return [b for p, b, _ in self.received if p == path]


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    s = Sink()
    await s.start()
    yield s
    assert s.runner is not None
    await s.runner.cleanup()


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    eng = await make_engine(tmp_path / "a.db", make_config())
    yield eng
    await close_engine(eng)


# ----------------------------------------------------------------------------------- config


def test_alerts_config_parses_durations_and_webhooks() -> None:
    cfg = parse_alerts_config({
        "hysteresis": 0.05, "check_interval": "2m", "feed_stale_after": "10m",
        "webhooks": [{"url": "https://hooks.example.com/T/B/x", "kind": "slack",
                      "token_env": "HOOK_TOKEN", "kinds": ["drawdown_breach"],
                      "timeout": "3s"}],
    })
    assert cfg.check_interval == 120.0 and cfg.feed_stale_after == 600.0
    assert cfg.webhooks[0].kind == "slack" and cfg.webhooks[0].timeout == 3.0
    assert parse_alerts_config({}) == AlertsConfig()
    with pytest.raises(Exception, match="frozen"):
        cfg.hysteresis = 0.1  # type: ignore[misc]


def test_invalid_alerts_config_gives_one_line_per_problem() -> None:
    with pytest.raises(ConfigError) as err:
        parse_alerts_config({
            "hysteresis": 2, "check_interval": "soon", "colour": "red",
            "webhooks": [{"url": "ftp://x", "kind": "teams"}, {"kind": "json"}],
        })
    problems = err.value.problems
    assert all("\n" not in p for p in problems)
    joined = "\n".join(problems)
    for expected in ("alerts.hysteresis:", "alerts.check_interval: invalid duration",
                     "alerts.colour: unknown key", "alerts.webhooks.0.url: must be an http",
                     "alerts.webhooks.0.kind:", "alerts.webhooks.1.url: required key"):
        assert expected in joined


def test_default_components_validate_alerts_and_follow_http_settings() -> None:
    assert [c.name for c in default_components(make_config(), mode="live")] == ["observability"]
    plain = parse_config({"agents": [{"id": "a", "kind": "cash"}]})
    assert default_components(plain, mode="replay") == []
    assert len(default_components(make_config(), mode="replay")) == 1  # ew halts on breach
    obs = default_components(make_config(replay=True), mode="replay")[0]
    assert isinstance(obs, Observability) and obs.http_enabled
    assert not Observability(make_config(), mode="replay").http_enabled
    bad = make_config({"webhooks": [{"url": "nope"}]})
    with pytest.raises(ConfigError, match=r"alerts\.webhooks\.0\.url"):
        default_components(bad, mode="live")


def test_drawdown_limit_comes_from_the_profile_or_the_explicit_value() -> None:
    def cfg(**kw: Any) -> AgentConfig:
        return AgentConfig(id="a", kind="cash", **kw)

    assert drawdown_limit(cfg(risk_profile="conservative")) == 0.10
    assert drawdown_limit(cfg()) == 0.20
    assert drawdown_limit(cfg(risk_profile="aggressive")) == 0.35
    assert drawdown_limit(cfg(risk_profile="aggressive", max_drawdown=0.05)) == 0.05


# ----------------------------------------------------------------------------------- drawdown


# (seconds after T0, price factor): bh (limit 30%) breaches, wobbles, recovers, breaches again.
PATH = [(60, 1.0), (120, 0.75), (180, 0.69), (240, 0.71), (300, 0.685), (360, 0.73),
        (420, 0.69)]


async def run_path(engine: Engine, monitor: AlertMonitor) -> None:
    await tick(engine, T0, 1.0)
    await buy(engine, T0 + 1)
    for dt, f in PATH:
        await tick(engine, T0 + dt, f)
        await tick(engine, T0 + dt + 10, f)  # within check_interval: not evaluated


async def test_drawdown_alerts_with_hysteresis_halt_and_persistence(engine: Engine) -> None:
    monitor = AlertMonitor(engine, AlertsConfig(check_interval=60, hysteresis=0.02))
    await monitor.start()
    events: list[AlertEvent] = []
    engine.bus.subscribe("alert.#", events.append, name="test-alerts")
    await run_path(engine, monitor)
    await monitor.drain()
    await engine.bus.drain()
    got = [(a.kind, a.agent, a.ts - T0, round(a.value, 4)) for a in monitor.raised]
    assert got == [
        (DRAWDOWN_BREACH, "ew", 120, 0.25),       # conservative: 10% limit
        (DRAWDOWN_BREACH, "bh", 180, 0.31),       # explicit 30% limit
        (DRAWDOWN_RECOVERED, "bh", 360, 0.27),    # 29% and 31.5% do not re-arm; 27% <= 28% does
        (DRAWDOWN_BREACH, "bh", 420, 0.31),       # a new breach after re-arming
    ]
    # The halted agent is not re-armed by recovering; it waits for an operator.
    assert engine.slots["equity"]["ew"].status == "halted"
    assert "resume with POST /api/agents/ew/resume" in engine.slots["equity"]["ew"].reason
    assert [e.kind for e in events] == [a[0] for a in got]
    rows = await engine.store.fetchall("SELECT kind, agent, market, ts, value, limit_value"
                                       " FROM alerts ORDER BY id")
    assert [(k, a, t - T0) for k, a, _, t, _, _ in rows] == [(g[0], g[1], g[2]) for g in got]
    assert rows[0][5] == 0.10 and rows[1][5] == 0.30
    state = await engine.store.fetchall("SELECT agent, market, status FROM agent_state")
    assert state == [("ew", "equity", "halted")]
    # The next round records ew as halted (and holds); bh still decides.
    result = await engine.rounds["equity"].run(T0 + 3600)
    assert result.outcomes["ew"] == "halted" and result.outcomes["bh"] in ("ok", "hold")
    await monitor.stop()


async def test_a_live_breach_inside_the_interval_is_raised_without_another_price(
    tmp_path: Path,
) -> None:
    """The crash comes right after a check and no price follows (the end of a burst, a quiet
    market): the live monitor still evaluates it once ``check_interval`` has passed."""
    import time

    store = await Store.open(tmp_path / "live.db")
    engine = Engine(make_config(), clock=LiveClock(), store=store)
    engine.add_equity_universe(ASSETS)
    engine.build_agents()
    await engine.restore()
    await engine.bus.start()
    monitor = AlertMonitor(engine, AlertsConfig(check_interval=0.3))
    await monitor.start()

    async def prices(factor: float) -> None:
        now = time.time()
        for a in ASSETS:
            await engine.bus.publish(PriceEvent(ts=now, recv_ts=now, market="equity", asset=a,
                                                price=100.0 * factor))

    try:
        await prices(1.0)
        await engine.rounds["equity"].run(time.time())  # ew and bh invest everything
        await asyncio.sleep(0.35)
        await prices(1.0)  # past the interval: checked, no breach
        assert monitor.raised == []
        await prices(0.5)  # a crash inside the interval, and then nothing
        await wait_for(lambda: {a.agent for a in monitor.raised} >= {"ew", "bh"})
        assert {(a.kind, a.agent) for a in monitor.raised} == {
            (DRAWDOWN_BREACH, "ew"), (DRAWDOWN_BREACH, "bh")}
    finally:
        await monitor.stop()
        await close_engine(engine)


async def test_drawdown_is_checked_deterministically_on_engine_time(tmp_path: Path) -> None:
    runs = []
    for name in ("x", "y"):
        eng = await make_engine(tmp_path / f"{name}.db", make_config())
        monitor = AlertMonitor(eng, AlertsConfig(check_interval=60))
        await monitor.start()
        await run_path(eng, monitor)
        await monitor.stop()
        runs.append([(a.kind, a.agent, a.ts, a.value, a.message) for a in monitor.raised])
        await close_engine(eng)
    assert runs[0] == runs[1] and len(runs[0]) == 4


async def test_restart_restores_peaks_halts_and_disarmed_alerts(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    eng = await make_engine(db, make_config())
    monitor = AlertMonitor(eng, AlertsConfig(check_interval=60))
    await monitor.start()
    await tick(eng, T0, 1.0)
    await buy(eng, T0 + 1)
    await tick(eng, T0 + 60, 1.2)
    await buy(eng, T0 + 61)  # an equity snapshot at the new peak (1200)
    await tick(eng, T0 + 120, 0.8)  # bh: 33% from the peak -> breach; ew halted
    await monitor.stop()
    assert [a.agent for a in monitor.raised] == ["ew", "bh"]
    await close_engine(eng)

    eng = await make_engine(db, make_config(), t0=T0 + 180)
    assert eng.slots["equity"]["ew"].status == "halted"  # restored from agent_state
    monitor = AlertMonitor(eng, AlertsConfig(check_interval=60))
    await monitor.start()
    bh = monitor.tracks[("equity", "bh")]
    assert bh.peak == pytest.approx(1200.0) and not bh.armed
    assert not monitor.tracks[("equity", "ew")].armed
    assert monitor.tracks[("equity", "cash")].armed
    await tick(eng, T0 + 240, 0.8)
    await monitor.stop()
    assert monitor.raised == []  # no duplicate alert after the restart
    await close_engine(eng)


async def test_resume_reactivates_a_halted_agent_and_records_it(engine: Engine) -> None:
    monitor = AlertMonitor(engine, AlertsConfig(check_interval=60))
    await monitor.start()
    await tick(engine, T0, 1.0)
    await buy(engine, T0 + 1)
    await tick(engine, T0 + 60, 0.85)
    assert engine.slots["equity"]["ew"].status == "halted"
    assert await monitor.resume("bh") == []  # not halted
    assert await monitor.resume("ew", by="alice") == ["equity"]
    assert engine.slots["equity"]["ew"].status == "active"
    await monitor.drain()
    state = await engine.store.fetchall("SELECT status, reason FROM agent_state WHERE agent='ew'")
    assert state[0][0] == "active" and "resumed by alice" in state[0][1]
    kinds = await engine.store.fetchall("SELECT kind FROM alerts ORDER BY id")
    assert [k for (k,) in kinds] == [DRAWDOWN_BREACH, AGENT_RESUMED]
    # Still in breach: no new alert (and no new halt) until it recovers and breaches anew.
    await tick(engine, T0 + 120, 0.84)
    assert engine.slots["equity"]["ew"].status == "active"
    result = await engine.rounds["equity"].run(T0 + 3600)
    assert result.outcomes["ew"] == "ok"
    await monitor.stop()


# ----------------------------------------------------------------------------------- feeds


async def test_stale_feed_alerts_only_while_its_market_is_open(engine: Engine) -> None:
    poly = FakeSource("polymarket", "stale", market="polymarket")
    yahoo = FakeSource("yahoo", "down")
    news = FakeSource("news-gdelt", "live")
    monitor = AlertMonitor(engine, AlertsConfig(feed_stale_after=300, feed_recovered_after=60),
                           sources=[poly, yahoo, news])
    t = SATURDAY
    assert monitor.check_feeds(t) == []
    assert monitor.check_feeds(t + 299) == []
    raised = monitor.check_feeds(t + 300)
    assert [(a.kind, a.source, a.market) for a in raised] == [(FEED_STALE, "polymarket",
                                                                "polymarket")]
    assert monitor.check_feeds(t + 900) == []  # once per episode; yahoo's market is closed
    poly.state = "live"
    assert monitor.check_feeds(t + 1000) == []
    assert monitor.check_feeds(t + 1059) == []
    assert [a.kind for a in monitor.check_feeds(t + 1060)] == [FEED_RECOVERED]
    poly.state = "backing_off"
    monitor.check_feeds(t + 2000)
    assert [a.kind for a in monitor.check_feeds(t + 2300)] == [FEED_STALE]
    # During NYSE hours the equity feed counts.
    assert monitor.check_feeds(T0 + 86_400 * 7) == []
    assert [a.source for a in monitor.check_feeds(T0 + 86_400 * 7 + 300)] == ["yahoo"]


# ----------------------------------------------------------------------------------- notifiers


def alert(kind: str = DRAWDOWN_BREACH, severity: str = "critical") -> Alert:
    return Alert(ts=T0, kind=kind, severity=severity, agent="ew", market="equity", value=0.12,
                 limit=0.1, message="agent ew in equity: drawdown 12.0% breached its limit 10%")


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def notifier(url: str, **kw: Any) -> WebhookNotifier:
    opts = {k: kw.pop(k) for k in ("max_attempts", "queue_size") if k in kw}
    return WebhookNotifier(WebhookConfig(url=url, **kw), sleep=no_sleep, **opts)


async def test_webhook_payload_formats(sink: Sink) -> None:
    for kind in ("json", "slack", "discord"):
        n = notifier(sink.url(f"/{kind}"), kind=kind)
        assert await n.deliver(alert())
        await n.stop()
    body = sink.bodies("/json")[0]
    assert body["kind"] == DRAWDOWN_BREACH and body["agent"] == "ew" and body["limit"] == 0.1
    assert body["time"] == "2026-11-03T15:00:00Z" and body["source"] is None
    assert sink.bodies("/slack") == [{"text": f":rotating_light: [paperarena critical] "
                                              f"{alert().message}"}]
    assert list(sink.bodies("/discord")[0]) == ["content"]


async def test_webhook_retries_with_backoff_then_delivers_once(sink: Sink) -> None:
    sink.script = [500, 503, 200]
    results: list[str] = []
    n = WebhookNotifier(WebhookConfig(url=sink.url("/hook")), max_attempts=5,
                        on_result=lambda _, r: results.append(r), sleep=no_sleep)
    await n.start()
    assert n.offer(alert())
    await n.wait_idle()
    await n.stop()
    assert len(sink.received) == 3 and n.delivered == 1 and n.failed == 0
    assert results == ["retried", "retried", "delivered"]
    delays = [n.backoff(k) for k in range(1, 12)]
    assert all(0 < d <= n.backoff_max for d in delays)
    assert n.backoff(1) <= n.backoff_initial and n.backoff(10) >= n.backoff_max / 2


async def test_webhook_gives_up_on_client_errors_and_after_max_attempts(sink: Sink) -> None:
    sink.script = [400]
    n = notifier(sink.url("/hook"), max_attempts=4)
    assert not await n.deliver(alert())
    assert len(sink.received) == 1  # a 400 is not retried
    sink.script = [500] * 10
    assert not await n.deliver(alert())
    assert len(sink.received) == 1 + 4
    dead = notifier("http://127.0.0.1:9/refused", max_attempts=2)
    assert not await dead.deliver(alert())
    await n.stop()
    await dead.stop()


async def test_webhook_filters_bounds_its_queue_and_never_logs_the_token(
    sink: Sink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PA_HOOK_TOKEN", "s3cr3t-token-value")
    n = notifier(sink.url("/private/path"), token_env="PA_HOOK_TOKEN", queue_size=2,
                 kinds=(DRAWDOWN_BREACH, FEED_STALE), min_severity="warning")
    assert not n.offer(alert(DRAWDOWN_RECOVERED, "info"))
    assert not n.offer(alert(FEED_STALE, "info"))
    for _ in range(3):
        assert n.offer(alert())
    assert n.dropped == 1
    with capture_logs() as logs:
        await n.start()
        await n.wait_idle()
        sink.script = [500]
        n.offer(alert())
        await n.wait_idle()
        await n.stop()
    assert n.delivered == 3
    assert sink.received[0][2]["Authorization"] == "Bearer s3cr3t-token-value"
    text = json.dumps(logs, default=str)
    assert "s3cr3t" not in text and "/private/path" not in text
    assert safe_url(sink.url("/private/path")) == f"http://127.0.0.1:{sink.port}"


async def test_monitor_delivers_each_breach_exactly_once(engine: Engine, sink: Sink) -> None:
    cfg = parse_alerts_config({"check_interval": "60s", "webhooks": [
        {"url": sink.url("/json")},
        {"url": sink.url("/slack"), "kind": "slack", "kinds": ["drawdown_breach"]},
    ]})
    monitor = AlertMonitor(engine, cfg, notifiers=build_notifiers(cfg))
    await monitor.start()
    await run_path(engine, monitor)
    await monitor.drain()
    breaches = [(b["agent"], b["ts"] - T0) for b in sink.bodies("/json")
                if b["kind"] == DRAWDOWN_BREACH]
    assert breaches == [("ew", 120), ("bh", 180), ("bh", 420)]
    assert [b["kind"] for b in sink.bodies("/json")].count(DRAWDOWN_RECOVERED) == 1
    assert len(sink.bodies("/slack")) == 3
    await monitor.stop()


def test_alert_rows_are_readable_with_plain_sqlite(tmp_path: Path) -> None:
    async def scenario() -> None:
        eng = await make_engine(tmp_path / "p.db", make_config())
        monitor = AlertMonitor(eng, AlertsConfig(check_interval=60))
        await monitor.start()
        await tick(eng, T0, 1.0)
        await buy(eng, T0 + 1)
        await tick(eng, T0 + 60, 0.5)
        await monitor.stop()
        await close_engine(eng)

    asyncio.run(scenario())
    con = sqlite3.connect(tmp_path / "p.db")
    rows = con.execute("SELECT kind, severity, agent FROM alerts ORDER BY id").fetchall()
    assert rows == [(DRAWDOWN_BREACH, "critical", "ew"), (DRAWDOWN_BREACH, "critical", "bh")]
