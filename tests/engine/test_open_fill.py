"""Rounds with ``fill_at = "session_open"`` show and fill at the session's opening prices."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agents.stored_input import load_input
from daemon.config.settings import ConfigError, parse_config
from daemon.core.events import PriceEvent
from daemon.core.sparse_rows import FILLS, fill_map
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import SimClock

FRI_CLOSE = 1_792_785_600.0  # 2026-10-23 16:00 ET, a Friday close
MON_OPEN = 1_793_021_400.0  # 2026-10-26 09:30 ET
# Friday's close, Monday's first regular-session prints (the opening prices), later prints.
TICKS = [("AAPL", 100.0, FRI_CLOSE), ("MSFT", 200.0, FRI_CLOSE),
         ("AAPL", 110.0, MON_OPEN + 20), ("MSFT", 190.0, MON_OPEN + 40),
         ("AAPL", 120.0, MON_OPEN + 59), ("MSFT", 180.0, MON_OPEN + 59)]


async def engine(tmp_path: Path, fill_at: str) -> Engine:
    cfg = parse_config({
        "markets": {"equity": {"assets": ["AAPL", "MSFT"], "cost": {"preset": "none"},
                               "schedule": {"kind": "nyse", "times": ["open", "open+1m"],
                                            "fill_at": fill_at}},
                    "polymarket": {"enabled": False}},
        "agents": [{"id": "ew", "kind": "equal_weight", "markets": ["equity"]}],
    })
    store = await Store.open(tmp_path / "r.db")
    await store.begin_run(mode="test", version="0", config=cfg.model_dump(mode="json"),
                          recording=None, started_ts=FRI_CLOSE)
    eng = Engine(cfg, clock=SimClock(FRI_CLOSE - 60), store=store)
    eng.add_equity_universe(["AAPL", "MSFT"])
    eng.build_agents()
    await eng.bus.start()
    return eng


async def feed(eng: Engine, until: float) -> None:
    """Publish the ticks after the clock's time up to ``until`` and move the clock there."""
    start = eng.clock.now()
    for asset, p, ts in TICKS:
        if start < ts <= until:
            eng.clock.advance(ts)  # type: ignore[attr-defined]
            await eng.bus.publish(PriceEvent(ts=ts, recv_ts=ts, market="equity", asset=asset,
                                             price=p))
    await eng.bus.drain()
    eng.clock.advance(until)  # type: ignore[attr-defined]


def shown_input(db: Path, agent: str, ts: float) -> dict[str, Any]:
    """Return the whole stored input of one equity decision (rebuilt from its parts)."""
    con = sqlite3.connect(db)
    try:
        text = load_input(con, agent, "equity", ts)
    finally:
        con.close()
    assert text is not None
    return dict(json.loads(text))


def rows(db: Path, sql: str) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


async def test_round_at_the_open_fills_at_the_opening_prices(tmp_path: Path) -> None:
    eng = await engine(tmp_path, "session_open")
    # 09:30:00: Friday's close is fresh, but no price of the session yet: skipped, says why.
    await feed(eng, MON_OPEN)
    assert (await eng.rounds["equity"].run(MON_OPEN)).outcomes == {"ew": "skipped"}
    (reason,) = rows(tmp_path / "r.db", "SELECT reason FROM decisions")[0]
    assert "no session opening price yet" in reason and "AAPL, MSFT" in reason
    # Only AAPL has opened at 09:30:30.
    await feed(eng, MON_OPEN + 30)
    assert (await eng.rounds["equity"].run(MON_OPEN + 30)).outcomes == {"ew": "skipped"}
    # 09:31: both opened (110, 190) and moved since (120, 180): the opening prices count.
    await feed(eng, MON_OPEN + 60)
    assert (await eng.rounds["equity"].run(MON_OPEN + 60)).outcomes == {"ew": "ok"}
    (trades, value_after, assets), = rows(tmp_path / "r.db", "SELECT f.trades_json,"
                                          f" f.value_after, s.assets_json FROM {FILLS}")
    units = fill_map(trades, assets)
    assert units["AAPL"] == pytest.approx(500.0 / 110.0)
    assert units["MSFT"] == pytest.approx(500.0 / 190.0)
    assert value_after == pytest.approx(1000.0)
    (ts,) = rows(tmp_path / "r.db", "SELECT scheduled_ts FROM decisions WHERE outcome='ok'")[0]
    shown = shown_input(tmp_path / "r.db", "ew", ts)["prices"]
    assert shown == {"AAPL": [MON_OPEN + 20, 110.0], "MSFT": [MON_OPEN + 40, 190.0]}
    # The book is marked at the latest prices again.
    book = eng.books["equity"]
    assert list(book.prices) == [120.0, 180.0]
    assert book.value("ew") == pytest.approx(500.0 / 110 * 120 + 500.0 / 190 * 180)
    await eng.bus.stop()
    await eng.store.close()


