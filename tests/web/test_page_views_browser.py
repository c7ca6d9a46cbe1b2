"""The live page's views of issue 30 in Chromium, over the same kind of daemon as
test_page_browser.py (its fixtures, a daemon of this module's own): the combined chart, the
badge from the sources' health, an empty board's reason, positions, trades and reasoning, sorting
and filters, a decision's exact prompt rebuilt on demand (API and page)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agents.prompting import HEADLINE_CHARS, neutralise
from tests.helpers import HANG_GUARD
from tests.web.test_page_browser import (
    XSS_ANSWER,
    XSS_HEADLINE,
    Arena,
    cells,
    chromium,
    click,
    loaded,
    running_arena,
    wait,
)

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    yield from running_arena(tmp_path_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


def legend(drv: Any, market: str) -> list[tuple[str, str]]:
    """Return the combined chart's legend of ``market`` as (label, value) pairs (x excluded)."""
    return [tuple(p) for p in drv.execute_script(
        "return [...document.querySelectorAll(`section.market-chart[data-market='${arguments[0]}']"
        " .u-legend tr.u-series`)].slice(1).map((tr) => [tr.querySelector('.u-label').textContent,"
        " tr.querySelector('.u-value').textContent])", market)]


def test_one_chart_shows_every_agent_and_the_benchmark(arena: Arena, browser: Any) -> None:
    """A line per agent plus the dashed benchmark; hover shows every value; $/% and ranges."""
    from selenium.webdriver.common.action_chains import ActionChains

    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1 and len(legend(d, "equity")) == 4, "chart drawn")
    assert [label for label, _ in legend(browser, "equity")] == [
        "cash", "ew", "llm1", "benchmark (equal weight)"]
    assert browser.execute_script(  # a canvas drawn by the vendored uPlot, under the CSP
        "return typeof uPlot === 'function' && !!document.querySelector("
        "\"section.market-chart[data-market='equity'] canvas\")")
    def hover(d: Any, dx: int = 0) -> None:
        over = d.find_element(By.CSS_SELECTOR, "section.market-chart[data-market='equity'] .u-over")
        ActionChains(d).move_to_element(over).move_by_offset(dx, 0).perform()

    hover(browser)
    wait(browser, lambda d: all(v not in ("", "-", "--") for _, v in legend(d, "equity")),
         "hover shows every series' value")
    assert all(v[0].isdigit() for _, v in legend(browser, "equity"))  # dollars
    click(browser, "section.market-chart[data-market='equity'] button[data-value='return']")
    hover(browser, 5)
    wait(browser, lambda d: all(v.endswith("%") for _, v in legend(d, "equity")),
         "% mode")
    click(browser, "section.market-chart[data-market='equity'] button[data-value='1D']")
    wait(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, "section.market-chart[data-market='equity'] button[data-value='1D']"
    ).get_attribute("class") == "toggle on", "1D range")
    assert len(legend(browser, "equity")) == 4
    assert browser.execute_script("return window.__pwned") is None


def test_the_badge_follows_the_sources_not_the_stream(arena: Arena, browser: Any) -> None:
    """Every source down: "no data" though the page's stream is open; the line says which."""
    from tests.web.test_alerts import FakeSource

    assert arena.obs is not None
    down = [FakeSource(name, state="down", market="polymarket") for name in ("clob", "news")]
    arena.obs.sources[:] = down
    try:
        browser.get(arena.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "badge").text == "no data", "no data")
        wait(browser, lambda d: d.find_element(By.ID, "conn").get_attribute("data-state")
             == "live", "stream open")
        line = browser.find_element(By.ID, "summary").text
        assert line.startswith("0/2 sources live · clob down") and "news down" in line
        assert "next equity round" in line
        down[0].state = "live"
        browser.refresh()
        wait(browser, lambda d: d.find_element(By.ID, "badge").text == "stale", "stale")
        down[1].state = "live"
        browser.refresh()
        wait(browser, lambda d: d.find_element(By.ID, "badge").text == "live", "live")
        assert browser.find_element(By.ID, "summary").text.startswith("2/2 sources live")
    finally:
        arena.obs.sources[:] = []


def test_a_board_with_nothing_ranked_says_why_and_when_the_next_round_is(
        arena: Arena, browser: Any) -> None:
    assert arena.obs is not None and arena.obs.server is not None
    cache = arena.obs.server.board_cache
    assert cache is not None
    compute = cache.compute

    def none_ranked(path: Any) -> dict[str, Any]:
        board = compute(path)
        for row in board["rows"]:
            row.update(provisional=True, rank=None, provisional_reason="too few days")
        return board

    cache.compute = none_ranked
    cache.stamp = None
    try:
        browser.get(arena.url + "/")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.empty-why"), "reason")
        text = browser.find_element(By.CSS_SELECTOR, "p.empty-why[data-market='equity']").text
        status = arena.run(arena.obs.server.page.status())
        due = status["rounds"]["equity"]["next_ts"]
        from datetime import UTC, datetime

        when = datetime.fromtimestamp(due, UTC).strftime("%Y-%m-%d %H:%MZ")
        assert text.startswith("Nothing ranked yet: every agent is still provisional")
        assert f"The next equity round is due {when} (in " in text
    finally:
        cache.compute = compute
        cache.stamp = None


