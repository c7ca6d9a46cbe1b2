"""The live page in a real headless Chromium (Debian's chromium and chromedriver, via selenium).

One daemon (engine, store, bus, HTTP server, an LLM agent behind tests/llm_server.py) runs in a
background thread's event loop for the whole module, and one browser session drives it: the
page loads, its table matches ``paperarena report --json`` on the same database, a new fill
appears without a reload, an agent page opens, and a ``<script>`` in an LLM answer and in a news
headline is shown as text and never runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from daemon.config.settings import Config, parse_config
from daemon.core.events import NewsEvent
from daemon.engine.engine import Engine
from daemon.web.observability import Observability
from tests.llm_server import FakeLlmServer, answer
from tests.web.test_alerts import T0, close_engine, make_engine, tick

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip("needs Debian's chromium and chromium-driver (python3 dev.py test installs them "
                "as root)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

T = TypeVar("T")
DAY = 86_400.0
KEY_ENV = "PAPERARENA_TEST_LLM_KEY"
#: Would set window.__pwned if any of it ever ran as code.
XSS_ANSWER = '<script>window.__pwned = "answer"</script><img src=x onerror="window.__pwned=1">'
XSS_HEADLINE = '<script>window.__pwned = "news"</script><img src=y onerror="window.__pwned=2">'
WAIT = 20.0
ROOT = Path(__file__).resolve().parents[2]


def config(api_base: str) -> Config:
    return parse_config({
        "markets": {
            "equity": {"assets": ["AAA", "BBB"], "cost": {"preset": "none"},
                       "schedule": {"kind": "interval", "every": "1h", "timezone": "UTC"}},
            "polymarket": {"enabled": False},
        },
        "agents": [
            {"id": "ew", "kind": "equal_weight"},
            {"id": "cash", "kind": "cash"},
            {"id": "llm1", "kind": "llm", "model": "openai/test-model", "api_base": api_base,
             "api_key_env": KEY_ENV, "timeout": 5.0, "max_attempts": 1},
        ],
        "http": {"port": 0},
    })


class Arena:
    """A daemon running in its own thread's event loop, driven from synchronous tests."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.llm = FakeLlmServer(default=answer({"AAA": 0.5, "BBB": 0.3, "CASH": 0.2},
                                                reasoning=XSS_ANSWER))
        self.engine: Engine | None = None
        self.obs: Observability | None = None
        self.day = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def start(self) -> None:
        await self.llm.__aenter__()
        cfg = config(self.llm.api_base)
        self.engine = await make_engine(self.db, cfg)
        self.obs = Observability(cfg, mode="live", http=True, port=0, version="0.0.0",
                                 process_metrics=False)
        await self.obs.start(self.engine, sources=[])

    async def next_day(self) -> float:
        """Move one day on: prices, a headline, a decision round, a daily mark."""
        assert self.engine is not None
        ts = T0 + self.day * DAY
        await tick(self.engine, ts, 1.0 + 0.02 * (self.day % 3) - 0.01 * self.day)
        await self.engine.bus.publish(NewsEvent(ts=ts, recv_ts=ts, id=f"n{self.day}",
                                                headline=XSS_HEADLINE, source="Wire",
                                                keys=("AAA",)))
        await self.engine.rounds["equity"].run(ts + 60)
        await self.engine.mark("equity", ts + 120)
        await self.engine.bus.drain()
        self.day += 1
        return ts + 60

    async def stop(self) -> None:
        if self.obs is not None:
            await self.obs.stop()
        if self.engine is not None:
            await close_engine(self.engine)
        await self.llm.__aexit__(None, None, None)

    def close(self) -> None:
        """Stop the daemon, then its loop and thread, and close the loop: its executor's
        threads end too (left running, they made a later test in this worker believe it could
        not fork, as scoring's forked reports check)."""
        self.run(self.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    @property
    def url(self) -> str:
        assert self.obs is not None and self.obs.url is not None
        return self.obs.url


def running_arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    """Start a daemon, move it four days on, yield it, stop it (a module fixture's body)."""
    os.environ[KEY_ENV] = "sk-test-not-a-real-key"
    a = Arena(tmp_path_factory.mktemp("page") / "page.db")
    try:
        a.run(a.start())
        for _ in range(4):
            a.run(a.next_day())
        yield a
    finally:
        a.close()
        os.environ.pop(KEY_ENV, None)


def chromium() -> Iterator[Any]:
    """Yield a headless Chromium session at 1,400 px, then quit it (a fixture's body)."""
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    yield from running_arena(tmp_path_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


def wait(drv: Any, cond: Any, what: str) -> Any:
    return WebDriverWait(drv, WAIT, poll_frequency=0.1).until(cond, message=what)


def pct(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{'+' if x >= 0 else '-'}{abs(x * 100):.2f}%"


def share(x: float | None) -> str:
    return "-" if x is None else f"{abs(x * 100):.2f}%"


def num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report_json(db: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "daemon.app.cli", "report", "--db", str(db),
                          "--json"],
                         check=True, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return json.loads(out.stdout)


def cells(drv: Any, market: str) -> list[dict[str, str]]:
    """Return the leaderboard's rows of ``market`` as {field: text}, read in one go."""
    return list(drv.execute_script(
        "return [...document.querySelectorAll(`table.leaderboard[data-market='${arguments[0]}']"
        " tbody tr`)].map((tr) => Object.fromEntries([['_agent', tr.dataset.agent],"
        " ...[...tr.children].map((td) => [td.dataset.field, td.innerText.trim()])]))", market))


def click(drv: Any, css: str) -> None:
    """Click ``css`` (found again if a live update replaced it meanwhile)."""
    def attempt(d: Any) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except StaleElementReferenceException:
            return False
        return True

    wait(drv, attempt, f"click {css}")


def streaming(drv: Any) -> bool:
    """Return whether the page's update stream is open."""
    return bool(drv.find_element(By.ID, "conn").get_attribute("data-state") == "live")


def loaded(drv: Any) -> int:
    return int(drv.execute_script("return Number(document.body.dataset.loaded || 0)"))


def test_page_loads_and_matches_the_report(arena: Arena, browser: Any) -> None:
    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1 and cells(d, "equity"), "leaderboard rendered")
    wait(browser, streaming, "event stream open")
    report = report_json(arena.db)
    import sqlite3

    with sqlite3.connect(arena.db) as con:
        traded = dict(con.execute("SELECT agent, COUNT(*) FROM fills WHERE market='equity'"
                                  " AND traded_value > 0 GROUP BY agent").fetchall())
    page = cells(browser, "equity")
    mine = [r for r in report["rows"] if r["market"] == "equity"]
    # Ranked agents in the report's order, then the provisional ones without a rank.
    rows = ([r for r in mine if not r.get("provisional")] +
            [r for r in mine if r.get("provisional")])
    assert [c["_agent"] for c in page] == [r["agent"] for r in rows]
    for c, r in zip(page, rows, strict=True):
        if r.get("provisional"):
            assert c["rank"] == "—" and "provisional" in c["agent"]
        else:
            assert c["rank"] == f"{r['rank']}{'~' if r['tied_with_next'] else ''}"
        assert c["cumulative_return"] == pct(r["cumulative_return"])
        assert c["max_drawdown"] == share(r["max_drawdown"])  # a loss: never signed
        assert c["sharpe"] == num(r["sharpe"])
        assert c["volatility"] == share(r["volatility"])
        assert c["costs"] == f"{r['costs']:,.2f}"
        assert c["llm_cost_usd"] == ("-" if r.get("llm_cost_usd") is None
                                     else f"{r['llm_cost_usd']:.4f}")
        assert c["trades"] == str(traded.get(r["agent"], 0))
        assert c["days"] == str(r["days"])
        assert c["decisions"] == ", ".join(f"{k}={v}" for k, v in sorted(r["decisions"].items()))
    status = {s.get_attribute("data-market"): s.text
              for s in browser.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")}
    assert "equity" in status and "none yet" not in status["equity"]


def test_a_new_fill_appears_without_a_reload(arena: Arena, browser: Any) -> None:
    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1 and streaming(d), "page live")
    browser.execute_script("window.__same_page = true")
    before = {c["_agent"]: c["decisions"] for c in cells(browser, "equity")}
    arena.run(arena.next_day())
    wait(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, '#activity li[data-type="fill"][data-agent="ew"]'), "fill in activity")
    fill = browser.execute_script(
        "return document.querySelector('#activity li[data-type=\"fill\"][data-agent=\"ew\"]')"
        ".textContent")
    assert "kept its holdings" in fill or " asset" in fill or "sold " in fill, fill
    assert "traded 0.00" not in fill
    wait(browser, lambda d: {c["_agent"]: c["decisions"] for c in cells(d, "equity")}["ew"]
         != before["ew"], "table updated")
    assert browser.execute_script("return window.__same_page") is True  # never reloaded


def test_agent_page_opens_and_never_runs_untrusted_text(arena: Arena, browser: Any) -> None:
    browser.get(arena.url + "/")
    wait(browser, lambda d: cells(d, "equity"), "leaderboard rendered")
    click(browser, 'table.leaderboard tr[data-agent="llm1"] td[data-field="agent"] a')
    wait(browser, lambda d: d.current_url.endswith("/agent/llm1"), "agent page")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#decisions tbody tr[data-ts]"),
         "decisions rendered")
    assert browser.find_element(By.ID, "agent-id").text == "llm1"
    wait(browser, lambda d: len(d.find_elements(  # equity and drawdown, drawn by uPlot
        By.CSS_SELECTOR, "#charts .market-charts[data-market='equity'] .agent-chart canvas")) == 2,
        "agent charts")
    assert browser.find_elements(By.CSS_SELECTOR, "#charts svg.chart rect")  # allocations
    click(browser, "#decisions details.audit summary")
    text = browser.execute_script(
        "return document.querySelector('#decisions details.audit').innerText")
    assert "window.__pwned" in text and "<script>" in text  # the answer, shown as text
    assert XSS_HEADLINE in text  # the headline, shown as text
    assert "step 1 (attempt 1) · openai/test-model" in text or "test-model" in text
    assert not browser.find_elements(By.CSS_SELECTOR, "#decisions script, #decisions img")
    assert browser.execute_script("return window.__pwned") is None
    # The same texts through the leaderboard page's activity list (decision reasons).
    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1, "leaderboard rendered")
    assert browser.execute_script("return window.__pwned") is None