async def test_default_fills_at_the_latest_price(tmp_path: Path) -> None:
    eng = await engine(tmp_path, "latest")
    await feed(eng, MON_OPEN)
    assert (await eng.rounds["equity"].run(MON_OPEN)).outcomes == {"ew": "ok"}  # Friday's close
    await feed(eng, MON_OPEN + 60)
    assert (await eng.rounds["equity"].run(MON_OPEN + 60)).outcomes == {"ew": "ok"}
    fills = rows(tmp_path / "r.db", f"SELECT f.trades_json, s.assets_json FROM {FILLS}"
                 " ORDER BY f.ts")
    assert fill_map(*fills[0])["AAPL"] == pytest.approx(500.0 / 100.0)
    await eng.bus.stop()
    await eng.store.close()


async def test_opening_prices_survive_a_checkpoint(tmp_path: Path) -> None:
    eng = await engine(tmp_path, "session_open")
    await feed(eng, MON_OPEN + 60)
    state = json.loads(json.dumps(eng.state.state()))
    eng.state.history["equity"].clear()
    eng.state.restore(state)
    opens, missing = eng.state.opening_prices("equity", MON_OPEN + 60)
    assert missing == () and opens["MSFT"].price == 190.0
    await eng.bus.stop()
    await eng.store.close()


def test_fill_at_open_needs_nyse_sessions() -> None:
    with pytest.raises(ConfigError, match="fill_at"):
        parse_config({"markets": {"polymarket": {"schedule": {
            "kind": "interval", "every": "1h", "fill_at": "session_open"}}}})


async def test_replayed_recording_fills_at_each_sessions_first_print(tmp_path: Path) -> None:
    from daemon.app.replay import replay
    from daemon.config.settings import load_config
    from feeds.recording import iter_events
    from tests.recordings import TINY_CONFIG, make_recording

    rec = tmp_path / "rec.jsonl.gz"
    make_recording(rec, days=4, step=300.0)  # first print of a session: 5 minutes after the open
    cfg_text = TINY_CONFIG.replace('cost = { preset = "realistic" }\n',
                                   'cost = { preset = "realistic" }\n[markets.equity.schedule]\n'
                                   'kind = "nyse"\ntimes = ["open", "open+10m"]\n'
                                   'fill_at = "session_open"\n')
    (tmp_path / "c.toml").write_text(cfg_text)
    db = tmp_path / "r.db"
    await replay(rec, load_config(tmp_path / "c.toml"), db, progress=False)
    prices: dict[str, list[tuple[float, float]]] = {}
    for _, ev in iter_events(rec):
        if isinstance(ev, PriceEvent) and ev.market == "equity":
            prices.setdefault(ev.asset, []).append((ev.ts, ev.price))
    decided = rows(db, "SELECT scheduled_ts, outcome, reason FROM decisions"
                       " WHERE agent='ew' AND market='equity' ORDER BY scheduled_ts")
    assert len(decided) == 8  # 4 sessions x 2 times
    assert decided[0][1] == "skipped" and "no price" in decided[0][2]  # nothing recorded yet
    for at_open, later in zip(decided[::2], decided[1::2], strict=True):
        if at_open is not decided[0]:  # the previous close is fresh, the session has no print
            assert at_open[1] == "skipped" and "no session opening price yet" in at_open[2]
        assert later[1] == "ok"
        shown = shown_input(db, "ew", later[0])["prices"]
        for asset, (ts, p) in shown.items():
            first = min((t, q) for t, q in prices[asset] if t > at_open[0])
            latest = max((t, q) for t, q in prices[asset] if t <= later[0])
            assert (ts, p) == first and ts == at_open[0] + 300.0
            assert latest[0] > ts and latest[1] != p  # an older price than the latest one
        if at_open is not decided[0]:  # not the previous closes
            closes = {a: max((t, q) for t, q in prices[a] if t < at_open[0])[1] for a in shown}
            assert any(shown[a][1] != closes[a] for a in shown)
    # The fill used the opening prices: units x opening price = the traded weights' value.
    (trades, value_before, cost, assets), = rows(
        db, f"SELECT f.trades_json, f.value_before, f.cost, s.assets_json FROM {FILLS}"
        " WHERE f.agent='ew' AND f.market='equity' ORDER BY f.ts LIMIT 1")
    opening = shown_input(db, "ew", decided[1][0])["prices"]
    bought = sum(u * opening[a][1] for a, u in fill_map(trades, assets).items())
    assert bought + cost == pytest.approx(value_before, rel=1e-9)
