"""Rounds without usable prices are ``skipped``: no model call, no fill, a reason and a log line."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from daemon.config.settings import ConfigError, parse_config
from daemon.core.events import MarketListed, PriceEvent, ResolutionEvent
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import SimClock
from daemon.web.metrics import OUTCOMES
from tests.llm_server import FakeLlmServer, answer

FRI_CLOSE = 1_792_785_600.0  # 2026-10-23 20:00 UTC = 16:00 ET, a Friday close
MON_PRE = 1_793_019_600.0  # 2026-10-26 13:00 UTC = 09:00 ET, before the open
MON_10 = 1_793_023_200.0  # 10:00 ET: the market has been open 30 minutes
MON_11 = 1_793_026_800.0  # 11:00 ET


@pytest.fixture()
async def llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeLlmServer]:
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-not-a-secret")
    async with FakeLlmServer(default=answer({"CASH": 1.0})) as server:
        yield server


async def engine(tmp_path: Path, server: FakeLlmServer, t: float, **markets: Any) -> Engine:
    data = {
        "markets": {"equity": {"assets": ["AAPL", "MSFT"], **markets.get("equity", {})},
                    "polymarket": markets.get("polymarket", {})},
        "agents": [
            {"id": "llm", "kind": "llm", "model": "openai/test-model",
             "api_base": server.api_base, "api_key_env": "FAKE_LLM_KEY", "max_attempts": 1},
            {"id": "ew", "kind": "equal_weight"},
        ],
    }
    cfg = parse_config(data)
    store = await Store.open(tmp_path / "r.db")
    await store.begin_run(mode="test", version="0", config=cfg.model_dump(mode="json"),
                          recording=None, started_ts=t)
    eng = Engine(cfg, clock=SimClock(t), store=store)
    eng.add_equity_universe(["AAPL", "MSFT"])
    eng.build_agents()
    await eng.bus.start()
    return eng


async def close(eng: Engine) -> None:
    await eng.bus.stop()
    await eng.store.close()


async def price(eng: Engine, asset: str, p: float, ts: float, market: str = "equity") -> None:
    await eng.bus.publish(PriceEvent(ts=ts, recv_ts=ts, market=market, asset=asset, price=p))


def rows(db: Path, sql: str) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


async def test_round_without_any_price_is_skipped_without_asking_the_model(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    eng = await engine(tmp_path, llm, MON_11)
    res = await eng.rounds["equity"].run(MON_11)
    assert res.outcomes == {"llm": "skipped", "ew": "skipped"}
    assert llm.requests == []  # the model was never called
    stored = rows(tmp_path / "r.db", "SELECT agent, outcome, reason FROM decisions ORDER BY agent")
    assert [(a, o) for a, o, _ in stored] == [("ew", "skipped"), ("llm", "skipped")]
    reason = stored[0][2]
    assert "0/2 fresh" in reason and "AAPL: no price" in reason and "MSFT: no price" in reason
    assert rows(tmp_path / "r.db", "SELECT COUNT(*) FROM fills") == [(0,)]
    # Prices arrive: the next round is a decision again, and the model is asked.
    await price(eng, "AAPL", 10.0, MON_11 + 60)
    await price(eng, "MSFT", 20.0, MON_11 + 60)
    eng.clock.advance(MON_11 + 120)  # type: ignore[attr-defined]
    res = await eng.rounds["equity"].run(MON_11 + 120)
    assert res.outcomes == {"llm": "ok", "ew": "ok"}
    assert len(llm.requests) == 1
    await close(eng)


async def test_a_stale_price_skips_the_round_and_says_how_old_it_is(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    eng = await engine(tmp_path, llm, MON_11)
    await price(eng, "AAPL", 10.0, MON_11 - 3600)  # one hour of trading ago: stale (15m)
    await price(eng, "MSFT", 20.0, MON_11 - 30)
    res = await eng.rounds["equity"].run(MON_11)
    assert set(res.outcomes.values()) == {"skipped"}
    assert llm.requests == []
    (reason,) = {r for (r,) in rows(tmp_path / "r.db", "SELECT reason FROM decisions")}
    assert "1/2 fresh" in reason and "AAPL: last price 1h ago" in reason
    assert "MSFT" not in reason
    await close(eng)


async def test_coverage_setting_lets_a_partly_priced_round_run(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    eng = await engine(tmp_path, llm, MON_11, equity={"min_price_coverage": 0.5})
    await price(eng, "AAPL", 10.0, MON_11 - 3600)
    await price(eng, "MSFT", 20.0, MON_11 - 30)
    res = await eng.rounds["equity"].run(MON_11)
    assert res.outcomes == {"llm": "ok", "ew": "ok"}
    assert len(llm.requests) == 1
    await close(eng)


async def test_equity_staleness_counts_only_nyse_open_time(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    eng = await engine(tmp_path, llm, MON_PRE)
    await price(eng, "AAPL", 10.0, FRI_CLOSE)
    await price(eng, "MSFT", 20.0, FRI_CLOSE)
    # Monday 09:00 ET: the Friday close is the current price (no trading since).
    assert (await eng.rounds["equity"].run(MON_PRE)).outcomes["ew"] == "ok"
    # 10:00 ET: the market has traded 30 minutes without a new price: stale.
    eng.clock.advance(MON_10)  # type: ignore[attr-defined]
    assert (await eng.rounds["equity"].run(MON_10)).outcomes["ew"] == "skipped"
    await close(eng)


async def test_polymarket_coverage_uses_unresolved_yes_and_no_tokens(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    t = MON_11
    eng = await engine(tmp_path, llm, t)
    pm = eng.rounds["polymarket"]
    # No question listed yet: nothing to decide.
    res = await pm.run(t - 7200)
    assert res.outcomes == {"llm": "skipped", "ew": "skipped"}
    reason = rows(tmp_path / "r.db", "SELECT reason FROM decisions LIMIT 1")[0][0]
    assert "no tradable asset" in reason
    pub = eng.bus.publish
    for q in ("q1", "q2"):
        await pub(MarketListed(ts=t - 3000, question_id=q, question=f"{q}?", yes_asset=f"{q}y",
                               no_asset=f"{q}n"))
    await price(eng, "q1y", 0.4, t - 2000, "polymarket")
    await price(eng, "q1n", 0.6, t - 2000, "polymarket")
    await price(eng, "q2y", 0.3, t - 60, "polymarket")  # q2's NO token never priced
    res = await pm.run(t - 1000)
    assert set(res.outcomes.values()) == {"skipped"}
    reason = rows(tmp_path / "r.db",
                  "SELECT reason FROM decisions ORDER BY rowid DESC LIMIT 1")[0][0]
    assert "3/4 fresh" in reason and "q2n: no price" in reason
    # q2 resolves: its tokens leave the tradable set and q1's fresh prices are enough.
    await pub(ResolutionEvent(ts=t - 500, question_id="q2", payouts={"q2y": 0.0, "q2n": 1.0}))
    res = await pm.run(t)
    assert res.outcomes == {"llm": "ok", "ew": "ok"}
    assert len(llm.requests) == 1
    # An hour later q1's prices are older than the Polymarket limit (1h): skipped again.
    eng.clock.advance(t + 3600)  # type: ignore[attr-defined]
    res = await pm.run(t + 3600)
    assert set(res.outcomes.values()) == {"skipped"}
    await close(eng)


async def test_one_log_line_per_round_with_outcome_counts_and_coverage(
    tmp_path: Path, llm: FakeLlmServer
) -> None:
    eng = await engine(tmp_path, llm, MON_11)
    await price(eng, "AAPL", 10.0, MON_11 - 30)
    with capture_logs() as logs:
        await eng.rounds["equity"].run(MON_11)
        await price(eng, "MSFT", 20.0, MON_11 - 20)
        await eng.rounds["equity"].run(MON_11 + 1)
    lines = [e for e in logs if e["event"] in ("round skipped", "round decided")]
    assert [e["event"] for e in lines] == ["round skipped", "round decided"]
    assert lines[0]["coverage"] == "1/2" and lines[0]["outcomes"] == {"skipped": 2}
    assert lines[1]["coverage"] == "2/2" and lines[1]["outcomes"] == {"ok": 2}
    assert lines[0]["log_level"] == "warning" and lines[1]["log_level"] == "info"
    await close(eng)


def test_coverage_setting_is_validated() -> None:
    with pytest.raises(ConfigError, match="min_price_coverage"):
        parse_config({"markets": {"polymarket": {"min_price_coverage": 1.5}}})
    cfg = parse_config({"markets": {"equity": {"min_price_coverage": 0}}})
    assert cfg.markets.equity.min_price_coverage == 0.0
    assert cfg.markets.polymarket.min_price_coverage == 1.0
    assert "skipped" in OUTCOMES


async def test_sample_replay_skips_only_the_polymarket_round_before_any_listing(
    tmp_path: Path,
) -> None:
    from daemon.app.replay import replay
    from daemon.config.settings import load_config
    from daemon.store.reports import leaderboard

    root = Path(__file__).resolve().parents[2]
    db = tmp_path / "sample.db"
    await replay(root / "examples" / "sample.jsonl.gz",
                 load_config(root / "examples" / "sample-replay.toml"), db, progress=False)
    skipped = rows(db, "SELECT market, scheduled_ts, COUNT(*) FROM decisions"
                       " WHERE outcome='skipped' GROUP BY market, scheduled_ts")
    first = rows(db, "SELECT MIN(scheduled_ts) FROM decisions WHERE market='polymarket'")[0][0]
    # 00:00 UTC on the first day: the questions are listed at 00:01, so there is nothing to
    # trade. Every other round (22 equity sessions, 29 Polymarket days) has every price fresh.
    assert skipped == [("polymarket", first, 4)]
    board = leaderboard(db)
    assert all(r["valid_decision_rate"] == 1.0 and not r["provisional"] for r in board["rows"])
    assert sorted(r["rank"] for r in board["rows"]) == [1, 1, 2, 2, 3, 3, 4, 4]
