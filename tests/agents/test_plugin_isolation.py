"""Plugin agents run off the daemon's event loop (issue 26, point 5): a plugin that blocks its
thread (``time.sleep``, a CPU loop) gets an ``error`` decision at its timeout, its late answer
is dropped, and the daemon's loop keeps running meanwhile.

The plugins are installed like those of tests/agents/test_plugins.py (tests/plugin_install.py).
The loop's lag is measured by a task sleeping 1 ms at a time; its bound is generous (a busy CI
machine): what it rules out is the loop stopping for the whole blocking call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.base import CASH
from agents.factory import build_agent
from agents.plugins import GuardedAgent
from daemon.config.settings import load_config, parse_config
from tests.agents.test_plugins import T, agent_cfg, obs, write_config
from tests.helpers import wait_for
from tests.plugin_install import write_dist
from tests.web.test_alerts import ASSETS, T0, tick
from tests.web.test_metrics_http import start_daemon, stop_daemon

#: The worst gap allowed between two 1 ms sleeps of the loop while a plugin blocks its thread.
LAG_BOUND_S = 0.25

BLOCKING = '''
import asyncio
import time

from pydantic import BaseModel

from agents.base import CASH, AgentDecision


class Settings(BaseModel):
    seconds: float = 1.5
    blocking_calls: int = 1000


def answer(obs):
    return AgentDecision({obs.assets[0]: 0.5, CASH: 0.5}, raw_output=f"for {obs.decision_ts:.0f}")


class Sleeper:
    """Blocks its thread with time.sleep on its first blocking_calls calls."""

    settings_model = Settings

    def __init__(self, agent_id, settings):
        self.id = agent_id
        self.settings = settings
        self.calls = 0

    async def decide(self, obs):
        self.calls += 1
        if self.calls <= self.settings.blocking_calls:
            time.sleep(self.settings.seconds)
        return answer(obs)


class Spinner:
    """Loops on the CPU for its seconds, then answers."""

    settings_model = Settings

    def __init__(self, agent_id, settings):
        self.id = agent_id
        self.settings = settings

    async def decide(self, obs):
        end = time.monotonic() + self.settings.seconds
        while time.monotonic() < end:
            pass
        return answer(obs)


class Exiter:
    def __init__(self, agent_id, settings):
        self.id = agent_id

    async def decide(self, obs):
        raise SystemExit(3)
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Install the blocking plugins for this process; return the folder."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "blocking_plugins.py").write_text(BLOCKING)
    write_dist(folder, "blocking", {"sleepy": "blocking_plugins:Sleeper",
                                    "spinner": "blocking_plugins:Spinner",
                                    "exiter": "blocking_plugins:Exiter"})
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
async def closing() -> AsyncIterator[list[GuardedAgent]]:
    """Collect the agents a test builds; close them (and their worker threads) after it."""
    agents: list[GuardedAgent] = []
    yield agents
    for agent in agents:
        await agent.aclose()


def guarded(closing: list[GuardedAgent], kind: str, **kw: Any) -> GuardedAgent:
    agent = build_agent(agent_cfg(kind, **kw))
    assert isinstance(agent, GuardedAgent)
    closing.append(agent)
    return agent


async def worst_loop_gap(until: Awaitable[Any]) -> tuple[Any, float]:
    """Await ``until`` while a task sleeps 1 ms at a time; return its result and the worst gap."""
    done = asyncio.ensure_future(until)
    worst, last = 0.0, time.monotonic()
    while not done.done():
        await asyncio.sleep(0.001)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return done.result(), worst


@pytest.mark.parametrize("kind", ["sleepy", "spinner"])
async def test_a_blocking_plugin_is_an_error_at_its_timeout_and_the_loop_keeps_running(
    plugins: Path, closing: list[GuardedAgent], kind: str,
) -> None:
    agent = guarded(closing, kind, timeout=0.3, settings={"seconds": 1.5})

    async def decide_and_wait() -> Any:
        dec = await agent.decide(obs())
        still_running = agent.busy  # the plugin is still blocked when the decision is given
        await wait_for(lambda: not agent.busy, timeout=30)  # watch the loop until it returns
        return dec, still_running

    (dec, still_running), gap = await worst_loop_gap(decide_and_wait())
    assert (dec.outcome, dec.reason, dec.allocation) == (
        "error", f"plugin {kind!r}: no answer within 0.3s (timeout)", None)
    assert still_running
    assert gap < LAG_BOUND_S, f"the event loop stalled for {gap:.3f}s"


async def test_a_plugin_answering_within_its_timeout_is_ok_with_its_allocation(
    plugins: Path, closing: list[GuardedAgent],
) -> None:
    for kind in ("sleepy", "spinner"):
        agent = guarded(closing, kind, timeout=10, settings={"seconds": 0.05})
        dec = await agent.decide(obs())
        assert (dec.outcome, dec.reason) == ("ok", "")
        assert dec.allocation == {"AAPL": 0.5, CASH: 0.5}
        assert dec.raw_output == f"for {T:.0f}"
        assert agent.thread is not threading.current_thread() and agent.thread.is_alive()


async def test_a_late_answer_is_dropped_and_a_busy_plugin_is_not_asked(
    plugins: Path, closing: list[GuardedAgent],
) -> None:
    agent = guarded(closing, "sleepy", timeout=0.2, settings={"seconds": 1.0, "blocking_calls": 1})
    inner: Any = agent.inner
    first = await agent.decide(obs())
    assert (first.outcome, first.allocation, first.reason) == (
        "error", None, "plugin 'sleepy': no answer within 0.2s (timeout)")
    # Blocked still: the next decision is an error at once, without asking the plugin.
    second, gap = await worst_loop_gap(agent.decide(obs()))
    assert (second.outcome, second.allocation, second.reason) == (
        "error", None, "plugin 'sleepy': still busy with a previous decision that ran past its"
                       " 0.2s timeout; not asked")
    assert inner.calls == 1 and gap < LAG_BOUND_S
    # Once the blocked call has returned (its answer dropped), the plugin is asked again, and
    # the answer given is the new one, never the late one.
    await wait_for(lambda: not agent.busy, timeout=30)
    third = await agent.decide(replace(obs(), decision_ts=T + 60))
    assert (third.outcome, third.raw_output) == ("ok", f"for {T + 60:.0f}")
    assert inner.calls == 2


async def test_sys_exit_in_a_plugin_is_an_error_and_its_worker_survives(
    plugins: Path, closing: list[GuardedAgent],
) -> None:
    agent = guarded(closing, "exiter", timeout=5)
    for _ in range(2):
        dec = await agent.decide(obs())
        assert (dec.outcome, dec.reason) == ("error", "plugin 'exiter' raised SystemExit: 3")
    assert agent.thread.is_alive()


async def test_the_worker_thread_ends_at_close_and_a_closed_agent_is_not_asked(
    plugins: Path, tmp_path: Path,
) -> None:
    agent = build_agent(agent_cfg("sleepy", timeout=5, settings={"seconds": 0.0}))
    assert isinstance(agent, GuardedAgent)
    assert (await agent.decide(obs())).outcome == "ok"
    await agent.aclose()
    assert not agent.thread.is_alive()
    dec = await agent.decide(obs())
    assert (dec.outcome, dec.reason) == (
        "error", "plugin 'sleepy': the agent is closed (stopping or replaced); not asked")
    # Checking a config builds its plugin agents only to close them: no worker is left behind.
    load_config(write_config(tmp_path, 'id = "chk"\nkind = "sleepy"\n'))
    await wait_for(lambda: "paperarena-plugin-chk" not in {t.name for t in threading.enumerate()})


async def test_a_blocked_plugin_in_a_daemon_round_is_an_error_and_healthz_stays_ok(
    plugins: Path, tmp_path: Path,
) -> None:
    config = parse_config({
        "markets": {
            "equity": {"assets": list(ASSETS), "cost": {"preset": "none"},
                       "schedule": {"kind": "interval", "every": "1h", "timezone": "UTC"}},
            "polymarket": {"enabled": False},
        },
        "agents": [
            {"id": "stuck", "kind": "sleepy", "timeout": 0.3, "settings": {"seconds": 3.0}},
            {"id": "ew", "kind": "equal_weight"},
        ],
        "http": {"port": 0},
    })
    d = await start_daemon(tmp_path, config)
    try:
        eng = d.engine
        await tick(eng, T0 + 60, 1.0)
        await eng.bus.drain()
        stuck = eng.slots["equity"]["stuck"].agent
        assert isinstance(stuck, GuardedAgent)
        await eng.rounds["equity"].run(T0 + 60)
        rows = dict((a, (o, r)) for a, o, r in await eng.store.fetchall(
            "SELECT agent, outcome, reason FROM decisions"))
        assert rows == {"stuck": ("error", "plugin 'sleepy': no answer within 0.3s (timeout)"),
                        "ew": ("ok", "")}
        # The plugin still sleeps in its thread: the daemon answers and its loop is on time.
        assert stuck.busy
        statuses = []
        while stuck.busy:
            statuses.append((await d.get("/healthz"))[0])
            await asyncio.sleep(0.2)
        assert statuses and set(statuses) == {200}, statuses
        assert d.obs.lag.max_lag < 1.5, d.obs.lag.max_lag  # the plugin blocks 3 s
        await eng.close_agents()
        assert not stuck.thread.is_alive()
    finally:
        await stop_daemon(d)


async def test_a_plugin_worker_shortens_the_thread_switch_interval(
    plugins: Path, closing: list[GuardedAgent],
) -> None:
    # CPython hands the GIL over every 5 ms by default: a plugin looping on the CPU would hold
    # the daemon's loop that long at each turn. With a plugin worker the interval is 0.5 ms.
    import sys

    from agents import plugins as plugin_module

    saved = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        guarded(closing, "spinner", timeout=0.3, settings={"seconds": 0.01})
        assert sys.getswitchinterval() == pytest.approx(plugin_module.SWITCH_INTERVAL_S)
        sys.setswitchinterval(0.0001)  # an operator's own shorter interval is kept
        guarded(closing, "spinner", timeout=0.3, settings={"seconds": 0.01})
        assert sys.getswitchinterval() == pytest.approx(0.0001)
    finally:
        sys.setswitchinterval(saved)
