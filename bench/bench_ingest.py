"""End-to-end Polymarket ingest on the daemon's real path, beside decode-only of the same frames.

    python bench/bench_ingest.py [--agents 1000] [--tokens 500] [--frames 20000]

The real path: frames read by :class:`~feeds.connection.StreamingSource` (its read loop, over a
socket stand-in that hands out prepared frames) -> :class:`~feeds.polymarket.decode.
PolymarketDecoder` -> bus -> market state (price cache, history) -> the engine's book (every
agent holds tokens) -> store buffer, with the drawdown alert monitor and the live page's event
stream tapped and the store flushed every ``[store] flush_interval`` on its own thread as the
daemon does. The limit beside it,
measured in the same run: the decoder alone over the same frames, as the read loop calls it
(:meth:`PolymarketDecoder.decode_columns`: books and prices into columns, nothing published).
Events are the price events the frames produce (the same number on both paths). The real
path's time runs until every event is stored: the daemon's flushes every ``flush_interval``
fall inside it and the last write of what is still buffered counts too
(``store_tail_flush_s``). ``equity_current`` says whether every agent's equity and peak were
current after each batch (checked against a full re-mark at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGET_EVENTS_PER_S = 250_000
TARGET_RATIO = 0.6


class _FrameSocket:
    """A stand-in for a WebSocket connection: ``recv`` hands out prepared frames, then closes."""

    def __init__(self, frames: list[bytes], every: int = 64) -> None:
        self._frames = frames
        self._i = 0
        self._every = every

    async def recv(self) -> bytes:
        from websockets.exceptions import ConnectionClosed

        i = self._i
        if i >= len(self._frames):
            raise ConnectionClosed(None, None)
        self._i = i + 1
        if i % self._every == 0:
            await asyncio.sleep(0)  # a socket read yields now and then (flusher, subscribers)
        return self._frames[i]


def _decode_only(tokens: list[str], snapshots: list[str], frames: list[bytes]
                 ) -> tuple[int, float, float]:
    """Decode the frames as the read loop does (prices into columns, taken every burst)."""
    from feeds.frame_batch import MAX_BATCH_FRAMES
    from feeds.polymarket.decode import PolymarketDecoder

    dec = PolymarketDecoder()
    dec.reset(tokens)
    for s in snapshots:
        dec.decode(s, 0.0)
    prices = dec.price_columns()
    n = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i, f in enumerate(frames):
        dec.decode_columns(f, 1.0, prices)
        if i % MAX_BATCH_FRAMES == MAX_BATCH_FRAMES - 1:
            n += len(prices.take())
    n += len(prices.take())
    return n, time.perf_counter() - t0, time.process_time() - c0


async def _real_path(n_agents: int, tokens: list[str], snapshots: list[str],
                     frames: list[bytes], db: Path) -> dict[str, Any]:
    import structlog

    from daemon.alerts.config import parse_alerts_config
    from daemon.alerts.rules import AlertMonitor
    from daemon.config.settings import parse_config
    from daemon.core.events import MarketListed
    from daemon.engine.engine import Engine
    from daemon.store.store import Store
    from daemon.timing.clock import SimClock
    from feeds.connection import _Shard
    from feeds.polymarket.source import PolymarketSettings, PolymarketSource

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    cfg = parse_config({"markets": {"equity": {"enabled": False}}})
    store = await Store.open(db)
    clock = SimClock(1.0)
    eng = Engine(cfg, clock=clock, store=store)
    book = eng.books["polymarket"]
    for q in range(0, len(tokens), 2):
        await eng.bus.publish(MarketListed(ts=0.0, recv_ts=0.0, question_id=f"q{q}",
                                           question=f"Q{q}?", yes_asset=tokens[q],
                                           no_asset=tokens[q + 1]))
    src = PolymarketSource(PolymarketSettings(), bus=eng.bus, now=clock.now)
    src.decoder.reset(tokens)
    src.streaming._keys = list(tokens)
    shard = _Shard(0, list(tokens), None)  # type: ignore[arg-type]
    shard.active = set(tokens)
    await src.streaming._read(shard, _FrameSocket([s.encode() for s in snapshots]))  # type: ignore[arg-type]
    _say("listed and snapshots")
    rng = np.random.default_rng(1)
    for i in range(n_agents):
        a = f"a{i:04d}"
        book.add_agent(a)
        eng.slots["polymarket"][a] = __import__(
            "daemon.engine.rounds", fromlist=["AgentSlot"]).AgentSlot(
            agent=None)  # type: ignore[arg-type]
        picks = 2 * rng.choice(len(tokens) // 2, 8, replace=False) + rng.integers(0, 2, 8)
        w = rng.dirichlet(np.ones(9))
        book.rebalance(a, {tokens[j]: float(x) for j, x in zip(picks, w[:8], strict=True)}
                       | {"CASH": float(w[8])})
    _say("agents")
    alerts = AlertMonitor(eng, parse_alerts_config(cfg.alerts))
    await alerts.start()
    # The live page's event stream, as the daemon's HTTP server wires it (it counts prices).
    from types import SimpleNamespace

    from daemon.web.page import LiveEvents

    LiveEvents(SimpleNamespace(engine=eng))  # type: ignore[arg-type]
    await eng.bus.start()
    await store.flush()
    flusher_stop = asyncio.Event()

    async def flusher() -> None:
        while not flusher_stop.is_set():
            await asyncio.sleep(cfg.store.flush_interval)
            await store.flush()

    ft = asyncio.create_task(flusher())
    published0 = eng.bus.published
    gc.collect()
    gc.freeze()
    c0 = time.process_time()
    t0 = time.perf_counter()
    await src.streaming._read(shard, _FrameSocket(frames))  # type: ignore[arg-type]
    t1 = time.perf_counter()
    ft.cancel()  # the flusher may be mid-write: its transaction completes (Store._atomic)
    with contextlib.suppress(asyncio.CancelledError):
        await ft
    await store.flush()  # an event is ingested once it is stored: the last write counts
    dt = time.perf_counter() - t0
    tail = time.perf_counter() - t1
    cpu = time.process_time() - c0  # every thread of the process: the store writer's included
    n = eng.bus.published - published0
    flusher_stop.set()
    gc.unfreeze()
    current = _equity_current(book)
    await alerts.stop()
    await eng.bus.stop()
    await store.close()
    return {"events": n, "seconds": dt, "cpu_seconds": cpu, "store_tail_flush_s": tail,
            "read_loop_seconds": t1 - t0,
            "equity_current": current}


def _say(msg: str) -> None:
    print(f"[ingest] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _equity_current(book: Any) -> bool:
    """Return whether the book's values and peaks, as left by the last batch, match a full
    re-mark (no re-mark pending: a lazy book that only recorded ticks is not current)."""
    if not hasattr(book, "peaks") or getattr(book, "_dirty", False):
        return False
    na = len(book.agents)
    eq = book._vals[:na].copy()
    peaks = book._peak[:na].copy()
    full = book.mark()
    return bool(np.allclose(eq, full, rtol=1e-12, atol=1e-9) and (peaks >= full - 1e-9).all())


def run(agents: int = 1000, n_tokens: int = 500, n_frames: int = 20_000, repeats: int = 3
        ) -> dict[str, Any]:
    """Measure the real path and decode-only of the same frames, best of ``repeats`` each."""
    from bench_polymarket_decode import build_frames

    random.seed(7)
    tokens, snapshots, frames = build_frames(n_tokens=n_tokens, n_frames=n_frames)
    best_dec = best_real = 0.0
    real: dict[str, Any] = {}
    events = 0
    ratios = []
    cpu_ratios = []
    best_cpu_real = best_cpu_dec = 0.0
    with tempfile.TemporaryDirectory() as d:
        for i in range(repeats):  # each pair back to back: the load of the moment hits both
            n, s, c = _decode_only(tokens, snapshots, frames)
            best_dec = max(best_dec, n / s)
            best_cpu_dec = max(best_cpu_dec, n / c)
            events = n
            r = asyncio.run(_real_path(agents, tokens, snapshots, frames, Path(d) / f"i{i}.db"))
            ratios.append((r["events"] / r["seconds"]) / (n / s))
            cpu_ratios.append((r["events"] / r["cpu_seconds"]) / (n / c))
            best_cpu_real = max(best_cpu_real, r["events"] / r["cpu_seconds"])
            if r["events"] / r["seconds"] > best_real:
                best_real, real = r["events"] / r["seconds"], r
    ratio = sorted(ratios)[len(ratios) // 2]
    return {
        "agents": agents, "tokens": n_tokens, "frames": n_frames, "price_events": events,
        "real_path_events": real.get("events"),
        "real_path_events_per_s": round(best_real),
        "limit_decode_only_events_per_s": round(best_dec),
        "ratio_to_decode_only": round(ratio, 3),
        "ratio_per_pair": [round(x, 3) for x in ratios],
        # Per CPU second of the process (all threads): less disturbed by other processes on a
        # shared machine than wall time.
        "real_path_events_per_cpu_s": round(best_cpu_real),
        "limit_decode_only_events_per_cpu_s": round(best_cpu_dec),
        "cpu_ratio_to_decode_only": round(sorted(cpu_ratios)[len(cpu_ratios) // 2], 3),
        "store_tail_flush_s": round(real.get("store_tail_flush_s", 0.0), 3),
        # The same run until the read loop ended, before the last store write (what this
        # benchmark measured before 2026-11-25; not the figure the targets are about).
        "real_path_events_per_s_before_last_write": round(
            real.get("events", 0) / real.get("read_loop_seconds", 1.0)),
        "equity_and_peak_current_after_every_batch": real.get("equity_current"),
        "target_events_per_s": TARGET_EVENTS_PER_S, "target_ratio": TARGET_RATIO,
        "meets_target": best_real >= TARGET_EVENTS_PER_S and ratio >= TARGET_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the ingest benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=500)
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    print(json.dumps(run(a.agents, a.tokens, a.frames, a.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
