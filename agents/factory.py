"""Build agents from their config; LLM agents import LiteLLM only when configured.

Any kind that is not built in names a plugin (:mod:`agents.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agents.base import Agent
from agents.baselines import AllCash, BuyAndHold, EqualWeightRebalanced, Momentum, RandomGuess
from agents.config import BUILTIN_KINDS, AgentConfig


def build_agent(cfg: AgentConfig, *, clock: Callable[[], float] | None = None) -> Agent:
    """Return the agent described by ``cfg``.

    ``clock`` (the engine's ``clock.now``; simulated in a replay) stamps and times the calls an
    LLM or http agent stores; ``None`` means wall time (a live command outside an engine).
    """
    if cfg.kind == "cash":
        return AllCash(cfg.id)
    if cfg.kind == "equal_weight":
        return EqualWeightRebalanced(cfg.id)
    if cfg.kind == "buy_and_hold":
        return BuyAndHold(cfg.id)
    if cfg.kind == "momentum":
        return Momentum(cfg.id, lookback=cfg.lookback_days, top_k=cfg.top_k)
    if cfg.kind == "random_guess":
        return RandomGuess(cfg.id, seed=cfg.seed)
    if cfg.kind == "sixty_forty":
        from agents.portfolio_baselines import SixtyForty

        return SixtyForty(cfg.id, cfg.asset_classes, cfg.class_roles)
    if cfg.kind in ("risk_parity", "equal_risk_contribution", "min_variance"):
        from agents.portfolio_baselines import CovarianceBaseline

        return CovarianceBaseline(cfg.id, cfg.kind, window=cfg.cov_window)
    if cfg.kind == "llm":
        from agents.protocols import build_llm_agent

        return build_llm_agent(cfg, clock=clock)
    if cfg.kind == "http":
        from agents.remote import HttpAgent

        return HttpAgent(cfg) if clock is None else HttpAgent(cfg, clock=clock)
    from agents.plugins import build_plugin_agent

    return build_plugin_agent(cfg)  # raises PluginError (a ValueError), one line


def agent_problems(agents: Sequence[AgentConfig]) -> list[str]:
    """Return one line per agent that cannot be built: a missing or broken plugin, bad plugin
    settings, an unusable own prompt file (checked when a config is loaded)."""
    from agents.plugins import plugin_problem
    from agents.prompting import PromptFileError

    problems = []
    for i, cfg in enumerate(agents):
        where = f"agents.{i}"
        if cfg.kind not in BUILTIN_KINDS:
            problem = plugin_problem(cfg)
            if problem:
                problems.append(f"{where}.{problem[0]}: agent {cfg.id}: {problem[1]}")
        if cfg.prompt_files is not None:
            from agents.llm import own_templates

            try:
                own_templates(cfg)
            except PromptFileError as exc:
                problems.append(f"{where}.prompt_files: {exc}")
    return problems
