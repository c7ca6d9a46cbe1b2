"""Replay of the sample recording with 4, 100 and 1,000 baseline agents: time, RSS, DB size.

    python bench/bench_replay_scale.py [--agents 4,100,1000] [--json]

Each replay runs in its own process (its peak RSS is its own) into a fresh database, with the
sample's four baselines repeated (ids ``<kind>-<n>``) over both markets and the sample's
config otherwise. Beside each run, measured in the same run:

- time: reading and decoding the same recording alone (the most any replay can reach);
- RSS: the peak RSS of a process that imports the daemon and decodes the whole recording;
- DB size: per agent, the growth from the 4-agent run (market events are shared by all).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "sample.jsonl.gz"
CONFIG = ROOT / "examples" / "sample-replay.toml"
TARGET_MB_PER_AGENT = 0.1

_CHILD = r"""
import asyncio, json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
from daemon.config.settings import load_config
from daemon.app.replay import replay
from feeds.recording import iter_events
rec, cfg_path, db = sys.argv[2], sys.argv[3], sys.argv[4]
t0 = time.perf_counter()
if cfg_path == "-":
    n = sum(1 for _ in iter_events(rec))
    out = {"events": n}
else:
    s = asyncio.run(replay(rec, load_config(cfg_path), db, progress=False))
    out = {"events": s.events}
out["seconds"] = time.perf_counter() - t0
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def agents_toml(n: int) -> str:
    """Return the sample config with its four baselines repeated to ``n`` agents."""
    base = CONFIG.read_text()
    head = base.split("[[agents]]", 1)[0]
    kinds = tomllib.loads(base)["agents"]
    out = [head]
    for i in range(n):
        a = dict(kinds[i % len(kinds)])
        a["id"] = f"{a['id']}-{i:04d}"
        out.append("[[agents]]\n" + "".join(
            f"{k} = {json.dumps(v)}\n" for k, v in a.items()))
    return "\n".join(out)


def _child(cfg: str, db: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT), str(RECORDING), cfg, db],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def _db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*")
               if not p.name.endswith(".lock"))


def run(agents: tuple[int, ...] = (4, 100, 1000)) -> dict:
    """Replay the sample once per agent count; return the figures beside the limits."""
    floor = _child("-", "")
    out: dict = {"recording": str(RECORDING.relative_to(ROOT)), "events": floor["events"],
                 "limit_decode_only_s": round(floor["seconds"], 2),
                 "limit_decode_only_peak_rss_mb": round(floor["peak_rss_mb"], 1), "runs": []}
    base_bytes = None
    base_n = None
    with tempfile.TemporaryDirectory() as d:
        for n in sorted(agents):
            cfg = Path(d) / f"a{n}.toml"
            cfg.write_text(agents_toml(n))
            db = Path(d) / f"a{n}.db"
            t0 = time.perf_counter()
            r = _child(str(cfg), str(db))
            size = _db_bytes(db)
            row = {"agents": n, "seconds": round(r["seconds"], 2),
                   "events_per_s": round(r["events"] / r["seconds"]),
                   "wall_s": round(time.perf_counter() - t0, 2),
                   "peak_rss_mb": round(r["peak_rss_mb"], 1),
                   "db_mb": round(size / 1e6, 2),
                   "x_decode_only_time": round(r["seconds"] / floor["seconds"], 1)}
            if base_bytes is None:
                base_bytes, base_n = size, n
            else:
                per = (size - base_bytes) / (n - int(base_n or 0)) / 1e6
                row["db_mb_per_agent"] = round(per, 4)
                row["target_db_mb_per_agent"] = TARGET_MB_PER_AGENT
                row["meets_target"] = per < TARGET_MB_PER_AGENT
            out["runs"].append(row)
            for p in db.parent.glob(db.name + "*"):
                p.unlink()
    out["cpu_count"] = os.cpu_count()
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the replay scale benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="4,100,1000")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(tuple(int(x) for x in a.agents.split(",")))
    print(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
