"""Decision protocols of LLM agents: which workflow of model calls turns an observation into orders.

A protocol is a small workflow of steps. Each step renders its own prompt (from the observation
and the answers of earlier steps), calls the model through :meth:`agents.llm.LlmAgent.run_step`
(timeouts, retries, budgets, usage, redaction) and validates its answer strictly; every call is
kept in :attr:`agents.base.AgentDecision.calls` with its step name, the SHA-256 of the prompt it
sent, its outcome and the parsed value, and stored in the ``llm_calls`` table. A failed step holds
the portfolio, with the step named in the decision's reason.

Protocols (``[[agents]] protocol = ...``):

- ``livetradebench`` (default): one call returns the whole allocation (:mod:`agents.llm`);
- ``stockbench``: overview -> stock selection -> fundamentals -> per-stock dollar orders ->
  execution check with revisions (:mod:`agents.stockbench`);
- ``portbench``: views -> signals -> target weights (investor limits enforced) -> execution ->
  risk monitor (:mod:`agents.portbench`);
- ``capitalbench``: one submission per frozen CapitalBench round, not asked in decision rounds
  (:mod:`agents.capitalbench`, :mod:`daemon.capital_runner`);
- ``alphaforgebench``: the model writes a strategy function (renewed on a schedule) that the
  daemon runs on every bar in a sandboxed process (:mod:`agents.alphaforge`).

Multi-step protocols derive from :class:`StepwiseAgent`, which ends a decision the same way for
all of them (a failed step, a hold, the stored JSON summary of the workflow).

Prompts are files, one set per protocol under ``agents/prompts/<protocol>/``; a set's version is
``<protocol>-v<N>+<first 8 hex of the SHA-256 of its files>``, so any edit changes the version
stored with each decision.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from typing import Any

import structlog

from agents.base import AgentDecision, Observation
from agents.llm import DecisionRun, LlmAgent, StepResult, audit_trail
from agents.llm_output import split_think
from daemon.config import AgentConfig
from daemon.logs import redact_text
from daemon.rounds import AGENT_DEADLINE

log = structlog.get_logger(__name__)

#: Protocol -> version label of its prompt set (bump it when a prompt's meaning changes).
PROMPT_SET_VERSIONS: dict[str, str] = {"stockbench": "v1", "portbench": "v1", "capitalbench": "v1",
                                       "alphaforgebench": "v1"}


@lru_cache(maxsize=8)
def load_prompt_set(protocol: str) -> tuple[dict[str, str], str]:
    """Return ``({step: template text}, version)`` of ``agents/prompts/<protocol>/*.txt``."""
    if protocol not in PROMPT_SET_VERSIONS:
        raise ValueError(f"no prompt set for protocol {protocol!r}")
    folder = resources.files(f"agents.prompts.{protocol}")
    files = sorted(
        (f for f in folder.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name
    )
    digest = hashlib.sha256()
    texts: dict[str, str] = {}
    for f in files:
        data = f.read_bytes()
        digest.update(f.name.encode() + b"\0" + data + b"\0")
        texts[f.name.removesuffix(".txt")] = data.decode("utf-8")
    if not texts:
        raise ValueError(f"prompt set {protocol!r} has no templates")
    return texts, f"{protocol}-{PROMPT_SET_VERSIONS[protocol]}+{digest.hexdigest()[:8]}"


def build_llm_agent(cfg: AgentConfig, *, clock: Callable[[], float] | None = None) -> LlmAgent:
    """Return the LLM agent running ``cfg.protocol`` (``clock``: the engine's, else wall time)."""
    kw: dict[str, Any] = {} if clock is None else {"clock": clock}
    if cfg.protocol == "livetradebench":
        return LlmAgent(cfg, **kw)
    if cfg.protocol == "stockbench":
        from agents.stockbench import StockBenchAgent

        return StockBenchAgent(cfg, **kw)
    if cfg.protocol == "portbench":
        from agents.portbench import PortBenchAgent

        return PortBenchAgent(cfg, **kw)
    if cfg.protocol == "capitalbench":
        from agents.capitalbench import CapitalBenchAgent

        return CapitalBenchAgent(cfg, **kw)
    if cfg.protocol == "alphaforgebench":
        from agents.alphaforge import AlphaForgeAgent

        return AlphaForgeAgent(cfg, **kw)
    raise ValueError(f"agent {cfg.id}: unknown protocol {cfg.protocol!r}")


class StepwiseAgent(LlmAgent):
    """An LLM agent whose decision is several steps: the shared ways a decision ends."""

    decision_deadline: float = AGENT_DEADLINE - 30.0
    """Seconds a decision may take, all steps included: a call that could end later is not
    started (the step fails, naming the deadline) so the calls made so far are kept."""

    def start(self, obs: Observation, version: str) -> AgentDecision | DecisionRun:
        """Return a decision made without calling (budget, key) or the run, its deadline set."""
        run = self.prepare(obs, version)
        if isinstance(run, DecisionRun):
            run.deadline = time.monotonic() + self.decision_deadline
        return run

    def _held(
        self, run: DecisionRun, reason: str, version: str, summary: dict[str, Any]
    ) -> AgentDecision:
        common = self._common(run, version, summary)
        log.info("llm.decision", agent=self.id, market=run.obs.market, outcome="invalid",
                 reason=reason, attempts=common["attempts"])
        return AgentDecision(
            allocation=None, outcome="invalid", reason=flat(redact_text(reason), 300), **common
        )

    def _failed(
        self, run: DecisionRun, step: StepResult, version: str, summary: dict[str, Any]
    ) -> AgentDecision:
        summary["failed_step"] = step.step
        common = self._common(run, version, summary)
        last = step.attempts[-1] if step.attempts else None
        if step.stop_reason:
            outcome = "paused"
            reason = f"step {step.step}: {step.error}"
        elif step.out_of_time:
            outcome = "error"
            reason = f"step {step.step}: {step.error}"
        else:
            outcome = "invalid" if last is not None and last.kind == "invalid" else "error"
            reason = (
                f"step {step.step}: {step.error}"
                f" (attempt {len(step.attempts)} of {self.cfg.max_attempts})"
            )
        log.info("llm.decision", agent=self.id, market=run.obs.market, outcome=outcome,
                 reason=reason, attempts=common["attempts"])
        return AgentDecision(
            allocation=None, outcome=outcome, reason=flat(redact_text(reason), 300), **common
        )

    @staticmethod
    def _common(run: DecisionRun, version: str, summary: dict[str, Any]) -> dict[str, Any]:
        common = audit_trail(run.attempts, version)
        common["raw_output"] = redact_text(json.dumps(summary, sort_keys=True))
        return common


def flat(text: str, limit: int) -> str:
    """Return ``text`` without thinking blocks, on one line, cut to ``limit`` characters."""
    one = " ".join(split_think(text)[0].split()) if text else ""
    return one if len(one) <= limit else one[: limit - 1] + "…"
