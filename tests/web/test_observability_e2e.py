"""End to end: a replayed crash scraped by a real Prometheus, alerting through a real Alertmanager.

The daemon (``paperarena replay`` in a subprocess, HTTP enabled in replay) replays an 80-second
recording at 4x in which prices dip, bounce and crash by 40%: the conservative equal-weight agent
breaches its 10% limit and is halted, buy-and-hold (aggressive, 35%) breaches later and wobbles
around its limit without re-arming. An LLM agent, mostly in cash, asks a local OpenAI-compatible
model (tests/llm_server.py, through the real litellm path) every round. Decisions run at
close-1m and at the close; two earlier sessions are replayed first as fast as possible (a
recording cut before the crash, resumed by the complete one), and the crash session's close
falls inside the crash, so three daily marks feed every leaderboard figure (``[leaderboard]
min_days = 3`` ranks the agents). Prometheus scrapes it every
second with the repo's rules (``for:`` shortened to 1s), Alertmanager (the repo's config, fast
grouping) posts to a local webhook sink, and so does the daemon's own notifier. Afterwards every
PromQL expression of every dashboard is evaluated at the last scrape of the daemon and must
return data.

Why one module over 500 lines: one end-to-end run (replayed crash, real Prometheus and Alertmanager)
whose checks share the servers it starts once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from daemon.core.events import PriceEvent
from feeds.recording import RecordingHeader, RecordingWriter
from tests.helpers import HANG_GUARD
from tests.llm_server import FakeLlmServer, answer

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARDS = ROOT / "grafana" / "dashboards"
INSTALL = ("install the Debian packages prometheus and prometheus-alertmanager "
           "(python3 dev.py test installs them when run as root)")


def tool(name: str) -> str | None:
    """Return the path of a Prometheus tool, or None."""
    found = shutil.which(name)
    if found:
        return found
    path = Path("/usr/bin") / name
    return str(path) if path.exists() else None


PROMETHEUS = tool("prometheus")
PROMTOOL = tool("promtool")
ALERTMANAGER = tool("prometheus-alertmanager") or tool("alertmanager")
AMTOOL = tool("amtool")

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=f"promtool missing: {INSTALL}")
needs_stack = pytest.mark.skipif(
    PROMETHEUS is None or ALERTMANAGER is None,
    reason=f"prometheus or alertmanager missing: {INSTALL}",
)
pytestmark = pytest.mark.slow

TICKERS = ("AAPL", "MSFT", "NVDA", "JPM")
#: The NYSE close of Tuesday 2026-11-03 (16:00 EST): the daily mark is taken there.
CLOSE = datetime(2026, 11, 3, 21, 0, tzinfo=UTC).timestamp()
#: 30 s before the close, which so falls between ew's halt and bh's breach: the decision and
#: the mark at the close come 7.5 s of wall time into the replay, before the daemon's first
#: leaderboard refresh (15 s), and the last figures are scraped from then on.
START = CLOSE - 30
DURATION = 80.0
#: Each session's close (Fri 2026-10-30, Mon 2026-11-02, then the crash's) and each ticker's
#: price factor 70 s before it, ahead of the decisions at close-1m and at the close: three
#: daily marks in all, as many as every leaderboard figure needs (s_corr correlates
#: mark-to-mark returns). Below 1 before the crash, so its drawdowns start at the crash; JPM
#: doubles before it, so an asset gains over the window and CapitalBench has a best return.
HISTORY = ((datetime(2026, 10, 30, 20, 0, tzinfo=UTC).timestamp(), (0.97, 0.99, 0.96, 0.5)),
           (datetime(2026, 11, 2, 21, 0, tzinfo=UTC).timestamp(), (0.985, 0.975, 0.99, 0.55)),
           (CLOSE, (1.0, 1.0, 1.0, 1.0)))
SPEED = 4.0
#: (seconds, price factor): flat, dip to -14%, bounce to -8.5%, crash to -40%, wobble, flat.
KNOTS = ((0, 1.0), (12, 1.0), (20, 0.86), (26, 0.915), (40, 0.60), (50, 0.60), (56, 0.665),
         (62, 0.60), (80, 0.60))

CONFIG = """
[markets.equity]
assets = {assets}
cost = {{ preset = "none" }}
[markets.equity.schedule]
kind = "nyse"
times = ["close-1m", "close"]

