"""Replay throughput of the sample recording at max speed, beside the decode-only floor.

    python bench/bench_replay.py [--recording examples/sample.jsonl.gz] [--json]

The floor is the rate of reading and decoding the same recording alone (no bus, no books, no
store): the most any replay of that file can reach on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemon.app.replay import replay  # noqa: E402
from daemon.config.settings import load_config  # noqa: E402
from feeds.recording import iter_events  # noqa: E402

DEFAULT_RECORDING = ROOT / "examples" / "sample.jsonl.gz"
DEFAULT_CONFIG = ROOT / "examples" / "sample-replay.toml"
TARGET = 100_000.0


def decode_floor(path: Path) -> tuple[int, float]:
    """Return (events, events/s) for reading and decoding ``path`` alone."""
    t0 = time.perf_counter()
    n = sum(1 for _ in iter_events(path))
    return n, n / (time.perf_counter() - t0)


def run(recording: Path = DEFAULT_RECORDING, config: Path = DEFAULT_CONFIG,
        repeats: int = 3) -> dict:
    """Replay ``recording`` ``repeats`` times into fresh databases; return the best figures."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    cfg = load_config(config)
    floors = [decode_floor(recording)[1] for _ in range(repeats)]
    rates = []
    events = 0
    with tempfile.TemporaryDirectory() as d:
        for i in range(repeats):
            db = Path(d) / f"r{i}.db"
            s = asyncio.run(replay(recording, cfg, db, progress=False))
            rates.append(s.events_per_s)
            events = s.events
    best, floor = max(rates), max(floors)
    return {
        "recording": str(recording.relative_to(ROOT) if recording.is_relative_to(ROOT)
                         else recording),
        "events": events,
        "replay_events_per_s": round(best),
        "decode_floor_events_per_s": round(floor),
        "ratio_to_floor": round(best / floor, 3),
        "target_events_per_s": TARGET,
        "meets_target": best >= TARGET,
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the replay benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--recording", type=Path, default=DEFAULT_RECORDING)
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(a.recording, a.config, a.repeats)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"replay {r['events']} events: {r['replay_events_per_s']:,} ev/s "
              f"(decode floor {r['decode_floor_events_per_s']:,} ev/s, "
              f"{r['ratio_to_floor']:.0%} of it; target {TARGET:,.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
