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
  execution check with revisions (:mod:`agents.stockbench.agent`);
- ``portbench``: views -> signals -> target weights (investor limits enforced) -> execution ->
  risk monitor (:mod:`agents.portbench.agent`);
- ``capitalbench``: one submission per frozen CapitalBench round, not asked in decision rounds
  (:mod:`agents.capitalbench.agent`, :mod:`agents.capitalbench.runner`);
- ``alphaforgebench``: the model writes a strategy function (renewed on a schedule) that the
  daemon runs on every bar in a sandboxed process (:mod:`agents.alphaforgebench.agent`).

Multi-step protocols derive from :class:`StepwiseAgent`, which ends a decision the same way for
all of them (a failed step, a hold, the stored JSON summary of the workflow).

Prompts are files, one set per protocol under ``agents/prompts/<protocol>/``; a set's version is
``<protocol>-v<N>+<first 8 hex of the SHA-256 of its files>``, so any edit changes the version
stored with each decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.config import AgentConfig
from agents.llm import LlmAgent

__all__ = ["build_llm_agent"]


def build_llm_agent(cfg: AgentConfig, *, clock: Callable[[], float] | None = None) -> LlmAgent:
    """Return the LLM agent running ``cfg.protocol`` (``clock``: the engine's, else wall time)."""
    kw: dict[str, Any] = {} if clock is None else {"clock": clock}
    if cfg.protocol == "livetradebench":
        return LlmAgent(cfg, **kw)
    if cfg.protocol == "stockbench":
        from agents.stockbench.agent import StockBenchAgent

        return StockBenchAgent(cfg, **kw)
    if cfg.protocol == "portbench":
        from agents.portbench.agent import PortBenchAgent

        return PortBenchAgent(cfg, **kw)
    if cfg.protocol == "capitalbench":
        from agents.capitalbench.agent import CapitalBenchAgent

        return CapitalBenchAgent(cfg, **kw)
    if cfg.protocol == "alphaforgebench":
        from agents.alphaforgebench.agent import AlphaForgeAgent

        return AlphaForgeAgent(cfg, **kw)
    raise ValueError(f"agent {cfg.id}: unknown protocol {cfg.protocol!r}")
