"""The protocol layer: config, factory, per-step call records and their storage."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agents.config import AgentConfig
from agents.factory import build_agent
from agents.llm import LlmAgent
from agents.stepwise import load_prompt_set
from agents.stockbench.agent import StockBenchAgent
from daemon.config.settings import ConfigError, parse_config
from daemon.store.records import DecisionRecord, RoundCommit
from daemon.store.store import Store
from tests.agents.test_llm_agent import equity_obs
from tests.llm_server import FakeLlmServer, answer

KEY_ENV = "PAPERARENA_TEST_LLM_KEY"


def llm(**kw: Any) -> dict[str, Any]:
    return {"id": "m", "kind": "llm", "model": "openai/test-model", **kw}


def test_protocol_defaults_to_livetradebench() -> None:
    cfg = AgentConfig.model_validate(llm())
    assert cfg.protocol == "livetradebench"
    assert (cfg.revision_rounds, cfg.action_days) == ("until_fit", 7)
    assert type(build_agent(cfg)) is LlmAgent


def test_stockbench_protocol_builds_its_agent() -> None:
    cfg = AgentConfig.model_validate(llm(protocol="stockbench", markets=["equity"]))
    assert isinstance(build_agent(cfg), StockBenchAgent)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (llm(protocol="portbench9"), "protocol"),
        ({"id": "b", "kind": "equal_weight", "protocol": "stockbench"}, "for llm agents only"),
        (llm(protocol="stockbench"), "markets = ['equity']"),
        (llm(protocol="stockbench", markets=["equity"], revision_rounds=-1), "revision_rounds"),
    ],
)
def test_bad_protocol_settings_are_one_line_errors(agent: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"agents": [agent]})
    assert message in str(err.value)


def test_prompt_set_version_names_protocol_and_content() -> None:
    texts, version = load_prompt_set("stockbench")
    assert set(texts) == {"overview", "decision", "revision"}
    assert version.startswith("stockbench-v1+") and len(version) == len("stockbench-v1+") + 8
    with pytest.raises(ValueError, match="no prompt set"):
        load_prompt_set("nope")


async def test_livetradebench_calls_are_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default protocol is one step, 'allocation', recorded like any protocol's steps."""
    monkeypatch.setenv(KEY_ENV, "sk-test")
    async with FakeLlmServer() as server:
        server.push(answer({"AAPL": 2.0}), answer({"AAPL": 0.5, "CASH": 0.5}))
        agent = LlmAgent(AgentConfig.model_validate(llm(
            api_base=server.api_base, api_key_env=KEY_ENV, timeout=5, max_attempts=2)),
            sleep=_no_sleep)
        d = await agent.decide(equity_obs())
    assert d.outcome == "ok"
    prompts = server.prompts()
    assert [c["step"] for c in d.calls] == ["allocation", "allocation"]
    assert [c["attempt"] for c in d.calls] == [1, 2]
    assert [c["input_sha256"] for c in d.calls] == [
        hashlib.sha256(p.encode()).hexdigest() for p in prompts]
    assert [c["outcome"] for c in d.calls] == ["invalid", "ok"]
    assert d.calls[0]["parsed"] is None
    assert d.calls[1]["parsed"] == {"allocations": dict(d.allocation or {})}


async def test_step_records_are_stored(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "s.db")
    await store.begin_run(mode="test", version="0", config={}, recording=None, started_ts=1.0)
    call = {"attempt": 1, "ts": 2.0, "model": "m", "raw_response": "{}", "error": None,
            "finish_reason": "stop", "tokens_in": 3, "tokens_out": 4, "latency_s": 0.5,
            "cost_usd": 0.0, "step": "overview", "input_sha256": "ab" * 32, "outcome": "ok",
            "parsed": {"selected": ["AAPL"]}}
    rc = RoundCommit()
    rc.decisions.append(DecisionRecord("m", "equity", 1.0, 2.0, "ok", calls=[
        call, {**call, "attempt": 2, "step": "decision", "outcome": "invalid", "parsed": None}]))
    await store.commit_round(rc)
    await store.close()
    con = sqlite3.connect(tmp_path / "s.db")
    rows = con.execute("SELECT attempt, step, input_sha256, outcome, parsed_json FROM llm_calls"
                       " ORDER BY attempt").fetchall()
    con.close()
    assert rows == [(1, "overview", "ab" * 32, "ok", json.dumps({"selected": ["AAPL"]},
                                                                 separators=(",", ":"))),
                    (2, "decision", "ab" * 32, "invalid", None)]


async def _no_sleep(_: float) -> None:
    return None
