"""Agent plugins through the ``paperarena.agents`` entry-point group, and both kinds of own
agents (a plugin and a remote http agent) in a replay of the sample beside the baselines.

Plugins are installed by writing their ``.dist-info`` metadata into a temporary folder on the
path (tests/plugin_install.py): the sample plugin of examples/plugin_agent, and misbehaving ones.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.base import CASH, Observation, PricePoint
from agents.config import AgentConfig
from agents.factory import build_agent
from agents.plugins import GuardedAgent
from agents.stored_input import load_input
from agents.validation import validate_allocation
from daemon.app.replay import replay
from daemon.config.settings import ConfigError, load_config, parse_config
from daemon.core.sparse_rows import FILLS, fill_map
from tests.agents.test_remote_agent import SERVICE, serve
from tests.plugin_install import EXAMPLE_PLUGIN, install_example_plugin, pythonpath, write_dist

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "sample.jsonl.gz"
T = 1_714_600_000.0

MISBEHAVING = '''
import asyncio

class Raiser:
    def __init__(self, agent_id, settings):
        self.id = agent_id
    async def decide(self, obs):
        raise KeyError("no such column\\nat line 2")

class Sleeper:
    def __init__(self, agent_id, settings):
        self.id = agent_id
    async def decide(self, obs):
        await asyncio.sleep(30)

class Garbage:
    def __init__(self, agent_id, settings):
        self.id = agent_id
    async def decide(self, obs):
        return {"AAPL": 1.0}

class BadInit:
    def __init__(self, agent_id, settings):
        raise RuntimeError("model weights not found")

class NoDecide:
    def __init__(self, agent_id, settings):
        self.id = agent_id
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Install the sample plugin and the misbehaving ones for this process; return the folder."""
    folder = tmp_path / "site"
    folder.mkdir()
    install_example_plugin(folder)
    (folder / "misbehaving_plugins.py").write_text(MISBEHAVING)
    (folder / "broken_plugin.py").write_text("raise RuntimeError('half-installed package')\n")
    write_dist(folder, "misbehaving", {
        "raiser": "misbehaving_plugins:Raiser", "sleeper": "misbehaving_plugins:Sleeper",
        "garbage": "misbehaving_plugins:Garbage", "badinit": "misbehaving_plugins:BadInit",
        "nodecide": "misbehaving_plugins:NoDecide", "broken": "broken_plugin:Agent",
        "noattr": "misbehaving_plugins:Missing",
    })
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))
    monkeypatch.syspath_prepend(str(folder))
    return folder


def obs() -> Observation:
    """Return an equity observation over AAPL, MSFT and NVDA (NVDA has no price)."""
    return Observation(
        agent="p1", market="equity", decision_ts=T, assets=("AAPL", "MSFT", "NVDA"),
        prices={"AAPL": PricePoint(T - 60, 190.0), "MSFT": PricePoint(T - 60, 410.0)},
        history={"AAPL": (PricePoint(T - 86400, 180.0),), "MSFT": (PricePoint(T - 86400, 400.0),)},
        holdings={}, cash=1000.0, value=1000.0, initial_value=1000.0, weights={CASH: 1.0},
    )


def agent_cfg(kind: str, **kw: object) -> AgentConfig:
    """Return an agent config of ``kind``."""
    return AgentConfig.model_validate({"id": "p1", "kind": kind, **kw})


def write_config(tmp_path: Path, agent_toml: str) -> Path:
    """Write a config with one agent (the ``[[agents]]`` body given) and return its path."""
    path = tmp_path / "c.toml"
    path.write_text("[http]\nenabled = false\n\n[[agents]]\n" + textwrap.dedent(agent_toml))
    return path


async def test_the_sample_plugin_is_loaded_by_kind_and_decides(site: Path) -> None:
    agent = build_agent(agent_cfg("tilt", settings={"cash": 0.3, "top": 1}))
    assert isinstance(agent, GuardedAgent) and agent.id == "p1"
    try:
        dec = await agent.decide(obs())
    finally:
        await agent.aclose()  # its worker thread ends (a later test in this process may fork)
    assert dec.outcome == "ok" and dec.allocation is not None
    weights = validate_allocation(dec.allocation, obs())
    assert weights == {"AAPL": pytest.approx(0.7), "MSFT": 0.0, "NVDA": 0.0, CASH: 0.3}


