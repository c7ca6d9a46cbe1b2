"""The live page's agent view shows PortBench's stage scores, the stress gate and run groups
(read from ``/api/leaderboard``, as ``paperarena report --json`` gives them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tests.web.test_page_browser as pb
from daemon.config.settings import Config, parse_config
from daemon.web.observability import Observability
from tests.web.test_alerts import make_engine
from tests.web.test_page_browser import KEY_ENV, By, report_json, wait

browser = pb.browser  # the module's browser fixture


def config(api_base: str) -> Config:
    return parse_config({
        "markets": {
            "equity": {"assets": ["AAA", "BBB"], "cost": {"preset": "none"},
                       "schedule": {"kind": "interval", "every": "1h", "timezone": "UTC"}},
            "polymarket": {"enabled": False},
        },
        "agents": [
            {"id": "ew", "kind": "equal_weight", "markets": ["equity"], "run_group": "base"},
            {"id": "cash", "kind": "cash", "markets": ["equity"], "run_group": "base"},
            # The fake model answers an allocation, not views: every workflow fails at S1.
            {"id": "pm", "kind": "llm", "protocol": "portbench", "markets": ["equity"],
             "model": "openai/test-model", "api_base": api_base, "api_key_env": KEY_ENV,
             "timeout": 5.0, "max_attempts": 1, "risk_profile": "conservative"},
        ],
        "http": {"port": 0},
    })


class ProtocolArena(pb.Arena):
    async def start(self) -> None:
        await self.llm.__aenter__()
        cfg = config(self.llm.api_base)
        self.engine = await make_engine(self.db, cfg)
        await self.engine.store.begin_run(mode="live", version="0", recording=None,
                                          config=cfg.model_dump(mode="json"), started_ts=pb.T0)
        self.obs = Observability(cfg, mode="live", http=True, port=0, version="0.0.0",
                                 process_metrics=False)
        await self.obs.start(self.engine, sources=[])


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pb.Arena]:
    import os

    os.environ[KEY_ENV] = "sk-test-not-a-real-key"
    a = ProtocolArena(tmp_path_factory.mktemp("page") / "page.db")
    try:
        a.run(a.start())
        for _ in range(3):
            a.run(a.next_day())
        yield a
    finally:
        a.close()
        os.environ.pop(KEY_ENV, None)


def test_agent_view_shows_stage_scores_gate_and_run_group(arena: pb.Arena, browser: Any) -> None:
    board = report_json(arena.db)
    scores = board["portbench"]["pm"]
    assert scores["decisions"] == 3 and scores["failed"] == 3 and scores["pending"] == 0
    assert board["stress_gate"]["pm"]["profile"] == "conservative"
    browser.get(arena.url + "/agent/pm")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#portbench-scores tbody tr"),
         "stage scores rendered")
    # Read in one go: a live update may re-render the section at any time.
    cells = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#portbench-scores td')]"
        ".map((td) => [td.dataset.field, td.innerText.trim()]))")
    # failed workflows are not pending: nothing scored, nothing waiting
    assert cells["failed"] == "3" and cells["decisions"] == "3" and cells["CEPS"] == "-"
    assert cells["S1"] == "-"
    gate = browser.execute_script("return document.getElementById('stress-gate').innerText")
    assert "conservative" in gate and "10.00%" in gate
    browser.get(arena.url + "/agent/ew")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.run-group"), "run group rendered")
    group = browser.execute_script("return document.querySelector('p.run-group').innerText")
    assert "run group base" in group and "2 runs: cash, ew" in group
    assert not browser.find_elements(By.ID, "portbench-scores")
