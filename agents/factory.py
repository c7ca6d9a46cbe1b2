"""Build agents from their config; LLM agents import LiteLLM only when configured."""

from __future__ import annotations

from agents.base import Agent
from agents.baselines import AllCash, BuyAndHold, EqualWeightRebalanced, Momentum
from daemon.config import AgentConfig


def build_agent(cfg: AgentConfig) -> Agent:
    """Return the agent described by ``cfg``."""
    if cfg.kind == "cash":
        return AllCash(cfg.id)
    if cfg.kind == "equal_weight":
        return EqualWeightRebalanced(cfg.id)
    if cfg.kind == "buy_and_hold":
        return BuyAndHold(cfg.id)
    if cfg.kind == "momentum":
        return Momentum(cfg.id, lookback=cfg.lookback_days, top_k=cfg.top_k)
    if cfg.kind == "llm":
        from agents.protocols import build_llm_agent  # heavy import (litellm), only when configured

        return build_llm_agent(cfg)
    raise ValueError(f"unknown agent kind {cfg.kind!r}")
