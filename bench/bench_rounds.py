"""Decision rounds of 100, 1,000 and 5,000 baseline agents: round time and the price latency
they add.

    python bench/bench_rounds.py [--json]

The real engine (books, market state, SQLite store, bus) with equal-weight and buy-and-hold
agents over 16 stocks. While a round runs, a producer publishes a price every millisecond and a
bus subscriber records how late each one arrives (from when it was due to be sent, so a stalled
event loop counts in full). The machine's limit beside it is the same latency with no round
running, measured in the same run; the figure the issue targets is the p99 added by a round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.config.settings import parse_config  # noqa: E402
from daemon.core.events import PriceEvent  # noqa: E402
from daemon.engine.engine import Engine, freeze_heap  # noqa: E402
from daemon.store.store import Store  # noqa: E402
from daemon.timing.clock import SimClock  # noqa: E402

T = 1_793_023_200.0  # Monday 2026-10-26 10:00 ET (the NYSE is open)
ASSETS = [f"S{j:02d}" for j in range(16)]
PERIOD = 0.001


class Probe:
    """Publish a price every ``PERIOD`` seconds; record how late each reaches a subscriber."""

    def __init__(self, eng: Engine) -> None:
        self.eng = eng
        self.due: dict[int, float] = {}
        self.lat: list[float] = []
        self.k = 0
        eng.bus.subscribe("price.equity.#", self._got, name="latency-probe")

    async def _got(self, ev: PriceEvent) -> None:
        due = self.due.pop(int(ev.price), None)
        if due is not None:
            self.lat.append(time.perf_counter() - due)

    async def run(self, stop: asyncio.Event) -> None:
        """Publish every price due by now at each wake-up (as a socket read returns every frame
        that arrived meanwhile), then sleep until the next one is due."""
        t0 = time.perf_counter()
        start = self.k
        while not stop.is_set():
            now = time.perf_counter()
            while t0 + (self.k - start) * PERIOD <= now:
                self.due[self.k] = t0 + (self.k - start) * PERIOD
                self.eng.bus.publish_nowait(PriceEvent(
                    ts=self.eng.clock.now(), recv_ts=self.eng.clock.now(), market="equity",
                    asset=f"LAT{self.k % 256}", price=float(self.k)))
                self.k += 1
            await asyncio.sleep(max(t0 + (self.k - start) * PERIOD - time.perf_counter(), 0.0))

    async def during(self, work: object) -> tuple[float, list[float]]:
        """Run ``work`` (a coroutine, or seconds to wait) with the probe; return (s, latencies)."""
        self.lat = []
        stop = asyncio.Event()
        task = asyncio.create_task(self.run(stop))
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        if isinstance(work, float):
            await asyncio.sleep(work)
        else:
            await work  # type: ignore[misc]
        took = time.perf_counter() - t0
        stop.set()
        await task
        await asyncio.sleep(0.01)
        return took, list(self.lat)


def p99(xs: list[float]) -> float:
    """Return the 99th percentile of ``xs``."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


async def measure(agents: int, rounds: int, db: Path, extra_agents: tuple[dict, ...] = ()
                  ) -> dict:
    """Run ``rounds`` rounds of ``agents`` agents (and ``extra_agents``, config tables); return
    round time and latency figures."""
    kinds = ("equal_weight", "buy_and_hold")
    cfg = parse_config({"markets": {"equity": {"assets": ASSETS}},
                        "agents": [{"id": f"a{k}", "kind": kinds[k % 2]}
                                   for k in range(agents)] + list(extra_agents)})
    store = await Store.open(db)
    await store.begin_run(mode="bench", version="0", config={}, recording=None, started_ts=T)
    clock = SimClock(T - 120)
    eng = Engine(cfg, clock=clock, store=store)
    eng.add_equity_universe(ASSETS)
    eng.build_agents()
    freeze_heap()  # as the daemon does once its agents are built
    await eng.bus.start()
    probe = Probe(eng)
    times, lat, idle = [], [], []
    try:
        for r in range(rounds + 1):
            t = T + 60 * r
            clock.advance(t - 10)
            for j, a in enumerate(ASSETS):
                await eng.bus.publish(PriceEvent(ts=t - 10, recv_ts=t - 10, market="equity",
                                                 asset=a, price=100.0 + j + r * 0.5))
            clock.advance(t)
            took, got = await probe.during(eng.rounds["equity"].run(t))
            if r:  # the first round is a warm-up
                times.append(took)
                lat.extend(got)
                idle.extend((await probe.during(took))[1])
    finally:
        await eng.bus.stop()
        await eng.close_agents()
        await store.close()
    ms = 1e3
    return {
        "round_ms_median": round(ms * statistics.median(times), 1),
        "round_ms_max": round(ms * max(times), 1),
        "price_latency_p99_ms_during_round": round(ms * p99(lat), 2),
        "price_latency_p99_ms_idle_limit": round(ms * p99(idle), 2),
        "added_p99_ms": round(ms * (p99(lat) - p99(idle)), 2),
        "price_latency_max_ms_during_round": round(ms * max(lat), 2),
        "prices_seen": len(lat),
    }


def run(sizes: tuple[int, ...] = (100, 1000, 5000), rounds: int = 5) -> dict:
    """Measure rounds at each size (structlog quiet)."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    out: dict = {"targets": {"round_100_ms": 20, "added_p99_1000_ms": 10,
                             "added_p99_5000_ms": 10}}
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            out[f"agents_{n}"] = asyncio.run(measure(n, rounds, Path(d) / f"r{n}.db"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the rounds benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--agents", default="100,1000,5000", help="comma-separated round sizes")
    a = ap.parse_args(argv)
    sizes = tuple(int(x) for x in a.agents.split(","))
    print(json.dumps(run(sizes, rounds=a.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
