"""A round builds the market-wide observation once and stores exactly what each agent saw
(issue 16, point 2)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

from agents.base import AgentDecision, Observation
from agents.stored_input import load_input
from daemon.config.settings import parse_config
from daemon.core.events import NewsEvent, PriceEvent
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import SimClock

T = 1_793_023_200.0  # Monday 2026-10-26 10:00 ET (the NYSE is open)
ASSETS = ["AAPL", "MSFT", "NVDA"]


class Recorder:
    """An agent that keeps what it was given (and, if told, scribbles on its own holdings)."""

    def __init__(self, agent_id: str, weights: dict[str, float], scribble: bool = False) -> None:
        self.id = agent_id
        self.weights = weights
        self.scribble = scribble
        self.seen: list[tuple[Observation, bytes]] = []

    async def decide(self, obs: Observation) -> AgentDecision:
        self.seen.append((obs, msgspec.json.encode(obs.to_dict(), order="sorted")))
        if self.scribble:
            obs.holdings["FAKE"] = 1e9  # type: ignore[index]
        return AgentDecision(dict(self.weights))


async def engine(tmp_path: Path, agents: int) -> tuple[Engine, list[Recorder]]:
    cfg = parse_config({
        "markets": {"equity": {"assets": ASSETS}},
        "agents": [{"id": f"a{k}", "kind": "equal_weight", "memory": 2} for k in range(agents)],
    })
    store = await Store.open(tmp_path / "o.db")
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=T)
    eng = Engine(cfg, clock=SimClock(T), store=store)
    eng.add_equity_universe(ASSETS)
    eng.build_agents()
    recorders = []
    for k, slot in enumerate(eng.slots["equity"].values()):
        w = {ASSETS[k % 3]: 0.5, "CASH": 0.5}
        slot.agent = Recorder(f"a{k}", w, scribble=k == 0)
        recorders.append(slot.agent)  # type: ignore[arg-type]
    await eng.bus.start()
    return eng, recorders


async def prices(eng: Engine, ts: float, base: float) -> None:
    for j, a in enumerate(ASSETS):
        await eng.bus.publish(PriceEvent(ts=ts, recv_ts=ts, market="equity", asset=a,
                                         price=base + j))


def stored(db: Path) -> dict[tuple[str, float], tuple[str, str]]:
    """Return every decision's rebuilt input and its stored hash."""
    con = sqlite3.connect(db)
    try:
        return {(a, t): (load_input(con, a, m, t) or "", h) for a, m, t, h in con.execute(
            "SELECT agent, market, scheduled_ts, input_sha256 FROM decisions").fetchall()}
    finally:
        con.close()


async def test_market_wide_part_is_shared_and_stored_input_is_what_the_agent_saw(
        tmp_path: Path) -> None:
    eng, recs = await engine(tmp_path, 4)
    try:
        await eng.bus.publish(NewsEvent(ts=T - 60, recv_ts=T - 60, id="n1", headline="up",
                                        keys=("AAPL",)))
        await prices(eng, T - 30, 100.0)
        await eng.rounds["equity"].run(T)
        obs = [r.seen[0][0] for r in recs]
        # Built once per round: every agent's market-wide mappings are the same objects, and
        # read-only (one agent cannot change what the others see).
        assert all(o.prices is obs[0].prices and o.news is obs[0].news for o in obs)
        try:
            obs[1].prices["AAPL"] = obs[1].prices["MSFT"]  # type: ignore[index]
            raise AssertionError("shared prices are writable")
        except TypeError:
            pass
        rows = stored(tmp_path / "o.db")
        for r in recs:
            _, given = r.seen[0]
            text, sha = rows[(r.id, T)]
            # Exactly what the agent was given, even for a0 which changed its holdings after.
            assert text.encode() == given
            assert sha == hashlib.sha256(given).hexdigest()
            assert json.loads(text)["news"]["AAPL"][0][1] == "up"
        assert "FAKE" not in json.loads(rows[("a0", T)][0])["holdings"]
    finally:
        await eng.bus.stop()
        await eng.store.close()


