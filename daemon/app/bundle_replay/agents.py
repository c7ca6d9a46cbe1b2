"""How a bundle's replay answers each agent of the season from the stored rows (issue 32).

- an LLM agent of any protocol but CapitalBench: its own code, its model calls answered by the
  stored calls (:func:`agents.prompt_replay.answer_from_store`); a CapitalBench agent the same
  way, from the calls stored with its submissions (:mod:`daemon.app.bundle_replay.capital`);
- an AlphaForgeBench agent also runs its strategy code again in the sandbox; only a bar that
  ran out of wall-clock time live (``timed out after Ns``, which depends on the load of the
  host, not on the code) fails so again without running, and the replay's bars get a wall-clock
  limit of their own (:data:`REPLAY_BAR_TIMEOUT`), so that a slower host repeats the outcome;
- an HTTP or plugin agent (its answer is its decision): a stand-in answering each round with
  the stored decision (:class:`agents.prompt_replay.StoredDecisionAgent`);
- in a live season every agent's answer waits for the events the live round received while
  its agents were answering (:func:`wait_for_events`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agents.base import Agent, AgentDecision, Observation
from agents.llm import LlmAgent
from agents.prompt_replay import (
    StoredCall,
    StoredDecision,
    StoredDecisionAgent,
    answer_from_store,
)
from daemon.engine.engine import Engine

__all__ = ["REPLAY_BAR_TIMEOUT", "answer_llm", "stand_ins", "wait_for_events"]

#: Wall-clock seconds a replayed strategy bar may take (its live limit, when longer).
REPLAY_BAR_TIMEOUT = 300.0

#: How a stored bar that ran out of wall-clock time begins (agents.alphaforgebench.sandbox).
_TIMED_OUT = "timed out after "

Key = tuple[str, str, float]
"""(agent, market, the live round's time)."""


def answer_llm(agent: LlmAgent, calls: Mapping[Key, Sequence[StoredCall]],
               outputs: Mapping[Key, str]) -> None:
    """Make ``agent`` answer from its stored ``calls`` (``outputs``: the stored ``raw_output``
    of each decision, for an AlphaForgeBench agent's timed-out bars)."""

    def calls_for(obs: Observation) -> Sequence[StoredCall] | None:
        return calls.get((agent.id, obs.market, obs.decision_ts))

    answer_from_store(agent, calls_for)
    if hasattr(agent, "worker") and hasattr(agent, "limits"):
        _bars_as_stored(agent, outputs)


def _bars_as_stored(agent: Any, outputs: Mapping[Key, str]) -> None:
    """Fail each bar of ``agent`` that timed out live the same way, without running it."""
    from agents.alphaforgebench.sandbox import SandboxError

    agent.limits = dataclasses.replace(
        agent.limits, timeout_s=max(agent.limits.timeout_s, REPLAY_BAR_TIMEOUT))
    own_decide, own_install = agent.decide, agent.install
    pending: list[str | None] = [None]

    def patch() -> None:
        worker, message = agent.worker, pending[0]
        if worker is None or message is None:
            return

        async def timed_out(_: Any) -> dict[str, Any]:
            await worker.close()  # killed, as live
            raise SandboxError(message)

        worker.run_bar = timed_out

    async def install(strategy: Any, ts: float) -> None:
        await own_install(strategy, ts)
        patch()

    async def decide(obs: Observation) -> AgentDecision:
        pending[0] = _timeout_of(outputs.get((agent.id, obs.market, obs.decision_ts)))
        patch()
        try:
            return await own_decide(obs)
        finally:
            pending[0] = None
            if agent.worker is not None:
                vars(agent.worker).pop("run_bar", None)

    agent.install = install
    agent.decide = decide


def _timeout_of(raw_output: str | None) -> str | None:
    """Return the stored bar's wall-clock timeout message (None: it did not time out)."""
    if not raw_output or _TIMED_OUT not in raw_output:
        return None
    try:
        failed = json.loads(raw_output).get("bar_failed")
    except (ValueError, AttributeError):
        return None
    return failed if isinstance(failed, str) and failed.startswith(_TIMED_OUT) else None


def stand_ins(engine: Engine, remote: Sequence[str],
              decisions: Mapping[Key, StoredDecision]) -> None:
    """Put in place of each HTTP or plugin agent one that answers its stored decisions (one
    per agent: an agent trading two markets is one)."""
    made: dict[str, StoredDecisionAgent] = {}

    def stored(agent_id: str) -> Callable[[Observation], StoredDecision | None]:
        return lambda obs: decisions.get((agent_id, obs.market, obs.decision_ts))

    for slots in engine.slots.values():
        for slot in slots.values():
            aid = slot.agent.id
            if aid in remote:
                slot.agent = made.setdefault(aid, StoredDecisionAgent(aid, stored(aid)))


def wait_for_events(agent: Agent, catch_up: Callable[[float], Awaitable[None]],
                    ends: Mapping[tuple[str, float], float]) -> None:
    """Make ``agent``'s answer wait until ``catch_up`` applied the events the live round
    received while its agents answered (``ends``: by (market, the live round's time))."""
    own = agent.decide

    async def decide(obs: Observation) -> AgentDecision:
        got = await own(obs)
        end = ends.get((obs.market, obs.decision_ts))
        if end is not None:
            await catch_up(end)
        return got

    agent.decide = decide  # type: ignore[method-assign]
