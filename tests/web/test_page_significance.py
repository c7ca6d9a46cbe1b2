"""Issue 27 on the page: the Model Confidence Set band and rank stability (a real browser).

The page's functions (``static/significance.js``) render the report's JSON: a band naming the
market's Model Confidence Set above its table and the rank stability in a rank's tooltip.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.test_page_browser import Arena, cells, loaded, wait
from tests.web.test_page_browser import arena as arena
from tests.web.test_page_browser import browser as browser

pytest.importorskip("selenium.webdriver", reason="needs selenium (the dev extra)")

BOARD_MARKET = {"mcs": {"level": 0.9, "agents": ["llm", "ew"], "days": 42,
                        "block_length": 2.5}}
ROW = {"agent": "llm", "rank": 1, "in_mcs": True,
       "rank_stability": {"top1": 0.6123, "top3": 0.97, "p_to_best": None,
                          "p_to_best_holm": None},
       "vs_next": {"p_value_holm": 0.00004}}


def test_mcs_band_and_rank_stability_render_the_reports_json(
        arena: Arena, browser: Any) -> None:
    browser.get(arena.url + "/")
    wait(browser, lambda d: loaded(d) >= 1 and cells(d, "equity"), "leaderboard rendered")
    band = browser.execute_script(
        "const p = PASIG.mcsBand(arguments[0], PA.el); return [p.className, p.textContent];",
        BOARD_MARKET)
    assert band == ["mcs-band", "90% Model Confidence Set (42 days): llm, ew"]
    assert browser.execute_script("return PASIG.mcsBand({mcs: {agents: []}}, PA.el)") is None
    big = {**BOARD_MARKET, "comparisons": 4983, "holm_floor": 4983 / 10_001}
    assert browser.execute_script("return PASIG.mcsBand(arguments[0], PA.el).textContent",
                                  big) == ("90% Model Confidence Set (42 days): llm, ew; 4983 "
                                           "comparisons: the smallest Holm-adjusted p-value "
                                           "the draws allow is 0.498, none can be significant")
    title = browser.execute_script("return PASIG.stabilityTitle(arguments[0])", ROW)
    assert title == ("#1 in 61.2% of resamples, top 3 in 97.0%; inside the Model Confidence "
                     "Set; vs next: Holm-adjusted p < 0.0001")
    assert browser.execute_script("return PASIG.stabilityTitle({agent: 'x'})") == ""