def test_provisional_agents_are_listed_below_the_ranked_ones(arena: Arena,
                                                             browser: Any) -> None:
    """Fields the leaderboard may carry (provisional + reason, a valid-decision rate) render."""
    assert arena.obs is not None and arena.obs.server is not None
    cache = arena.obs.server.board_cache
    assert cache is not None
    compute = cache.compute

    def marked(path: Any) -> dict[str, Any]:
        board = compute(path)
        for row in board["rows"]:
            row["valid_decision_rate"] = 0.5 if row["agent"] == "llm1" else 1.0
            if row["agent"] == "cash":
                row.update(provisional=True, rank=None,
                           provisional_reason="<b>only 2 valid decisions</b>")
            else:
                row.update(provisional=False, provisional_reason=None)
        return board

    cache.compute = marked
    cache.stamp = None  # recompute on the next request
    try:
        browser.get(arena.url + "/")
        wait(browser, lambda d: any(c.get("valid_decision_rate") for c in cells(d, "equity")),
             "rate column")
        rows = cells(browser, "equity")
        assert rows[-1]["rank"] == "—" and rows[-1]["_agent"] == "cash"
        assert "provisional" in rows[-1]["agent"] and "<b>only 2 valid decisions</b>" in rows[-1][
            "agent"]
        assert all(r["rank"] != "—" for r in rows[:-1])
        assert {r["_agent"]: r["valid_decision_rate"] for r in rows}["llm1"] == "50.00%"
        status = arena.run(arena.obs.server.page.status())
        assert [(a["agent"], a["provisional_reason"]) for a in status["agents"]
                if a["provisional"]] == [("cash", "<b>only 2 valid decisions</b>")]
    finally:
        cache.compute = compute
        cache.stamp = None


