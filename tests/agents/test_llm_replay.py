"""Replay the sample with two LLM agents (real LiteLLM, local server) and the baselines."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from agents.base import AgentDecision, Observation
from daemon.app.replay import replay
from daemon.config.settings import parse_config
from daemon.core.events import PriceEvent
from daemon.core.logs import register_secret
from daemon.core.sparse_rows import FILLS, fill_map
from daemon.engine.engine import Engine
from daemon.store.store import Store
from daemon.timing.clock import SimClock
from tests.llm_server import Behaviour, FakeLlmServer, ok

ROOT = Path(__file__).resolve().parents[2]
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
    for w, a in q(f"SELECT f.weights_json, s.assets_json FROM {FILLS}").fetchall():
        assert abs(sum(fill_map(w, a).values()) - 1.0) < 1e-9
    # Baselines ran beside them.
    assert q("SELECT COUNT(*) FROM decisions WHERE agent IN ('bh','ew')").fetchone()[0] > 10


class KeyEchoingServer(FakeLlmServer):
    """A model that repeats the key it was sent: in its reasoning, its prose and its errors."""

    async def _respond(self, body: dict[str, Any]) -> web.StreamResponse:
        key = self.keys[-1]
        n = len(self.requests)
        if n % 3 == 1:
            text = json.dumps({"reasoning": f"authorised by {key}", "allocations": {"CASH": 1.0}})
            self.push(ok(f"Using key {key}.\n{text}", tool_calls=(("note", f'"{key}"'),)))
        elif n % 3 == 2:
            self.push(Behaviour(content=f"I refuse, {key}", refusal=f"no ({key})"))
        else:
            self.push(Behaviour(status=401, body=json.dumps(
                {"error": {"message": f"Incorrect API key provided: {key}"}})))
        return await super()._respond(body)


async def test_echoed_key_never_reaches_the_database(tmp_path: Path, monkeypatch: Any) -> None:
    secret = "sk-live-echo-4f8a9c2e7b1d"
    monkeypatch.setenv("ECHO_LLM_KEY", secret)
    async with KeyEchoingServer() as server:
        cfg = parse_config({
            "agents": [{"id": "echo", "kind": "llm", "model": "openai/test-model",
                        "api_base": server.api_base, "api_key_env": "ECHO_LLM_KEY",
                        "timeout": 10, "max_attempts": 2, "markets": ["equity"]}],
        })
        end = datetime(2026, 10, 21, tzinfo=UTC).timestamp()  # the first two sessions
        await replay(SAMPLE, cfg, tmp_path / "echo.db", progress=False, window=(None, end))
    assert server.keys and set(server.keys) == {secret}  # the provider did get the key
    con = sqlite3.connect(tmp_path / "echo.db")
    calls = con.execute("SELECT raw_response, error FROM llm_calls").fetchall()
    decisions = con.execute("SELECT outcome, reason, raw_output FROM decisions").fetchall()
    # Every kind of echo was stored (redacted): reasoning, tool call, refusal, provider error.
    assert any("Using key [redacted]" in (r or "") for r, _ in calls)
    assert any('<tool_call name="note">"[redacted]"</tool_call>' in (r or "") for r, _ in calls)
    assert any("<refusal>no ([redacted])</refusal>" in (r or "") for r, _ in calls)
    assert any("Incorrect API key provided: [redacted]" in (e or "") for _, e in calls)
    assert {o for o, _, _ in decisions} >= {"ok", "error"}
    # Nowhere in the database: no table, no column.
    dump = "\n".join(con.iterdump())
    con.close()
    assert secret not in dump


class LeakyAgent:
    """Any agent (not only LLM ones) whose texts carry a configured secret."""

    id = "ew"

    def __init__(self, secret: str) -> None:
        self.secret = secret

    async def decide(self, obs: Observation) -> AgentDecision:
        return AgentDecision(
            {"CASH": 1.0}, raw_output=f"raw {self.secret}",
            calls=({"attempt": 1, "ts": obs.decision_ts, "model": "m",
                    "raw_response": f"resp {self.secret}", "error": f"err {self.secret}",
                    "finish_reason": "stop", "tokens_in": 1, "tokens_out": 1,
                    "latency_s": 0.0, "cost_usd": 0.0},),
        )


async def test_round_redacts_any_agents_stored_texts(tmp_path: Path) -> None:
    secret = "sk-plugin-9d8c7b6a5f4e"
    register_secret(secret)  # as register_config_secrets does for every *_env of the config
    t0 = 1_793_000_000.0
    store = await Store.open(tmp_path / "r.db")
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=t0)
    cfg = parse_config({"markets": {"equity": {"assets": ["AAPL"]}},
                        "agents": [{"id": "ew", "kind": "equal_weight"}]})
    eng = Engine(cfg, clock=SimClock(t0), store=store)
    eng.add_equity_universe(["AAPL"])
    eng.build_agents()
    eng.slots["equity"]["ew"].agent = LeakyAgent(secret)
    await eng.bus.start()
    await eng.bus.publish(PriceEvent(ts=t0, recv_ts=t0, market="equity", asset="AAPL", price=10.0))
    assert (await eng.rounds["equity"].run(t0)).outcomes == {"ew": "ok"}
    await eng.bus.stop()
    await store.close()
    con = sqlite3.connect(tmp_path / "r.db")
    assert con.execute("SELECT raw_output FROM decisions").fetchall() == [("raw [redacted]",)]
    assert con.execute("SELECT raw_response, error FROM llm_calls").fetchall() == [
        ("resp [redacted]", "err [redacted]")]
    assert secret not in "\n".join(con.iterdump())
    con.close()
