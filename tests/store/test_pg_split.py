"""A split deployment over Mosquitto writing into ONE PostgreSQL database (issue 19).

A replay publisher and two evaluators (disjoint agents) replay a recording into one shared store;
its single merged report equals the single-process SQLite replay of every agent. An evaluator
killed with SIGKILL mid-run leaves no half round in the database, and after a restart completes
the run without applying any decision twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from daemon.app.replay_publish import ReplayPublisher
from daemon.app.replay_roles import replay_evaluate
from daemon.store.pg import scope_schema
from daemon.store.reports import leaderboard
from scoring.board.text import to_json
from tests.app.test_roles import GROUPS, Broker, Rec, _close, broker, rec  # noqa: F401 (fixtures)
from tests.helpers import HANG_GUARD
from tests.mosquitto import requires_broker
from tests.pg import pg_database, requires_pg

pytestmark = [requires_broker, requires_pg]

ROOT = Path(__file__).resolve().parents[2]


def assert_one_leaderboard(ref: Rec, url: str) -> None:
    """The merged report of the shared store equals the single-process one (float rounding:
    equity marks may differ by one ULP across agent sets, docs/distributed.md)."""
    got, want = json.loads(to_json(leaderboard(url))), json.loads(ref.reports[None])
    problems = list(_close(want, got, "report"))
    assert not problems, problems[:5]


async def _fills(url: str, process_id: str) -> list[tuple[Any, ...]]:
    con = await asyncpg.connect(url)
    try:
        rows = await con.fetch(
            "SELECT agent, market, scheduled_ts, trades_json, traded_value, cost, value_before,"
            f' value_after, weights_json FROM "{scope_schema(process_id)}".fills'
            " ORDER BY agent, market, scheduled_ts")
        return [tuple(r) for r in rows]
    except asyncpg.UndefinedTableError:
        return []
    finally:
        await con.close()


async def test_two_evaluators_write_one_store_whose_report_is_the_single_process_one(
    rec: Rec, broker: Broker  # noqa: F811
) -> None:
    settings = broker.settings()
    broker.process_ids.update({"pub", "e0", "e1"})
    with pg_database() as url:
        tasks = [asyncio.create_task(replay_evaluate(
            rec.config, url, agent_ids=list(agents), settings=settings, process_id=f"e{k}",
            stall_timeout=15.0, connect_timeout=5.0)) for k, agents in enumerate(GROUPS)]
        publisher = ReplayPublisher(rec.path, settings, process_id="pub", evaluators=2,
                                    wait_timeout=15.0, retransmit_after=0.5)
        published = await asyncio.wait_for(publisher.run(), 60)
        evaluated = [await asyncio.wait_for(t, HANG_GUARD) for t in tasks]
        assert published.events == rec.count
        assert [s.events for s in evaluated] == [rec.count, rec.count]
        # Every evaluator wrote only its own agents, into its own scope of the one database.
        for k, agents in enumerate(GROUPS):
            assert {r[0] for r in await _fills(url, f"e{k}")} == set(agents)
        merged = [r for k in range(2) for r in await _fills(url, f"e{k}")]
        assert sorted(merged) == sorted(rec.fills[None])
        assert_one_leaderboard(rec, url)


def _evaluator(config: Path, url: str, agents: tuple[str, ...], pid: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "daemon.app.cli", "replay-evaluate", "--config", str(config),
         "--db", url, "--agents", ",".join(agents), "--process-id", pid],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def test_an_evaluator_killed_mid_run_leaves_no_half_round_and_resumes(
    rec: Rec, broker: Broker, tmp_path: Path  # noqa: F811
) -> None:
    config = broker.toml(tmp_path / "split.toml")
    settings = broker.settings()
    broker.process_ids.update({"pub", "e0", "e1"})
    victim, other = GROUPS
    want = [f for f in rec.fills[None] if f[0] in victim]
    per_round: dict[tuple[str, float], set[str]] = defaultdict(set)
    for f in want:
        per_round[(f[1], f[2])].add(f[0])
    with pg_database() as url:
        proc = _evaluator(config, url, victim, "e0")
        peer = asyncio.create_task(replay_evaluate(
            rec.config, url, agent_ids=list(other), settings=settings, process_id="e1",
            stall_timeout=30.0, connect_timeout=5.0))
        publisher = ReplayPublisher(rec.path, settings, process_id="pub", evaluators=2,
                                    window=20, wait_timeout=30.0, retransmit_after=0.5)
        pub = asyncio.create_task(publisher.run())
        try:
            async with asyncio.timeout(60):  # some rounds of e0 stored
                while len(await _fills(url, "e0")) < 4:
                    await asyncio.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            killed = await _fills(url, "e0")
            assert 0 < len(killed) < len(want), "kill came too late to be mid-run"
            # No half round: every stored round holds the fills of every agent it had.
            got: dict[tuple[str, float], set[str]] = defaultdict(set)
            for f in killed:
                got[(f[1], f[2])].add(f[0])
            assert {k: got[k] for k in got} == {k: per_round[k] for k in got}
            proc = _evaluator(config, url, victim, "e0")  # restart: resumes from the store
            await asyncio.wait_for(pub, 120)
            await asyncio.wait_for(peer, HANG_GUARD)
            out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
            assert proc.returncode == 0, out[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
            for t in (peer, pub):
                t.cancel()
                with contextlib.suppress(BaseException):
                    await t
        # Each decision applied once: the fills equal the single process's, none twice.
        assert sorted(await _fills(url, "e0")) == sorted(want)
        assert_one_leaderboard(rec, url)
