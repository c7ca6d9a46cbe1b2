"""``fill_at = "next_price"``: a round fills at each asset's first price after its decision
(LiveTradeBench's Eq. 2; issue 29, point 4), recomputed here from the recording's events."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon.app.replay import replay
from daemon.config.settings import parse_config
from daemon.core.events import PriceEvent
from daemon.core.sparse_rows import FILLS, fill_map
from daemon.engine.next_fill import NEXT_PRICE_REASON
from feeds.recording import iter_events
from tests.recordings import TICKERS, make_recording


def _config(fill_at: str) -> Any:
    return parse_config({
        "markets": {
            "equity": {"assets": list(TICKERS), "initial_cash": 100_000.0,
                       "cost": {"fee_bps": 0, "slippage_bps": 0},
                       "schedule": {"kind": "nyse", "times": ["close-30m"], "fill_at": fill_at}},
            "polymarket": {"enabled": False},
        },
        "agents": [{"id": "ew", "kind": "equal_weight"}],
    })


def _prices(rec: Path) -> list[tuple[float, str, float]]:
    """Return (time as the market state stamps it, asset, price) of every equity price."""
    out = []
    for _, ev in iter_events(rec):
        if isinstance(ev, PriceEvent) and ev.market == "equity":
            ts = ev.recv_ts if ev.recv_ts and ev.ts > ev.recv_ts else ev.ts
            out.append((ts, ev.asset, ev.price))
    return out


def _fills(db: Path) -> list[tuple[float, float, dict[str, float], float]]:
    con = sqlite3.connect(db)
    rows = con.execute(f"SELECT f.scheduled_ts, f.ts, f.trades_json, s.assets_json,"
                       f" f.value_before FROM {FILLS} WHERE f.agent='ew'"
                       " ORDER BY f.scheduled_ts").fetchall()
    con.close()
    return [(s, t, fill_map(tj, aj), v) for s, t, tj, aj, v in rows]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: Any) -> Path:
    rec = tmp_path_factory.mktemp("np") / "rec.jsonl.gz"
    make_recording(rec, days=4)
    return rec


async def test_fills_at_the_first_prices_after_the_decision(recording: Path,
                                                            tmp_path: Path) -> None:
    await replay(recording, _config("next_price"), tmp_path / "n.db", progress=False)
    fills = _fills(tmp_path / "n.db")
    con = sqlite3.connect(tmp_path / "n.db")
    decisions = con.execute("SELECT scheduled_ts, outcome, reason FROM decisions"
                            " WHERE agent='ew' ORDER BY scheduled_ts").fetchall()
    con.close()
    assert len(decisions) >= 2 and all(o == "ok" for _, o, _ in decisions)
    assert all(r == NEXT_PRICE_REASON for _, _, r in decisions)
    assert [f[0] for f in fills] == [d[0] for d in decisions]  # every decision filled
    prices = _prices(recording)
    held = dict.fromkeys(TICKERS, 0.0)
    cash = 100_000.0
    for scheduled, ts, trades, value_before in fills:
        first: dict[str, tuple[float, float]] = {}
        for t, a, p in prices:  # in recording order: the first after the decision wins
            if t > scheduled and a not in first:
                first[a] = (t, p)
        assert ts == max(t for t, _ in first.values())
        value = cash + sum(held[a] * first[a][1] for a in TICKERS)
        assert value_before == pytest.approx(value, rel=1e-12)
        for a in TICKERS:  # equal weights at the next prices, no cost
            want = value / len(TICKERS) / first[a][1] - held[a]
            assert trades.get(a, 0.0) == pytest.approx(want, rel=1e-9, abs=1e-9)
            held[a] += trades.get(a, 0.0)
        cash = value - sum(held[a] * first[a][1] for a in TICKERS)


async def test_the_default_fills_at_the_decision_prices(recording: Path, tmp_path: Path
                                                        ) -> None:
    await replay(recording, _config("latest"), tmp_path / "l.db", progress=False)
    await replay(recording, _config("next_price"), tmp_path / "n.db", progress=False)
    latest, nxt = _fills(tmp_path / "l.db"), _fills(tmp_path / "n.db")
    assert [f[0] for f in latest] == [f[0] for f in nxt]
    assert all(f[1] == f[0] for f in latest)  # at the decision's own time
    assert all(n[1] > n[0] for n in nxt)  # strictly later
    assert latest[0][2] != pytest.approx(nxt[0][2])  # other prices, other quantities
    # A second replay stores the same fills.
    await replay(recording, _config("next_price"), tmp_path / "n2.db", progress=False)
    assert _fills(tmp_path / "n2.db") == nxt


def test_next_price_is_a_setting_of_any_schedule() -> None:
    cfg = parse_config({"markets": {"polymarket": {"schedule": {
        "kind": "interval", "every": "1h", "fill_at": "next_price"}}}})
    assert cfg.markets.polymarket.schedule.fill_at == "next_price"
    assert parse_config({}).markets.equity.schedule.fill_at == "latest"


async def test_live_the_fill_follows_the_last_next_price(tmp_path: Path) -> None:
    """Live, the fill is made as soon as every asset has a price after the decision."""
    import time

    from daemon.engine.engine import Engine
    from daemon.store.store import Store
    from daemon.timing.clock import LiveClock

    store = await Store.open(str(tmp_path / "live.db"))
    now = time.time()
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=now)
    cfg = parse_config({"markets": {
        "equity": {"assets": ["AAPL", "MSFT"], "cost": {"fee_bps": 0, "slippage_bps": 0},
                   "stale_after": "7d", "min_price_coverage": 0.0,
                   "schedule": {"kind": "interval", "every": "1h", "fill_at": "next_price"}},
        "polymarket": {"enabled": False}}, "agents": [{"id": "ew", "kind": "equal_weight"}]})
    eng = Engine(cfg, clock=LiveClock(), store=store)
    eng.add_equity_universe(["AAPL", "MSFT"])
    eng.build_agents()
    await eng.restore()
    await eng.bus.start()
    try:
        for a, p in (("AAPL", 10.0), ("MSFT", 20.0)):
            await eng.bus.publish(PriceEvent(ts=now - 5, recv_ts=now - 5, market="equity",
                                             asset=a, price=p))
        result = await eng.rounds["equity"].run(now)
        assert result.outcomes == {"ew": "ok"}
        nf = eng.rounds["equity"].next_fills
        assert nf is not None and set(nf.pending) == {"ew"}
        t1 = time.time() + 1e-3
        await eng.bus.publish(PriceEvent(ts=t1, recv_ts=t1, market="equity", asset="AAPL",
                                         price=12.5))
        assert nf._task is None  # MSFT has no new price yet
        t2 = max(time.time(), t1) + 1e-3
        await eng.bus.publish(PriceEvent(ts=t2, recv_ts=t2, market="equity", asset="MSFT",
                                         price=25.0))
        assert nf._task is not None
        await nf._task
        assert nf.pending == {}
        con = sqlite3.connect(tmp_path / "live.db")
        ts, tj, aj, vb = con.execute(f"SELECT f.ts, f.trades_json, s.assets_json,"
                                     f" f.value_before FROM {FILLS}").fetchone()
        con.close()
        trades = fill_map(tj, aj)
        assert ts == t2
        assert trades == pytest.approx({"AAPL": vb / 2 / 12.5, "MSFT": vb / 2 / 25.0})
    finally:
        await eng.bus.stop()
        await store.close()
