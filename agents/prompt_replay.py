"""Rebuild the exact prompts of a stored decision from its stored input (issue 30, point 2).

A prompt is never stored, only its SHA-256 (``llm_calls.input_sha256``). It is rebuilt by running
the agent's own protocol again on the decision's stored observation, with the model replaced by
the decision's stored calls in order: each step sees the answers its prompt was built from (a
multi-step protocol's later prompts embed earlier answers; a retry's prompt adds the feedback on
the stored error). Every prompt the protocol sends is captured, and one is shown only when its
SHA-256 equals the stored hash, so a changed prompt file, template or config is named, never
shown as the prompt that was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.base import AgentDecision, Observation
from agents.config import AgentConfig
from agents.llm import DecisionRun, LlmAgent, _Attempt, _one_line, utc_day
from agents.llm_output import InvalidOutput
from agents.protocols import build_llm_agent
from daemon.core.logs import redact_text

__all__ = ["RebuiltPrompt", "StoredCall", "StoredDecision", "StoredDecisionAgent",
           "answer_from_store", "rebuild_prompts", "stored_reply"]


@dataclass(frozen=True, slots=True)
class StoredCall:
    """One stored model call (an ``llm_calls`` row) as the replay needs it."""

    attempt: int
    step: str | None
    input_sha256: str | None
    raw_response: str | None
    error: str | None
    finish_reason: str | None
    outcome: str | None
    usage: dict[str, Any] | None = None
    """The call's stored ``ts``, ``model``, ``tokens_in``, ``tokens_out``, ``latency_s`` and
    ``cost_usd`` (None: zeros, the prompt rebuild needs none of them)."""


@dataclass(frozen=True, slots=True)
class StoredDecision:
    """One stored decision (a ``decisions`` row) of an agent whose answer is its decision."""

    outcome: str
    reason: str
    raw_output: str
    allocation: dict[str, float] | None
    attempts: int
    template_version: str
    calls: tuple[dict[str, Any], ...] = ()
    """The stored call records of the decision (an HTTP agent's requests)."""


#: Stored outcomes the engine made of an agent's ``ok`` answer (validated, then applied).
_APPLIED = frozenset({"ok", "rejected"})


class StoredDecisionAgent:
    """An HTTP or plugin agent replayed from its stored decisions: no service is called.

    Each decision returns the stored answer of the round (its outcome, reason, raw output and
    the allocation the engine validated), so the engine validates and fills it again; a round
    with no stored decision is an ``error`` naming it. The engine hashes the observation it
    gives, so an input that is not the stored one shows as a differing input hash.
    """

    def __init__(self, agent_id: str,
                 decision_for: Callable[[Observation], StoredDecision | None]) -> None:
        """Answer as ``agent_id`` with ``decision_for(obs)``."""
        self.id = agent_id
        self._decision_for = decision_for

    async def decide(self, obs: Observation) -> AgentDecision:
        """Return the stored decision of the round of ``obs``."""
        got = self._decision_for(obs)
        if got is None:
            return AgentDecision(None, outcome="error", reason="no stored decision")
        applied = got.outcome in _APPLIED and got.allocation is not None
        return AgentDecision(
            got.allocation if applied else None, raw_output=got.raw_output,
            outcome="ok" if applied else got.outcome,
            reason="" if got.outcome == "rejected" else got.reason,
            attempts=got.attempts, template_version=got.template_version, calls=got.calls)


@dataclass(frozen=True, slots=True)
class RebuiltPrompt:
    """The prompt of one stored call: its text when the hash matches, else why not."""

    attempt: int
    step: str
    stored_sha256: str | None
    sha256: str | None
    text: str | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form the API answers with."""
        return {"attempt": self.attempt, "step": self.step, "stored_sha256": self.stored_sha256,
                "sha256": self.sha256, "prompt": self.text, "error": self.error}


def rebuild_prompts(cfg: AgentConfig, obs: Observation, calls: Sequence[StoredCall]
                    ) -> list[RebuiltPrompt]:
    """Return the prompt of every stored call of one decision of ``cfg`` on ``obs``.

    Runs in its own event loop (call it from a worker thread); builds the agent (LiteLLM is
    imported, no call is made). A call whose rebuilt prompt does not hash to its stored SHA-256
    gets ``text`` None and a one-line ``error``.
    """
    agent = build_llm_agent(cfg)
    sent = asyncio.run(_replay(agent, obs, calls))
    out = []
    for i, call in enumerate(calls):
        step = call.step or "allocation"
        text = sent[i] if i < len(sent) else None
        digest = None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()
        error = None
        if text is None:
            error = (f"the protocol sent no prompt for stored call {i + 1} (step {step}): the "
                     "agent's protocol or config changed since the decision")
        elif not call.input_sha256:
            error = "the stored call has no prompt SHA-256 to check the rebuilt prompt against"
        elif digest != call.input_sha256:
            error = (f"the rebuilt prompt of step {step} (SHA-256 {str(digest)[:12]}...) does not "
                     f"match the stored {call.input_sha256[:12]}...: the prompt template, prompt "
                     "files or agent config changed since the decision")
        ok = error is None
        out.append(RebuiltPrompt(call.attempt, step, call.input_sha256, digest,
                                 text if ok else None, error))
    return out


async def _replay(agent: LlmAgent, obs: Observation, calls: Sequence[StoredCall]) -> list[str]:
    """Run ``agent`` on ``obs`` answering each call from ``calls``; return the prompts sent."""
    sent: list[str] = []
    answer_from_store(agent, lambda _: calls, sent)
    # A protocol that cannot run again: the prompts sent so far (the rest are named missing).
    with contextlib.suppress(Exception):
        await agent.decide(obs)
    return sent


_TOOL_CALL = re.compile(r'\n?<tool_call name="[^"]*">(.*?)</tool_call>', re.DOTALL)
_REFUSAL = re.compile(r"\n?<refusal>(.*)</refusal>\Z", re.DOTALL)


def stored_reply(text: str) -> tuple[str, str]:
    """Return (the answer a protocol parses, the refusal) of a stored ``raw_response``.

    A stored answer is everything the model sent (:func:`agents.llm._reply`): the content,
    each tool call's arguments in a ``<tool_call>`` block, a refusal in a ``<refusal>`` block
    last; the protocol parsed the content and the arguments, joined by newlines.
    """
    refusal = ""
    m = _REFUSAL.search(text)
    if m is not None:
        refusal, text = m.group(1), text[:m.start()]
    content = _TOOL_CALL.sub("", text)
    return "\n".join([*([content] if content else []), *_TOOL_CALL.findall(text)]), refusal


def answer_from_store(agent: LlmAgent,
                      calls_for: Callable[[Observation], Sequence[StoredCall] | None],
                      sent: list[str] | None = None) -> None:
    """Make ``agent`` answer each call of a decision from its stored calls, in order.

    ``calls_for(obs)``: the stored calls of the decision on ``obs`` (None: none stored, each
    call then fails as ``fatal``). No model is called, no key is needed, retries do not wait;
    the daily budget still pauses as it did. A stored answer (outcome ``ok`` or ``invalid``) is
    parsed again by the protocol's own check, as a live answer is (:func:`stored_reply`: its
    content and tool calls; a refusal is invalid); a stored transport error stays one.
    ``sent``: receives the last message of every prompt the protocol sends.
    """
    queue: list[StoredCall] = []
    own_prepare = agent.prepare

    async def no_wait(_: float) -> None:
        return None

    def prepare(o: Observation, template_version: str) -> AgentDecision | DecisionRun:
        if agent.budget_exceeded(utc_day(o.decision_ts)):
            return own_prepare(o, template_version)  # paused, as the live decision was
        queue[:] = calls_for(o) or ()
        return DecisionRun(obs=o, day=utc_day(o.decision_ts), api_key=None)

    async def answer(n: int, messages: list[dict[str, str]], api_key: str | None,
                     o: Observation, check: Any) -> _Attempt:
        if sent is not None:
            sent.append(str(messages[-1].get("content", "")) if messages else "")
        record: dict[str, Any] = {"attempt": n, "ts": 0.0, "model": agent.cfg.model,
                                  "raw_response": "", "error": None, "finish_reason": None,
                                  "tokens_in": 0, "tokens_out": 0, "latency_s": 0.0,
                                  "cost_usd": 0.0}
        if not queue:  # the stored decision made no more calls
            return _Attempt(record=record, content="", kind="fatal", error="no stored call")
        call = queue.pop(0)
        content = call.raw_response or ""
        record.update(raw_response=content, error=call.error, finish_reason=call.finish_reason,
                      **({} if call.usage is None else call.usage))
        kind = call.outcome or ("error" if call.error else "ok")
        if kind not in ("ok", "invalid"):
            return _Attempt(record=record, content=content, kind=kind, error=call.error or "")
        answer_text, refusal = stored_reply(content)
        try:
            if refusal:  # as agents.llm treats a refusal
                raise InvalidOutput(f"model refused: {_one_line(refusal, 200)}")
            parsed = check(answer_text, call.finish_reason)
        except InvalidOutput as exc:  # as the live call words it (agents.llm)
            record["error"] = redact_text(f"invalid output: {exc}")
            return _Attempt(record=record, content=content, kind="invalid",
                            error=record["error"])
        record["error"] = None
        return _Attempt(record=record, content=content, kind="ok", parsed=parsed)

    # This instance only: no budget or key check, no waits, the stored answers.
    agent.prepare = prepare  # type: ignore[method-assign,assignment]
    agent._attempt = answer  # type: ignore[method-assign,assignment]
    agent._sleep = no_wait
