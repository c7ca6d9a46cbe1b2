"""Engine, store and config behaviour: look-ahead guard, misfires, idempotence, lock, migration."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agents.base import LookAheadError, Observation, PricePoint, assert_no_lookahead
from daemon.config.settings import ConfigError, load_config, parse_config
from daemon.core.events import MarketListed, NewsEvent, PriceEvent
from daemon.engine.engine import Engine
from daemon.store.dbfile import StoreLockedError
from daemon.store.schema import _V1, SCHEMA_VERSION, _statements
from daemon.store.store import Store
from daemon.timing.clock import SimClock

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_793_000_000.0  # 2026-10-26 (a Monday) 07:33 UTC


def cfg(**extra: object):
    data = {
        "markets": {"equity": {"assets": ["AAPL", "MSFT"]}},
        "agents": [{"id": "ew", "kind": "equal_weight"}, {"id": "bh", "kind": "buy_and_hold"}],
    }
    data.update(extra)
    return parse_config(data)


async def make_engine(db: str, t: float = T0) -> Engine:
    """Return a started engine on ``db`` (a SQLite file or a PostgreSQL URL)."""
    store = await Store.open(db)
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=t)
    eng = Engine(cfg(), clock=SimClock(t), store=store)
    eng.add_equity_universe(["AAPL", "MSFT"])
    eng.build_agents()
    await eng.restore()  # claims the agents in a shared store
    await eng.bus.start()
    return eng


async def test_observation_holds_nothing_after_decision_time(backend: str) -> None:
    eng = await make_engine(backend)
    clock: SimClock = eng.clock  # type: ignore[assignment]
    pub = eng.bus.publish
    await pub(PriceEvent(ts=T0 - 60, recv_ts=T0 - 60, market="equity", asset="AAPL", price=10.0))
    await pub(PriceEvent(ts=T0 - 30, recv_ts=T0 - 30, market="equity", asset="MSFT", price=20.0))
    await pub(NewsEvent(ts=T0 - 10, recv_ts=T0 - 10, id="old", headline="old", keys=("AAPL",)))
    # Future-dated items (source clock ahead of ours, or an item scheduled for later).
    await pub(NewsEvent(ts=T0 + 3600, recv_ts=T0 - 5, id="future", headline="future",
                        keys=("AAPL",)))
    await pub(PriceEvent(ts=T0 + 999, recv_ts=T0 - 1, market="equity", asset="MSFT", price=21.0))
    obs = eng.state.observation("ew", "equity", clock.now(), recent=[], news_window=86400,
                                news_per_key=5)
    assert_no_lookahead(obs)
    assert [n.headline for n in obs.news["AAPL"]] == ["old"]
    # The future-stamped price is clamped to when we received it, never later than now.
    assert obs.prices["MSFT"].ts <= clock.now()
    assert obs.prices["AAPL"] == PricePoint(T0 - 60, 10.0)
    # The guard itself rejects anything later than the decision time.
    bad = Observation.from_dict({**obs.to_dict(), "prices": {"AAPL": [T0 + 1, 10.0]}})
    with pytest.raises(LookAheadError, match="after decision time"):
        assert_no_lookahead(bad)
    await eng.bus.stop()
    await eng.store.close()


async def test_round_applies_once_and_missed_round_is_recorded_not_run(backend: str) -> None:
    eng = await make_engine(backend)
    clock: SimClock = eng.clock  # type: ignore[assignment]
    for a, p in (("AAPL", 10.0), ("MSFT", 20.0)):
        await eng.bus.publish(PriceEvent(ts=T0, recv_ts=T0, market="equity", asset=a, price=p))
    r1 = await eng.rounds["equity"].run(T0)
    assert r1.outcomes == {"ew": "ok", "bh": "ok"}
    # Running the same scheduled round again (e.g. after a restart) does nothing.
    r2 = await eng.rounds["equity"].run(T0)
    assert r2.outcomes == {}
    clock.advance(T0 + 86400)
    r3 = await eng.rounds["equity"].run(T0 + 3600, missed=True)
    assert r3.outcomes == {"ew": "missed", "bh": "missed"}
    rows = await eng.store.fetchall(
        "SELECT agent, outcome FROM decisions ORDER BY scheduled_ts, agent")
    assert rows == [("bh", "ok"), ("ew", "ok"), ("bh", "missed"), ("ew", "missed")]
    assert await eng.store.fetchall("SELECT COUNT(*) FROM fills") == [(2,)]
    await eng.bus.stop()
    await eng.store.close()


async def test_polymarket_listing_makes_tokens_tradable_one_side_only(backend: str) -> None:
    eng = await make_engine(backend)
    pub = eng.bus.publish
    await pub(MarketListed(ts=T0, question_id="q", question="Q?", yes_asset="Y", no_asset="N"))
    await pub(PriceEvent(ts=T0, market="polymarket", asset="Y", price=0.3))
    await pub(PriceEvent(ts=T0, market="polymarket", asset="N", price=0.7))
    res = await eng.rounds["polymarket"].run(T0)
    assert res.outcomes == {"ew": "ok", "bh": "ok"}
    w = eng.books["polymarket"].weights("ew")
    assert w["N"] == pytest.approx(1.0) and w.get("Y", 0.0) == 0.0  # the favoured side only
    await eng.bus.stop()
    await eng.store.close()


async def test_second_daemon_on_same_db_is_refused(tmp_path: Path) -> None:
    s1 = await Store.open(tmp_path / "x.db")
    with pytest.raises(StoreLockedError, match="in use by another paperarena daemon"):
        await Store.open(tmp_path / "x.db")
    await s1.close()
    s2 = await Store.open(tmp_path / "x.db")  # free again after close
    await s2.close()


async def test_schema_v1_database_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    for stmt in _statements(_V1):
        con.execute(stmt)
    con.execute("INSERT INTO meta VALUES('schema_version', '1')")
    con.execute("INSERT INTO decisions(agent, market, scheduled_ts, decided_ts, outcome,"
                " input_json) VALUES('a', 'equity', 1.0, 1.0, 'ok', '{\"agent\":\"a\"}')")
    con.commit()
    con.close()
    store = await Store.open(db)
    assert await store.schema_version() == SCHEMA_VERSION  # every migration ran, v1 to the last
    assert await store.fetchall("SELECT agent, observation_sha256 FROM decisions") == [
        ("a", None)]
    assert await store.fetchall("SELECT COUNT(*) FROM stage_scores") == [(0,)]
    assert await store.fetchall("SELECT COUNT(*) FROM agent_state") == [(0,)]
    await store.close()
    # A decision stored before v8 keeps its whole input, read back as stored.
    from agents.stored_input import load_input

    con = sqlite3.connect(db)
    assert load_input(con, "a", "equity", 1.0) == '{"agent":"a"}'
    con.close()


def test_config_errors_are_one_line_each(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[markets.equity]\ninitial_cash = -1\nassets = ["AAPL", "AAPL"]\n'
        '[[agents]]\nid = "x"\nkind = "wizard"\n[[agents]]\nid = "y"\nkind = "llm"\n'
        "[surprise]\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_config(bad)
    text = "\n".join(exc.value.problems)
    assert "markets.equity.initial_cash: Input should be greater than 0" in text
    assert "duplicate asset" in text
    assert "agents.0.kind" in text
    assert "needs 'model'" in text
    assert "surprise: unknown key" in text
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config", str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(exc.value.problems) == 5
    assert all(line.startswith(str(bad)) for line in lines)
    bad.write_text("this is = = not toml")
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config", str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "invalid TOML" in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.toml")))
def test_example_configs_are_valid(example: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config", str(example)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
