"""Soak: replay >= 24 h of dense recorded time at max speed and watch the process RSS.

    python bench/soak.py [--hours 24] [--json]

A deterministic synthetic recording is generated in a temporary directory: 15 equities every
5 s during NYSE sessions, 10 Polymarket questions (YES and NO tokens) every 10 s around the
clock, a headline every 10 minutes, and question churn (one resolves and a new one is listed
every 6 h). It is replayed through the real replay path (:func:`daemon.app.replay.replay` with the
default replay components) in a fresh subprocess, with decision rounds every 30 minutes of each
NYSE session and every hour on Polymarket. A bus tap samples VmRSS (after a GC) at every hour
of recorded time, with the number of live Python objects. The recording starts 30 minutes
before a NYSE open, so the warm-up (the first quarter of the run, at least 8 h) holds a whole
session. Reported: RSS over recorded time; the growth of the peak RSS after warm-up over the
peak during it (allocator plateaus make single samples noisy), of the last sample over the one
at the end of warm-up, and of the live Python objects. Target: < 5 % growth.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.core.events import MarketListed, NewsEvent, PriceEvent, ResolutionEvent  # noqa: E402
from daemon.core.universe import DEFAULT_EQUITIES  # noqa: E402
from feeds.recording import RecordingHeader, RecordingWriter  # noqa: E402

START = datetime(2026, 11, 2, 14, tzinfo=UTC)  # a Monday, 30 min before the NYSE open
EQUITY_STEP = 5.0
POLY_STEP = 10.0
NEWS_STEP = 600.0
CHURN_STEP = 6 * 3600.0
QUESTIONS = 10
TARGET_GROWTH = 0.05
#: glibc tuning of the systemd units: a fixed mmap threshold. glibc's dynamic threshold moves
#: large transient buffers (decoded event blocks, SQLite batches) onto the heap after the first
#: free, and the heap then keeps ~50 MB plateaus it cannot trim (see docs/operations.md).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576"}
#: Warm-up: the first NYSE session (open 30 min after the start) and its decision rounds.
WARMUP_HOURS = 8.0
SOAK_CONFIG = """
[markets.equity]
cost = { preset = "realistic" }
[markets.equity.schedule]
kind = "nyse"
times = ["10:00", "10:30", "11:00", "11:30", "12:00", "12:30", "13:00", "13:30", "14:00",
         "14:30", "15:00", "15:30"]

[markets.polymarket]
cost = { fee_bps = 5, slippage_bps = 10 }
[markets.polymarket.schedule]
kind = "interval"
every = "1h"
timezone = "UTC"

[alerts]
check_interval = "1m"

