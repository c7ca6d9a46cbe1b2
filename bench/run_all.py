"""Run every benchmark and print one JSON document (machine, date, figures beside floors).

    python3 dev.py bench            # all but the scale table and the soak
    python3 dev.py bench replay     # only the named ones
    python3 dev.py bench scale      # the scale table (docs/benchmarks.md)
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT))

BENCHES = {
    "ledger": "bench_ledger",
    "observation": "bench_observation",
    "rounds": "bench_rounds",
    "ingest": "bench_ingest",
    "replay": "bench_replay",
    "replay_scale": "bench_replay_scale",
    "report": "bench_report",
    "polymarket_decode": "bench_polymarket_decode",
    "equity_decode": "bench_equity_decode",
    "factor_library": "bench_factor_library",
    "mqtt": "bench_mqtt",
    "reconnect": "bench_reconnect",
    "plugins": "bench_plugins",
    "scale": "bench_scale",
    "soak": "soak",
}
#: Run only when named: long (the soak replays a day; the scale table runs 10 configurations).
ON_REQUEST = ("scale", "soak")


def machine() -> dict:
    """Describe the machine the figures were measured on."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem, "python": platform.python_version(),
            "platform": platform.platform()}


def main(argv: list[str]) -> int:
    """Run the selected benchmarks."""
    wanted = argv or [k for k in BENCHES if k not in ON_REQUEST]
    out: dict = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                 "results": {}}
    for name in wanted:
        mod_name = BENCHES.get(name)
        if mod_name is None:
            print(f"unknown benchmark {name!r}: {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            out["results"][name] = {"skipped": f"not available: {exc}"}
            continue
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        out["results"][name] = mod.run()
        out["results"][name]["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
