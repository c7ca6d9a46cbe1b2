"""The shared path of multi-step LLM protocols: their prompt sets, the step runner base class
and the one-line rendering of answers (:mod:`agents.protocols` tells which protocol is which)."""

from __future__ import annotations

import hashlib
import json
import time
from functools import lru_cache
from importlib import resources
from typing import Any

import structlog

from agents.base import AGENT_DEADLINE, AgentDecision, Observation
from agents.llm import DecisionRun, LlmAgent, StepResult, audit_trail
from agents.llm_output import split_think
from daemon.core.logs import redact_text

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
