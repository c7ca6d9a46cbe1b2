"""Frames that arrive together are published as one batch (issue 16, point 1): each tap runs
once per burst, every event arrives in order, a burst is capped and nothing waits at the end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

from daemon.core.bus import Bus
from daemon.core.events import NewsEvent, PriceEvent
from feeds.frame_batch import MAX_BATCH_FRAMES, FrameBatcher
from scoring.ledger.held import held_entries, use_held, value_change
from scoring.ledger.ledger import Book
from tests.feeds.test_connection import KVAdapter, KVServer, make, server  # noqa: F401
from tests.helpers import HANG_GUARD, wait_for


def price(asset: str, p: float) -> PriceEvent:
    return PriceEvent(ts=1.0, recv_ts=1.0, market="polymarket", asset=asset, price=p)


def batching_bus() -> tuple[Bus, list[list[str]], list[str]]:
    """A bus whose price tap records each batch it gets; a '#' tap records every event."""
    bus = Bus()
    batches: list[list[str]] = []
    every: list[str] = []
    bus.add_tap("price.#", lambda e: None,
                batch=lambda evs: batches.append([e.asset for e in evs]))  # type: ignore[attr-defined]
    bus.add_tap("#", lambda e: every.append(getattr(e, "asset", None) or e.topic))
    return bus, batches, every


async def test_frames_added_together_go_out_as_one_batch_when_the_loop_turns() -> None:
    bus, batches, every = batching_bus()
    b = FrameBatcher(bus)
    b.add([price("A", 0.1), price("B", 0.2)])
    b.add([price("A", 0.3)])
    assert batches == [] and b.waiting == 3  # nothing yet: the read loop has not suspended
    await asyncio.sleep(0)
    assert batches == [["A", "B", "A"]] and b.waiting == 0
    assert every == ["A", "B", "A"]
    assert bus.published == 3


async def test_a_full_burst_is_published_at_once_and_close_publishes_the_rest() -> None:
    bus, batches, _ = batching_bus()
    b = FrameBatcher(bus, max_frames=4)
    for i in range(9):
        b.add([price(f"T{i}", 0.5)])
    assert [len(x) for x in batches] == [4, 4]  # capped: latency stays bounded
    b.close()
    assert [len(x) for x in batches] == [4, 4, 1]
    await asyncio.sleep(0)  # the cancelled callback publishes nothing twice
    assert sum(len(x) for x in batches) == 9


async def test_a_non_price_event_keeps_its_place_between_prices() -> None:
    bus, batches, every = batching_bus()
    b = FrameBatcher(bus)
    b.add([price("A", 0.1)])
    b.add([price("B", 0.2)])
    b.flush()  # what the read loop does before publishing a news event
    await bus.publish(NewsEvent(ts=1.0, recv_ts=1.0, id="n1", headline="h"))
    b.add([price("C", 0.3)])
    await asyncio.sleep(0)
    assert every[:2] == ["A", "B"] and every[-1] == "C" and len(every) == 4
    assert batches == [["A", "B"], ["C"]]


async def test_the_read_loop_batches_a_burst_from_a_real_socket(server: KVServer) -> None:  # noqa: F811
    adapter = KVAdapter(server.url)
    src, bus, seen = make(adapter, ["K"])
    batches: list[int] = []
    bus.add_tap("price.#", lambda e: None, batch=lambda evs: batches.append(len(evs)))
    task = asyncio.create_task(src.run())
    await wait_for(lambda: server.subscribed() == ["K"])
    n = 400
    conn: Any = server.open_conns[0]["ws"]
    for i in range(n):  # one burst: the client reads many frames per socket read
        await conn.send(json.dumps({"k": "K", "v": float(i)}))
    await wait_for(lambda: sum(e.price for e in seen if isinstance(e, PriceEvent)) ==  # type: ignore[attr-defined]
                   sum(range(n)))
    got = [e.price for e in seen if isinstance(e, PriceEvent)]
    assert got == [float(i) for i in range(n)]  # every price, in order
    assert sum(batches) == n
    assert len(batches) < n / 4  # frames read together were published together
    assert max(batches) <= MAX_BATCH_FRAMES
    await src.stop()
    await asyncio.wait_for(task, HANG_GUARD)


def _holdings(rng: np.random.Generator, na: int, nx: int, per_agent: int) -> np.ndarray:
    h = np.zeros((na, nx), order="F")
    for i in range(na):
        h[i, rng.choice(nx, per_agent, replace=False)] = rng.uniform(0.1, 500.0, per_agent)
    return h


def test_both_ways_of_marking_a_batch_give_the_same_bits() -> None:
    rng = np.random.default_rng(5)
    h = _holdings(rng, 300, 120, 6)
    held = held_entries(h)
    for n_cols in (1, 7, 60, 120):
        cols = rng.choice(120, n_cols, replace=False).astype(np.intp)
        d = rng.uniform(-0.3, 0.3, n_cols)
        order = np.argsort(cols)
        dense = np.einsum("ij,j->i", h[:, cols[order]], d[order])
        sparse = value_change(held, 300, 120, cols, d)
        np.testing.assert_array_equal(sparse, dense)
        # an agent's change is the same whoever else is in the book
        alone = value_change(held_entries(h[17:18]), 1, 120, cols, d)
        assert alone[0] == sparse[17]
    assert use_held(held, 300, 120) and not use_held(held, 300, 1)


def test_a_burst_marks_the_book_like_a_full_re_mark_after_a_rebalance() -> None:
    rng = np.random.default_rng(9)
    b = Book("polymarket")
    for j in range(200):
        b.add_asset(f"t{j}")
    b.set_prices(np.arange(200, dtype=np.intp), np.full(200, 0.5), 1.0)
    for i in range(50):
        b.add_agent(f"a{i}")
        picks = rng.choice(200, 4, replace=False)
        b.rebalance(f"a{i}", {f"t{j}": 0.2 for j in picks} | {"CASH": 0.2})
    for step in range(40):
        n = 150 if step % 2 else 3  # a burst (held entries) or a frame (dense columns)
        cols = rng.choice(200, n, replace=False).astype(np.intp)
        b.set_prices(cols, rng.uniform(0.05, 0.95, n), 2.0 + step, checked=True)
        if step == 20:  # holdings change: the held entries are rebuilt
            b.rebalance("a3", {"t0": 0.5, "CASH": 0.5})
        now = b._vals[:50].copy()
        full = b._cash[:50] + b._h[:50, :200] @ b._pz[:200]
        np.testing.assert_allclose(now, full, rtol=1e-12)
    assert b.weights("a3")["t0"] > 0.0  # the rebalance took: marks above used its holdings


def test_pattern_reach_over_a_markets_prices() -> None:
    from daemon.core.price_routes import price_pattern_reach as reach

    assert [reach(p, "equity") for p in ("#", "price.#", "+.#", "price.equity.#", "price.+.#")
            ] == ["all"] * 5
    assert [reach(p, "equity") for p in ("news.#", "price.polymarket.#", "price", "price.equity",
                                         "decision.+.#")] == ["none"] * 5
    # the asset level named, or one level only: BRK.B has two
    assert [reach(p, "equity") for p in ("price.equity.AAPL", "price.equity.+", "price.+.+.#")
            ] == ["asset"] * 3


async def test_a_batch_reaches_asset_specific_taps_and_subscribers_only_for_their_asset() -> None:
    bus = Bus()
    wide: list[list[str]] = []
    aapl: list[str] = []
    one_level: list[str] = []
    bus.add_tap("price.#", lambda e: None,
                batch=lambda evs: wide.append([e.asset for e in evs]))  # type: ignore[attr-defined]
    bus.add_tap("price.equity.AAPL", lambda e: aapl.append(e.asset))  # type: ignore[attr-defined]
    bus.add_tap("price.equity.+", lambda e: one_level.append(e.asset))  # type: ignore[attr-defined]
    evs = [PriceEvent(ts=1.0, recv_ts=1.0, market="equity", asset=a, price=1.0)
           for a in ("AAPL", "BRK.B", "MSFT", "AAPL")]
    bus.publish_batch(evs)  # type: ignore[arg-type]
    assert wide == [["AAPL", "BRK.B", "MSFT", "AAPL"]]
    assert aapl == ["AAPL", "AAPL"]
    assert one_level == ["AAPL", "MSFT", "AAPL"]  # BRK.B is two levels
    assert bus.published == 4