[markets.polymarket]
enabled = false

[http]
replay = true
port = {port}

[leaderboard]
min_days = 3

[logging]
level = "info"
format = "json"

[alerts]
check_interval = "2s"
hysteresis = 0.02
backoff_initial = "0.2s"
[[alerts.webhooks]]
url = "http://127.0.0.1:{sink}/daemon"
kind = "json"
name = "sink-json"
[[alerts.webhooks]]
url = "http://127.0.0.1:{sink}/slack"
kind = "slack"
kinds = ["drawdown_breach"]

[[agents]]
id = "ew"
kind = "equal_weight"
risk_profile = "conservative"
halt_on_breach = true
daily_budget_usd = 1.0

[[agents]]
id = "bh"
kind = "buy_and_hold"
risk_profile = "aggressive"

[[agents]]
id = "cash"
kind = "cash"

[[agents]]
id = "llm"
kind = "llm"
model = "openai/test-model"
api_base = "{api_base}"
api_key_env = "{key_env}"
timeout = 10
max_attempts = 1
daily_budget_usd = 5.0
"""
#: The environment variable holding the (fake) model key the daemon sends to the local model.
KEY_ENV = "PAPERARENA_OBS_TEST_LLM_KEY"
#: What the local model answers every round: almost all cash, so the crash breaches no limit.
LLM_ANSWER = {"AAPL": 0.05, "CASH": 0.95}


def factor(t: float) -> float:
    """Return the price factor at ``t`` seconds into the recording (piecewise linear)."""
    for (t0, f0), (t1, f1) in itertools.pairwise(KNOTS):
        if t0 <= t <= t1:
            return f0 + (f1 - f0) * (t - t0) / (t1 - t0)
    return KNOTS[-1][1]


def make_crash_recording(path: Path, *, history_only: bool = False) -> int:
    """Write the recording: the sessions' prices, then the crash (every ticker every 0.5 s).

    ``history_only``: stop at the crash's first event and cut the gzip trailer, as a recording
    still being written looks. Replayed as fast as possible, it runs the earlier sessions' jobs
    (and the last round before the crash, committing the checkpoint at that event); the complete
    recording then resumes at the crash. Return the count of crash events.
    """
    header = RecordingHeader(start=HISTORY[0][0] - 90, end=START + DURATION, equities=TICKERS,
                             description="observability e2e: a 40% crash in 80 seconds")
    n = 0
    with RecordingWriter(path, header) as w:
        for close, factors in HISTORY:
            t = close - 70
            for i, sym in enumerate(TICKERS):
                price = round(100.0 * (1 + i / 10) * factors[i], 4)
                w.write(PriceEvent(ts=t, recv_ts=t, market="equity", asset=sym, price=price))
        for k in range(int(DURATION * 2) + 1):
            t = START + k * 0.5
            for i, sym in enumerate(TICKERS):
                if history_only and n == 1:
                    w.close()
                    path.write_bytes(path.read_bytes()[:-8])
                    return 0
                price = round(100.0 * (1 + i / 10) * factor(k * 0.5), 4)
                w.write(PriceEvent(ts=t, recv_ts=t, market="equity", asset=sym, price=price))
                n += 1
    return n


def free_port() -> int:
    """Return a TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def short_for(text: str) -> str:
    """Rewrite every ``for:`` duration of a rules file to 1s."""
    return re.sub(r"(?m)^(\s+for:\s*)\S+", r"\g<1>1s", text)