def test_agent_page_pages_through_a_long_history(arena: Arena, browser: Any) -> None:
    from daemon.store.records import DecisionRecord, RoundCommit

    assert arena.engine is not None
    old = [DecisionRecord("cash", "equity", T0 - (i + 1) * 3600.0, T0 - (i + 1) * 3600.0,
                          "error", reason=f"old failure {i}") for i in range(30)]
    arena.run(arena.engine.store.commit_round(RoundCommit(decisions=old)))
    browser.get(arena.url + "/agent/cash")
    wait(browser, lambda d: "page 1 of" in d.find_element(By.ID, "page").text, "pager")
    first = browser.find_element(By.ID, "page").text
    total = int(first.split("(")[1].split()[0])
    assert total >= 30 and first.startswith(f"page 1 of {(total + 19) // 20} ")
    assert browser.find_element(By.ID, "newer").get_attribute("disabled") is not None
    click(browser, "#older")
    wait(browser, lambda d: d.find_element(By.ID, "page").text.startswith("page 2 of"), "page 2")
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#decisions tbody tr[data-ts]')]"
        ".map((tr) => Number(tr.dataset.ts))")
    assert rows == sorted(rows, reverse=True) and len(rows) == min(20, total - 20)
    assert max(rows) < T0  # the older decisions, newest first
