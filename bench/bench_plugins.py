"""A plugin agent whose decide() blocks its thread: the price latency it adds to a round.

    python bench/bench_plugins.py [--rounds 3]

The rounds benchmark (``bench/bench_rounds.py``: the real engine, store and bus, a price every
millisecond, each one's lateness recorded by a bus subscriber) with 100 baseline agents and one
plugin agent installed as a package registers it (an entry point of ``paperarena.agents``), in
three runs: no plugin (the limit), a plugin that blocks in ``time.sleep`` and one that loops on
the CPU (each for 0.5 s, within its deadline, so every round waits for all of it). Plugins run in
their own worker thread (``agents/plugins.py``); the figure is the p99 price latency during the
round minus the same run's idle p99, beside the run without a plugin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGET_ADDED_P99_MS = 10.0
SLEEP_S = 0.5
SPIN_S = 0.5

PLUGINS = f'''
import time

from agents.base import CASH, AgentDecision


class Sleeper:
    """Blocks its thread with time.sleep (within its deadline: the round waits for all of it)."""

    def __init__(self, agent_id, settings):
        self.id = agent_id

    async def decide(self, obs):
        time.sleep({SLEEP_S!r})
        return AgentDecision({{CASH: 1.0}})


class Spinner:
    """Loops on the CPU, then answers (within its deadline: the round waits for all of it)."""

    def __init__(self, agent_id, settings):
        self.id = agent_id

    async def decide(self, obs):
        end = time.monotonic() + {SPIN_S!r}
        while time.monotonic() < end:
            pass
        return AgentDecision({{CASH: 1.0}})
'''


def _install(site: Path) -> None:
    """Install the two plugins for this process (their module and entry points on sys.path)."""
    from tests.plugin_install import write_dist

    (site / "bench_blocking_plugins.py").write_text(PLUGINS)
    write_dist(site, "bench-blocking", {"bench_sleepy": "bench_blocking_plugins:Sleeper",
                                        "bench_spinner": "bench_blocking_plugins:Spinner"})
    sys.path.insert(0, str(site))


def run(rounds: int = 3, agents: int = 100) -> dict[str, Any]:
    """Measure a round of ``agents`` baselines alone, with a sleeping and a spinning plugin."""
    import structlog
    from bench_rounds import measure

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    out: dict[str, Any] = {"agents": agents, "switch_interval_ms": sys.getswitchinterval() * 1e3}
    cases: dict[str, tuple[dict[str, Any], ...]] = {
        "no_plugin": (),
        "plugin_sleeps": ({"id": "plugin", "kind": "bench_sleepy", "timeout": 4 * SLEEP_S,
                           "markets": ["equity"]},),
        "plugin_spins": ({"id": "plugin", "kind": "bench_spinner", "timeout": 4 * SPIN_S,
                          "markets": ["equity"]},),
    }
    with tempfile.TemporaryDirectory() as d:
        _install(Path(d))
        for name, extra in cases.items():
            out[name] = asyncio.run(measure(agents, rounds, Path(d) / f"{name}.db", extra))
            out[name]["load_average_1m"] = round(os.getloadavg()[0], 2)
    worst = max(out["plugin_sleeps"]["added_p99_ms"], out["plugin_spins"]["added_p99_ms"])
    out["target_added_p99_ms"] = TARGET_ADDED_P99_MS
    out["meets_target"] = worst < TARGET_ADDED_P99_MS
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the plugin benchmark."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    print(json.dumps(run(a.rounds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