def test_plugin_settings_are_validated_by_the_plugins_model(site: Path, tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, 'id = "t"\nkind = "tilt"\nsettings = {top = 2}\n'))
    assert cfg.agents[0].settings == {"top": 2}
    for settings, line in (
        ("{cash = 2.0}", "agents.0.settings: agent t: settings.cash: Input should be less than"
                         " or equal to 1"),
        ('{top = "3"}', "agents.0.settings: agent t: settings.top: Input should be a valid"
                        " integer"),
        ("{color = 1}", "agents.0.settings: agent t: settings.color: unknown key"),
    ):
        with pytest.raises(ConfigError) as err:
            load_config(write_config(tmp_path, f'id = "t"\nkind = "tilt"\nsettings = {settings}\n'))
        assert err.value.problems == [line]


@pytest.mark.parametrize(("kind", "line"), [
    ("nope", "agents.0.kind: unknown agent kind 'nope': not built in (buy_and_hold,"
             " equal_weight, cash, momentum, llm, http, sixty_forty, risk_parity,"
             " equal_risk_contribution, min_variance, random_guess) and no installed package"
             " registers it in"
             " the entry-point group 'paperarena.agents'"),
    ("broken", "agents.0.kind: agent t: plugin 'broken' (broken_plugin:Agent) failed to load:"
               " RuntimeError: half-installed package"),
    ("noattr", "agents.0.kind: agent t: plugin 'noattr' (misbehaving_plugins:Missing) failed to"
               " load: AttributeError: module 'misbehaving_plugins' has no attribute 'Missing'"),
    ("badinit", "agents.0.kind: agent t: plugin 'badinit' raised building agent t:"
                " RuntimeError: model weights not found"),
    ("nodecide", "agents.0.kind: agent t: plugin 'nodecide': the agent has no async decide(obs)"
                 " method"),
    ("badinit", "agents.0.settings: agent t: plugin 'badinit' takes no settings; remove"
                " [agents.settings]"),
])
def test_missing_or_broken_plugins_are_one_line_at_load(
    site: Path, tmp_path: Path, kind: str, line: str,
) -> None:
    extra = "settings = {x = 1}\n" if "takes no settings" in line else ""
    with pytest.raises(ConfigError) as err:
        load_config(write_config(tmp_path, f'id = "t"\nkind = "{kind}"\n{extra}'))
    assert err.value.problems == [line]
    with pytest.raises(ValueError) as built:  # the engine refuses to build it the same way
        build_agent(AgentConfig.model_validate(
            {"id": "t", "kind": kind, "settings": {"x": 1} if extra else {}}))
    assert line.split(": ", 1)[1].removeprefix("agent t: ") in str(built.value)