[[agents]]
id = "buy_and_hold"
kind = "buy_and_hold"
[[agents]]
id = "equal_weight"
kind = "equal_weight"
[[agents]]
id = "all_cash"
kind = "cash"
[[agents]]
id = "momentum"
kind = "momentum"
lookback_days = 1
top_k = 3
"""


def _sessions(start: float, end: float) -> list[tuple[float, float]]:
    from daemon.timing.nyse import get_nyse_calendar

    cal = get_nyse_calendar()
    out = []
    day = datetime.fromtimestamp(start, UTC).date()
    while datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() < end:
        bounds = cal.session_bounds(date(day.year, day.month, day.day))
        if bounds is not None:
            out.append((bounds[0].timestamp(), bounds[1].timestamp()))
        day += timedelta(days=1)
    return out


def make_recording(path: Path, hours: float, seed: int = 11) -> dict[str, int]:
    """Write the soak recording of ``hours`` recorded hours to ``path``; return event counts."""
    rng = random.Random(seed)
    t0 = START.timestamp()
    end = t0 + hours * 3600.0
    sessions = _sessions(t0, end)
    px = {s: 50.0 + 400.0 * rng.random() for s in DEFAULT_EQUITIES}
    live: dict[str, float] = {}  # question id -> logit of P(YES)
    serial = 0

    def listing(ts: float) -> MarketListed:
        nonlocal serial
        qid = f"q{serial}"
        serial += 1
        live[qid] = rng.gauss(0.0, 1.0)
        return MarketListed(ts=ts, recv_ts=ts, question_id=qid, question=f"Question {qid}?",
                            yes_asset=f"{qid}-yes", no_asset=f"{qid}-no")

    first = [listing(t0) for _ in range(QUESTIONS)]
    header = RecordingHeader(
        start=t0, end=end, description=f"soak: {hours:g} h, dense synthetic",
        equities=tuple(DEFAULT_EQUITIES),
        questions=tuple({"id": e.question_id, "question": e.question, "yes": e.yes_asset,
                         "no": e.no_asset} for e in first),
        meta={"generator": "bench/soak.py", "seed": seed, "synthetic": True},
    )
    counts = {"PriceEvent": 0, "MarketListed": 0, "NewsEvent": 0, "ResolutionEvent": 0}
    vol = 0.2 / math.sqrt(252 * 23_400 / EQUITY_STEP)
    with RecordingWriter(path, header, compresslevel=1) as w:
        for ev in first:
            w.write(ev)
            counts["MarketListed"] += 1
        step = math.gcd(int(EQUITY_STEP), int(POLY_STEP))
        n_steps = int(hours * 3600 / step)
        si = 0
        for k in range(1, n_steps + 1):
            t = t0 + k * step
            while si < len(sessions) and t > sessions[si][1]:
                si += 1
            if k * step % CHURN_STEP == 0 and live:
                qid = min(live, key=lambda q: int(q[1:]))
                yes = 1.0 if live.pop(qid) > 0 else 0.0
                w.write(ResolutionEvent(ts=t, recv_ts=t, question_id=qid,
                                        payouts={f"{qid}-yes": yes, f"{qid}-no": 1.0 - yes}))
                w.write(listing(t))
                counts["ResolutionEvent"] += 1
                counts["MarketListed"] += 1
            if si < len(sessions) and sessions[si][0] < t <= sessions[si][1] \
                    and k * step % EQUITY_STEP == 0:
                for s in DEFAULT_EQUITIES:
                    px[s] *= math.exp(rng.gauss(0.0, vol))
                    p = round(px[s], 2)
                    w.write(PriceEvent(ts=t, recv_ts=t, market="equity", asset=s, price=p,
                                       bid=round(p - 0.01, 2), ask=round(p + 0.01, 2)))
                    counts["PriceEvent"] += 1
            if k * step % POLY_STEP == 0:
                for qid in list(live):
                    live[qid] = max(-4.0, min(4.0, live[qid] + rng.gauss(0.0, 0.01)))
                    p = round(1.0 / (1.0 + math.exp(-live[qid])), 3)
                    w.write(PriceEvent(ts=t, recv_ts=t, market="polymarket", asset=f"{qid}-yes",
                                       price=p))
                    w.write(PriceEvent(ts=t, recv_ts=t, market="polymarket", asset=f"{qid}-no",
                                       price=round(1.0 - p, 3)))
                    counts["PriceEvent"] += 2
            if k * step % NEWS_STEP == 0:
                key = DEFAULT_EQUITIES[(k // int(NEWS_STEP / step)) % len(DEFAULT_EQUITIES)]
                w.write(NewsEvent(ts=t, recv_ts=t, id=f"n{k}", headline=f"{key} headline {k}",
                                  source="soak", keys=(key,)))
                counts["NewsEvent"] += 1
    return counts


def rss_bytes() -> int:
    """Return this process's resident set size in bytes."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssProbe:
    """A replay component sampling RSS at every ``every`` seconds of recorded time."""

    name = "soak-rss"

    def __init__(self, start: float, every: float = 3600.0) -> None:
        """Sample at ``start + k * every``."""
        self.t0 = start
        self.every = every
        self.next = start + every
        self.samples: list[tuple[float, int, int]] = []
        """(recorded hour, RSS bytes, live Python objects); hour -1 is after the replay."""

    async def start(self, engine: Any, *, sources: list[Any]) -> None:
        """Tap every price event (a timestamp compare; a sample on each boundary)."""
        del sources
        self._sample(0.0)
        engine.bus.add_tap("price.#", self._tap)

    def _tap(self, ev: Any) -> None:
        if ev.ts >= self.next:
            self._sample((self.next - self.t0) / 3600.0)
            self.next += self.every

    def _sample(self, hour: float) -> None:
        gc.collect()
        # Frozen objects (the daemon freezes what each round leaves) count: the collector
        # never frees them, so a leak among them must show here.
        self.samples.append((hour, rss_bytes(), len(gc.get_objects()) + gc.get_freeze_count()))

    async def stop(self) -> None:
        """Take the final sample."""
        self._sample(-1.0)


def _replay_child(rec: Path, db: Path, config: Path) -> dict[str, Any]:
    import structlog

    from daemon.app.components import default_components
    from daemon.app.replay import replay
    from daemon.config.settings import load_config
    from feeds.recording import read_header

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    cfg = load_config(config)
    probe = RssProbe(read_header(rec).start)
    comps = [*default_components(cfg, mode="replay"), probe]
    summary = asyncio.run(replay(rec, cfg, db, progress=False, components=comps))
    return {"events": summary.events, "decisions": summary.decisions,
            "elapsed_s": summary.elapsed_s, "samples": probe.samples}


