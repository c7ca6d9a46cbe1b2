"""A live season of every replayed kind of agent rebuilds its report by replay (issue 32).

A live-clock season (the daemon in this process, the equity feeds and their daily history at
the local fakes), stopped and started again on the same store, trades a StockBench, a PortBench
and an AlphaForgeBench agent, each at a fake OpenAI-compatible model that reads its prompts
(the protocol tests' models), an HTTP agent at the reference agent service
(examples/http_agent) and a baseline. ``report --bundle`` in a fresh process with no key and no
network rebuilds its report byte for byte, run after run, the AlphaForgeBench strategies
running again in the sandbox. Then an edited stored answer of each protocol, an edited stored
decision of the HTTP agent and an edited stored headline (an input that is not the stored one)
are named as the first replayed decision that is not the stored one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.app.live import LiveDaemon
from daemon.app.sources import build_sources
from daemon.config.settings import Config
from tests.agents.test_llm_agent import KEY_ENV
from tests.agents.test_remote_agent import SERVICE, serve
from tests.app.test_live_e2e import Tape, make_config, next_round, prices_applied
from tests.fakes.scenario import Scenario, wait_until
from tests.protocols.test_alphaforge import TREND, StrategyModel
from tests.protocols.test_portbench import PortBenchModel
from tests.protocols.test_stockbench import StockBenchModel
from tests.protocols.test_stockbench_fundamentals import FakeProviders
from tests.store.integrity.test_bundle import _members
from tests.store.integrity.test_bundle_replay import (
    _env,
    assert_rebuilds,
    edit_answer,
    exported,
    forged,
    rechain,
    rows,
)
from tests.store.test_cli_database import cli

pytestmark = pytest.mark.slow

PROTOCOLS = {"sb": "stockbench", "pb": "portbench", "af": "alphaforgebench"}


async def _run(sc: Scenario, cfg: Config, db: Path, rounds: int, first: bool) -> None:
    """Run the live daemon on ``db`` for ``rounds`` rounds with fresh prices before each (the
    first prices of the season when ``first``), then stop it in a quiet gap."""
    daemon = LiveDaemon(cfg, db=str(db), sources=lambda eng: build_sources(cfg, eng))
    tape = Tape()
    await sc.wait_phase(0.2)  # just after a round boundary
    await daemon.start()
    try:
        eng = daemon.engine
        assert eng is not None
        eng.bus.add_tap("#", tape)
        await wait_until(lambda: any(len(c.symbols) == 3 for c in sc.yahoo.open_conns),
                         10, "the Yahoo subscription")
        for k in range(rounds):
            t = await sc.wait_phase(1.0)
            if first and k == 0:
                await sc.send_initial()
                await wait_until(lambda: prices_applied(eng, sc), 5, "the first prices")
            else:
                await sc.burst(polymarket=False)
            await next_round(eng, tape, t, timeout=60)
        await sc.wait_phase(1.0)  # stop in a quiet gap
    finally:
        await daemon.stop()


async def _live_season(tmp: Path) -> Path:
    """Run the live daemon for a few rounds of every agent, stop it, start it again on the same
    store (a restart: the round due meanwhile is settled as the daemon does) and run a few more
    rounds; return its store."""
    db = tmp / "live.db"
    sc = Scenario()
    await sc.start()
    sc.serve_daily_history()
    os.environ[KEY_ENV] = "sk-test"
    try:
        async with StockBenchModel() as sb, PortBenchModel() as pb, \
                StrategyModel([TREND, TREND.replace("0.8", "0.5")]) as af, \
                serve(SERVICE.make_app()) as url, FakeProviders() as quotes:
            llm = {"kind": "llm", "model": "openai/test-model", "api_key_env": KEY_ENV,
                   "markets": ["equity"], "max_attempts": 2, "timeout": 10.0}
            agents: list[dict[str, Any]] = [
                {"id": "sb", "protocol": "stockbench", "api_base": sb.api_base,
                 "revision_rounds": 2, **llm},
                {"id": "pb", "protocol": "portbench", "api_base": pb.api_base, **llm},
                {"id": "af", "protocol": "alphaforgebench", "api_base": af.api_base, **llm,
                 "strategy": {"regenerate_every": "5s", "timeout": "10s", "lookback": 20}},
                {"id": "remote", "kind": "http", "markets": ["equity"],
                 "http": {"url": url, "timeout": 5}},
                {"id": "equal_weight", "kind": "equal_weight"},
            ]
            cfg = make_config(sc, db, agents=agents, polymarket=False, backfill=True,
                              fundamentals_url=f"{quotes.base}/v7/finance/quote")
            await _run(sc, cfg, db, 3, first=True)
            await _run(sc, cfg, db, 3, first=False)
            assert af.served >= 2 and len(sb.requests) >= 5 and len(pb.requests) >= 5
            assert quotes.requests  # the StockBench agent's fundamentals, stored and replayed
            return db
    finally:
        os.environ.pop(KEY_ENV, None)
        await sc.stop()


@pytest.fixture(scope="module")
def season(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The live store and its bundle."""
    tmp = tmp_path_factory.mktemp("live-agents")
    db = asyncio.run(_live_season(tmp))
    yield db, exported(db)


