"""Rebuilding a stored decision's exact prompts (issue 30, point 2): the agent's own protocol run
again on the stored input against the stored answers, through the real LiteLLM path once."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import pytest

from agents.config import AgentConfig
from agents.llm import LlmAgent
from agents.prompt_replay import StoredCall, rebuild_prompts
from agents.stockbench.agent import StockBenchAgent
from tests.agents.test_llm_agent import equity_obs
from tests.llm_server import FakeLlmServer, answer, ok

KEY_ENV = "PAPERARENA_TEST_LLM_KEY"


async def _no_sleep(_: float) -> None:
    return None


def config(server: FakeLlmServer, **kw: Any) -> AgentConfig:
    return AgentConfig.model_validate({
        "id": "a", "kind": "llm", "model": "openai/test-model", "api_base": server.api_base,
        "api_key_env": KEY_ENV, "timeout": 5, "max_attempts": 2, "markets": ["equity"], **kw})


def stored(calls: Any) -> list[StoredCall]:
    """Return the calls of a decision as the store keeps them (``llm_calls`` columns)."""
    return [StoredCall(c["attempt"], c.get("step"), c.get("input_sha256"), c["raw_response"],
                       c["error"], c["finish_reason"], c.get("outcome")) for c in calls]


@pytest.fixture
async def server() -> Any:
    async with FakeLlmServer() as s:
        yield s


async def test_every_step_and_retry_of_a_multi_step_decision_is_rebuilt(
        server: FakeLlmServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = config(server, protocol="stockbench", id="sb")

    def orders(decisions: dict[str, Any]) -> Any:
        return ok(json.dumps({"reasoning": "because", "decisions": decisions}))

    server.push_step("overview", ok("not json"),  # a rejected answer: the retry adds feedback
                     ok(json.dumps({"reasoning": "look", "selected": ["MSFT"]})))
    server.push_step("decision", orders({"MSFT": {"action": "increase", "target_usd": 900.0}}))
    server.push_step("revision_1", orders({"MSFT": {"action": "increase", "target_usd": 800.0}}))
    obs = equity_obs()
    d = await StockBenchAgent(cfg, sleep=_no_sleep).decide(obs)
    assert d.outcome == "ok", d.reason
    sent = server.prompts()
    assert [c["step"] for c in d.calls] == ["overview", "overview", "decision", "revision_1"]
    rebuilt = await asyncio.to_thread(rebuild_prompts, cfg, obs, stored(d.calls))
    assert [p.text for p in rebuilt] == sent  # byte for byte, every step and retry
    assert [p.sha256 for p in rebuilt] == [c["input_sha256"] for c in d.calls]
    assert [p.step for p in rebuilt] == ["overview", "overview", "decision", "revision_1"]
    assert all(p.error is None for p in rebuilt)
    assert sent[1] != sent[0] and sent[1].startswith(sent[0])  # the retry's feedback
    assert "80.00 USD short" in str(rebuilt[3].text)  # the revision embeds the earlier answer


async def test_a_changed_prompt_is_named_not_shown(server: FakeLlmServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = config(server)
    server.push(answer({"AAPL": 0.5, "CASH": 0.5}))
    obs = equity_obs()
    d = await LlmAgent(cfg, sleep=_no_sleep).decide(obs)
    assert d.outcome == "ok", d.reason
    (good,) = await asyncio.to_thread(rebuild_prompts, cfg, obs, stored(d.calls))
    assert good.text == server.prompts()[0] and good.error is None
    # The hash stored with the call no longer matches what the config renders today.
    other = obs.to_dict() | {"cash": obs.cash + 1.0}
    changed = type(obs).from_dict(other)
    (bad,) = await asyncio.to_thread(rebuild_prompts, cfg, changed, stored(d.calls))
    assert bad.text is None and bad.sha256 != good.sha256
    assert bad.error is not None and "\n" not in bad.error
    assert "does not match the stored" in bad.error
    assert bad.stored_sha256 == hashlib.sha256(good.text.encode()).hexdigest()


async def test_stored_answers_decide_as_the_live_calls_did(server: FakeLlmServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal (invalid, retried) then an answer given as a tool call: the agent answered
    from the stored calls (the bundle replay's agent) parses them as the live agent did."""
    from agents.prompt_replay import answer_from_store, stored_reply
    from tests.llm_server import Behaviour

    monkeypatch.setenv(KEY_ENV, "sk-test")
    cfg = config(server)
    args = json.dumps({"reasoning": "tool", "allocations": {"MSFT": 0.7, "CASH": 0.3}})
    server.push(Behaviour(content=None, refusal="I cannot help with trading"),
                Behaviour(content="", tool_calls=(("allocate", args),), finish_reason="tool_calls"))
    obs = equity_obs()
    live = await LlmAgent(cfg, sleep=_no_sleep).decide(obs)
    assert live.outcome == "ok" and live.attempts == 2, live.reason
    assert [c["outcome"] for c in live.calls] == ["invalid", "ok"]
    assert stored_reply(live.calls[0]["raw_response"]) == ("", "I cannot help with trading")
    assert stored_reply(live.calls[1]["raw_response"]) == (args, "")
    asked = len(server.requests)
    usage = ("ts", "model", "tokens_in", "tokens_out", "latency_s", "cost_usd")
    calls = [StoredCall(c["attempt"], c["step"], c["input_sha256"], c["raw_response"],
                        c["error"], c["finish_reason"], c["outcome"], {k: c[k] for k in usage})
             for c in live.calls]
    monkeypatch.delenv(KEY_ENV)  # the stored answers need no key
    agent = LlmAgent(cfg, sleep=_no_sleep)
    answer_from_store(agent, lambda o: calls if o is obs else None)
    replayed = await agent.decide(obs)
    assert len(server.requests) == asked  # no model was called
    assert (replayed.outcome, replayed.allocation, replayed.reason, replayed.raw_output) == (
        live.outcome, live.allocation, live.reason, live.raw_output)
    assert replayed.calls == live.calls  # errors, prompt hashes, usage: as stored