def dashboard_queries() -> list[tuple[str, str, str]]:
    """Return (dashboard uid, panel title, expr) for every panel target of every dashboard."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for t in panel.get("targets", []):
                out.append((board["uid"], panel["title"], t["expr"]))
    return out


def variable_queries() -> list[tuple[str, str, str]]:
    """Return (dashboard uid, variable, PromQL) equivalents of the label_values variables."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            q = re.fullmatch(r"query_result\((.+)\)", var["definition"])
            if q:  # a PromQL query whose result labels give the values
                out.append((board["uid"], var["name"], q[1]))
                continue
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
            assert m, var["definition"]
            out.append((board["uid"], var["name"], f"count by ({m[2]}) ({m[1]})"))
    return out


SUBSTITUTIONS = {"instance": ".*", "market": "equity", "agent": "ew", "source": ".*",
                 "__rate_interval": "1m", "__interval": "5s", "__range": "1h"}
#: Per dashboard overrides: the LLM dashboard lists model-calling agents only.
DASHBOARD_SUBSTITUTIONS = {"paperarena-llm": {"agent": "llm"}}


def substitute(expr: str, uid: str = "") -> str:
    """Replace Grafana variables the way Grafana would for one concrete selection."""
    values = SUBSTITUTIONS | DASHBOARD_SUBSTITUTIONS.get(uid, {})
    for name, val in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${{{name}}}", val).replace(f"${name}", val)
    assert "$" not in expr, expr
    return expr


@dataclass
class Scenario:
    """What the end-to-end run observed."""

    events: int = 0
    daemon_rc: int | None = None
    daemon_log: str = ""
    history_rc: int | None = None
    history_log: str = ""
    daemon_sink: list[dict[str, Any]] = field(default_factory=list)
    slack_sink: list[dict[str, Any]] = field(default_factory=list)
    am_sink: list[dict[str, Any]] = field(default_factory=list)
    during: dict[str, Any] = field(default_factory=dict)
    last_scrape: float | None = None
    results: dict[str, int] = field(default_factory=dict)
    llm_requests: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    db: Path = Path()
    elapsed: float = 0.0


