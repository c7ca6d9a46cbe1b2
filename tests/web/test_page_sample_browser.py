"""The page over the replayed sample, served read-only (``paperarena serve``), in Chromium at
1,400 and 390 px: a chart line per agent in both markets, Polymarket tokens by question title
and side, and no horizontal overflow on the index or an agent page."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.test_page_browser import ROOT, chromium, wait
from tests.web.test_page_browser import click as click_css
from tests.web.test_page_views_browser import legend

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")
from selenium.webdriver.common.by import By  # noqa: E402

SAMPLE_AGENTS = ["all_cash", "buy_and_hold", "equal_weight", "momentum"]
BENCH = "benchmark (equal weight)"


def replay_sample(db: Path) -> None:
    """Replay the shipped sample into ``db`` (the README's recipe, without --serve)."""
    subprocess.run([sys.executable, "-m", "daemon.app.cli", "replay", "examples/sample.jsonl.gz",
                    "--config", "examples/sample-replay.toml", "--db", str(db), "--no-progress"],
                   check=True, capture_output=True, timeout=300, cwd=ROOT,
                   env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


class Served:
    """``paperarena serve`` over a store, in its own thread's event loop."""

    def __init__(self, db: Path) -> None:
        from daemon.web.readonly import serve

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.bound: list[str] = []
        ready = threading.Event()

        async def start() -> None:
            up = asyncio.Event()
            self.task = asyncio.create_task(serve(db, port=0, ready=up, bound=self.bound))
            await up.wait()
            ready.set()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(60)
        assert ready.is_set()
        self.url = self.bound[0]

    def stop(self) -> None:
        async def cancel() -> None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()  # its executor's threads end too (a later test may need to fork)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("sample") / "sample.db"
    replay_sample(db)
    s = Served(db)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    yield from chromium()


def set_width(drv: Any, width: int) -> None:
    """Lay the page out ``width`` CSS pixels wide (a phone's viewport below 500: headless
    Chromium's windows are never narrower than 500 px)."""
    if width < 500:
        drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": True})
    else:
        drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        drv.set_window_size(width, 1000)


def overflow(drv: Any) -> int:
    """Return how many CSS pixels the page is wider than the window (0: none)."""
    return int(drv.execute_script(
        "return Math.max(0, document.documentElement.scrollWidth - window.innerWidth)"))


def loaded(drv: Any) -> bool:
    return bool(drv.execute_script("return Number(document.body.dataset.loaded || 0) >= 1"))


@pytest.mark.parametrize("width", [1400, 390])
def test_sample_index_has_every_agent_on_each_chart_and_fits(served: Served, chrome: Any,
                                                             width: int) -> None:
    set_width(chrome, width)
    chrome.get(served.url + "/")
    for market in ("equity", "polymarket"):
        wait(chrome, lambda d, m=market: [lbl for lbl, _ in legend(d, m)]
             == [*SAMPLE_AGENTS, BENCH], f"{market} chart")
    wait(chrome, lambda d: loaded(d) and d.find_elements(By.CSS_SELECTOR, "table.leaderboard"),
         "leaderboard")
    assert chrome.find_element(By.ID, "badge").text == "read-only"
    meta = chrome.find_element(By.CSS_SELECTOR, "section.board[data-market='polymarket'] .meta")
    assert "best asset Will " in meta.text and ("YES" in meta.text or "NO" in meta.text)
    assert chrome.execute_script("return window.innerWidth") == width
    assert overflow(chrome) == 0, f"{overflow(chrome)} px too wide at {width} px"
    click_css(chrome, "#market-tabs button[data-market='polymarket']")
    wait(chrome, lambda d: not d.find_element(
        By.CSS_SELECTOR, "section.board[data-market='equity']").is_displayed(), "equity hidden")
    assert chrome.find_element(By.CSS_SELECTOR, "section.market-chart[data-market='polymarket']"
                               ).is_displayed()


@pytest.mark.parametrize("width", [1400, 390])
def test_sample_agent_page_names_questions_and_fits(served: Served, chrome: Any,
                                                    width: int) -> None:
    set_width(chrome, width)
    chrome.get(served.url + "/agent/equal_weight")
    wait(chrome, lambda d: loaded(d) and d.find_elements(
        By.CSS_SELECTOR, "#trades tbody tr[data-market='polymarket']"), "agent page")
    names = chrome.execute_script(
        "return [...document.querySelectorAll('.asset')].filter((e) => /^[0-9]{20,}$/.test("
        "e.dataset.asset)).map((e) => [e.textContent, e.title])")
    assert names, "no Polymarket token shown"
    for text, title in names:
        assert text.endswith((" YES", " NO")) and title.endswith((" YES", " NO"))
        assert len(text) <= 44 and title.startswith(text[:-4].rstrip("…").rstrip()[:20])
    assert not chrome.execute_script(  # no 77-digit id shown as text anywhere
        "return /[0-9]{40,}/.test(document.querySelector('main').innerText)")
    assert chrome.execute_script("return window.innerWidth") == width
    assert overflow(chrome) == 0, f"{overflow(chrome)} px too wide at {width} px"


def test_the_screenshot_script_writes_the_pages(served: Served, chrome: Any,
                                                 tmp_path: Path) -> None:
    """docs/screenshots.py regenerates the docs' screenshots (here into a temporary folder)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("screenshots", ROOT / "docs" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    written = shots.shoot(served.url, tmp_path, chrome)
    assert [p.name for p in written] == ["leaderboard-page.png", "agent-page.png",
                                         "leaderboard-page-390.png"]
    for p in written:
        head = p.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        width = int.from_bytes(head[16:20], "big")
        assert width == (390 if p.name.endswith("-390.png") else 1400)
