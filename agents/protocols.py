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
  execution check with revisions (:mod:`agents.stockbench`).

Prompts are files, one set per protocol under ``agents/prompts/<protocol>/``; a set's version is
``<protocol>-v<N>+<first 8 hex of the SHA-256 of its files>``, so any edit changes the version
stored with each decision.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources

from agents.llm import LlmAgent
from daemon.config import AgentConfig

#: Protocol -> version label of its prompt set (bump it when a prompt's meaning changes).
PROMPT_SET_VERSIONS: dict[str, str] = {"stockbench": "v1"}


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


def build_llm_agent(cfg: AgentConfig) -> LlmAgent:
    """Return the LLM agent running ``cfg.protocol``."""
    if cfg.protocol == "livetradebench":
        return LlmAgent(cfg)
    if cfg.protocol == "stockbench":
        from agents.stockbench import StockBenchAgent

        return StockBenchAgent(cfg)
    raise ValueError(f"agent {cfg.id}: unknown protocol {cfg.protocol!r}")