async def _wait_http(session: aiohttp.ClientSession, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with session.get(url) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready after {timeout}s")
        await asyncio.sleep(0.1)


async def _prom_query(session: aiohttp.ClientSession, base: str, expr: str, at: float
                      ) -> tuple[int, str]:
    async with session.post(f"{base}/api/v1/query", data={"query": expr, "time": str(at)}) as r:
        body = await r.json()
    if body.get("status") != "success":
        return -1, str(body.get("error"))
    return len(body["data"]["result"]), ""


async def run_scenario(tmp: Path) -> Scenario:
    """Run the whole stack once and collect what each test checks."""
    assert PROMETHEUS is not None and ALERTMANAGER is not None
    sc = Scenario(db=tmp / "replay.db")
    t_begin = time.monotonic()
    sc.events = make_crash_recording(tmp / "crash.jsonl.gz")
    (tmp / "history").mkdir()
    make_crash_recording(tmp / "history" / "crash.jsonl.gz", history_only=True)
    p_daemon, p_prom, p_am = free_port(), free_port(), free_port()

    received: dict[str, list[dict[str, Any]]] = {"/daemon": [], "/slack": [],
                                                 "/alertmanager": []}

    async def hook(request: web.Request) -> web.Response:
        received.setdefault(request.path, []).append(await request.json())
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/{tail:.*}", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    p_sink = runner.addresses[0][1]
    llm = await FakeLlmServer(default=answer(LLM_ANSWER)).start()

    (tmp / "paperarena.toml").write_text(CONFIG.format(
        assets=json.dumps(list(TICKERS)), port=p_daemon, sink=p_sink, api_base=llm.api_base,
        key_env=KEY_ENV))
    prom_dir = tmp / "prom"
    prom_dir.mkdir()
    prom_cfg = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    prom_cfg = (prom_cfg.replace("127.0.0.1:9464", f"127.0.0.1:{p_daemon}")
                .replace("127.0.0.1:9093", f"127.0.0.1:{p_am}"))
    prom_cfg = re.sub(r"(scrape_interval|evaluation_interval): \S+", r"\1: 1s", prom_cfg)
    (prom_dir / "prometheus.yml").write_text(prom_cfg)
    (prom_dir / "alerts.yml").write_text(short_for(
        (DEPLOY / "prometheus" / "alerts.yml").read_text()))
    am_cfg = (DEPLOY / "alertmanager" / "alertmanager.yml").read_text()
    am_cfg = am_cfg.replace("http://127.0.0.1:9099/alertmanager",
                            f"http://127.0.0.1:{p_sink}/alertmanager")
    am_cfg = re.sub(r"(group_wait|group_interval): \S+", r"\1: 1s", am_cfg)
    (tmp / "alertmanager.yml").write_text(am_cfg)

    logs = {name: (tmp / f"{name}.log").open("w")
            for name in ("prometheus", "am", "history", "daemon")}
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           KEY_ENV: "sk-test-not-a-secret"}
    try:
        # The earlier sessions, as fast as possible: the replay stops where the recording is cut.
        history = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemon.app.cli", "replay",
            str(tmp / "history" / "crash.jsonl.gz"),
            "--config", str(tmp / "paperarena.toml"), "--db", str(sc.db), "--no-progress",
            cwd=ROOT, env=env, stdout=logs["history"], stderr=subprocess.STDOUT)
        sc.history_rc = await history.wait()
        procs.append(subprocess.Popen(
            [ALERTMANAGER, f"--config.file={tmp / 'alertmanager.yml'}",
             f"--storage.path={tmp / 'am-data'}", f"--web.listen-address=127.0.0.1:{p_am}",
             "--cluster.listen-address=", "--log.level=warn"],
            stdout=logs["am"], stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={prom_dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{p_prom}", "--log.level=warn"],
            stdout=logs["prometheus"], stderr=subprocess.STDOUT))
        prom = f"http://127.0.0.1:{p_prom}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
            await _wait_http(s, f"http://127.0.0.1:{p_am}/-/ready", 20)
            await _wait_http(s, f"{prom}/-/ready", 20)
            daemon = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "daemon.app.cli", "replay", str(tmp / "crash.jsonl.gz"),
                "--config", str(tmp / "paperarena.toml"), "--db", str(sc.db),
                "--speed", str(SPEED), "--no-progress",
                cwd=ROOT, env=env, stdout=logs["daemon"], stderr=subprocess.STDOUT)
            base = f"http://127.0.0.1:{p_daemon}"
            # While the replay runs: readiness and the JSON API, once the halt happened.
            while daemon.returncode is None:
                try:
                    for path in ("/readyz", "/healthz", "/api/leaderboard", "/api/agents/ew"):
                        async with s.get(base + path) as r:
                            sc.during[path] = (r.status, await r.json())
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.5)
                if "/api/agents/ew" in sc.during:
                    cur = sc.during["/api/agents/ew"][1].get("current", [{}])
                    if cur and cur[0].get("status") == "halted" and "halted" not in sc.during:
                        sc.during["halted"] = True
                        async with s.get(base + "/metrics") as r:
                            sc.during["/metrics"] = await r.text()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(daemon.wait(), 0.01)
            sc.daemon_rc = daemon.returncode
            # Alertmanager posts the Prometheus alert to the sink (it fired during the replay).
            deadline = time.monotonic() + HANG_GUARD
            while time.monotonic() < deadline and not any(
                a["labels"].get("alertname") == "PaperarenaDrawdownBreach"
                for msg in received["/alertmanager"] for a in msg.get("alerts", [])
            ):
                await asyncio.sleep(0.2)
            # The last moment Prometheus scraped the daemon: evaluate every panel there.
            now = time.time()
            async with s.post(f"{prom}/api/v1/query_range", data={
                "query": 'up{job="paperarena"} == 1', "start": str(now - 120),
                "end": str(now), "step": "1"}) as r:
                body = await r.json()
            points = [float(t) for res in body["data"]["result"] for t, _ in res["values"]]
            sc.last_scrape = max(points) if points else None
            if sc.last_scrape is not None:
                queries = [(u, f"{u} / {t}", e) for u, t, e in dashboard_queries()]
                queries += [(u, f"{u} / ${v}", e) for u, v, e in variable_queries()]
                for uid, key, expr in queries:
                    n, err = await _prom_query(s, prom, substitute(expr, uid), sc.last_scrape)
                    sc.results[f"{key}: {expr}"] = n
                    if err:
                        sc.errors[f"{key}: {expr}"] = err
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
        await runner.cleanup()
        sc.llm_requests = len(llm.requests)
        await llm.close()
    sc.daemon_log = (tmp / "daemon.log").read_text()
    sc.history_log = (tmp / "history.log").read_text()
    sc.daemon_sink = received["/daemon"]
    sc.slack_sink = received["/slack"]
    sc.am_sink = received["/alertmanager"]
    sc.elapsed = time.monotonic() - t_begin
    return sc


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    if PROMETHEUS is None or ALERTMANAGER is None:
        pytest.skip(f"prometheus or alertmanager missing: {INSTALL}")
    return asyncio.run(run_scenario(tmp_path_factory.mktemp("obs-e2e")))


