"""Two replays of one recording with LLM agents (real LiteLLM, local server) are identical.

Every table row by row, every column (timestamps, latencies and durations included: in a replay
they come from the simulated clock), and the ``report`` text and ``--json`` output.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.app.replay import replay
from daemon.config.settings import parse_config
from tests.llm_server import FakeLlmServer, ok
from tests.protocols.test_stockbench import StockBenchModel

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
END = datetime(2026, 10, 22, tzinfo=UTC).timestamp()  # the first three sessions


class HashingModel(FakeLlmServer):
    """Answer from the prompt alone (whatever the order of requests), a little slowly; a prompt
    whose hash ends in 0-3 gets garbage (a retry follows with the feedback line)."""

    async def _respond(self, body: dict[str, Any]) -> web.StreamResponse:
        prompt = body["messages"][-1]["content"]
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        block = prompt.split("AVAILABLE ASSETS", 1)[1].strip().split("\n\n", 1)[0]
        names = [n for n in re.split(r"[\s,]+", block) if n and n != "CASH"]
        k = int(digest[:2], 16) % max(len(names), 1)
        picks = (names[k:] + names[:k])[:2]
        if digest[-1] in "0123":
            self.push(ok("not sure {allocations: maybe}", delay=0.02))
        else:
            alloc = {p: 0.8 / len(picks) for p in picks} | {"CASH": 0.2 if picks else 1.0}
            self.push(ok(json.dumps({"reasoning": digest[:8], "allocations": alloc}),
                         delay=0.02))
        return await super()._respond(body)


def config(ltb: str, sb: str) -> Any:
    data = tomllib.loads((ROOT / "examples" / "stockbench.toml").read_text())
    data["agents"][0].update(api_base=sb, timeout=10)
    data["agents"].append({"id": "ltb", "kind": "llm", "model": "openai/test-model",
                           "api_base": ltb, "api_key_env": "LOCAL_LLM_KEY", "timeout": 10,
                           "max_attempts": 2, "markets": ["equity"]})
    return parse_config(data)


def tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Return every table's rows in storage order (all columns)."""
    con = sqlite3.connect(db)
    names = [n for (n,) in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]
    out = {n: con.execute(f'SELECT * FROM "{n}" ORDER BY rowid').fetchall() for n in names}
    con.close()
    return out


def report(db: Path, *extra: str) -> str:
    p = subprocess.run([sys.executable, "-m", "daemon.app.cli", "report", "--db", str(db), *extra],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


async def test_two_llm_replays_give_identical_tables_and_reports(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    dbs = []
    async with HashingModel() as ltb, StockBenchModel() as sb:  # one config (same ports)
        for name in ("a", "b"):
            for server in (ltb, sb):  # each replay meets a fresh model
                server.requests.clear()
                server.steps.clear()
                server.queue.clear()
            db = tmp_path / f"{name}.db"
            await replay(SAMPLE, config(ltb.api_base, sb.api_base), db, progress=False,
                         window=(None, END))
            assert len(ltb.requests) >= 3 and len(sb.requests) >= 3
            dbs.append(db)
    a, b = tables(dbs[0]), tables(dbs[1])
    # Both LLM agents decided and every call is stored, at the simulated decision time.
    con = sqlite3.connect(dbs[0])
    calls = con.execute("SELECT c.ts, d.scheduled_ts, c.latency_s, d.duration_s FROM llm_calls c"
                        " JOIN decisions d USING (agent, market, scheduled_ts)").fetchall()
    agents = {r for (r,) in con.execute("SELECT DISTINCT agent FROM llm_calls")}
    con.close()
    assert agents == {"ltb", "stockbench"}
    assert calls and all(ts >= sched and ts - sched < 3600 and lat == 0.0 and dur == 0.0
                          for ts, sched, lat, dur in calls)
    assert a.keys() == b.keys()
    for table in a:
        assert len(a[table]) == len(b[table]), table
        for i, (ra, rb) in enumerate(zip(a[table], b[table], strict=True)):
            assert ra == rb, (table, i, ra, rb)
    text = report(dbs[0])
    assert "ltb" in text and "stockbench" in text
    assert text == report(dbs[1])
    ja, jb = report(dbs[0], "--json"), report(dbs[1], "--json")
    assert ja == jb
    rows = {r["agent"]: r for r in json.loads(ja)["rows"]}
    assert rows["ltb"]["llm_calls"] >= 3 and rows["ltb"]["llm_latency_mean_s"] == 0.0


async def test_every_protocol_stamps_and_times_calls_on_the_engine_clock(
    monkeypatch: Any,
) -> None:
    """Calls of every protocol carry the engine clock's time and latency (wall time ignored)."""
    from agents.config import AgentConfig
    from agents.factory import build_agent
    from daemon.timing.clock import SimClock
    from tests.agents.test_llm_agent import equity_obs

    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-local")
    clock = SimClock(1_700_000_123.0)
    async with FakeLlmServer(default=ok("no json here", delay=0.05)) as server:
        for protocol in ("livetradebench", "stockbench", "portbench", "alphaforgebench",
                         "capitalbench"):
            cfg = AgentConfig.model_validate({
                "id": "x", "kind": "llm", "model": "openai/test-model", "protocol": protocol,
                "api_base": server.api_base, "api_key_env": "LOCAL_LLM_KEY", "timeout": 5,
                "max_attempts": 1, "markets": ["equity"]})
            agent: Any = build_agent(cfg, clock=clock.now)
            if protocol == "capitalbench":  # answers CapitalBench rounds, not observations
                assert agent._clock() == clock.now()
                continue
            before = len(server.requests)
            d = await agent.decide(equity_obs())
            assert len(server.requests) > before and d.calls, protocol
            assert all(c["ts"] == 1_700_000_123.0 and c["latency_s"] == 0.0 for c in d.calls), (
                protocol, d.calls)
