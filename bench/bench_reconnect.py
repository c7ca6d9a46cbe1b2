"""Reconnect time after an abrupt close, on loopback, against the fake Polymarket server.

    python bench/bench_reconnect.py [--trials 20] [--json]

Measured from the moment the server aborts every connection (TCP reset) to the first fresh price
published from the new connection's book snapshot. Two policies: the default backoff (full jitter
over [0, 1 s) on the first retry) and a near-zero first delay, which shows the machinery's own
cost: connect, subscribe, snapshot, decode, publish.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.core.bus import Bus  # noqa: E402
from daemon.core.events import PriceEvent  # noqa: E402
from feeds.polymarket.source import PolymarketSettings, build_polymarket_source  # noqa: E402
from tests.fakes.polymarket_server import Book, FakePolymarket, gamma_market  # noqa: E402


async def _trials(n: int, backoff_initial: float) -> list[float]:
    fake = FakePolymarket()
    await fake.start()
    fake.add_market(gamma_market("1", "Will A?", "Y1", "N1"),
                    {"Y1": Book(bids=[(0.40, 10)], asks=[(0.42, 10)]),
                     "N1": Book(bids=[(0.58, 10)], asks=[(0.60, 10)])})
    settings = PolymarketSettings(
        ws_url=fake.ws_url, gamma_url=fake.http_url, clob_url=fake.http_url, ids=("1",),
        ping_interval=5.0, stale_after=60.0, resolution_poll_interval=600.0,
        discovery_interval=600.0, watchdog_interval=0.01, backoff_initial=backoff_initial,
        backoff_max=max(backoff_initial, 1.0), backoff_reset_after=0.0, dead_after=None,
    )
    bus = Bus()
    fresh = asyncio.Event()
    mark = {"t": 0.0}

    def tap(ev: Any) -> None:
        if isinstance(ev, PriceEvent) and ev.recv_ts >= mark["t"]:
            fresh.set()

    bus.add_tap("price.#", tap)
    src = build_polymarket_source(settings, bus=bus, now=time.time)
    task = asyncio.create_task(src.run())
    out: list[float] = []
    try:
        await fake.wait_conns(1, timeout=10)
        await asyncio.wait_for(fresh.wait(), 10)
        for i in range(n):
            await asyncio.sleep(0.05)
            fresh.clear()
            t0 = time.time()
            mark["t"] = t0
            fake.abort_all()
            await asyncio.wait_for(fresh.wait(), 10)
            out.append(time.time() - t0)
            await fake.wait_conns(i + 2, timeout=10)
    finally:
        await src.stop()
        await asyncio.wait_for(task, 5)
        await fake.stop()
    return out


def _summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": round(1000 * statistics.median(xs), 2),
            "p90_ms": round(1000 * xs[int(0.9 * (len(xs) - 1))], 2),
            "max_ms": round(1000 * xs[-1], 2)}


def run(trials: int = 20) -> dict:
    """Measure reconnect times under both policies."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    return {
        "default_backoff": _summary(asyncio.run(_trials(trials, 1.0))),
        "near_zero_backoff": _summary(asyncio.run(_trials(trials, 0.001))),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the reconnect benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(a.trials)
    print(json.dumps(r, indent=2) if a.json else
          f"default backoff: {r['default_backoff']}\nnear-zero backoff: {r['near_zero_backoff']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