def test_agent_page_shows_positions_trades_and_reasoning_from_the_store(
        arena: Arena, browser: Any) -> None:
    """Positions match the engine's book, trades the stored fills; reasoning renders as text."""
    import sqlite3

    assert arena.engine is not None
    browser.get(arena.url + "/agent/llm1")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#positions tbody tr[data-asset]")
         and "trades)" in d.find_element(By.ID, "trades-page").text, "positions and trades")
    book = arena.engine.books["equity"]
    i = book.agent_index("llm1")
    held = {a: float(book.holdings[i][j]) for j, a in enumerate(book.assets)
            if book.holdings[i][j] > 0}
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#positions tbody tr[data-asset]')].map((tr) =>"
        " [tr.dataset.asset, [...tr.children].map((td) => td.innerText.trim())])")
    assert {a for a, _ in rows} == set(held) == {"AAA", "BBB"}
    for asset, tds in rows:
        assert float(tds[2]) == pytest.approx(held[asset], rel=1e-3)  # units
        assert tds[7].endswith("%") and not tds[7].startswith("+")  # weight, unsigned
    with sqlite3.connect(arena.db) as con:
        fills = con.execute("SELECT COUNT(*) FROM fills WHERE agent='llm1'").fetchone()[0]
    page = browser.find_element(By.ID, "trades-page").text
    total = int(page.split("(")[1].split()[0])
    assert fills >= 1 and total >= 2  # the first fill bought both assets
    sides = browser.execute_script(  # read in one go (a live update may redraw the table)
        "return [...document.querySelectorAll('#trades tbody tr[data-asset]')]"
        ".map((tr) => tr.children[3].textContent)")
    assert len(sides) == min(20, total) and set(sides) <= {"buy", "sell"}
    reasoning = wait(browser, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#decisions .reasoning')].map((e) => e.textContent)"
    ), "reasoning rendered")
    assert all(r == XSS_ANSWER for r in reasoning)  # the hostile text, as text
    assert not browser.find_elements(By.CSS_SELECTOR, "#decisions script, #decisions img")
    assert browser.execute_script("return window.__pwned") is None


def test_leaderboard_sorts_by_any_column_filters_by_agent_and_market(arena: Arena,
                                                                     browser: Any) -> None:
    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1 and len(cells(d, "equity")) == 3, "leaderboard")

    def shown() -> list[tuple[str, float]]:
        return [(r["_agent"], float(r["cumulative_return"].rstrip("%")))
                for r in cells(browser, "equity") if r["rank"] != "—"]

    def visible() -> list[str]:
        return list(browser.execute_script(
            "return [...document.querySelectorAll('table.leaderboard tbody tr')]"
            ".filter((tr) => !tr.hidden).map((tr) => tr.dataset.agent)"))

    click(browser, "table.leaderboard th[data-sort='cumulative_return']")
    wait(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, "th[data-sort='cumulative_return'][aria-sort='descending']"), "sorted")
    down = shown()
    assert [x for _, x in down] == sorted((x for _, x in down), reverse=True)
    click(browser, "table.leaderboard th[data-sort='cumulative_return']")
    wait(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, "th[data-sort='cumulative_return'][aria-sort='ascending']"), "reversed")
    assert [x for _, x in shown()] == sorted(x for _, x in down)
    browser.find_element(By.ID, "search").send_keys("llm")
    wait(browser, lambda d: visible() == ["llm1"], "search")
    assert [b.get_attribute("data-market") for b in browser.find_elements(
        By.CSS_SELECTOR, "#market-tabs button")] == ["all", "equity"]
    click(browser, "#market-tabs button[data-market='equity']")
    assert browser.find_element(By.CSS_SELECTOR, "section.board[data-market='equity']"
                                ).is_displayed()