def run(hours: float = 24, *, malloc_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Generate, replay in a fresh process and report RSS over recorded time.

    ``malloc_env`` is the glibc malloc tuning the replay process runs with (default: the one
    the systemd units set, :data:`MALLOC_ENV`; ``{}`` for glibc's defaults).
    """
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    with tempfile.TemporaryDirectory(prefix="paperarena-soak-") as d:
        rec, db, cfg = Path(d) / "soak.jsonl.gz", Path(d) / "soak.db", Path(d) / "soak.toml"
        cfg.write_text(SOAK_CONFIG)
        t0 = time.perf_counter()
        counts = make_recording(rec, hours)
        gen_s = time.perf_counter() - t0
        res = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(rec), str(db),
             str(cfg)], capture_output=True, text=True, check=False, cwd=ROOT,
            env={**os.environ, **(MALLOC_ENV if malloc_env is None else malloc_env)})
        if res.returncode != 0:
            raise RuntimeError(f"soak replay failed: {res.stderr.strip()[-2000:]}")
        child = json.loads(res.stdout)
        db_mb = db.stat().st_size / 1e6
        rec_mb = rec.stat().st_size / 1e6
    samples = [(h, b, o) for h, b, o in child["samples"] if h >= 0]
    final = child["samples"][-1]
    warm_h = max(WARMUP_HOURS, hours / 4)
    during = [s for s in samples if s[0] <= warm_h]
    after = [s for s in samples if s[0] > warm_h] or [samples[-1]]
    at_warm = during[-1]
    peak_warm = max(b for _, b, _ in during)
    peak_after = max(b for _, b, _ in after)
    growth_peak = (peak_after - peak_warm) / peak_warm
    growth_end = (after[-1][1] - at_warm[1]) / at_warm[1]
    growth_objects = (after[-1][2] - at_warm[2]) / at_warm[2]
    mb = 1024 * 1024
    return {
        "recorded_hours": hours,
        "malloc_env": MALLOC_ENV if malloc_env is None else malloc_env,
        "events": child["events"],
        "events_by_type": counts,
        "decision_jobs": child["decisions"],
        "generate_s": round(gen_s, 1),
        "replay_s": round(child["elapsed_s"], 1),
        "events_per_s": round(child["events"] / child["elapsed_s"]),
        "recording_mb": round(rec_mb, 1),
        "db_mb": round(db_mb, 1),
        "rss_mb_by_hour": [[round(h, 2), round(b / mb, 1)] for h, b, _ in samples],
        "py_objects_by_hour": [[round(h, 2), o] for h, _, o in samples],
        "rss_mb_start": round(samples[0][1] / mb, 1),
        "warmup_hours": warm_h,
        "rss_mb_at_warmup": round(at_warm[1] / mb, 1),
        "rss_mb_peak_warmup": round(peak_warm / mb, 1),
        "rss_mb_peak_after_warmup": round(peak_after / mb, 1),
        "rss_mb_end": round(after[-1][1] / mb, 1),
        "rss_mb_after_replay": round(final[1] / mb, 1),
        "rss_growth_peak": round(growth_peak, 4),
        "rss_growth_end": round(growth_end, 4),
        "py_objects_growth": round(growth_objects, 4),
        "target_growth": TARGET_GROWTH,
        "meets_target": growth_peak < TARGET_GROWTH and growth_objects < TARGET_GROWTH,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print the result."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--glibc-defaults", action="store_true",
                    help="replay without the units' malloc tuning (MALLOC_MMAP_THRESHOLD_)")
    ap.add_argument("--child", nargs=3, metavar=("REC", "DB", "CONFIG"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        out = _replay_child(*(Path(p) for p in a.child))
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    r = run(a.hours, malloc_env={} if a.glibc_defaults else None)
    if a.json:
        sys.stdout.write(json.dumps(r, indent=2) + "\n")
    else:
        curve = ", ".join(f"{h:g}h {m:.0f}" for h, m in r["rss_mb_by_hour"][:: max(1, len(
            r["rss_mb_by_hour"]) // 12)])
        sys.stdout.write(
            f"soak {r['recorded_hours']:g} h recorded: {r['events']:,} events in "
            f"{r['replay_s']} s ({r['events_per_s']:,} ev/s), RSS MB {curve}; "
            f"after the {r['warmup_hours']:g} h warm-up: peak RSS {r['rss_growth_peak']:+.1%}, "
            f"end RSS {r['rss_growth_end']:+.1%}, Python objects "
            f"{r['py_objects_growth']:+.1%} (target < {TARGET_GROWTH:.0%})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