def test_every_kind_of_agent_is_replayed_byte_identically(season: tuple[Path, Path]) -> None:
    db, bundle = season
    # Two runs, each of which decided rounds (the second also the one due while stopped).
    runs = rows(db, "SELECT r.id, COUNT(DISTINCT d.scheduled_ts), MIN(d.scheduled_ts) <"
                     " r.started_ts FROM runs r JOIN decisions d ON d.run_id = r.id GROUP BY r.id")
    assert [(n >= 3, settled) for _, n, settled in runs] == [(True, 0), (True, 1)], runs
    # Every agent traded; every protocol's steps and the HTTP agent's requests were stored.
    traded = {a for (a,) in rows(db, "SELECT agent FROM fills WHERE traded_value > 0")}
    assert traded == {"sb", "pb", "af", "remote", "equal_weight"}, traded
    steps = {(a, s) for a, s in rows(db, "SELECT DISTINCT agent, step FROM llm_calls")}
    assert {("sb", "overview"), ("sb", "decision"), ("pb", "views"), ("pb", "weights"),
            ("af", "strategy"), ("remote", None)} <= steps, steps
    assert_rebuilds(bundle)


def _difference(bundle: Path) -> str:
    """Return the first replayed decision or fill ``verify-bundle`` names as not stored."""
    r = cli("verify-bundle", str(bundle), timeout=300, env=_env())
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("the report replayed from the stored answers differs from "
                               "report.json at line "), r.stdout
    assert lines[1].startswith("the replay"), r.stdout
    return lines[1]


@pytest.mark.parametrize("agent", sorted(PROTOCOLS))
def test_an_edited_answer_of_each_protocol_is_named(season: tuple[Path, Path], tmp_path: Path,
                                                    agent: str) -> None:
    _, bundle = season
    # A refusal in place of a valid answer: the protocol's own check rejects it on replay.
    edited = forged(bundle, tmp_path, lambda db: edit_answer(db, agent, "<refusal>no</refusal>"))
    assert _members(edited)["report.json"] == _members(bundle)["report.json"]
    line = _difference(edited)
    assert line.startswith(f"the replay's decision of {agent} in equity at "), line


def _edit_remote(db: Path) -> None:
    """Turn the HTTP agent's first stored trade into all cash (decisions re-chained)."""
    con = sqlite3.connect(db)
    with con:
        (ts,) = con.execute("SELECT MIN(scheduled_ts) FROM fills WHERE agent='remote'"
                            " AND traded_value > 0").fetchone()
        con.execute("UPDATE decisions SET allocation_json=? WHERE agent='remote' AND"
                    " scheduled_ts=?", (json.dumps([["CASH", 1.0]]), ts))
        rechain(con, "decisions")
    con.close()


def test_an_edited_decision_of_an_http_agent_is_named(season: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    _, bundle = season
    line = _difference(forged(bundle, tmp_path, _edit_remote))
    assert line.startswith("the replay's decision of remote in equity at "), line
    assert "differs in allocation_json" in line, line


def _edit_news(db: Path) -> None:
    """Change a stored headline (market_events re-chained): every later input differs."""
    con = sqlite3.connect(db)
    with con:
        n = con.execute("UPDATE market_events SET payload=replace(payload, 'Apple unveils a"
                        " thing', 'Apple unveils a forgery') WHERE kind='NewsEvent'").rowcount
        assert n >= 1  # fetched again by each run
        rechain(con, "market_events")
    con.close()


def test_an_input_that_is_not_the_stored_one_is_named(season: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    _, bundle = season
    r = cli("verify-bundle", str(forged(bundle, tmp_path, _edit_news)), timeout=300, env=_env())
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    named = [x for x in r.stdout.splitlines() if x.startswith("the replay's decision of ")]
    assert len(named) == 1 and " differs in input_sha256: stored " in named[0], r.stdout
