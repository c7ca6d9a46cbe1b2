"""What the user sees when every source is down: one short health line, no repr floods."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from daemon.core.bus import Bus
from daemon.core.events import PriceEvent
from feeds.health import SourceHealth, short_error
from feeds.source_contract import SourceState
from feeds.yahoo import ChartError, YahooRestFallback, YahooSettings
from tests.feeds.test_yahoo import running
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_offline_start_prints_one_short_health_line(tmp_path: Path) -> None:
    port = closed_port()
    base = f"127.0.0.1:{port}"
    cfg = tmp_path / "offline.toml"
    cfg.write_text(f"""
[http]
enabled = false
[sources.equity.yahoo]
ws_url = "ws://{base}/"
chart_url = "http://{base}/v8/finance/chart"
[sources.polymarket]
ws_url = "ws://{base}/ws"
gamma_url = "http://{base}"
clob_url = "http://{base}"
[sources.news]
google_url = "http://{base}/rss"
""")
    proc = subprocess.run(
        [sys.executable, "-m", "daemon.app.cli", "run", "--config", str(cfg),
         "--db", str(tmp_path / "d.db"), "--duration", "7"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "ConnectionKey(" not in out
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    health = [r["event"] for r in records if str(r.get("event", "")).startswith("sources: ")]
    assert len(health) == 1, health
    line = health[0]
    assert line.startswith("sources: 0/4 live (")
    for part in ("yahoo: connect refused", "polymarket: connect refused",
                 "news-google: connect refused", "equity-backfill: connect refused",
                 "standby: yahoo-rest", "rounds skip until prices arrive"):
        assert part in line, line
    warnings = [r for r in records if r.get("level") in ("warning", "error")]
    assert len(warnings) <= 10, [r["event"] for r in warnings]


async def test_short_error_names_the_root_cause() -> None:
    port = closed_port()
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError) as info:
            await s.get(f"http://127.0.0.1:{port}/")
    try:
        raise ChartError(f"request failed: {info.value!r}") from info.value
    except ChartError as exc:
        assert short_error(exc) == "connect refused"
    assert short_error(TimeoutError()) == "timeout"
    assert short_error(ValueError("x" * 200)).endswith("…")
    assert short_error(None) == ""


class Src:
    def __init__(self, name: str, state: str = "live", last_error: str = "",
                 standby: bool = False, provides_prices: bool = True) -> None:
        self.name, self.state, self.last_error = name, state, last_error
        self.standby, self.provides_prices = standby, provides_prices


def test_health_line_on_change_rate_limited_and_reminders() -> None:
    t = [0.0]
    yahoo, news = Src("yahoo", "connecting"), Src("news-google", "live", provides_prices=False)
    h = SourceHealth([yahoo, news, Src("yahoo-rest", standby=True)], min_gap=10, repeat=60,
                     settle=5, clock=lambda: t[0])
    assert h.check() is None  # still connecting: settle first
    yahoo.state, yahoo.last_error = "backing_off", "connect refused"
    assert h.check() == ("sources: 1/2 live (yahoo: connect refused); standby: yahoo-rest; "
                         "rounds skip until prices arrive")
    for state in ("connecting", "backing_off", "down"):  # flapping, same error: no new line
        yahoo.state = state
        t[0] += 1
        assert h.check() is None
    yahoo.state, yahoo.last_error = "live", ""
    t[0] += 1
    assert h.check() is None  # a change within min_gap waits...
    t[0] = 10.5
    assert h.check() == "sources: 2/2 live; standby: yahoo-rest"  # ...and is merged in
    t[0] = 500
    assert h.check() is None  # healthy: no reminder
    news.state, news.last_error = "down", "HTTP 429"
    assert h.check() == "sources: 1/2 live (news-google: HTTP 429); standby: yahoo-rest"
    t[0] = 561
    assert h.check() == h.lines[-2]  # reminder while something is down


async def test_rest_fallback_reports_failures_only_while_it_is_needed() -> None:
    bus = Bus()
    fb = YahooRestFallback(
        YahooSettings(chart_url=f"http://127.0.0.1:{closed_port()}/v8/finance/chart",
                      rest_check_interval=0.05, rest_poll_interval=0.1, rest_timeout=1.0),
        ["AAPL"], bus=bus, now=time.time, is_open=lambda t: True, stale_after=0.2,
    )
    health = SourceHealth([fb], settle=0, min_gap=0)
    assert fb.standby and health.check() == (
        "sources: 0/0 live; standby: yahoo-rest; rounds skip until prices arrive")
    async with running(fb):
        await wait_for(lambda: fb.last_error == "connect refused", 3.0)
        assert not fb.standby and fb.state is SourceState.BACKING_OFF
        assert health.check() == (
            "sources: 0/1 live (yahoo-rest: connect refused); rounds skip until prices arrive")
        # the stream is back: the fallback is not needed, its past failure no longer matters
        bus.publish_nowait(PriceEvent(ts=time.time(), recv_ts=time.time(), market="equity",
                                      asset="AAPL", price=1.0, source="yahoo"))
        await wait_for(lambda: fb.standby and fb.state is SourceState.LIVE, 3.0)