def test_check_config_reports_a_missing_or_broken_plugin_in_one_line(
    site: Path, tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": pythonpath(site, EXAMPLE_PLUGIN, ROOT)}

    def check(agent_toml: str) -> subprocess.CompletedProcess[str]:
        path = write_config(tmp_path, agent_toml)
        return subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config", str(path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    good = check('id = "t"\nkind = "tilt"\nsettings = {cash = 0.5}\n')
    assert good.returncode == 0 and good.stdout.endswith(": ok (1 agents, markets: equity,"
                                                         " polymarket)\n"), good.stderr
    for kind, words in (("nope", "unknown agent kind 'nope'"),
                        ("broken", "failed to load: RuntimeError: half-installed package")):
        r = check(f'id = "t"\nkind = "{kind}"\n')
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr
    # Without the plugin installed, the sample plugin's kind is simply unknown.
    env["PYTHONPATH"] = pythonpath(ROOT)
    r = check('id = "t"\nkind = "tilt"\n')
    assert r.returncode == 2 and "unknown agent kind 'tilt'" in r.stderr
    assert len(r.stderr.splitlines()) == 1


async def test_a_plugin_that_raises_hangs_or_returns_garbage_gives_a_one_line_error(
    site: Path,
) -> None:
    for kind, reason in (
        ("raiser", "plugin 'raiser' raised KeyError: 'no such column\\nat line 2'"),
        ("sleeper", "plugin 'sleeper': no answer within 0.2s (timeout)"),
        ("garbage", "plugin 'garbage' returned dict, not an AgentDecision"),
    ):
        agent = build_agent(agent_cfg(kind, timeout=0.2))
        assert isinstance(agent, GuardedAgent)
        try:
            dec = await agent.decide(obs())
        finally:
            await agent.aclose()  # its worker thread ends (a later test may fork)
        assert (dec.outcome, dec.reason, dec.allocation) == ("error", reason, None)


def test_plugin_only_keys_are_refused_on_built_in_kinds() -> None:
    for agent, words in (
        ({"kind": "momentum", "settings": {"a": 1}}, "'settings' is for plugin agents"),
        ({"kind": "http"}, "an http agent needs an [agents.http] table"),
        ({"kind": "cash", "http": {"url": "http://127.0.0.1:1/"}}, "an http agent needs"),
        ({"kind": "cash", "prompt_files": {"equity": "p.txt"}}, "'prompt_files' is for llm"),
        ({"kind": "bad kind!"}, "agents.0.kind: String should match pattern"),
        ({"kind": "http", "http": {"url": "ftp://x/"}}, "agents.0.http.url"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_config({"agents": [{"id": "a", **agent}]})
        assert len(err.value.problems) == 1 and words in err.value.problems[0], err.value.problems


def test_the_example_config_of_own_agents_checks(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": pythonpath(site, EXAMPLE_PLUGIN, ROOT),
           "AGENT_TOKEN": "example-token"}
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config",
                        "examples/own-agents/replay.toml"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    env.pop("AGENT_TOKEN")
    r = subprocess.run([sys.executable, "-m", "daemon.app.cli", "check-config",
                        "examples/own-agents/replay.toml"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "AGENT_TOKEN (agent remote)" in r.stderr


async def test_a_plugin_and_a_remote_agent_replay_the_sample_beside_the_baselines(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAPERARENA_TEST_AGENT_TOKEN", "tok-123456")
    app = SERVICE.make_app(token="tok-123456")
    async with serve(app) as url:
        cfg = parse_config({
            "markets": {"equity": {"cost": {"preset": "realistic"}}},
            "http": {"enabled": False},
            "agents": [
                {"id": "tilt", "kind": "tilt", "settings": {"cash": 0.1, "top": 2}},
                {"id": "remote", "kind": "http",
                 "http": {"url": url, "token_env": "PAPERARENA_TEST_AGENT_TOKEN"}},
                {"id": "bh", "kind": "buy_and_hold"},
                {"id": "ew", "kind": "equal_weight"},
            ],
        })
        end = datetime(2026, 10, 28, tzinfo=UTC).timestamp()  # the first 7 sessions
        await replay(SAMPLE, cfg, tmp_path / "own.db", progress=False, window=(None, end))
    con = sqlite3.connect(tmp_path / "own.db")
    q = con.execute
    outcomes = dict(q("SELECT agent || '/' || outcome, COUNT(*) FROM decisions"
                      " GROUP BY agent, outcome").fetchall())
    for agent in ("tilt", "remote", "bh", "ew"):  # every round decided, both markets
        assert outcomes.get(f"{agent}/ok", 0) + outcomes.get(f"{agent}/hold", 0) >= 14, outcomes
        assert outcomes.get(f"{agent}/ok", 0) >= 2, outcomes
    assert not [k for k in outcomes if k.startswith(("tilt/", "remote/"))
                and not k.endswith(("/ok", "/hold", "/skipped"))], outcomes
    traded = set(q("SELECT agent, market FROM fills WHERE traded_value > 0").fetchall())
    assert {(a, m) for a in ("tilt", "remote") for m in ("equity", "polymarket")} <= traded
    # The remote agent's raw answers are stored as an LLM's: in the decision and per call.
    rows = q("SELECT raw_output, template_version, market, scheduled_ts FROM decisions"
             " WHERE agent='remote' AND outcome='ok'").fetchall()
    for raw, version, market, ts in rows:
        assert json.loads(raw)["allocations"] and version == "http-v1"
        seen = json.loads(load_input(con, "remote", market, ts) or "")
        assert any(seen == body["observation"] for body in app[SERVICE.REQUESTS])
    calls = q("SELECT COUNT(*) FROM llm_calls WHERE agent='remote' AND error IS NULL"
              " AND raw_response LIKE '{%'").fetchone()[0]
    assert calls == len(app[SERVICE.REQUESTS]) >= len(rows)
    # No invalid allocation was ever applied: every fill's weights sum to 1.
    for w, a in q(f"SELECT f.weights_json, s.assets_json FROM {FILLS}").fetchall():
        assert abs(sum(fill_map(w, a).values()) - 1.0) < 1e-9