# ----------------------------------------------------------------------------------- static


@needs_promtool
def test_promtool_checks_rules_and_prometheus_config() -> None:
    assert PROMTOOL is not None
    for args in (["check", "rules", "alerts.yml"], ["check", "config", "prometheus.yml"]):
        r = subprocess.run([PROMTOOL, *args], cwd=DEPLOY / "prometheus", capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_promtool_unit_tests_cover_every_rule_firing_and_not() -> None:
    assert PROMTOOL is not None
    r = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=DEPLOY / "prometheus",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    rules = set(re.findall(r"(?m)^\s+- alert: (\w+)",
                           (DEPLOY / "prometheus" / "alerts.yml").read_text()))
    tests = (DEPLOY / "prometheus" / "alerts_test.yml").read_text()
    cases = re.findall(r"alertname: (\w+)\n(\s+exp_alerts:)?", tests)
    firing = {name for name, exp in cases if exp}
    quiet = {name for name, exp in cases if not exp}
    assert rules and rules == firing == quiet, (rules, firing, quiet)
    text = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert text.count("severity:") == text.count("runbook_url:") == len(rules)
    assert text.count("for:") == len(rules)


@pytest.mark.skipif(AMTOOL is None, reason=f"amtool missing: {INSTALL}")
def test_alertmanager_config_is_valid() -> None:
    assert AMTOOL is not None
    r = subprocess.run([AMTOOL, "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboards_are_generated_with_stable_uids() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "grafana" / "generate.py"), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    uids = {json.loads(p.read_text())["uid"] for p in DASHBOARDS.glob("*.json")}
    assert uids == {"paperarena-overview", "paperarena-agent", "paperarena-system",
                    "paperarena-llm"}
    agent = json.loads((DASHBOARDS / "paperarena-agent.json").read_text())
    assert "agent" in [v["name"] for v in agent["templating"]["list"]]
    assert len(dashboard_queries()) > 40


# ----------------------------------------------------------------------------------- live


@needs_stack
def test_replay_ran_with_http_and_exited_cleanly(scenario: Scenario) -> None:
    assert scenario.daemon_rc == 0, scenario.daemon_log[-3000:]
    assert f"replayed {scenario.events} events" in scenario.daemon_log
    status, ready = scenario.during["/readyz"]
    assert status == 200 and ready["feeds"]["replay"]["state"] == "live"
    assert scenario.during["/healthz"][0] == 200
    status, board = scenario.during["/api/leaderboard"]
    assert status == 200 and {r["agent"] for r in board["live"]} == {"ew", "bh", "cash", "llm"}
    assert scenario.during.get("halted"), "ew was never seen halted through /api/agents/ew"
    assert 'paperarena_agent_status{agent="ew",market="equity",status="halted"} 1.0' in \
        scenario.during["/metrics"]


@needs_stack
def test_daemon_notifier_delivers_each_breach_exactly_once(scenario: Scenario) -> None:
    breaches = [m for m in scenario.daemon_sink if m["kind"] == "drawdown_breach"]
    assert sorted(m["agent"] for m in breaches) == ["bh", "ew"]  # once each: hysteresis
    ew = next(m for m in breaches if m["agent"] == "ew")
    assert ew["limit"] == 0.1 and ew["value"] >= 0.1 and "halted" in ew["message"]
    assert START + 14 <= ew["ts"] <= START + 22  # engine (recording) time, not wall time
    bh = next(m for m in breaches if m["agent"] == "bh")
    assert bh["limit"] == 0.35 and START + 30 <= bh["ts"] <= START + 42
    assert not [m for m in scenario.daemon_sink if m["kind"] == "drawdown_recovered"]
    assert len(scenario.slack_sink) == 2 and all("text" in m for m in scenario.slack_sink)


@needs_stack
def test_breach_and_halt_are_persisted(scenario: Scenario) -> None:
    con = sqlite3.connect(scenario.db)
    alerts = con.execute("SELECT kind, agent, ts FROM alerts ORDER BY id").fetchall()
    assert [(k, a) for k, a, _ in alerts] == [("drawdown_breach", "ew"),
                                              ("drawdown_breach", "bh")]
    assert con.execute("SELECT status FROM agent_state WHERE agent='ew'").fetchone() == (
        "halted",)
    halted_from = alerts[0][2]
    outcomes = con.execute("SELECT outcome, COUNT(*) FROM decisions WHERE agent='ew' AND "
                           "scheduled_ts > ? GROUP BY outcome", (halted_from,)).fetchall()
    assert outcomes and dict(outcomes).keys() == {"halted"}


@needs_stack
def test_prometheus_alert_reaches_the_webhook_through_alertmanager(scenario: Scenario) -> None:
    alerts = [a for msg in scenario.am_sink for a in msg.get("alerts", [])]
    breach = [a for a in alerts if a["labels"].get("alertname") == "PaperarenaDrawdownBreach"
              and a["labels"].get("agent") == "ew"]
    assert breach, [a["labels"] for a in alerts]
    first = breach[0]
    assert first["status"] == "firing" and first["labels"]["severity"] == "critical"
    assert first["labels"]["market"] == "equity"
    assert first["annotations"]["runbook_url"] == "docs/operations.md#drawdown-breach"
    assert "ew breached its drawdown limit" in first["annotations"]["summary"]


@needs_stack
def test_every_dashboard_expression_returns_data(scenario: Scenario) -> None:
    assert scenario.last_scrape is not None, "Prometheus never scraped the daemon"
    assert not scenario.errors, scenario.errors
    empty = [k for k, n in scenario.results.items() if n <= 0]
    assert not empty, "\n".join(empty)
    expected = {f"{u} / {t}: {e}" for u, t, e in dashboard_queries()}
    expected |= {f"{u} / ${v}: {e}" for u, v, e in variable_queries()}
    assert set(scenario.results) == expected


@needs_stack
def test_llm_agent_called_the_model_and_each_close_was_marked(scenario: Scenario) -> None:
    assert "replay the complete recording on the same --db" in scenario.history_log
    assert scenario.history_rc != 0 and "replay resumed" in scenario.daemon_log
    assert scenario.llm_requests > 0
    con = sqlite3.connect(scenario.db)
    calls = con.execute("SELECT COUNT(*) FROM llm_calls WHERE agent='llm'").fetchone()[0]
    assert calls == scenario.llm_requests
    ok = con.execute("SELECT COUNT(*) FROM decisions WHERE agent='llm' AND outcome='ok'")
    assert ok.fetchone()[0] > 0
    marks = con.execute("SELECT DISTINCT ts FROM equity WHERE kind='daily' ORDER BY ts")
    assert marks.fetchall() == [(close,) for close, _ in HISTORY]