def test_a_degraded_sandbox_is_a_banner_above_the_fold(arena: Arena, browser: Any) -> None:
    """allow_degraded on a host without a layer: the page says so, as text, until it is on."""
    from agents.alphaforgebench import isolation

    saved = (isolation._policy, isolation._state)
    try:
        browser.get(arena.url + "/")
        wait(browser, lambda d: d.find_element(By.ID, "summary").text != "", "summary")
        assert not browser.find_elements(By.ID, "sandbox-warning")
        isolation.configure(isolation.SandboxPolicy(bwrap=None, tolerated=frozenset(
            {"bubblewrap"})), {"bubblewrap": "<b>not found</b>"})
        browser.refresh()
        wait(browser, lambda d: d.find_elements(By.ID, "sandbox-warning"), "banner")
        banner = browser.find_element(By.ID, "sandbox-warning")
        assert banner.text == ("Sandbox DEGRADED: AlphaForgeBench strategies run without "
                               "bubblewrap (<b>not found</b>) ([sandbox] allow_degraded = true).")
        assert banner.location["y"] < browser.find_element(By.ID, "summary").location["y"]
    finally:
        isolation._policy, isolation._state = saved


def get(url: str) -> tuple[int, dict[str, Any]]:
    """Return the status and JSON body of a GET (errors included)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_prompt_api_rebuilds_each_stored_prompt_to_its_hash(arena: Arena) -> None:
    """Every prompt of llm1 rebuilt from the store hashes to the SHA-256 stored with its call."""
    import sqlite3

    with sqlite3.connect(arena.db) as con:
        calls = con.execute("SELECT market, scheduled_ts, input_sha256 FROM llm_calls"
                            " WHERE agent='llm1' ORDER BY id").fetchall()
    assert len(calls) >= 4  # one call a day
    for market, ts, sha in calls:
        status, body = get(f"{arena.url}/api/agents/llm1/prompt?market={market}"
                           f"&scheduled_ts={ts!r}")
        assert status == 200, body
        (p,) = body["prompts"]
        assert p["error"] is None and p["stored_sha256"] == p["sha256"] == sha
        assert hashlib.sha256(p["prompt"].encode()).hexdigest() == sha
        assert "<news>" in p["prompt"]  # markup, and the hostile headline as the agent saw it
        assert neutralise(XSS_HEADLINE, HEADLINE_CHARS) in p["prompt"]
    # A baseline sent no prompt; bad requests get one line.
    ts = calls[0][1]
    status, body = get(f"{arena.url}/api/agents/ew/prompt?market=equity&scheduled_ts={ts!r}")
    assert status == 404 and "no model call" in body["error"]
    for query, code in (("market=equity", 400), ("market=equity&scheduled_ts=x", 400),
                        ("market=equity&scheduled_ts=1&at=2", 400),
                        ("market=equity&scheduled_ts=1", 404)):
        status, body = get(f"{arena.url}/api/agents/llm1/prompt?{query}")
        assert status == code and "\n" not in body["error"], (query, body)
    assert get(f"{arena.url}/api/agents/nobody/prompt?market=equity&scheduled_ts=1")[0] == 404


def test_reasoning_is_stored_with_each_decision(arena: Arena) -> None:
    """decisions.reasoning (schema v12) is written at decision time, per step, for every agent."""
    import sqlite3

    with sqlite3.connect(arena.db) as con:
        rows = con.execute("SELECT agent, outcome, reasoning FROM decisions"
                           " WHERE agent IN ('llm1', 'ew')").fetchall()
    llm = [json.loads(r) for a, o, r in rows if a == "llm1" and o == "ok"]
    assert len(llm) >= 4
    assert all(r == [{"step": "allocation", "text": XSS_ANSWER}] for r in llm), llm
    # A baseline's own one-line reasoning, stored the same way.
    assert [json.loads(r) for a, _, r in rows if a == "ew"] == [
        [{"step": "answer", "text": "equal weight, rebalanced"}]] * len(llm)
    status, body = get(f"{arena.url}/api/agents/llm1/decisions?limit=1")
    assert status == 200 and body["decisions"][0]["reasoning"] == llm[0]


def test_a_decisions_prompt_shows_on_demand_as_text(arena: Arena, browser: Any) -> None:
    """The button fetches the exact prompt; its hostile markup stays text."""
    browser.get(arena.url + "/agent/llm1")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#decisions button.show-prompt"),
         "a prompt button per call")
    browser.execute_script(  # open the newest decision's audit and ask for its prompt
        "const d = document.querySelector('#decisions details.audit'); d.open = true;"
        "d.querySelector('button.show-prompt').click()")
    from selenium.webdriver.support.ui import WebDriverWait

    text = WebDriverWait(browser, HANG_GUARD, poll_frequency=0.1).until(  # LiteLLM may load
        lambda d: d.execute_script(
            "const p = document.querySelector('#decisions .prompt pre.prompt-text');"
            "return p && p.textContent"), message="the prompt shown")
    assert "<news>" in text and "</news>" in text  # the prompt's markup, as text
    assert neutralise(XSS_HEADLINE, HEADLINE_CHARS) in text
    assert not browser.find_elements(By.CSS_SELECTOR,
                                     "#decisions script, #decisions img, #decisions news")
    assert browser.execute_script("return window.__pwned") is None
