"""A round frees what it built a slice at a time, and prices keep being handled until it ends
(issue 31 point 3). Every check waits on events and loop turns, never on wall-clock speed."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import weakref
from pathlib import Path

from daemon.config.settings import parse_config
from daemon.core.events import DecisionEvent, PriceEvent
from daemon.engine.engine import Engine
from daemon.engine.round_release import SLICE, release
from daemon.engine.rounds import DecisionRound
from daemon.store.store import Store
from daemon.timing.clock import SimClock

T = 1_793_023_200.0  # Monday 2026-10-26 10:00 ET (the NYSE is open)
ASSETS = ["AAPL", "MSFT", "NVDA"]


class Item:
    """An object whose death a weak reference tells."""


async def test_release_frees_a_slice_per_loop_turn() -> None:
    """Another task runs between slices and sees them freed a slice at a time, to the last."""
    n = 5 * SLICE + 7
    items = [Item() for _ in range(n)]
    by_key = {k: Item() for k in range(n)}
    refs = [weakref.ref(x) for x in itertools.chain(items, by_key.values())]
    seen: list[int] = []
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            seen.append(sum(r() is not None for r in refs))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0)
    await release(lambda: asyncio.sleep(0), items, by_key)
    stop.set()
    await watcher
    assert not items and not by_key and all(r() is None for r in refs)
    freed = [a - b for a, b in itertools.pairwise(seen) if a != b]
    assert freed and max(freed) <= SLICE  # never more than a slice in one turn
    assert len(set(seen)) >= 2 * n // SLICE  # the watcher ran between the slices


async def test_prices_published_during_a_round_are_handled_before_it_ends(
        tmp_path: Path) -> None:
    """A price published when the round publishes its last decision reaches its subscriber
    before the round returns; the round's results are stored as one commit."""
    n = 300
    cfg = parse_config({"markets": {"equity": {"assets": ASSETS}},
                        "agents": [{"id": f"a{k}", "kind": "equal_weight"} for k in range(n)]})
    store = await Store.open(tmp_path / "r.db")
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=T)
    eng = Engine(cfg, clock=SimClock(T - 10), store=store)
    eng.add_equity_universe(ASSETS)
    eng.build_agents()
    await eng.bus.start()
    ticks = itertools.count()
    # every pause of the round yields (its work budget always spent): the most turns it takes
    rnd = DecisionRound(eng, "equity", monotonic=lambda: float(next(ticks)))
    handled: list[float] = []
    decisions = 0

    async def on_price(ev: PriceEvent) -> None:
        if ev.asset == "PROBE":
            handled.append(ev.price)

    async def on_decision(ev: DecisionEvent) -> None:
        nonlocal decisions
        decisions += 1
        if decisions == n:  # the round's last event: what is left is its tail
            eng.bus.publish_nowait(PriceEvent(ts=T, recv_ts=T, market="equity",
                                              asset="PROBE", price=1.0))

    eng.bus.subscribe("price.equity.#", on_price, name="probe-prices")
    eng.bus.subscribe("decision.#", on_decision, name="probe-decisions")
    try:
        for j, a in enumerate(ASSETS):
            await eng.bus.publish(PriceEvent(ts=T - 10, recv_ts=T - 10, market="equity",
                                             asset=a, price=100.0 + j))
        await eng.bus.drain()
        eng.clock.advance(T)  # type: ignore[attr-defined]
        result = await rnd.run(T)
        assert handled == [1.0]
        assert sorted(set(result.outcomes.values())) == ["ok"] and len(result.outcomes) == n
    finally:
        await eng.bus.stop()
        await eng.close_agents()
        await store.close()
    con = sqlite3.connect(tmp_path / "r.db")
    try:
        assert con.execute("SELECT COUNT(*) FROM decisions WHERE outcome='ok'").fetchone()[0] == n
        assert con.execute("SELECT COUNT(*) FROM fills").fetchone()[0] == n
    finally:
        con.close()
