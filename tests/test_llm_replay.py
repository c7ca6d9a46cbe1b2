"""Replay the sample with two LLM agents (real LiteLLM, local server) and the baselines."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from daemon.config import parse_config
from daemon.replay import replay
from tests.llm_server import FakeLlmServer, ok

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"


class PromptReadingServer(FakeLlmServer):
    """Answer with weights over the first assets the prompt lists; every 5th answer is garbage."""

    async def _respond(self, body: dict[str, Any]) -> web.StreamResponse:
        prompt = body["messages"][-1]["content"]
        block = prompt.split("AVAILABLE ASSETS", 1)[1].strip().split("\n\n", 1)[0]
        names = [n for n in re.split(r"[\s,]+", block) if n and n != "CASH"]
        yes = [n for n in names if n.endswith("_YES")]
        picks = (yes or names)[:2]
        if len(self.requests) % 5 == 0:
            self.push(ok("I think AAPL will go up. {allocations: maybe}"))
        else:
            alloc = {p: 0.8 / len(picks) for p in picks} | {"CASH": 0.2 if picks else 1.0}
            self.push(ok(json.dumps({"reasoning": "test", "allocations": alloc})))
        return await super()._respond(body)


async def test_sample_replay_with_two_llm_agents(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test-not-a-secret")
    async with PromptReadingServer() as server:
        llm = {"kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
               "api_key_env": "FAKE_LLM_KEY", "timeout": 10, "max_attempts": 2}
        cfg = parse_config({
            "markets": {"equity": {"cost": {"preset": "realistic"}}},
            "agents": [
                {"id": "llm_a", **llm},
                {"id": "llm_b", **llm, "temperature": 0.0, "memory": 2},
                {"id": "bh", "kind": "buy_and_hold"},
                {"id": "ew", "kind": "equal_weight"},
            ],
        })
        end = datetime(2026, 10, 28, tzinfo=UTC).timestamp()  # the first 7 sessions
        summary = await replay(SAMPLE, cfg, tmp_path / "llm.db", progress=False,
                               window=(None, end))
    assert summary.events > 40_000
    con = sqlite3.connect(tmp_path / "llm.db")
    q = con.execute
    outcomes = dict(q("SELECT outcome, COUNT(*) FROM decisions WHERE agent LIKE 'llm_%'"
                      " GROUP BY outcome").fetchall())
    assert outcomes.get("ok", 0) >= 10, outcomes
    # Both markets were traded by both LLM agents.
    traded = set(q("SELECT agent, market FROM fills WHERE agent LIKE 'llm_%'"
                   " AND traded_value > 0").fetchall())
    assert traded == {(a, m) for a in ("llm_a", "llm_b") for m in ("equity", "polymarket")}
    # Every model call is stored with its raw response and usage; retries happened on garbage.
    calls = q("SELECT agent, attempt, raw_response, tokens_in, tokens_out, latency_s"
              " FROM llm_calls").fetchall()
    assert len(calls) >= outcomes["ok"]
    assert all(raw for _, _, raw, _, _, _ in calls)
    assert all(tin and tin > 0 and tout and tout > 0 and lat >= 0
               for _, _, _, tin, tout, lat in calls)
    assert max(a for _, a, *_ in calls) >= 2
    # Decisions carry the template version and the SHA-256 of their input.
    rows = q("SELECT template_version, input_sha256 FROM decisions WHERE agent='llm_a'"
             " AND outcome='ok'").fetchall()
    assert rows and all(tv.startswith(("equity-v", "polymarket-v")) and len(h) == 64
                        for tv, h in rows)
    # No invalid allocation was ever applied: every fill's weights sum to 1.
    for (w,) in q("SELECT weights_json FROM fills").fetchall():
        assert abs(sum(json.loads(w).values()) - 1.0) < 1e-9
    # Baselines ran beside them.
    assert q("SELECT COUNT(*) FROM decisions WHERE agent IN ('bh','ew')").fetchone()[0] > 10
