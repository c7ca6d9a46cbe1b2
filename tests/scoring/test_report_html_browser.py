"""The HTML report of the replayed sample in Chromium at 1,400 px: nothing scrolls sideways,
neither the document nor any of its tables (issue 30, point 7)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.app.replay import replay
from daemon.config.settings import load_config
from daemon.store.reports import load_report
from scoring.board.report_html import render_html
from tests.web.test_page_browser import ROOT, chromium

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    db = folder / "sample.db"
    asyncio.run(replay(ROOT / "examples" / "sample.jsonl.gz",
                       load_config(ROOT / "examples" / "sample-replay.toml"), db,
                       progress=False))
    out = folder / "report.html"
    out.write_text(render_html(load_report(db)), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    yield from chromium()


def test_report_fits_1400_px_without_sideways_scrolling(report_file: Path, chrome: Any) -> None:
    chrome.get(report_file.as_uri())
    width = chrome.execute_script("return window.innerWidth")
    assert 1350 <= width <= 1400  # the window is 1,400 px (less a scroll bar)
    page = chrome.execute_script("return document.documentElement.scrollWidth")
    assert page <= width, f"the report is {page} px wide in a {width} px window"
    boxes = chrome.execute_script(
        "return [...document.querySelectorAll('div.scroll')].map(d => ["
        "d.closest('section').dataset.market, d.scrollWidth, d.clientWidth,"
        "d.querySelectorAll('tbody tr, table > tr').length])")
    assert len(boxes) == 6  # three tables in each market
    for market, scroll, client, _ in boxes:
        assert scroll <= client, f"a {market} table is {scroll} px wide in its {client} px box"
    # Every table names every agent of its market: the split loses no row.
    rows = chrome.execute_script(
        "return [...document.querySelectorAll('table.leaderboard')].map(t =>"
        " [...t.querySelectorAll('tr')].slice(2).map(r => r.cells[1].textContent))")
    assert all(sorted(r) == ["all_cash", "buy_and_hold", "equal_weight", "momentum"]
               for r in rows), rows
