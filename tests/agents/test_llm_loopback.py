"""A model at a loopback ``api_base`` works without any key (issue 29, point 6).

LiteLLM's OpenAI-compatible providers refuse to call without a key ("Missing credentials"), so
a loopback server gets a placeholder key; no other host ever does, and ``check-config`` agrees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.config import AgentConfig
from agents.llm import LOOPBACK_PLACEHOLDER_KEY, DecisionRun, LlmAgent
from daemon.app.cli import main as cli
from daemon.config.settings import missing_api_keys, parse_config
from daemon.core.logs import redact_text
from tests.agents.test_llm_agent import GOOD, equity_obs
from tests.llm_server import FakeLlmServer, ok


async def test_a_local_model_without_api_key_env_is_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # nothing to fall back on
    async with FakeLlmServer(default=ok(GOOD)) as server:
        agent = LlmAgent(AgentConfig(id="local", kind="llm", model="openai/test-model",
                                     api_base=server.api_base, timeout=5.0, max_attempts=1))
        d = await agent.decide(equity_obs())
    assert d.outcome == "ok", d.reason
    assert server.keys == [LOOPBACK_PLACEHOLDER_KEY]
    # The placeholder is no secret: ordinary words are never redacted because of it.
    assert redact_text("none of the above") == "none of the above"


async def test_an_unset_key_variable_of_a_loopback_model_gets_the_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PA_TEST_LOOPBACK_KEY", raising=False)
    async with FakeLlmServer(default=ok(GOOD)) as server:
        agent = LlmAgent(AgentConfig(id="local", kind="llm", model="openai/test-model",
                                     api_base=server.api_base, api_key_env="PA_TEST_LOOPBACK_KEY",
                                     timeout=5.0, max_attempts=1))
        d = await agent.decide(equity_obs())
        monkeypatch.setenv("PA_TEST_LOOPBACK_KEY", "sk-real-local-key")
        d2 = await agent.decide(equity_obs())
    assert (d.outcome, d2.outcome) == ("ok", "ok")
    assert server.keys == [LOOPBACK_PLACEHOLDER_KEY, "sk-real-local-key"]  # a set key wins


@pytest.mark.parametrize("base", ["https://api.example.com/v1", "http://10.0.0.5:8000/v1", None])
def test_no_placeholder_for_other_hosts(base: str | None, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    agent = LlmAgent(AgentConfig(id="remote", kind="llm", model="openai/test-model",
                                 api_base=base))
    run = agent.prepare(equity_obs(), "v")
    assert isinstance(run, DecisionRun) and run.api_key is None  # LiteLLM's own env lookup
    monkeypatch.delenv("PA_TEST_REMOTE_KEY", raising=False)
    keyed = LlmAgent(AgentConfig(id="remote", kind="llm", model="openai/test-model",
                                 api_base=base, api_key_env="PA_TEST_REMOTE_KEY"))
    d = keyed.prepare(equity_obs(), "v")
    assert not isinstance(d, DecisionRun)
    assert d.reason == "environment variable PA_TEST_REMOTE_KEY (api_key_env) is not set"


def test_check_config_agrees(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PA_TEST_REMOTE_KEY", raising=False)
    local = {"id": "local", "kind": "llm", "model": "openai/m", "api_base": "http://[::1]:8000/v1"}
    remote = {"id": "remote", "kind": "llm", "model": "openai/m",
              "api_base": "https://api.example.com/v1", "api_key_env": "PA_TEST_REMOTE_KEY"}
    assert missing_api_keys(parse_config({"agents": [local]}), {}) == []
    assert missing_api_keys(parse_config({"agents": [local, remote]}), {}) == [
        ("remote", "PA_TEST_REMOTE_KEY")]
    cfg = tmp_path / "local.toml"
    cfg.write_text('[[agents]]\nid = "local"\nkind = "llm"\nmodel = "openai/m"\n'
                   'api_base = "http://localhost:8000/v1"\n')
    assert cli(["check-config", str(cfg)]) == 0
    capsys.readouterr()