async def test_market_wide_part_is_stored_once_per_round_and_rows_keep_their_own(
        tmp_path: Path) -> None:
    """Issue 16, point 4: one ``observations`` row per round, referenced by every decision."""
    eng, recs = await engine(tmp_path, 4)
    try:
        await eng.bus.publish(NewsEvent(ts=T - 60, recv_ts=T - 60, id="n1", headline="up",
                                        keys=("AAPL",)))
        await prices(eng, T - 30, 100.0)
        await eng.rounds["equity"].run(T)
        eng.clock.advance(T + 60)  # type: ignore[attr-defined]
        await eng.rounds["equity"].run(T + 60)
    finally:
        await eng.bus.stop()
        await eng.store.close()
    con = sqlite3.connect(tmp_path / "o.db")
    try:
        obs_rows = con.execute("SELECT sha256, market, decision_ts, market_json"
                               " FROM observations ORDER BY decision_ts").fetchall()
        dec = con.execute("SELECT agent, scheduled_ts, input_json, observation_sha256"
                          " FROM decisions").fetchall()
    finally:
        con.close()
    assert [(m, t) for _, m, t, _ in obs_rows] == [("equity", T), ("equity", T + 60)]
    for sha, _, _, text in obs_rows:
        assert hashlib.sha256(text.encode()).hexdigest() == sha
        assert "news" in json.loads(text) and "holdings" not in json.loads(text)
    by_ts = {t: sha for sha, _, t, _ in obs_rows}
    assert len(dec) == 8
    for agent, t, own, msha in dec:
        assert msha == by_ts[t]
        assert set(json.loads(own)) == {"agent", "holdings_ix", "cash", "value",
                                        "initial_value", "weights_ix", "recent_fills"}
        assert json.loads(own)["agent"] == agent
    # Rebuilt inputs are what each agent saw, byte for byte, and hash to the stored digest.
    rows = stored(tmp_path / "o.db")
    for r in recs:
        assert len(r.seen) == 2
        for (_, given), t in zip(r.seen, (T, T + 60), strict=True):
            text, sha = rows[(r.id, t)]
            assert text.encode() == given and sha == hashlib.sha256(given).hexdigest()


async def test_recent_allocations_kept_across_rounds_match_the_store(tmp_path: Path) -> None:
    eng, recs = await engine(tmp_path, 3)
    try:
        want: dict[str, Any] = {}
        for n in range(4):
            t = T + 60 * (n + 1)
            eng.clock.advance(t - 10)  # type: ignore[attr-defined]
            await prices(eng, t - 10, 100.0 + n)
            eng.clock.advance(t)  # type: ignore[attr-defined]
            # What the store holds before the round is what the round must show.
            want = {r.id: await eng.store.recent_allocations(r.id, "equity", 2) for r in recs}
            await eng.rounds["equity"].run(t)
        for r in recs:
            last, _ = r.seen[-1]
            assert len(last.recent_allocations) == 2
            init = eng.books["equity"].initial_cash
            assert [(p.ts, dict(p.weights), p.cumulative_return)
                    for p in last.recent_allocations] == [
                (ts, w, v / init - 1.0) for ts, w, v in want[r.id]]
        fresh = await eng.store.recent_allocations_of("equity", [r.id for r in recs], 2)
        kept = await eng.rounds["equity"]._recent([r.id for r in recs], eng.slots["equity"])
        assert {a: [e[:2] for e in v] for a, v in fresh.items()} == {
            a: [e[:2] for e in v] for a, v in kept.items()}
    finally:
        await eng.bus.stop()
        await eng.store.close()


async def test_a_round_yields_to_the_loop_after_each_slice_of_work() -> None:
    """The pause a round takes between agents yields only once its work budget is spent."""
    import asyncio

    from daemon.engine.rounds import _Pauser

    now = [0.0]
    pause = _Pauser(lambda: now[0], every=0.002)
    ran: list[int] = []

    async def other() -> None:
        ran.append(1)

    task = asyncio.create_task(other())
    await pause()  # no work done yet: the round keeps going
    assert not ran
    now[0] = 0.003
    await pause()  # 3 ms of work: other tasks (bus subscribers, sources) run now
    assert ran
    await task


async def test_a_pause_lets_a_price_reach_the_subscriber_it_wakes() -> None:
    """A source publishing in the loop's first turn wakes a subscriber that takes the price in
    the second: both happen within one pause, not after the round's next slice of work."""
    import asyncio

    from daemon.engine.rounds import _Pauser

    now = [0.0]
    pause = _Pauser(lambda: now[0], every=0.002)
    published = asyncio.Event()
    got: list[str] = []

    async def subscriber() -> None:
        await published.wait()
        got.append("price")

    async def source() -> None:
        published.set()  # wakes the subscriber: it runs in the next turn of the loop

    sub = asyncio.create_task(subscriber())
    await asyncio.sleep(0)  # the subscriber waits
    src = asyncio.create_task(source())
    now[0] = 0.003
    await pause()
    assert got == ["price"]
    await asyncio.gather(sub, src)
